package docker

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// StorageMountForTests is where volume-mode tests mount the storage volume
// in sandboxes (a path that differs from the storage root on the host, as in
// the job-container topology where the two differ per container).
const StorageMountForTests = "/xmode-storage"

// tenv is one test's docker setup: a provider over a storage root, in bind
// mode or in volume mode (the storage root is then the storage volume's
// mountpoint on this host).
type tenv struct {
	t        testing.TB
	cli      *client.Client
	p        *Provider
	cfg      *config.Config
	root     string
	volume   string
	instance string
	warnings *syncBuffer
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newEnv builds a provider. mode is MountBind, MountVolume, or MountSync
// (against the second, TLS daemon: a daemon that is not on this machine as
// far as xmode knows); vars override the configuration's environment.
func newEnv(t testing.TB, mode string, vars map[string]string) *tenv {
	t.Helper()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	env := map[string]string{
		"HOME":                 t.TempDir(),
		"XMODE_SANDBOX_ENGINE": "docker",
		"XMODE_SANDBOX_IMAGE":  img,
		"XMODE_RUNNER_MODE":    "cloud_worker",
	}
	if h := dockertest.Host(); h != client.DefaultDockerHost {
		env["XMODE_SANDBOX_DOCKER_HOST"] = h
	}
	if mode == MountSync {
		d := dockertest.RequireTLSDaemon(t)
		d.Image(t)
		cli = d.Client()
		for _, kv := range d.Env() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	e := &tenv{t: t, cli: cli, instance: dockertest.NewInstance(t, cli), warnings: &syncBuffer{}}
	if mode == MountVolume {
		e.volume, e.root = dockertest.StorageVolume(t, cli)
		env["XMODE_SANDBOX_STORAGE_VOLUME"] = e.volume
		env["XMODE_SANDBOX_STORAGE_MOUNT"] = StorageMountForTests
	} else {
		e.root = t.TempDir()
	}
	env["XMODE_STORAGE_ROOT"] = e.root
	for k, v := range vars {
		env[k] = v
	}
	cfg, err := config.Load(func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	e.cfg = cfg
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p.Warnings = e.warnings
	t.Cleanup(func() { _ = p.Close() })
	e.p = p
	return e
}

// worktree makes <root>/runs/<run>/worktree for a new run.
func (e *tenv) worktree(run string) string {
	e.t.Helper()
	wt := filepath.Join(e.root, "runs", run, "worktree")
	if err := os.MkdirAll(wt, 0o755); err != nil {
		e.t.Fatal(err)
	}
	return wt
}

func (e *tenv) spec(run string) engine.Spec {
	sid := dockertest.NewID("sbx_")
	return engine.Spec{
		SessionID: sid, RunID: run, Project: "proj", Worktree: e.worktree(run),
		Labels: dockertest.Labels(e.instance, sid, run),
	}
}

// provision provisions a session on a new run and destroys it when the test
// ends.
func (e *tenv) provision() engine.Sandbox {
	e.t.Helper()
	return e.provisionSpec(e.spec(dockertest.NewID("run_")))
}

func (e *tenv) provisionSpec(spec engine.Spec) engine.Sandbox {
	e.t.Helper()
	return provisionFor(e.t, e, spec)
}

// provisionFor provisions spec and destroys the sandbox when t ends.
func provisionFor(t testing.TB, e *tenv, spec engine.Spec) engine.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := e.p.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() {
		if err := e.p.Destroy(context.Background(), sb); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return sb
}

func newRun() string { return dockertest.NewID("run_") }

type execResult struct {
	st     engine.Status
	err    error
	stdout string
	stderr string
	took   time.Duration
}

// run executes `sh -c script` in the sandbox.
func (e *tenv) run(sb engine.Sandbox, script string, mod ...func(*engine.ExecRequest)) execResult {
	e.t.Helper()
	var out, errb syncBuffer
	req := engine.ExecRequest{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb}
	for _, m := range mod {
		m(&req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	st, err := e.p.Exec(ctx, sb, req)
	return execResult{st: st, err: err, stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
}

// ok runs script and requires exit 0.
func (e *tenv) ok(sb engine.Sandbox, script string, mod ...func(*engine.ExecRequest)) string {
	e.t.Helper()
	r := e.run(sb, script, mod...)
	if r.err != nil || r.st != (engine.Status{}) {
		e.t.Fatalf("sh -c %q: status %+v err %v\nstdout: %s\nstderr: %s", script, r.st, r.err, r.stdout, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

func withTimeout(d time.Duration) func(*engine.ExecRequest) {
	return func(r *engine.ExecRequest) { r.Timeout = d }
}
