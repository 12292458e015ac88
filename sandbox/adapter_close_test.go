package sandbox

import (
	"context"
	"io"
	"os"
	"testing"

	_ "github.com/xmode/xmode/providers/docker" // the docker engine
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// Every step opens the session's engine and closes it again: a process that
// runs many steps (a plan, the loop) does not keep one docker client and
// its connections per step, and neither does one that copies, stops or
// creates sessions.
func TestStepsCloseTheirEngine(t *testing.T) {
	cli := dockertest.Require(t)
	f := newFixture(t)
	svc := newService(t, map[string]string{
		"XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker", "XMODE_SANDBOX_IMAGE": dockertest.Image(t),
	})
	ctx := context.Background()
	instance, err := svc.Store.InstanceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, instance) })
	sess, err := svc.Create(ctx, CreateOptions{Repo: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	step := func() {
		t.Helper()
		res, err := svc.Exec(ctx, sess, ExecOptions{Argv: []string{"true"}, LiveStdout: io.Discard, LiveStderr: io.Discard})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v %v", res, err)
		}
	}
	step() // the store's connections, the first of everything
	before := openFDs(t)
	const n = 20
	for range n {
		step()
		if _, err := svc.CopyOut(ctx, sess, "README", t.TempDir()); err != nil {
			t.Fatalf("cp out: %v", err)
		}
	}
	if after := openFDs(t); after > before+2 {
		t.Fatalf("%d steps and copies left %d more open files (%d → %d): an engine opened per step is not closed", n, after-before, before, after)
	}

	// Stopping sessions (and a create's own engine) leaves nothing open.
	before = openFDs(t)
	for range 3 {
		s, err := svc.Create(ctx, CreateOptions{Repo: f.dir})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Stop(ctx, s, false); err != nil {
			t.Fatal(err)
		}
	}
	if after := openFDs(t); after > before+1 {
		t.Fatalf("3 creates and stops left %d more open files (%d → %d)", after-before, before, after)
	}
}
