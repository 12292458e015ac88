package docker

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/xmode/xmode/fail"
)

// The egress proxy's image is xmode's own static binary and the CA roots of
// this machine (the proxy verifies the upstreams it adds credentials for),
// imported as a one-layer image, xmode-egress:<version>: no registry, no
// base image, nothing in it but what the proxy runs. The version is a hash
// of both, so each binary makes its image once per daemon.

// systemRoots are where this machine keeps its CA bundle (the first found
// goes into the image).
var systemRoots = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// egressBinary is the binary the proxy's image is made from:
// XMODE_SANDBOX_EGRESS_BINARY, else this process's executable.
func (p *Provider) egressBinary() (string, error) {
	if p.cfg.EgressBinary != "" {
		return p.cfg.EgressBinary, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("the egress proxy's binary: %w", err)
	}
	return exe, nil
}

// checkStatic refuses a binary that needs a dynamic loader: the proxy's
// image has nothing but the binary.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fail.Enginef("the egress proxy runs %s, which is not an ELF binary (%v): build xmode with `make` (a static, CGO-free binary), or point XMODE_SANDBOX_EGRESS_BINARY at one", path, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fail.Enginef("the egress proxy runs %s in an image that has nothing else, and it is dynamically linked: build xmode with CGO_ENABLED=0 (`make` does), or point XMODE_SANDBOX_EGRESS_BINARY at a static build", path)
		}
	}
	return nil
}

// egressImage returns the proxy's image for this binary, importing it when
// the daemon lacks it.
func (p *Provider) egressImage(ctx context.Context) (ref, version string, err error) {
	bin, err := p.egressBinary()
	if err != nil {
		return "", "", err
	}
	if err := checkStatic(bin); err != nil {
		return "", "", err
	}
	// Hashed and sent as a stream: the binary is tens of megabytes.
	f, err := os.Open(bin)
	if err != nil {
		return "", "", fmt.Errorf("the egress proxy's binary: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", "", fmt.Errorf("the egress proxy's binary: %w", err)
	}
	var roots []byte
	for _, r := range systemRoots {
		if b, err := readBounded(r, 16<<20); err == nil {
			roots = b
			break
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", "", fmt.Errorf("the egress proxy's binary: %w", err)
	}
	h.Write(roots)
	version = hex.EncodeToString(h.Sum(nil))[:16]
	ref = EgressImageRepo + ":" + version
	cctx, cancel := p.call(ctx)
	defer cancel()
	if _, err := p.cli.ImageInspect(cctx, ref); err == nil {
		return ref, version, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", "", p.wrap(err, "inspect image "+ref)
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		now := time.Now()
		for _, d := range []string{"etc", "etc/ssl", "etc/ssl/certs", "egress", "tmp"} {
			_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: now})
		}
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "xmode", Mode: 0o755, Size: st.Size(), ModTime: now})
		if err == nil {
			_, err = io.Copy(tw, io.NewSectionReader(f, 0, st.Size()))
		}
		if err == nil && roots != nil {
			if err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Size: int64(len(roots)), ModTime: now}); err == nil {
				_, err = tw.Write(roots)
			}
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	ictx, icancel := context.WithTimeout(ctx, p.pullTimeout())
	defer icancel()
	rc, err := p.cli.ImageImport(ictx, image.ImportSource{Source: pr, SourceName: "-"}, ref, image.ImportOptions{
		Changes: []string{
			"LABEL " + LabelManaged + "=true " + LabelRole + "=" + RoleEgressProxy + " " + LabelEgressVersion + "=" + version,
			`ENTRYPOINT ["/xmode", "__egress", "--dir", "/egress", "--keep-going"]`,
		},
	})
	if err != nil {
		return "", "", p.wrap(err, "import the egress proxy's image "+ref)
	}
	msg, _ := io.ReadAll(io.LimitReader(rc, 64<<10))
	rc.Close()
	if strings.Contains(string(msg), `"error"`) {
		return "", "", fail.Enginef("import the egress proxy's image %s: %s", ref, strings.TrimSpace(string(msg)))
	}
	p.pruneEgressImages(ctx, ref)
	return ref, version, nil
}

// pruneEgressImages removes the proxy images of other binaries (xmode was
// upgraded, or rebuilt) that no container runs; one still in use stays
// until its proxy is reaped.
func (p *Provider) pruneEgressImages(ctx context.Context, keep string) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	imgs, err := p.cli.ImageList(cctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelRole+"="+RoleEgressProxy))})
	if err != nil {
		return
	}
	for _, img := range imgs {
		old := true
		for _, t := range img.RepoTags {
			old = old && t != keep && strings.HasPrefix(t, EgressImageRepo+":")
		}
		if old && len(img.RepoTags) > 0 {
			// Without force: the daemon refuses an image a container uses.
			_, _ = p.cli.ImageRemove(cctx, img.ID, imageRemoveOptions())
		}
	}
}

// imageRemoveOptions removes an image only when no container uses it.
func imageRemoveOptions() image.RemoveOptions { return image.RemoveOptions{PruneChildren: true} }

// randomUint32 is where a search for a free subnet starts.
func randomUint32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}
