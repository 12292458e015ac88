package docker

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

func TestRegistered(t *testing.T) {
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"XMODE_STORAGE_ROOT": t.TempDir(), "XMODE_SANDBOX_ENGINE": "docker", "HOME": t.TempDir()}[k]
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := engine.For(config.ModeCloudWorker, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name() != "docker" {
		t.Errorf("cloud_worker with XMODE_SANDBOX_ENGINE=docker chose %q", a.Name())
	}
}

// A missing image that cannot be pulled (no registry here) is exit 5 with
// the daemon's reason, promptly, and leaves nothing behind.
func TestPullFailureIsEngineUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	var progress syncBuffer
	e.p.Progress = &progress
	spec := e.spec(newRun())
	// A registry on a closed loopback port: the pull fails without the
	// daemon asking any host the test did not make.
	spec.Image = "127.0.0.1:1/xmode-test-no-such-image-" + strings.TrimPrefix(dockertest.NewID("x_"), "x_") + ":1"
	start := time.Now()
	_, err := e.p.Provision(context.Background(), spec)
	if err == nil {
		t.Fatal("Provision with an image that cannot be pulled succeeded")
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("the failed pull took %v", took)
	}
	if fail.KindOf(err) != fail.EngineUnavailable || fail.ExitCode(err) != 5 {
		t.Errorf("kind %v (exit %d), want EngineUnavailable (exit 5): %v", fail.KindOf(err), fail.ExitCode(err), err)
	}
	if !strings.Contains(err.Error(), spec.Image) || !strings.Contains(err.Error(), "could not pull") || !strings.Contains(err.Error(), "XMODE_SANDBOX_IMAGE") {
		t.Errorf("error does not say what failed: %v", err)
	}
	if !strings.Contains(progress.String(), "Unable to find image") {
		t.Errorf("no pull progress: %q", progress.String())
	}
	t.Logf("pull failure after %v: %v", time.Since(start), err)
	if _, err := e.cli.ContainerInspect(context.Background(), ContainerName(spec.SessionID)); !cerrdefs.IsNotFound(err) {
		t.Errorf("a container was left behind: %v", err)
	}
}

func TestBadImageReferenceIsUsage(t *testing.T) {
	e := newEnv(t, MountBind, nil)
	if err := e.p.EnsureImage(context.Background(), "Bad//Ref"); fail.KindOf(err) != fail.Usage {
		t.Errorf("EnsureImage(Bad//Ref) = %v, want a usage error", err)
	}
}

// An unreachable or hung daemon is exit 5, quickly, with what to check.
func TestUnreachableDaemon(t *testing.T) {
	t.Parallel()
	// A listener that accepts and never answers: a hung daemon.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, host := range []string{"unix:///nonexistent/docker.sock", "tcp://127.0.0.1:1", "tcp://" + hung.Addr().String()} {
		root := t.TempDir()
		cfg, err := config.Load(func(k string) string {
			return map[string]string{"XMODE_STORAGE_ROOT": root, "HOME": root, "XMODE_SANDBOX_DOCKER_HOST": host}[k]
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.PingTimeout = 500 * time.Millisecond
		run := dockertest.NewID("run_")
		wt := filepath.Join(root, "runs", run, "worktree")
		if err := os.MkdirAll(wt, 0o755); err != nil {
			t.Fatal(err)
		}
		sb := engine.Sandbox{Engine: "docker", ContainerID: "abc", SessionID: dockertest.NewID("sbx_"), RunID: run, Worktree: wt}
		start := time.Now()
		checks := map[string]error{}
		_, checks["Provision"] = p.Provision(context.Background(), engine.Spec{SessionID: sb.SessionID, RunID: run, Worktree: wt, Image: "busybox",
			Labels: dockertest.Labels("test_unreachable", sb.SessionID, run)})
		_, checks["Exec"] = p.Exec(context.Background(), sb, engine.ExecRequest{Argv: []string{"true"}})
		checks["Destroy"] = p.Destroy(context.Background(), sb)
		_, checks["Alive"] = p.Alive(context.Background(), sb)
		_, checks["Ping"] = p.Ping(context.Background())
		_, checks["ListObjects"] = p.ListObjects(context.Background(), "x")
		_, _, checks["IsolationMethod"] = p.IsolationMethod(context.Background())
		for what, err := range checks {
			if what == "IsolationMethod" {
				if err != nil {
					t.Errorf("%s: bind mode needs no daemon to say its isolation: %v", what, err)
				}
				continue
			}
			if fail.KindOf(err) != fail.EngineUnavailable {
				t.Errorf("%s against %s: %v (kind %v), want EngineUnavailable", what, host, err, fail.KindOf(err))
			} else if !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "DOCKER_HOST") {
				t.Errorf("%s against %s: %v does not say what to check", what, host, err)
			}
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("failing against %s took %v", host, took)
		}
		t.Logf("%s: %v", host, checks["Provision"])
		_ = p.Close()
	}
}

// tcp:// works: a second listener on loopback in front of the local socket.
func TestTCPEndpoint(t *testing.T) {
	t.Parallel()
	dockertest.Require(t)
	img := dockertest.Image(t)
	px := dockertest.NewTCPProxy(t)
	// A daemon on this machine reached over TCP: bind mode still works when
	// told so (by default a tcp:// daemon gets a copy of the worktree).
	e := newEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_DOCKER_HOST": px.Host(), "XMODE_SANDBOX_IMAGE": img, "XMODE_SANDBOX_DOCKER_REMOTE": "0"})
	if h := e.p.Host(); h != px.Host() {
		t.Fatalf("provider talks to %s", h)
	}
	v, err := e.p.Ping(context.Background())
	if err != nil || v == "" {
		t.Fatalf("Ping over tcp: %q %v", v, err)
	}
	sb := e.provision()
	if sb.MountMode != MountBind {
		t.Errorf("mount mode over tcp with XMODE_SANDBOX_DOCKER_REMOTE=0: %s", sb.MountMode)
	}
	if got := e.ok(sb, "echo over tcp; echo err >&2"); got != "over tcp" {
		t.Errorf("got %q", got)
	}
	r := e.run(sb, "sleep 30", withTimeout(300*time.Millisecond))
	if !r.st.TimedOut {
		t.Errorf("timeout over tcp: %+v %v", r.st, r.err)
	}
	if err := e.p.Destroy(context.Background(), sb); err != nil {
		t.Errorf("Destroy over tcp: %v", err)
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// The storage-root guard and the names: refused before the daemon is asked.
func TestProvisionRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	good := e.spec(newRun())

	outside := good
	outside.Worktree = t.TempDir()
	if _, err := e.p.Provision(context.Background(), outside); fail.KindOf(err) != fail.Refused {
		t.Errorf("worktree outside the storage root: %v, want refused", err)
	}
	notDerived := good
	notDerived.Worktree = filepath.Join(e.root, "runs", good.RunID, "elsewhere")
	if err := os.MkdirAll(notDerived.Worktree, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Provision(context.Background(), notDerived); fail.KindOf(err) != fail.Refused {
		t.Errorf("volume mode, worktree not <root>/runs/<run>/worktree: %v, want refused", err)
	}
	link := good
	link.RunID = newRun()
	if err := os.MkdirAll(filepath.Join(e.root, "runs", link.RunID), 0o755); err != nil {
		t.Fatal(err)
	}
	link.Worktree = filepath.Join(e.root, "runs", link.RunID, "worktree")
	if err := os.Symlink("/etc", link.Worktree); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Provision(context.Background(), link); fail.KindOf(err) != fail.Refused {
		t.Errorf("worktree symlinked out of the root: %v, want refused", err)
	}
	bad := good
	bad.SessionID = "sbx_../../x"
	if _, err := e.p.Provision(context.Background(), bad); fail.KindOf(err) != fail.Refused {
		t.Errorf("malformed session id: %v, want refused", err)
	}
}

// The docker socket never enters a sandbox, whatever the mounts say.
func TestNoDockerSocketMount(t *testing.T) {
	cfg := &config.Config{StorageRoot: "/srv/xmode", DockerHost: "unix:///custom/dock.sock"}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []mount.Mount{
		{Type: mount.TypeBind, Source: "/var/run/docker.sock", Target: "/workspace"},
		{Type: mount.TypeBind, Source: "/srv/xmode/runs/x/worktree", Target: "/var/run/docker.sock"},
		{Type: mount.TypeBind, Source: "/var/run", Target: "/x"},
		{Type: mount.TypeBind, Source: "/custom", Target: "/x"},
		{Type: mount.TypeBind, Source: "/", Target: "/host"},
		{Type: mount.TypeBind, Source: "/srv/a/docker.sock", Target: "/y"},
	} {
		if err := p.checkNoSocket([]mount.Mount{m}); fail.KindOf(err) != fail.Refused {
			t.Errorf("mount %s:%s: %v, want refused", m.Source, m.Target, err)
		}
	}
	if err := p.checkNoSocket([]mount.Mount{{Type: mount.TypeBind, Source: "/srv/xmode/runs/r/worktree", Target: "/workspace"}}); err != nil {
		t.Errorf("a worktree mount was refused: %v", err)
	}
}

// Alive is one inspect: a running container of the session is alive; one
// stopped, removed, or labelled for another session is not; a sandbox
// without a container is not.
func TestAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	ctx := context.Background()
	sb := e.provision()
	alive := func(what string, sb engine.Sandbox, want bool) {
		t.Helper()
		got, err := e.p.Alive(ctx, sb)
		if err != nil || got != want {
			t.Errorf("%s: Alive %v (%v), want %v", what, got, err, want)
		}
	}
	alive("running", sb, true)
	start := time.Now()
	for range 20 {
		e.p.Alive(ctx, sb)
	}
	t.Logf("Alive: %s a call", time.Since(start)/20)
	alive("another session's", engine.Sandbox{ContainerID: sb.ContainerID, SessionID: dockertest.NewID("sbx_")}, false)
	alive("no container", engine.Sandbox{SessionID: sb.SessionID}, false)
	zero := 0
	if err := e.cli.ContainerStop(ctx, sb.ContainerID, container.StopOptions{Timeout: &zero}); err != nil {
		t.Fatal(err)
	}
	alive("stopped", sb, false)
	if err := e.p.Destroy(ctx, sb); err != nil {
		t.Fatal(err)
	}
	alive("removed", sb, false)
}

func TestDestroy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	ctx := context.Background()

	// A per-session volume listed in the sandbox goes with it; the storage
	// volume never does, even when listed.
	spec := e.spec(newRun())
	sb := e.provisionSpec(spec)
	perSession := "xmode-test-session-" + strings.TrimPrefix(spec.SessionID, "sbx_")
	if _, err := e.cli.VolumeCreate(ctx, volume.CreateOptions{Name: perSession, Labels: spec.Labels}); err != nil {
		t.Fatal(err)
	}
	sb.Volumes = []string{perSession, e.volume}
	if err := e.p.Destroy(ctx, sb); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, sb.ContainerID); !cerrdefs.IsNotFound(err) {
		t.Errorf("container still there: %v", err)
	}
	if _, err := e.cli.VolumeInspect(ctx, perSession); !cerrdefs.IsNotFound(err) {
		t.Errorf("per-session volume still there: %v", err)
	}
	if _, err := e.cli.VolumeInspect(ctx, e.volume); err != nil {
		t.Errorf("the storage volume was removed: %v", err)
	}
	if err := e.p.Destroy(ctx, sb); err != nil {
		t.Errorf("second Destroy: %v", err)
	}

	// Provisioning that died before recording the container id: Destroy
	// finds the container by the session's name.
	spec2 := e.spec(newRun())
	sb2 := e.provisionSpec(spec2)
	if err := e.p.Destroy(ctx, engine.Sandbox{SessionID: spec2.SessionID}); err != nil {
		t.Fatalf("Destroy by session: %v", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, sb2.ContainerID); !cerrdefs.IsNotFound(err) {
		t.Errorf("container still there: %v", err)
	}

	// Not xmode's, or another session's: refused, left alone.
	foreign, err := e.cli.ContainerCreate(ctx, &container.Config{Image: e.cfg.Image, Cmd: []string{"true"}, Labels: map[string]string{"xmode.instance": e.instance}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.Destroy(ctx, engine.Sandbox{ContainerID: foreign.ID}); fail.KindOf(err) != fail.Refused {
		t.Errorf("Destroy of a container without xmode labels: %v, want refused", err)
	}
	sb3 := e.provision()
	if err := e.p.Destroy(ctx, engine.Sandbox{ContainerID: sb3.ContainerID, SessionID: dockertest.NewID("sbx_")}); fail.KindOf(err) != fail.Refused {
		t.Errorf("Destroy of another session's container: %v, want refused", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, sb3.ContainerID); err != nil {
		t.Errorf("another session's container was removed: %v", err)
	}
	unlabelled := "xmode-test-unlabelled-" + strings.TrimPrefix(dockertest.NewID("x_"), "x_")
	if _, err := e.cli.VolumeCreate(ctx, volume.CreateOptions{Name: unlabelled, Labels: map[string]string{"xmode.instance": e.instance}}); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Destroy(ctx, engine.Sandbox{Volumes: []string{unlabelled}}); fail.KindOf(err) != fail.Refused {
		t.Errorf("Destroy of a volume without xmode.managed: %v, want refused", err)
	}
}

func TestListObjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	ctx := context.Background()
	sb := e.provision()
	vol := "xmode-test-orphan-" + strings.TrimPrefix(dockertest.NewID("x_"), "x_")
	if _, err := e.cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: dockertest.Labels(e.instance, sb.SessionID, sb.RunID)}); err != nil {
		t.Fatal(err)
	}
	objs, err := e.p.ListObjects(ctx, e.instance)
	if err != nil {
		t.Fatal(err)
	}
	var cs, vs []engine.Object
	for _, o := range objs {
		if o.Kind == engine.KindContainer {
			cs = append(cs, o)
		} else {
			vs = append(vs, o)
		}
	}
	if len(cs) != 1 || cs[0].ID != sb.ContainerID || cs[0].Name != ContainerName(sb.SessionID) ||
		cs[0].SessionID != sb.SessionID || cs[0].State != "running" || cs[0].Instance != e.instance {
		t.Errorf("containers: %+v", cs)
	}
	if len(vs) != 1 || vs[0].Name != vol || vs[0].ID != vol || vs[0].SessionID != sb.SessionID || vs[0].Kind != engine.KindVolume {
		t.Errorf("volumes: %+v", vs)
	}
	other, err := e.p.ListObjects(ctx, "test_someoneelse")
	if err != nil || len(other) != 0 {
		t.Errorf("another instance sees %+v %v", other, err)
	}
	if _, err := e.p.ListObjects(ctx, ""); err == nil {
		t.Error("ListObjects without an instance id listed everything")
	}
	// RemoveObject is Destroy with its checks: the volume goes, and a
	// container of another session under this one's name does not.
	if err := e.p.RemoveObject(ctx, vs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.VolumeInspect(ctx, vol); !cerrdefs.IsNotFound(err) {
		t.Errorf("RemoveObject left the volume: %v", err)
	}
	wrong := cs[0]
	wrong.SessionID = dockertest.NewID("sbx_")
	if err := e.p.RemoveObject(ctx, wrong); fail.KindOf(err) != fail.Refused {
		t.Errorf("RemoveObject of a container labelled for another session: %v, want refused", err)
	}
}

func TestDoctorHelpers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	ctx := context.Background()
	v, err := e.p.Ping(ctx)
	if err != nil || v == "" {
		t.Fatalf("Ping: %q %v", v, err)
	}
	if ok, err := e.p.ImagePresent(ctx, e.cfg.Image); !ok || err != nil {
		t.Errorf("ImagePresent(%s) = %v %v", e.cfg.Image, ok, err)
	}
	if ok, err := e.p.ImagePresent(ctx, "xmode-test-absent:0"); ok || err != nil {
		t.Errorf("ImagePresent(absent) = %v %v", ok, err)
	}
	if ok, err := e.p.VolumePresent(ctx, e.volume); !ok || err != nil {
		t.Errorf("VolumePresent(%s) = %v %v", e.volume, ok, err)
	}
	if ok, err := e.p.VolumePresent(ctx, "xmode-test-absent"); ok || err != nil {
		t.Errorf("VolumePresent(absent) = %v %v", ok, err)
	}

	// A storage volume that does not exist: doctor and Provision say how to
	// make it; xmode does not create it behind the operator's back.
	missing := newEnv(t, MountVolume, map[string]string{"XMODE_SANDBOX_STORAGE_VOLUME": "xmode-test-absent"})
	if _, _, err := missing.p.IsolationMethod(ctx); fail.KindOf(err) != fail.EngineUnavailable || !strings.Contains(err.Error(), "docker volume create") {
		t.Errorf("IsolationMethod with a missing volume: %v", err)
	}
	if _, err := missing.p.Provision(ctx, missing.spec(newRun())); fail.KindOf(err) != fail.EngineUnavailable {
		t.Errorf("Provision with a missing volume: %v", err)
	}
	if ok, _ := missing.p.VolumePresent(ctx, "xmode-test-absent"); ok {
		t.Error("Provision created the missing storage volume")
	}
	bind := newEnv(t, MountBind, nil)
	if m, _, err := bind.p.IsolationMethod(ctx); m != IsolationBind || err != nil {
		t.Errorf("bind mode: %q %v", m, err)
	}
}

// A worktree that is not in the storage volume (the storage root is not the
// volume's mount) fails clearly instead of giving the sandbox an empty dir.
func TestWorktreeNotInVolume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	root := t.TempDir()
	cfg := *e.cfg
	cfg.StorageRoot = root
	p, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	run := newRun()
	wt := filepath.Join(root, "runs", run, "worktree")
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	sid := dockertest.NewID("sbx_")
	_, err = p.Provision(context.Background(), engine.Spec{SessionID: sid, RunID: run, Worktree: wt, Labels: dockertest.Labels(e.instance, sid, run)})
	if err == nil || !strings.Contains(err.Error(), "not in storage volume") {
		t.Errorf("Provision of a worktree outside the volume: %v", err)
	}
}

// PathPresent answers for the container's own filesystem — its image and
// what is mounted — not the host's, and runs nothing in the container; a
// path that is not absolute is refused.
func TestPathPresent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	ctx := context.Background()
	sb := e.provision()
	if err := os.WriteFile(filepath.Join(sb.Worktree, "agent.sh"), []byte("true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	host, err := filepath.Abs("provider_test.go") // on this host, not in the image
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"/bin/sh": true, "/workspace/agent.sh": true, "/workspace/nothing": false, host: false} {
		if got, err := e.p.PathPresent(ctx, sb, p); err != nil || got != want {
			t.Errorf("PathPresent(%s) = %v, %v; want %v", p, got, err, want)
		}
	}
	if _, err := e.p.PathPresent(ctx, sb, "bin/sh"); fail.KindOf(err) != fail.Usage {
		t.Errorf("a relative path: %v, want a usage error", err)
	}
	present, known, err := engine.PathPresent(ctx, e.p, sb, host)
	if present || !known || err != nil {
		t.Errorf("engine.PathPresent through the capability: %v %v %v", present, known, err)
	}
}
