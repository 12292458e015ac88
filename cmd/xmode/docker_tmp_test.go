package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// A real project's tests run in the hardened sandbox: `go test` builds its
// test binary under /tmp and runs it from there, which a noexec tmpfs
// (docker's default) refuses with "permission denied". The busybox image
// has no Go, so the test binary of a small module is built here (static)
// and copied in with `sandbox cp`; the step runs it from /tmp, as go test
// would. And an OOM kill says which limit it hit.
func TestDockerTmpRunsWhatWasBuiltThere(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	gobin, err := exec.LookPath("go")
	if err != nil {
		testenv.Skip(t, "no go on PATH to build the test binary")
	}
	dir := t.TempDir()
	mod := filepath.Join(dir, "mod")
	os.MkdirAll(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/sandboxed\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(mod, "add_test.go"), []byte(`package sandboxed

import "testing"

func TestAddInTheSandbox(t *testing.T) {
	if 2+2 != 4 {
		t.Fatal("arithmetic")
	}
}
`), 0o644)
	build := exec.Command(gobin, "test", "-c", "-o", filepath.Join(dir, "pkg.test"), ".")
	build.Dir = mod
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}

	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	vol, mountpoint := dockertest.StorageVolume(t, cli)
	dkRemoveSandboxes(t, cli, vol, mountpoint)
	env := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host(), "XMODE_SANDBOX_STORAGE_VOLUME=" + vol,
		"XMODE_SANDBOX_STORAGE_MOUNT=" + mountpoint, "XMODE_SANDBOX_MEMORY=64m"}
	x := func(args ...string) dkResult { t.Helper(); return dkXmode(t, mountpoint, env, args...) }
	var s dkSession
	dkJSON(t, dkWant(t, x("sandbox", "create", "--repo", repo, "--json"), 0), &s)
	defer x("sandbox", "stop", s.ID)
	if s.MountMode != "volume" {
		t.Fatalf("session %+v, want volume mode", s)
	}
	ci, err := cli.ContainerInspect(context.Background(), s.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if opts := ci.HostConfig.Tmpfs["/tmp"]; !strings.Contains(","+opts+",", ",exec,") || !strings.Contains(opts, "nosuid") {
		t.Fatalf("the sandbox's /tmp is mounted %q: want exec (and still nosuid)", opts)
	}

	dkWant(t, x("sandbox", "cp", filepath.Join(dir, "pkg.test"), s.ID+":pkg.test"), 0)
	r := dkWant(t, x("sandbox", "exec", s.ID, "--", "sh", "-c", "cp pkg.test /tmp/go-build-pkg.test && /tmp/go-build-pkg.test -test.v"), 0)
	if !strings.Contains(r.stdout, "--- PASS: TestAddInTheSandbox") {
		t.Fatalf("the test binary under /tmp: %s", r)
	}

	r = dkWant(t, x("sandbox", "exec", s.ID, "--", "sh", "-c", "exec dd if=/dev/zero of=/dev/null bs=128M count=1"), 137)
	if !strings.Contains(r.stderr, "OOM-killed at the 64m memory limit") {
		t.Fatalf("an OOM kill does not say which limit it hit:\n%s", r)
	}
}
