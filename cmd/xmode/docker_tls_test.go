package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/store"
)

// TestDockerTLSDaemonCLI runs whole sessions with the real CLI against a
// second docker daemon reached over TCP with TLS, as a dedicated sandbox
// host is: doctor, create (sync mode, the configured runtime), exec,
// OOM, timeout, stop, reap with orphans; and a daemon whose certificate
// another CA signed, or that lacks the runtime, is exit 5 saying so.
func TestDockerTLSDaemonCLI(t *testing.T) {
	t.Parallel()
	d := dockertest.RequireTLSDaemon(t)
	img := d.Image(t)
	cli := d.Client()
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	env := append([]string{
		"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_MEMORY=64m", "XMODE_SANDBOX_RUNTIME=" + dockertest.TestRuntime, "XMODE_SANDBOX_MAX_OPEN=0",
	}, d.Env()...)
	with := func(more ...string) []string { return append(slices.Clone(env), more...) }
	x := func(args ...string) dkResult { t.Helper(); return dkXmode(t, root, env, args...) }

	dkWant(t, x("sandbox", "list"), 0)
	instance, err := reapStore(t, root).InstanceID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, instance) })

	// doctor: the connection is TLS and verified, sandboxes get a copy of
	// the worktree, the runtime is there.
	var checks []dkCheck
	dkJSON(t, dkWant(t, x("doctor", "--json"), 0), &checks)
	for name, want := range map[string]string{
		"docker daemon": d.Host, "docker tls": "verified", "mount model": "sync mode",
		"runtime": dockertest.TestRuntime + " is registered", "image": "is present",
	} {
		if c := dkFind(checks, name); c == nil || c.Status != "ok" || !strings.Contains(c.Detail, want) {
			t.Errorf("doctor --json, %s: %+v, want ok saying %q", name, c, want)
		}
	}

	// create: a container on the TLS daemon, the worktree copied into the
	// session's own volume, the configured runtime.
	var s dkSession
	cr := dkWant(t, x("sandbox", "create", "--repo", repo, "--json"), 0)
	dkJSON(t, cr, &s)
	t.Logf("create over TLS took %s", cr.took.Round(time.Millisecond))
	if s.Engine != "docker" || s.MountMode != "sync" || s.ContainerID == "" || s.Status != "open" {
		t.Fatalf("create --json: %+v, want an open docker session in sync mode", s)
	}
	ctx := context.Background()
	ci, err := cli.ContainerInspect(ctx, "xmode-"+s.ID)
	if err != nil {
		t.Fatalf("the container on the TLS daemon: %v", err)
	}
	if ci.ID != s.ContainerID || !ci.State.Running || ci.HostConfig.Runtime != dockertest.TestRuntime ||
		len(ci.Mounts) != 1 || ci.Mounts[0].Name != "xmode-wt-"+s.ID {
		t.Fatalf("container: id %s running %v runtime %q mounts %+v", ci.ID, ci.State.Running, ci.HostConfig.Runtime, ci.Mounts)
	}

	// exec: the worktree, exit codes, streams apart, timeout, OOM.
	if r := dkWant(t, x("sandbox", "exec", s.ID, "--", "cat", "README"), 0); r.stdout != "version two\n" {
		t.Fatalf("README in the sandbox: %q", r.stdout)
	}
	if r := dkWant(t, x("sandbox", "exec", s.ID, "--", "pwd"), 0); strings.TrimSpace(r.stdout) != "/xmode/worktree" {
		t.Fatalf("a step runs in %q", r.stdout)
	}
	r := dkWant(t, x("sandbox", "exec", s.ID, "--", "sh", "-c", "echo out; echo err >&2; exit 3"), 3)
	if r.stdout != "out\n" || !strings.Contains(r.stderr, "err") {
		t.Fatalf("streams: %s", r)
	}
	if r := dkWant(t, x("sandbox", "exec", s.ID, "--timeout", "500ms", "--", "sleep", "30"), 124); r.took > 15*time.Second {
		t.Fatalf("--timeout 500ms took %s", r.took)
	}
	var st dkStep
	dkJSON(t, dkWant(t, x("sandbox", "exec", s.ID, "--json", "--", "sh", "-c", "exec dd if=/dev/zero of=/dev/null bs=128M count=1"), 137), &st)
	if !st.OOMKilled || st.ExitCode != 137 {
		t.Fatalf("memory hog over TLS: %+v", st)
	}

	// cp in sync mode: a copy in reaches the sandbox's copy of the
	// worktree, a copy out brings what the sandbox wrote; a directory the
	// sandbox replaced with a link is not copied through.
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dkWant(t, x("sandbox", "cp", in, s.ID+":sub"), 0)
	if r := dkWant(t, x("sandbox", "exec", s.ID, "--", "cat", "sub/in.txt"), 0); r.stdout != "from the host\n" {
		t.Fatalf("cp into a sync-mode sandbox: the sandbox reads %q", r.stdout)
	}
	dkWant(t, x("sandbox", "exec", s.ID, "--", "sh", "-c", "echo made inside > made.txt && ln -s /etc linkdir && ln -s sub inlink"), 0)
	out := filepath.Join(dir, "made.txt")
	dkWant(t, x("sandbox", "cp", s.ID+":made.txt", out), 0)
	if b, err := os.ReadFile(out); err != nil || string(b) != "made inside\n" {
		t.Fatalf("cp out of a sync-mode sandbox: %q %v", b, err)
	}
	// A link out never reaches this machine (sync back leaves it out); one
	// inside is not followed by the daemon, which unpacks as root.
	if r := dkWant(t, x("sandbox", "cp", in, s.ID+":linkdir/planted"), 3); !strings.Contains(r.stderr, "no such file or directory") {
		t.Fatalf("cp through a link out the sandbox planted: %s", r)
	}
	if r := dkWant(t, x("sandbox", "cp", in, s.ID+":inlink/planted"), 4); !strings.Contains(r.stderr, "not a directory in the sandbox's worktree") {
		t.Fatalf("cp through a link the sandbox planted: %s", r)
	}
	dkWant(t, x("sandbox", "exec", s.ID, "--", "sh", "-c", "! test -e /etc/planted && ! test -e sub/planted"), 0)

	// stop: the container and the session's volume go, the evidence stays.
	dkWant(t, x("sandbox", "stop", s.ID), 0)
	if _, err := cli.ContainerInspect(ctx, s.ContainerID); err == nil {
		t.Fatal("sandbox stop left the container")
	}
	if _, err := cli.VolumeInspect(ctx, "xmode-wt-"+s.ID); err == nil {
		t.Fatal("sandbox stop left the session's volume")
	}
	if m, _ := filepath.Glob(filepath.Join(s.RunDir, "steps", "*")); len(m) != 8 {
		t.Fatalf("evidence after stop: %v", m)
	}

	// reap: an expired session, and orphans of this install (a container
	// and a session volume whose session is gone) go; another install's stay.
	var s2 dkSession
	dkJSON(t, dkWant(t, x("sandbox", "create", "--repo", repo, "--json"), 0), &s2)
	dkWant(t, x("sandbox", "extend", s2.ID, "--ttl", "1ms"), 0)
	orphanLabels := dockertest.Labels(instance, store.NewSessionID(), store.NewRunID())
	orphan, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"sleep", "600"}, Labels: orphanLabels}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: "xmode-wt-" + orphanLabels["xmode.session"], Labels: orphanLabels}); err != nil {
		t.Fatal(err)
	}
	other := dockertest.NewInstance(t, cli)
	theirs, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"sleep", "600"},
		Labels: dockertest.Labels(other, store.NewSessionID(), store.NewRunID())}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	advanceClock(t, root, time.Second)
	var sum struct {
		Expired           int `json:"expired"`
		Destroyed         int `json:"destroyed"`
		ContainersRemoved int `json:"containers_removed"`
		OrphansRemoved    int `json:"orphans_removed"`
	}
	dkJSON(t, dkWant(t, x("reap", "--json"), 0), &sum)
	if sum.Expired != 1 || sum.Destroyed != 1 || sum.ContainersRemoved != 1 || sum.OrphansRemoved != 2 {
		t.Fatalf("reap over TLS: %+v", sum)
	}
	for _, gone := range []string{s2.ContainerID, orphan.ID} {
		if _, err := cli.ContainerInspect(ctx, gone); err == nil {
			t.Errorf("container %s is still on the TLS daemon", gone[:12])
		}
	}
	for _, gone := range []string{"xmode-wt-" + s2.ID, "xmode-wt-" + orphanLabels["xmode.session"]} {
		if _, err := cli.VolumeInspect(ctx, gone); err == nil {
			t.Errorf("volume %s is still on the TLS daemon", gone)
		}
	}
	if _, err := cli.ContainerInspect(ctx, theirs.ID); err != nil {
		t.Errorf("another install's container went: %v", err)
	}

	// A daemon whose certificate another CA signed: exit 5, nothing made.
	wrong := with("XMODE_SANDBOX_DOCKER_CERT_PATH=" + d.WrongCA)
	r = dkWant(t, dkXmode(t, root, wrong, "sandbox", "create", "--repo", repo), 5)
	for _, want := range []string{"TLS", "did not sign", "XMODE_SANDBOX_DOCKER_CERT_PATH", d.WrongCA} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("wrong CA: stderr does not say %q\n%s", want, r)
		}
	}
	if wt, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree")); len(wt) != 0 {
		t.Errorf("a refused create left worktrees: %v", wt)
	}
	dkJSON(t, dkWant(t, dkXmode(t, root, wrong, "doctor", "--json"), 1), &checks)
	if c := dkFind(checks, "docker daemon"); c == nil || c.Status != "fail" || !strings.Contains(c.Detail, "did not sign") {
		t.Errorf("doctor with the wrong CA: %+v", c)
	}
	if r := dkXmode(t, root, wrong, "sandbox", "exec", s2.ID, "--", "true"); r.code != 125 {
		t.Errorf("exec with the wrong CA: want 125\n%s", r)
	}

	// A runtime the daemon does not have: exit 5 naming it.
	r = dkWant(t, dkXmode(t, root, with("XMODE_SANDBOX_RUNTIME=xmode-no-such-runtime"), "sandbox", "create", "--repo", repo), 5)
	if !strings.Contains(r.stderr, `"xmode-no-such-runtime"`) || !strings.Contains(r.stderr, "XMODE_SANDBOX_RUNTIME") {
		t.Errorf("missing runtime: %s", r)
	}
	// Doctor warns when asked to connect insecurely.
	dkJSON(t, dkWant(t, dkXmode(t, root, with("XMODE_SANDBOX_DOCKER_INSECURE=1"), "doctor", "--json"), 0), &checks)
	if c := dkFind(checks, "docker tls"); c == nil || c.Status != "warn" {
		t.Errorf("doctor with XMODE_SANDBOX_DOCKER_INSECURE=1: %+v", c)
	}
}
