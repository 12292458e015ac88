package dockertest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
)

// TestRuntime is the runtime the TLS daemon registers: runc under another
// name, enough to prove that XMODE_SANDBOX_RUNTIME reaches the daemon.
const TestRuntime = "xmode-test-runc"

// TLSDaemon is a second dockerd, started by the test process on 127.0.0.1
// with --tlsverify and certificates made for it, as a sandbox host on
// another machine would be reached. It has its own data and exec roots,
// pidfile, containerd namespaces and bridge (started with --bridge none,
// dockerd deletes the first daemon's docker0), and TestRuntime. One per test process: RequireTLSDaemon
// starts it, StopTLSDaemon (from TestMain) stops it.
type TLSDaemon struct {
	Host     string // tcp://127.0.0.1:PORT
	Certs    string // ca.pem, cert.pem, key.pem of a client the daemon accepts
	WrongCA  string // ca.pem of another CA, and a client certificate it signed
	NoClient string // the right ca.pem and no client certificate

	dir    string
	bridge string
	lock   *os.File
	cmd    *exec.Cmd
	exited chan struct{}
	cli    *client.Client

	imageOnce sync.Once
	imageErr  error
}

var (
	tlsOnce sync.Once
	tlsD    *TLSDaemon
	tlsErr  error
)

// RequireTLSDaemon returns the process's TLS daemon, starting it on first
// use. Without what it needs (root, dockerd, ip, runc) the test skips —
// except in CI (CI=true), where it fails.
func RequireTLSDaemon(t testing.TB) *TLSDaemon {
	t.Helper()
	Require(t) // images come from the first daemon
	tlsOnce.Do(func() { tlsD, tlsErr = startTLSDaemon() })
	if tlsErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("start the second (TLS) docker daemon: %v; CI=true requires it", tlsErr)
		}
		t.Skipf("SKIP: cannot start a second (TLS) docker daemon (%v): TLS daemon tests skipped (with CI=true they fail)", tlsErr)
	}
	return tlsD
}

// Client is an SDK client of the TLS daemon, with the accepted client
// certificate.
func (d *TLSDaemon) Client() *client.Client { return d.cli }

// Env is the environment that points xmode at the TLS daemon.
func (d *TLSDaemon) Env() []string {
	return []string{
		"XMODE_SANDBOX_DOCKER_HOST=" + d.Host,
		"XMODE_SANDBOX_DOCKER_CERT_PATH=" + d.Certs,
		"DOCKER_TLS_VERIFY=1",
	}
}

// Image returns ImageRef after copying it from the first daemon once
// (`docker save | docker load`, through the SDK).
func (d *TLSDaemon) Image(t testing.TB) string {
	t.Helper()
	img := Image(t)
	d.imageOnce.Do(func() {
		local, err := NewClient()
		if err != nil {
			d.imageErr = err
			return
		}
		defer local.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rc, err := local.ImageSave(ctx, []string{img})
		if err != nil {
			d.imageErr = err
			return
		}
		defer rc.Close()
		resp, err := d.cli.ImageLoad(ctx, rc)
		if err != nil {
			d.imageErr = err
			return
		}
		var msg bytes.Buffer
		_, _ = msg.ReadFrom(resp.Body)
		resp.Body.Close()
		if _, err := d.cli.ImageInspect(ctx, img); err != nil {
			d.imageErr = fmt.Errorf("%v (load said %s)", err, msg.String())
		}
	})
	if d.imageErr != nil {
		t.Fatalf("copy the test image to the TLS daemon: %v", d.imageErr)
	}
	return img
}

// StopTLSDaemon stops the process's TLS daemon, if one was started, and
// removes its bridge and directories. It returns what tests of this process
// left on it (as "test: object"), after removing that too. Call it from
// TestMain after m.Run.
func StopTLSDaemon() []string {
	if tlsD == nil {
		return nil
	}
	d := tlsD
	tlsD = nil
	strays := d.strays()
	d.stop()
	return strays
}

func (d *TLSDaemon) strays() []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []string
	cs, _ := d.cli.ContainerList(ctx, container.ListOptions{All: true})
	for _, c := range cs {
		if test, ok := created.Load(c.Labels["xmode.instance"]); ok {
			out = append(out, test.(string)+": container "+strings.Join(c.Names, ",")+" on the TLS daemon")
		}
		_ = d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
	vs, _ := d.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs()})
	for _, v := range vs.Volumes {
		if test, ok := created.Load(v.Labels["xmode.instance"]); ok {
			out = append(out, test.(string)+": volume "+v.Name+" on the TLS daemon")
		}
		_ = d.cli.VolumeRemove(ctx, v.Name, true)
	}
	return out
}

func (d *TLSDaemon) stop() {
	if d.cli != nil {
		d.cli.Close()
	}
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(20 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	}
	_ = exec.Command("ip", "link", "del", d.bridge).Run()
	unmountUnder(d.dir)
	_ = os.RemoveAll(d.dir)
	if d.lock != nil {
		d.lock.Close()
	}
}

// startTLSDaemon takes a free slot (a lock file: test processes of one `go
// test ./...` run side by side), clears what a killed run left in it, and
// starts dockerd there.
func startTLSDaemon() (*TLSDaemon, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("starting dockerd needs root")
	}
	var tools = map[string]string{}
	for _, tool := range []string{"dockerd", "ip", "runc"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin"} {
				if _, serr := os.Stat(filepath.Join(dir, tool)); serr == nil {
					p, err = filepath.Join(dir, tool), nil
					break
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s is not installed (Debian: docker.io, iproute2, runc)", tool)
		}
		tools[tool] = p
	}
	d := &TLSDaemon{exited: make(chan struct{})}
	slot := -1
	for n := 0; n < 32 && slot < 0; n++ {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "xmode-tlsd-"+strconv.Itoa(n)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		slot, d.lock = n, f
	}
	if slot < 0 {
		return nil, errors.New("no free slot for a second daemon (32 in use)")
	}
	d.dir = filepath.Join(os.TempDir(), "xmode-tlsd-"+strconv.Itoa(slot))
	d.bridge = "xmtlsbr" + strconv.Itoa(slot)
	ok := false
	defer func() {
		if !ok {
			d.stop()
		}
	}()
	clearSlot(d.dir, d.bridge)
	for _, sub := range []string{"data", "exec", "server", "client", "wrongca", "noclient"} {
		if err := os.MkdirAll(filepath.Join(d.dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	if err := makeCerts(d.dir); err != nil {
		return nil, fmt.Errorf("make certificates: %w", err)
	}
	d.Certs, d.WrongCA, d.NoClient = filepath.Join(d.dir, "client"), filepath.Join(d.dir, "wrongca"), filepath.Join(d.dir, "noclient")
	for _, args := range [][]string{
		{"link", "add", d.bridge, "type", "bridge"},
		{"addr", "add", "10.99." + strconv.Itoa(slot) + ".1/24", "dev", d.bridge},
		{"link", "set", d.bridge, "up"},
	} {
		if out, err := exec.Command(tools["ip"], args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	d.Host = "tcp://" + addr
	if err := os.WriteFile(filepath.Join(d.dir, "daemon.json"), []byte("{}\n"), 0o600); err != nil {
		return nil, err
	}
	server := filepath.Join(d.dir, "server")
	args := []string{
		"--config-file", filepath.Join(d.dir, "daemon.json"), // not /etc/docker's
		"--data-root", filepath.Join(d.dir, "data"),
		"--exec-root", filepath.Join(d.dir, "exec"),
		"--pidfile", filepath.Join(d.dir, "dockerd.pid"),
		"-H", d.Host,
		"--tlsverify",
		"--tlscacert", filepath.Join(server, "ca.pem"),
		"--tlscert", filepath.Join(server, "cert.pem"),
		"--tlskey", filepath.Join(server, "key.pem"),
		"--bridge", d.bridge, "--iptables=false", "--ip-masq=false",
		"--storage-driver", "overlay2",
		"--add-runtime", TestRuntime + "=" + tools["runc"],
	}
	// Share the running containerd (the system's, or the one the first
	// dockerd manages) in namespaces of its own; else dockerd starts one.
	for _, sock := range []string{"/run/containerd/containerd.sock", "/var/run/docker/containerd/containerd.sock"} {
		if st, err := os.Stat(sock); err == nil && st.Mode()&os.ModeSocket != 0 {
			ns := "xmode-tlsd-" + strconv.Itoa(slot)
			args = append(args, "--containerd", sock, "--containerd-namespace", ns, "--containerd-plugins-namespace", ns+"-plugins")
			break
		}
	}
	logf, err := os.Create(filepath.Join(d.dir, "dockerd.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command(tools["dockerd"], args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// The daemon dies with the test process, even when TestMain cannot
	// stop it: the parent-death signal is sent when the thread that
	// started it ends, and that thread stays locked to a goroutine that
	// waits for the daemon until the process exits.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := d.cmd.Start(); err != nil {
			started <- err
			close(d.exited)
			return
		}
		started <- nil
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	d.cli, err = client.NewClientWithOpts(client.WithHost(d.Host), client.WithAPIVersionNegotiation(),
		client.WithTLSClientConfig(filepath.Join(d.Certs, "ca.pem"), filepath.Join(d.Certs, "cert.pem"), filepath.Join(d.Certs, "key.pem")))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := d.cli.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("dockerd exited: %s", tail(filepath.Join(d.dir, "dockerd.log")))
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dockerd did not answer within a minute (%v): %s", err, tail(filepath.Join(d.dir, "dockerd.log")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	ok = true
	return d, nil
}

// clearSlot removes what a test process killed before StopTLSDaemon left:
// its daemon (the pidfile's, if it still runs), bridge and directories.
func clearSlot(dir, bridge string) {
	if b, err := os.ReadFile(filepath.Join(dir, "dockerd.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			if comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "dockerd" {
				_ = syscall.Kill(pid, syscall.SIGTERM)
				for i := 0; i < 200; i++ {
					if syscall.Kill(pid, 0) != nil {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = exec.Command("ip", "link", "del", bridge).Run()
	unmountUnder(dir)
	_ = os.RemoveAll(dir)
}

// unmountUnder detaches what a daemon killed without its shutdown left
// mounted under dir (overlay layers, the shm of containers), deepest first,
// so that the directory can be removed.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

func tail(file string) string {
	b, _ := os.ReadFile(file)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// makeCerts writes the daemon's certificates (server/), a client's
// (client/), a client of another CA (wrongca/) and the right CA without a
// client certificate (noclient/).
func makeCerts(dir string) error {
	ca, caKey, err := newCert(nil, nil, "xmode test CA", true, nil)
	if err != nil {
		return err
	}
	other, otherKey, err := newCert(nil, nil, "another CA", true, nil)
	if err != nil {
		return err
	}
	srv, srvKey, err := newCert(ca, caKey, "127.0.0.1", false, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
	if err != nil {
		return err
	}
	cli, cliKey, err := newCert(ca, caKey, "xmode test client", false, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	if err != nil {
		return err
	}
	stranger, strangerKey, err := newCert(other, otherKey, "xmode test client", false, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	if err != nil {
		return err
	}
	for sub, files := range map[string][][2]any{
		"server":   {{"ca.pem", ca}, {"cert.pem", srv}, {"key.pem", srvKey}},
		"client":   {{"ca.pem", ca}, {"cert.pem", cli}, {"key.pem", cliKey}},
		"wrongca":  {{"ca.pem", other}, {"cert.pem", stranger}, {"key.pem", strangerKey}},
		"noclient": {{"ca.pem", ca}},
	} {
		for _, f := range files {
			var block *pem.Block
			switch v := f[1].(type) {
			case *x509.Certificate:
				block = &pem.Block{Type: "CERTIFICATE", Bytes: v.Raw}
			case *ecdsa.PrivateKey:
				der, err := x509.MarshalECPrivateKey(v)
				if err != nil {
					return err
				}
				block = &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
			}
			if err := os.WriteFile(filepath.Join(dir, sub, f[0].(string)), pem.EncodeToMemory(block), 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// newCert makes a certificate signed by parent (self-signed when nil).
func newCert(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool, usage []x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}
