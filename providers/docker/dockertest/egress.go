package dockertest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/xmode/xmode/internal/testenv"
)

// What the egress tests need (docs/network.md, "The bypasses tested"): a
// static xmode for the proxy's image, an image with the test probe, a CA
// of the tests' own, and test hosts on a network the test makes. No test
// names a real host or sends anything to an address it did not create.

var (
	xmodeOnce, probeOnce, pkiOnce sync.Once
	xmodeBin, probeBin            string
	xmodeErr, probeErr            error
	probeImageOnce                sync.Once
	probeImageErr                 error
	pki                           *PKI
	pkiErr                        error
)

// goTool is the go command that builds the test binaries.
func goTool() string {
	if g, err := exec.LookPath("go"); err == nil {
		return g
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// buildStatic builds a package with CGO_ENABLED=0 into one place for every
// test process of this user (the build cache makes a build that changed
// nothing quick): a new file renamed over the old, so that a process
// reading the old one meanwhile keeps it whole, and nothing piles up.
var (
	dirOnce     sync.Once
	buildDir    string
	buildDirErr error
)

// RemoveBuilt removes the binaries this process built (XmodeBinary, the
// probe's); a test binary's TestMain calls it once its tests are done.
func RemoveBuilt() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

func buildStatic(pkg, name string) (string, error) {
	// A directory of this process's own: a binary built from another tree
	// (another checkout's tests on this machine) must never stand in for
	// this tree's. The go command's cache makes the second build cheap.
	dirOnce.Do(func() { buildDir, buildDirErr = os.MkdirTemp("", "xmode-egress-test-") })
	if buildDirErr != nil {
		return "", buildDirErr
	}
	bin := filepath.Join(buildDir, name)
	cmd := exec.Command(goTool(), "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// XmodeBinary is a static xmode built from this tree, once per process:
// what XMODE_SANDBOX_EGRESS_BINARY names for the proxy's image.
func XmodeBinary(t testing.TB) string {
	t.Helper()
	xmodeOnce.Do(func() { xmodeBin, xmodeErr = buildStatic("github.com/xmode/xmode/cmd/xmode", "xmode") })
	if xmodeErr != nil {
		t.Fatalf("build a static xmode: %v", xmodeErr)
	}
	return xmodeBin
}

// ProbeRef is the image of the egress tests' sandboxes and test hosts:
// ImageRef's busybox, /usr/bin/egressprobe, and this machine's CA bundle
// as the image's own trust store.
const ProbeRef = "xmode-test-probe:1"

// ProbeBinary is the static egress probe built from this tree, once per
// process: for the images of engines other than docker (kubernetes).
func ProbeBinary(t testing.TB) string {
	t.Helper()
	probeOnce.Do(func() {
		probeBin, probeErr = buildStatic("github.com/xmode/xmode/providers/docker/internal/egressprobe", "egressprobe")
	})
	if probeErr != nil {
		t.Fatalf("build the egress probe: %v", probeErr)
	}
	return probeBin
}

// ProbeImage returns ProbeRef, importing it once per process when the
// daemon lacks it (or has one of another probe).
func ProbeImage(t testing.TB) string {
	t.Helper()
	cli := Require(t)
	ProbeBinary(t)
	probeImageOnce.Do(func() { probeImageErr = buildProbeImage(cli) })
	if probeImageErr != nil {
		testenv.Skip(t, "cannot build the probe image (%v): install busybox-static", probeImageErr)
	}
	return ProbeRef
}

func buildProbeImage(cli *client.Client) error {
	probe, err := os.ReadFile(probeBin)
	if err != nil {
		return err
	}
	extra := []imageFile{{"usr/bin/egressprobe", probe}}
	for _, f := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"} {
		if roots, err := os.ReadFile(f); err == nil {
			extra = append(extra, imageFile{"etc/ssl/certs/ca-certificates.crt", roots})
			break
		}
	}
	return buildBusyboxImage(cli, ProbeRef, 0o1777, "xmode.test.probe", extra)
}

// PKI is the tests' own CA and a certificate it signed for every test host
// name (*.test): what the test hosts serve, and what the proxy is told to
// trust (XMODE_SANDBOX_EGRESS_CA, the file CAFile).
type PKI struct {
	CAPEM, CertPEM, KeyPEM []byte
	CAFile                 string
}

// TestPKI makes the PKI once per process.
func TestPKI(t testing.TB) *PKI {
	t.Helper()
	pkiOnce.Do(func() { pki, pkiErr = makePKI() })
	if pkiErr != nil {
		t.Fatalf("test PKI: %v", pkiErr)
	}
	return pki
}

func makePKI() (*PKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xmode egress test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test host"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		// And the agents' API hosts, for test hosts named like them (their
		// names resolved to the test's own containers, never the real ones).
		DNSNames:    []string{"*.test", "allowed.test", "denied.test", "other.test", "metadata.test", "api.anthropic.com", "api.openai.com"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	p := &PKI{
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	f, err := os.CreateTemp("", "xmode-test-ca-*.pem")
	if err != nil {
		return nil, err
	}
	f.Write(p.CAPEM)
	f.Close()
	p.CAFile = f.Name()
	return p, nil
}

// Upstream is a network of test hosts the test made: what a sandbox's
// proxy reaches upstreams through (XMODE_SANDBOX_EGRESS_NETWORK), with
// probe servers on it at addresses of the test's choosing.
type Upstream struct {
	cli      *client.Client
	instance string
	Name     string
	Subnet   netip.Prefix
	mu       sync.Mutex
	hosts    map[string]string // name → container
	next     int
}

// NewUpstream creates the network (labelled with the test instance, so
// that CleanupInstance removes it), in a free /24 of 10.214.0.0/16.
func NewUpstream(t testing.TB, cli *client.Client, instance string) *Upstream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "xmode-test-up-" + strings.TrimPrefix(NewID("n_"), "n_")
	var b [1]byte
	for i := 0; i < 64; i++ {
		_, _ = rand.Read(b[:])
		subnet := netip.MustParsePrefix(fmt.Sprintf("10.214.%d.0/24", b[0]))
		_, err := cli.NetworkCreate(ctx, name, network.CreateOptions{
			Driver: "bridge",
			IPAM:   &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet.String()}}},
			Labels: map[string]string{LabelTest: "true", "xmode.instance": instance},
		})
		if err == nil {
			u := &Upstream{cli: cli, instance: instance, Name: name, Subnet: subnet, hosts: map[string]string{}}
			t.Cleanup(func() { CleanupInstance(t, cli, instance) })
			return u
		}
		if !strings.Contains(err.Error(), "overlap") {
			t.Fatalf("create the upstream network: %v", err)
		}
	}
	t.Fatal("no free /24 in 10.214.0.0/16 for an upstream network")
	return nil
}

// MetadataHost is a test host at 169.254.169.254 (the cloud metadata
// address), alone on a network of its own the test made (Network): internal,
// and without an address of the docker host's on its bridge, so that
// nothing of this machine routes to it (its real metadata service, if it
// has one, stays where it is). Only one can exist on a daemon at a time: it
// waits for another test's to go.
func MetadataHost(t testing.TB, cli *client.Client, instance string) *Upstream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := "xmode-test-md-" + strings.TrimPrefix(NewID("n_"), "n_")
	subnet := netip.MustParsePrefix("169.254.169.248/29")
	for {
		_, err := cli.NetworkCreate(ctx, name, network.CreateOptions{
			Driver: "bridge", Internal: true,
			IPAM:    &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet.String()}}},
			Options: map[string]string{"com.docker.network.bridge.inhibit_ipv4": "true"},
			Labels:  map[string]string{LabelTest: "true", "xmode.instance": instance},
		})
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "overlap") || ctx.Err() != nil {
			t.Fatalf("create the metadata test network: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	u := &Upstream{cli: cli, instance: instance, Name: name, Subnet: subnet, hosts: map[string]string{}}
	t.Cleanup(func() { CleanupInstance(t, cli, instance) })
	u.HostAt(t, "metadata", netip.MustParseAddr("169.254.169.254"))
	return u
}

// Gateway is the docker host's address on the upstream network.
func (u *Upstream) Gateway() netip.Addr { return u.Subnet.Addr().Next() }

// Host starts a probe server named name (it answers "hello from NAME") and
// returns its address.
func (u *Upstream) Host(t testing.TB, name string) netip.Addr {
	t.Helper()
	u.mu.Lock()
	u.next++
	addr := u.Subnet.Addr()
	for i := 0; i < 10+u.next; i++ {
		addr = addr.Next()
	}
	u.mu.Unlock()
	return u.HostAt(t, name, addr)
}

// HostAt starts a probe server named name at addr.
func (u *Upstream) HostAt(t testing.TB, name string, addr netip.Addr) netip.Addr {
	t.Helper()
	img := ProbeImage(t)
	p := TestPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := u.cli.ContainerCreate(ctx, &container.Config{
		Image:      img,
		Entrypoint: []string{"/usr/bin/egressprobe", "serve", "--name", name},
		Env:        []string{"PROBE_CERT=" + string(p.CertPEM), "PROBE_KEY=" + string(p.KeyPEM)},
		Labels:     map[string]string{LabelTest: "true", "xmode.instance": u.instance},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(u.Name)}, &network.NetworkingConfig{
		EndpointsConfig: map[string]*network.EndpointSettings{u.Name: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr.String()}}},
	}, nil, "xmt-"+strings.ReplaceAll(name, ".", "-")+"-"+strings.TrimPrefix(NewID("h_"), "h_"))
	if err != nil {
		t.Fatalf("create test host %s: %v", name, err)
	}
	if err := u.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start test host %s: %v", name, err)
	}
	u.mu.Lock()
	u.hosts[name] = created.ID
	u.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, h := range u.Hits(t, name) {
			if h.Kind == "ready" {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("test host %s did not start", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Run runs the probe image with argv in a plain container on the upstream
// network (docker's defaults: what any container there can do), and
// returns its exit code and output: the control that shows an attempt a
// sandbox must fail can succeed at all.
func (u *Upstream) Run(t testing.TB, argv ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := u.cli.ContainerCreate(ctx, &container.Config{
		Image: ProbeImage(t), Cmd: argv, Labels: map[string]string{LabelTest: "true", "xmode.instance": u.instance},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(u.Name)}, nil, nil, "")
	if err != nil {
		t.Fatalf("create a control container: %v", err)
	}
	defer u.cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	if err := u.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start a control container: %v", err)
	}
	waitC, errC := u.cli.ContainerWait(ctx, created.ID, container.WaitConditionNotRunning)
	var code int
	select {
	case w := <-waitC:
		code = int(w.StatusCode)
	case err := <-errC:
		t.Fatalf("wait for a control container: %v", err)
	}
	rc, err := u.cli.ContainerLogs(ctx, created.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, rc)
	return code, out.String()
}

// Hit is one thing a test host saw: an HTTP(S) request, a TCP connection,
// a UDP datagram.
type Hit struct {
	Kind    string            `json:"kind"`
	TLS     bool              `json:"tls"`
	Host    string            `json:"host"`
	Path    string            `json:"path"`
	From    string            `json:"from"`
	Data    string            `json:"data"`
	Headers map[string]string `json:"headers"`
}

// Hits are what the test host name saw so far (its "ready" line first).
func (u *Upstream) Hits(t testing.TB, name string) []Hit {
	t.Helper()
	u.mu.Lock()
	id := u.hosts[name]
	u.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := u.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true})
	if err != nil {
		t.Fatalf("logs of test host %s: %v", name, err)
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &bytes.Buffer{}, rc); err != nil {
		t.Fatalf("logs of test host %s: %v", name, err)
	}
	var hits []Hit
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var h Hit
		if json.Unmarshal(sc.Bytes(), &h) == nil {
			hits = append(hits, h)
		}
	}
	return hits
}

// Requests are the test host's hits other than its "ready" line.
func (u *Upstream) Requests(t testing.TB, name string) []Hit {
	t.Helper()
	var out []Hit
	for _, h := range u.Hits(t, name) {
		if h.Kind != "ready" {
			out = append(out, h)
		}
	}
	return out
}

// Connect attaches a container of the test's (the proxy, to reach a test
// host on a second network) to another network the test made.
func ConnectNetwork(t testing.TB, cli *client.Client, net, containerID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cli.NetworkConnect(ctx, net, containerID, nil); err != nil && !cerrdefs.IsConflict(err) {
		t.Fatalf("connect %s to %s: %v", containerID, net, err)
	}
}
