package kubetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The images of the kubernetes egress tests and benchmarks (docs/
// kubernetes.md, "Egress"): the proxy's, FROM scratch with a static xmode
// built from this tree at /xmode, as the docs say to build it; and the
// probe's, static busybox with egressprobe, for sandboxes and test hosts.
// Both are imported into the test cluster's containerd by
// hack/kube/image.sh (no registry), tagged by their binaries' hash.

var (
	imagesOnce              sync.Once
	egressImage, probeImage string
	imagesErr               error
)

const (
	probeImageConfig  = `{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["sh"]}`
	egressImageConfig = `{"Entrypoint":["/xmode"]}`
)

// EgressImages returns the proxy's image and the probe's, imported once
// per process; it skips (fails under CI=true) where nothing enforces
// NetworkPolicy, for then no egress test can hold.
func EgressImages(t testing.TB) (egress, probe string) {
	t.Helper()
	RequireNetworkPolicy(t)
	imagesOnce.Do(func() {
		dir, err := os.MkdirTemp("", "xmode-kube-bin-")
		if err != nil {
			imagesErr = err
			return
		}
		defer os.RemoveAll(dir)
		// Built here, in a directory of this process's: a binary shared by
		// every test process of the machine may be another tree's.
		xm, pr := filepath.Join(dir, "xmode"), filepath.Join(dir, "egressprobe")
		for pkg, out := range map[string]string{"github.com/xmode/xmode/cmd/xmode": xm, "github.com/xmode/xmode/providers/docker/internal/egressprobe": pr} {
			if imagesErr = buildStatic(pkg, out); imagesErr != nil {
				return
			}
		}
		egressImage, probeImage, imagesErr = importImages(xm, pr)
	})
	if imagesErr != nil {
		t.Fatalf("the egress tests' images: %v", imagesErr)
	}
	return egressImage, probeImage
}

// buildStatic builds pkg with CGO_ENABLED=0 to out.
func buildStatic(pkg, out string) error {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if g, err := exec.LookPath("go"); err == nil {
		goTool = g
	}
	cmd := exec.Command(goTool, "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// imageScript is hack/kube/image.sh, found from this file.
func imageScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "hack", "kube", "image.sh")
}

func fileHash(name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:6]), nil
}

func copyExec(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

func importImage(ref, root, cfg string) error {
	if out, err := exec.Command(imageScript(), ref, root, cfg).CombinedOutput(); err != nil {
		return fmt.Errorf("hack/kube/image.sh %s: %v: %s", ref, err, out)
	}
	return nil
}

func importImages(xm, probe string) (string, string, error) {
	dir, err := os.MkdirTemp("", "xmode-kube-images-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(dir)
	hx, err := fileHash(xm)
	if err != nil {
		return "", "", err
	}
	hp, err := fileHash(probe)
	if err != nil {
		return "", "", err
	}
	eg := filepath.Join(dir, "egress")
	if err := copyExec(xm, filepath.Join(eg, "xmode")); err != nil {
		return "", "", err
	}
	egRef := "xmode.invalid/xmode-egress:" + hx
	if err := importImage(egRef, eg, egressImageConfig); err != nil {
		return "", "", err
	}
	pr := filepath.Join(dir, "probe")
	if err := copyExec("/bin/busybox", filepath.Join(pr, "bin", "busybox")); err != nil {
		return "", "", fmt.Errorf("%v: apt-get install busybox-static", err)
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return "", "", err
	}
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" {
			if err := os.Symlink("busybox", filepath.Join(pr, "bin", a)); err != nil {
				return "", "", err
			}
		}
	}
	if err := copyExec(probe, filepath.Join(pr, "usr", "bin", "egressprobe")); err != nil {
		return "", "", err
	}
	for _, d := range []string{"etc", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(pr, d), 0o755); err != nil {
			return "", "", err
		}
	}
	if err := os.Chmod(filepath.Join(pr, "tmp"), 0o1777); err != nil {
		return "", "", err
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nsandbox:x:65532:65532:sandbox:/tmp:/bin/sh\n",
		"etc/group":  "root:x:0:\nsandbox:x:65532:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(pr, name), []byte(content), 0o644); err != nil {
			return "", "", err
		}
	}
	prRef := "xmode.invalid/egress-probe:" + hp
	if err := importImage(prRef, pr, probeImageConfig); err != nil {
		return "", "", err
	}
	return egRef, prRef, nil
}

// EgressHost starts a test host in ns: a pod named pod running `egressprobe
// serve` as name (HTTP on 80, HTTPS on 443 with the certificate and key
// given — the tests' PKI, dockertest.TestPKI —, TCP 7000, UDP 7001),
// restricted but for the sysctl that lets it bind ports below 1024, and
// returns its address once it runs.
func EgressHost(t testing.TB, cs kubernetes.Interface, ns, pod, name, image string, certPEM, keyPEM []byte) netip.Addr {
	t.Helper()
	p := RestrictedPod(pod, image, "egressprobe", "serve", "--name", name)
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PROBE_CERT", Value: string(certPEM)}, {Name: "PROBE_KEY", Value: string(keyPEM)}}
	p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return netip.MustParseAddr(WaitRunning(t, cs, ns, pod, time.Minute).Status.PodIP)
}

// WaitImagesListed waits until a node's status lists each of refs: the
// kubelet reports its images some seconds after an import, and xmode
// doctor reads them there (an image missing from every node fails its
// check under the pull policy Never).
func WaitImagesListed(t testing.TB, cs kubernetes.Interface, refs ...string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		missing := ""
		for _, ref := range refs {
			found := false
			for _, n := range nodes.Items {
				for _, img := range n.Status.Images {
					if slices.Contains(img.Names, ref) {
						found = true
					}
				}
			}
			if !found {
				missing = ref
				break
			}
		}
		if err == nil && missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node lists image %s after 90 s (%v)", missing, err)
		}
		time.Sleep(time.Second)
	}
}
