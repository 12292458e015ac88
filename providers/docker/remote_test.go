package docker

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/volume"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/engine/enginetest"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// The shared conformance suite against a daemon reached over TCP with TLS,
// in sync mode: the sandbox works on its own copy of the worktree.
func TestConformanceTLSSync(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountSync, nil)
	enginetest.Run(t, enginetest.Harness{Spec: func(t *testing.T) (engine.Provider, engine.Spec) {
		spec := e.spec(newRun())
		if err := os.Chown(spec.Worktree, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		return e.p, spec
	}})
}

// A session on the TLS daemon: the worktree is copied in at Provision into
// a volume of the session's, owned by the sandbox user; what the steps
// change comes back with SyncBack (new, changed, deleted files); the
// sandbox is hardened like volume mode and runs the configured runtime;
// Destroy removes container and volume.
func TestSyncModeSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountSync, map[string]string{"XMODE_SANDBOX_RUNTIME": dockertest.TestRuntime, "XMODE_SANDBOX_MEMORY": "64m"})
	ctx := context.Background()
	spec := e.spec(newRun())
	write := func(rel, s string) {
		t.Helper()
		p := filepath.Join(spec.Worktree, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README", "from the host\n")
	write("old.txt", "to be deleted\n")
	write("sub/dir/deep.txt", "deep\n")
	if err := os.Symlink("sub/dir/deep.txt", filepath.Join(spec.Worktree, "deep-link")); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(spec.Worktree, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 1000, 1000)
	}); err != nil {
		t.Fatal(err)
	}
	sb := e.provisionSpec(spec)
	if sb.MountMode != MountSync || !slices.Equal(sb.Volumes, []string{SyncVolumeName(spec.SessionID)}) || sb.ContainerID == "" {
		t.Fatalf("Provision returned %+v", sb)
	}
	got := e.ok(sb, `pwd; id -u; cat README; cat deep-link; ls -ln README | awk '{print $3":"$4}'; touch top-level-file && echo writable`)
	if want := SyncWorktree + "\n1000\nfrom the host\ndeep\n1000:1000\nwritable"; got != want {
		t.Errorf("in the sandbox:\n%s\nwant:\n%s", got, want)
	}
	ci, err := e.cli.ContainerInspect(ctx, sb.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	hc := ci.HostConfig
	if hc.Runtime != dockertest.TestRuntime || !slices.Contains(hc.CapDrop, "ALL") || !slices.Contains(hc.SecurityOpt, "no-new-privileges") ||
		hc.Memory != 64<<20 || hc.PidsLimit == nil || string(hc.NetworkMode) != "none" || ci.Config.User != "1000:1000" {
		t.Errorf("sync-mode sandbox: runtime %q capdrop %v secopt %v memory %d pids %v network %s user %q",
			hc.Runtime, hc.CapDrop, hc.SecurityOpt, hc.Memory, hc.PidsLimit, hc.NetworkMode, ci.Config.User)
	}
	if len(ci.Mounts) != 1 || ci.Mounts[0].Name != sb.Volumes[0] || ci.Mounts[0].Destination != SyncMount {
		t.Errorf("mounts %+v, want only the session's volume at %s", ci.Mounts, SyncMount)
	}

	// The host does not see the sandbox's changes until SyncBack.
	e.ok(sb, `echo from the sandbox > README; rm old.txt; mkdir -p made/here; echo new > made/here/new.txt; chmod 755 made/here/new.txt`)
	if b, _ := os.ReadFile(filepath.Join(spec.Worktree, "README")); string(b) != "from the host\n" {
		t.Fatalf("the host's README changed before SyncBack: %q", b)
	}
	if err := e.p.SyncBack(ctx, sb); err != nil {
		t.Fatalf("SyncBack: %v", err)
	}
	for rel, want := range map[string]string{"README": "from the sandbox\n", "made/here/new.txt": "new\n", "sub/dir/deep.txt": "deep\n"} {
		if b, err := os.ReadFile(filepath.Join(spec.Worktree, rel)); err != nil || string(b) != want {
			t.Errorf("%s on the host after SyncBack: %q %v, want %q", rel, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(spec.Worktree, "old.txt")); !os.IsNotExist(err) {
		t.Errorf("old.txt, deleted in the sandbox, is still on the host: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(spec.Worktree, "deep-link")); err != nil || l != "sub/dir/deep.txt" {
		t.Errorf("deep-link on the host: %q %v", l, err)
	}
	if st, err := os.Stat(filepath.Join(spec.Worktree, "made/here/new.txt")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("made/here/new.txt mode: %v %v", st, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(spec.Worktree), ".sync-*")); len(left) != 0 {
		t.Errorf("SyncBack left %v in the run's directory", left)
	}

	// A path deleted on the host (a file step's delete) is deleted in the
	// sandbox's copy by PushPath.
	if err := os.Remove(filepath.Join(spec.Worktree, "made/here/new.txt")); err != nil {
		t.Fatal(err)
	}
	if err := e.p.PushPath(ctx, sb, "made/here/new.txt"); err != nil {
		t.Fatalf("PushPath of a deleted path: %v", err)
	}
	if got := e.ok(sb, `test -e made/here/new.txt && echo still there; test -d made/here && echo dir kept`); got != "dir kept" {
		t.Errorf("after PushPath of a deleted file the sandbox has: %q", got)
	}

	// Hostile entries: links out of the worktree, setuid, a fifo.
	e.ok(sb, `ln -s /etc/passwd abs-link; ln -s ../../../.. up-link; ln -s made/../.. tricky-link; ln -s sub inner-link
		echo x > suid; chmod 6755 suid; mkfifo fifo; mkdir ro && chmod 555 ro`)
	if err := e.p.SyncBack(ctx, sb); err != nil {
		t.Fatalf("SyncBack of hostile entries: %v", err)
	}
	for _, gone := range []string{"abs-link", "up-link", "tricky-link", "fifo"} {
		if _, err := os.Lstat(filepath.Join(spec.Worktree, gone)); !os.IsNotExist(err) {
			t.Errorf("%s reached the host: %v", gone, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(spec.Worktree, "inner-link")); err != nil || l != "sub" {
		t.Errorf("a link inside the worktree was lost: %q %v", l, err)
	}
	if st, err := os.Stat(filepath.Join(spec.Worktree, "suid")); err != nil || st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || st.Mode().Perm() != 0o755 {
		t.Errorf("suid on the host: %v %v, want 0755 without setuid/setgid", st.Mode(), err)
	}
	if !strings.Contains(e.warnings.String(), "abs-link -> /etc/passwd") {
		t.Errorf("no warning about what was left out: %q", e.warnings)
	}

	// OOM and timeouts work over TLS as on the local socket.
	r := e.run(sb, "exec dd if=/dev/zero of=/dev/null bs=128M count=1")
	if r.err != nil || r.st != (engine.Status{ExitCode: 137, Signal: "SIGKILL", OOMKilled: true}) {
		t.Errorf("memory hog over TLS: %+v %v", r.st, r.err)
	}
	if r := e.run(sb, "sleep 30", withTimeout(300*time.Millisecond)); !r.st.TimedOut || r.err != nil {
		t.Errorf("timeout over TLS: %+v %v", r.st, r.err)
	}

	if err := e.p.Destroy(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.VolumeInspect(ctx, sb.Volumes[0]); !cerrdefs.IsNotFound(err) {
		t.Errorf("Destroy left the session's volume: %v", err)
	}
	if err := e.p.SyncBack(ctx, sb); fail.KindOf(err) != fail.Failed || !strings.Contains(err.Error(), "gone") {
		t.Errorf("SyncBack of a destroyed sandbox: %v", err)
	}
	// The host's worktree is still the last copy.
	if b, _ := os.ReadFile(filepath.Join(spec.Worktree, "README")); string(b) != "from the sandbox\n" {
		t.Errorf("README after Destroy: %q", b)
	}
}

// A runtime the daemon does not have fails create with exit 5 naming it,
// and leaves nothing behind; doctor says which runtimes there are.
func TestRuntimeMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountSync, map[string]string{"XMODE_SANDBOX_RUNTIME": "xmode-no-such-runtime"})
	ctx := context.Background()
	spec := e.spec(newRun())
	sb, err := e.p.Provision(ctx, spec)
	if fail.KindOf(err) != fail.EngineUnavailable || !strings.Contains(err.Error(), "xmode-no-such-runtime") {
		t.Fatalf("Provision with a missing runtime: %v, want exit 5 naming it", err)
	}
	if len(sb.Volumes) != 0 {
		t.Errorf("a failed Provision reports volumes left: %v", sb.Volumes)
	}
	if _, err := e.cli.ContainerInspect(ctx, ContainerName(spec.SessionID)); !cerrdefs.IsNotFound(err) {
		t.Errorf("a container was left: %v", err)
	}
	if _, err := e.cli.VolumeInspect(ctx, SyncVolumeName(spec.SessionID)); !cerrdefs.IsNotFound(err) {
		t.Errorf("the session's volume was left: %v", err)
	}
	c := find(e.p.Health(ctx), "runtime")
	if c == nil || c.Status != engine.CheckFail || !strings.Contains(c.Detail, "xmode-no-such-runtime") || !strings.Contains(c.Detail, dockertest.TestRuntime) {
		t.Errorf("doctor's runtime line: %+v", c)
	}
	ok := newEnv(t, MountSync, map[string]string{"XMODE_SANDBOX_RUNTIME": dockertest.TestRuntime})
	if c := find(ok.p.Health(ctx), "runtime"); c == nil || c.Status != engine.CheckOK || !strings.Contains(c.Detail, "registered") {
		t.Errorf("doctor's runtime line for a registered runtime: %+v", c)
	}
}

func find(checks []engine.Check, name string) *engine.Check {
	for i := range checks {
		if checks[i].Name == name {
			return &checks[i]
		}
	}
	return nil
}

// TLS that goes wrong says what is wrong (exit 5): a daemon whose
// certificate another CA signed, no client certificate, plain HTTP to a
// TLS daemon; plain TCP off loopback is refused unless asked for, and then
// doctor warns; XMODE_SANDBOX_DOCKER_INSECURE also skips verification, with
// a warning.
func TestTLSFailures(t *testing.T) {
	t.Parallel()
	d := dockertest.RequireTLSDaemon(t)
	ctx := context.Background()
	provider := func(vars map[string]string) (*Provider, error) {
		t.Helper()
		env := map[string]string{"HOME": t.TempDir(), "XMODE_STORAGE_ROOT": t.TempDir(), "XMODE_SANDBOX_DOCKER_HOST": d.Host}
		for k, v := range vars {
			env[k] = v
		}
		cfg, err := config.Load(func(k string) string { return env[k] }, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(cfg)
		if err == nil {
			p.PingTimeout = 5 * time.Second
			t.Cleanup(func() { p.Close() })
		}
		return p, err
	}
	for _, tc := range []struct {
		name string
		vars map[string]string
		want []string
	}{
		{"wrong CA", map[string]string{"XMODE_SANDBOX_DOCKER_CERT_PATH": d.WrongCA, "DOCKER_TLS_VERIFY": "1"}, []string{"did not sign", "XMODE_SANDBOX_DOCKER_CERT_PATH", d.WrongCA}},
		{"no client certificate", map[string]string{"XMODE_SANDBOX_DOCKER_CERT_PATH": d.NoClient, "DOCKER_TLS_VERIFY": "1"}, []string{"client certificate", "cert.pem"}},
		{"plain HTTP", map[string]string{"XMODE_SANDBOX_DOCKER_REMOTE": "1"}, []string{"speaks TLS", "XMODE_SANDBOX_DOCKER_CERT_PATH"}},
	} {
		p, err := provider(tc.vars)
		if err != nil {
			t.Fatalf("%s: New: %v", tc.name, err)
		}
		_, err = p.Ping(ctx)
		if fail.KindOf(err) != fail.EngineUnavailable {
			t.Errorf("%s: %v, want exit 5", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
		if c := find(p.Health(ctx), "docker daemon"); c == nil || c.Status != engine.CheckFail {
			t.Errorf("%s: doctor: %+v", tc.name, c)
		}
	}

	// Verification skipped on request: the daemon answers, doctor warns.
	mixed := t.TempDir()
	for src, name := range map[string]string{filepath.Join(d.WrongCA, "ca.pem"): "ca.pem", filepath.Join(d.Certs, "cert.pem"): "cert.pem", filepath.Join(d.Certs, "key.pem"): "key.pem"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mixed, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, err := provider(map[string]string{"XMODE_SANDBOX_DOCKER_CERT_PATH": mixed, "XMODE_SANDBOX_DOCKER_INSECURE": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ping(ctx); err != nil {
		t.Errorf("INSECURE=1 with an unverifiable daemon: %v", err)
	}
	if c := find(p.Health(ctx), "docker tls"); c == nil || c.Status != engine.CheckWarn || !strings.Contains(c.Detail, "without verifying") {
		t.Errorf("doctor with verification off: %+v", c)
	}
	if p, err := provider(map[string]string{"XMODE_SANDBOX_DOCKER_CERT_PATH": mixed}); err != nil {
		t.Fatal(err)
	} else if _, err := p.Ping(ctx); fail.KindOf(err) != fail.EngineUnavailable {
		t.Errorf("the same without INSECURE: %v, want refused", err)
	}
	p, err = provider(map[string]string{"XMODE_SANDBOX_DOCKER_CERT_PATH": d.Certs})
	if err != nil {
		t.Fatal(err)
	}
	if c := find(p.Health(ctx), "docker tls"); c == nil || c.Status != engine.CheckOK || !strings.Contains(c.Detail, "verified") {
		t.Errorf("doctor with TLS verified: %+v", c)
	}

	// Plain TCP to another machine (10.255.255.1 is never dialled).
	_, err = provider(map[string]string{"XMODE_SANDBOX_DOCKER_HOST": "tcp://10.255.255.1:2375"})
	if fail.KindOf(err) != fail.EngineUnavailable || !strings.Contains(err.Error(), "plain TCP") || !strings.Contains(err.Error(), "XMODE_SANDBOX_DOCKER_INSECURE") {
		t.Errorf("plain TCP off loopback: %v, want refused naming the way out", err)
	}
	p, err = provider(map[string]string{"XMODE_SANDBOX_DOCKER_HOST": "tcp://10.255.255.1:2375", "XMODE_SANDBOX_DOCKER_INSECURE": "1"})
	if err != nil {
		t.Fatal(err)
	}
	p.PingTimeout = 200 * time.Millisecond
	if c := find(p.Health(ctx), "docker tls"); c == nil || c.Status != engine.CheckWarn || !strings.Contains(c.Detail, "plain TCP") {
		t.Errorf("doctor with plain TCP allowed: %+v", c)
	}
}

// The endpoints the engine accepts and refuses, and what it makes of them.
func TestEndpoints(t *testing.T) {
	certs := t.TempDir()
	for _, tc := range []struct {
		vars                        map[string]string
		kind                        fail.Kind
		network                     string
		tls, remote, insecureRemark bool
		says                        string
	}{
		{vars: nil, network: "unix"},
		{vars: map[string]string{"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}, network: "unix"},
		{vars: map[string]string{"DOCKER_HOST": "tcp://127.0.0.1:2375"}, network: "tcp", remote: true},
		{vars: map[string]string{"DOCKER_HOST": "tcp://127.0.0.1:2375", "XMODE_SANDBOX_DOCKER_REMOTE": "0"}, network: "tcp"},
		{vars: map[string]string{"DOCKER_HOST": "unix:///var/run/docker.sock", "XMODE_SANDBOX_DOCKER_REMOTE": "1"}, network: "unix", remote: true},
		{vars: map[string]string{"DOCKER_HOST": "https://sandbox.example:2376", "DOCKER_CERT_PATH": certs}, network: "tcp", tls: true, remote: true},
		{vars: map[string]string{"DOCKER_HOST": "tcp://sandbox.example:2376", "DOCKER_CERT_PATH": certs}, network: "tcp", tls: true, remote: true},
		{vars: map[string]string{"XMODE_SANDBOX_DOCKER_HOST": "tcp://sandbox.example:2376", "DOCKER_TLS_VERIFY": "1", "HOME": certs}, network: "tcp", tls: true, remote: true},
		{vars: map[string]string{"DOCKER_HOST": "tcp://sandbox.example:2375", "XMODE_SANDBOX_DOCKER_INSECURE": "1"}, network: "tcp", remote: true, insecureRemark: true},
		{vars: map[string]string{"DOCKER_HOST": "tcp://sandbox.example:2375"}, kind: fail.EngineUnavailable, says: "DOCKER_HOST"},
		{vars: map[string]string{"DOCKER_HOST": "ssh://me@sandbox.example"}, kind: fail.Usage, says: "DOCKER_HOST"},
		{vars: map[string]string{"XMODE_SANDBOX_DOCKER_HOST": "ssh://me@sandbox.example"}, kind: fail.Usage, says: "XMODE_SANDBOX_DOCKER_HOST"},
		{vars: map[string]string{"DOCKER_HOST": "npipe:////./pipe/docker_engine"}, kind: fail.Usage, says: "DOCKER_HOST"},
		{vars: map[string]string{"DOCKER_HOST": "tcp://sandbox.example"}, kind: fail.Usage, says: "HOST:PORT"},
		{vars: map[string]string{"DOCKER_HOST": "sandbox.example:2376"}, kind: fail.Usage, says: "DOCKER_HOST"},
		{vars: map[string]string{"DOCKER_API_VERSION": "latest"}, kind: fail.Usage, says: "DOCKER_API_VERSION"},
	} {
		env := map[string]string{"HOME": "/nonexistent", "XMODE_STORAGE_ROOT": "/srv/x"}
		for k, v := range tc.vars {
			env[k] = v
		}
		cfg, err := config.Load(func(k string) string { return env[k] }, nil)
		if err != nil {
			t.Fatalf("%v: config: %v", tc.vars, err)
		}
		p, err := New(cfg)
		if tc.kind != 0 {
			if fail.KindOf(err) != tc.kind || !strings.Contains(fmt.Sprint(err), tc.says) {
				t.Errorf("%v: %v, want kind %v naming %s", tc.vars, err, tc.kind, tc.says)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.vars, err)
			continue
		}
		if p.ep.network != tc.network || (p.ep.tls != nil) != tc.tls || p.ep.remote != tc.remote || (p.ep.insecure != "") != tc.insecureRemark {
			t.Errorf("%v: endpoint %+v", tc.vars, p.ep)
		}
		if tc.tls && p.ep.tls.InsecureSkipVerify {
			t.Errorf("%v: TLS without verification", tc.vars)
		}
		p.Close()
	}
}

// IDs and names from a session row never become other API paths: the SDK
// puts them into request paths unchecked ("../volumes/X" as a container ID
// removed volume X).
func TestIDsAreChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	ctx := context.Background()
	victim := "xmode-test-victim-" + strings.TrimPrefix(dockertest.NewID("v_"), "v_")
	if _, err := e.cli.VolumeCreate(ctx, volume.CreateOptions{Name: victim, Labels: dockertest.Labels(e.instance, dockertest.NewID("sbx_"), newRun())}); err != nil {
		t.Fatal(err)
	}
	sid := dockertest.NewID("sbx_")
	for _, ref := range []string{"../volumes/" + victim, "../../v1.41/volumes/" + victim, "/volumes/" + victim, ".", ""} {
		sb := engine.Sandbox{Engine: Name, ContainerID: ref, SessionID: sid, RunID: newRun()}
		if ref == "" {
			sb.SessionID = "../volumes/" + victim
		}
		if err := e.p.Destroy(ctx, sb); fail.KindOf(err) != fail.Refused {
			t.Errorf("Destroy of container %q: %v, want refused", ref, err)
		}
		if _, err := e.p.Exec(ctx, sb, engine.ExecRequest{Argv: []string{"true"}}); fail.KindOf(err) != fail.Refused {
			t.Errorf("Exec in container %q: %v, want refused", ref, err)
		}
	}
	for _, name := range []string{"../containers/xmode-x", "a/b", ".."} {
		if err := e.p.Destroy(ctx, engine.Sandbox{Volumes: []string{name}}); fail.KindOf(err) != fail.Refused {
			t.Errorf("Destroy of volume %q: %v, want refused", name, err)
		}
		if err := e.p.RemoveVolume(ctx, name, e.instance); fail.KindOf(err) != fail.Refused {
			t.Errorf("RemoveVolume(%q): %v, want refused", name, err)
		}
	}
	if _, err := e.cli.VolumeInspect(ctx, victim); err != nil {
		t.Fatalf("the volume went: %v", err)
	}
}

// A daemon that takes an exec's attach request and never answers: the
// SDK's hijack handshake does not look at its context, so without the
// deadline on the connection (attachGuard) the step would hang for ever.
// Exec gives up within its call timeout instead (exit 5).
func TestExecAttachHandshakeIsBounded(t *testing.T) {
	t.Parallel()
	dockertest.Require(t)
	// The proxy below passes bytes through: it reaches a daemon on a unix
	// socket or on plain tcp, not one that speaks TLS.
	network, target, _ := strings.Cut(dockertest.Host(), "://")
	tls := os.Getenv("XMODE_SANDBOX_DOCKER_CERT_PATH") != "" || os.Getenv("DOCKER_CERT_PATH") != "" || os.Getenv("DOCKER_TLS_VERIFY") != ""
	if network != "unix" && (network != "tcp" || tls) {
		testenv.Skip(t, "the test daemon (%s) is neither on a unix socket nor on plain tcp", dockertest.Host())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []net.Conn
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(c)
				line, err := br.ReadBytes('\n')
				if err != nil {
					c.Close()
					return
				}
				if bytes.Contains(line, []byte("/exec/")) && bytes.Contains(line, []byte("/start")) {
					mu.Lock()
					held = append(held, c) // read, never answered
					mu.Unlock()
					return
				}
				u, err := net.Dial(network, target)
				if err != nil {
					c.Close()
					return
				}
				go func() { _, _ = u.Write(line); _, _ = io.Copy(u, br); closeWrite(u) }()
				_, _ = io.Copy(c, u)
				c.Close()
				u.Close()
			}()
		}
	}()
	e := newEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_DOCKER_HOST": "tcp://" + l.Addr().String(), "XMODE_SANDBOX_DOCKER_REMOTE": "0"})
	sb := e.provision()
	e.p.CallTimeout = time.Second
	start := time.Now()
	r := e.run(sb, "true")
	if r.err == nil || fail.KindOf(r.err) != fail.EngineUnavailable {
		t.Errorf("exec against a daemon that never answers the attach: %+v %v, want exit 5", r.st, r.err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the attach took %v to give up", took)
	}
	t.Logf("gave up after %v: %v", time.Since(start), r.err)
	e.p.CallTimeout = 0
}
