package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// TestDockerEngineCLI drives the real xmode CLI, as processes, against the
// real docker daemon: XMODE_SANDBOX_ENGINE=docker with cloud_worker
// sessions in both mount models (docs/docker.md, "Mount models"), the
// runner-mode table (docs/reference.md, "Runner modes and engines"), the
// engine's failures (exit 5) and `xmode doctor`.
func TestDockerEngineCLI(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	host := dockertest.Host()
	// Bind mode and the storage volume's mountpoint need the daemon on this
	// machine: a remote daemon resolves bind sources on its own host.
	local := strings.HasPrefix(host, "unix://")

	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	dockerEnv := []string{
		"XMODE_SANDBOX_ENGINE=docker",
		"XMODE_RUNNER_MODE=cloud_worker",
		"XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + host,
	}
	with := func(env []string, more ...string) []string { return append(slices.Clone(env), more...) }

	t.Run("bind", func(t *testing.T) {
		t.Parallel()
		if !local {
			testenv.Skip(t, "bind mode needs a local daemon, the daemon is at %s", host)
		}
		root := filepath.Join(t.TempDir(), "root")
		dkRemoveSandboxes(t, cli, "", root)
		dkSessionLifecycle(t, cli, root, repo, img, dockerEnv, "bind")
		dkDoctorOK(t, cli, root, img, dockerEnv, "")
	})

	t.Run("volume", func(t *testing.T) {
		t.Parallel()
		// The storage root is the volume's mountpoint here, and the volume
		// is mounted in sandboxes at that same path, so the worktree's path
		// is the same on the host and in the sandbox.
		vol, mountpoint := dockertest.StorageVolume(t, cli)
		dkRemoveSandboxes(t, cli, vol, mountpoint)
		env := with(dockerEnv, "XMODE_SANDBOX_STORAGE_VOLUME="+vol, "XMODE_SANDBOX_STORAGE_MOUNT="+mountpoint)
		dkSessionLifecycle(t, cli, mountpoint, repo, img, env, "volume")
		dkDoctorOK(t, cli, mountpoint, img, env, vol)
	})

	// `sandbox stop` while another terminal's step runs: refused (exit 4),
	// then --force ends the step, which its exec reports.
	t.Run("stop-force", func(t *testing.T) {
		t.Parallel()
		root := filepath.Join(t.TempDir(), "root")
		dkRemoveSandboxes(t, cli, "", root)
		var s struct {
			ID string `json:"id"`
		}
		dkJSON(t, dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "create", "--repo", repo, "--json"), 0), &s)
		done := make(chan dkResult, 1)
		go func() {
			done <- dkXmode(t, root, dockerEnv, "sandbox", "exec", s.ID, "--name", "long", "--", "sh", "-c", "touch up; exec sleep 300")
		}()
		deadline := time.Now().Add(30 * time.Second)
		for m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree", "up")); len(m) == 0; m, _ = filepath.Glob(filepath.Join(root, "runs", "*", "worktree", "up")) {
			if time.Now().After(deadline) {
				t.Fatal("the long step never started")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if r := dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "stop", s.ID), 4); !strings.Contains(r.stderr, "step 1 (long") {
			t.Errorf("the refusal does not name the step:\n%s", r)
		}
		dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "stop", "--force", s.ID), 0)
		long := <-done
		if long.code != 143 || !strings.Contains(long.stderr, "stopped by `sandbox stop`") {
			t.Errorf("the stopped exec:\n%s", long)
		}
		m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "steps", "0001-long", "result.json"))
		if len(m) != 1 {
			t.Fatal("no result.json for the stopped step")
		}
		if b, err := os.ReadFile(m[0]); err != nil || !strings.Contains(string(b), `"stopped_by": "sandbox stop"`) {
			t.Errorf("result.json: %v\n%s", err, b)
		}
	})

	t.Run("runner-modes", func(t *testing.T) {
		t.Parallel()
		root := filepath.Join(t.TempDir(), "root")
		dkRemoveSandboxes(t, cli, "", root)
		// local_worktree with the docker engine configured: a host process.
		var s dkSession
		dkJSON(t, dkWant(t, dkXmode(t, root, with(dockerEnv, "XMODE_RUNNER_MODE=local_worktree"), "sandbox", "create", "--repo", repo, "--json"), 0), &s)
		if s.Engine != "host" || s.RunnerMode != "local_worktree" || s.ContainerID != "" || s.MountMode != "" {
			t.Fatalf("local_worktree with XMODE_SANDBOX_ENGINE=docker: %+v, want a host session", s)
		}
		if !dkGone(t, cli, "xmode-"+s.ID) {
			t.Fatalf("a local_worktree session got a container")
		}
		if r := dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "exec", s.ID, "--", "pwd"), 0); strings.TrimSpace(r.stdout) != s.WorktreePath {
			t.Fatalf("a host step runs in %q, want the worktree %s", r.stdout, s.WorktreePath)
		}
		if r := dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "exec", s.ID, "--", "cat", "README"), 0); r.stdout != "version two\n" {
			t.Fatalf("README on the host: %q", r.stdout)
		}
		dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "stop", s.ID), 0)

		// cloud_worker without an engine: unchanged, a host process.
		var h dkSession
		dkJSON(t, dkWant(t, dkXmode(t, root, []string{"XMODE_RUNNER_MODE=cloud_worker"}, "sandbox", "create", "--repo", repo, "--json"), 0), &h)
		if h.Engine != "host" || h.ContainerID != "" {
			t.Fatalf("cloud_worker without XMODE_SANDBOX_ENGINE: %+v, want a host session", h)
		}
		dkWant(t, dkXmode(t, root, nil, "sandbox", "stop", h.ID), 0)

		// cloud_subscription: no container even with the docker engine; a
		// step is refused, pointing to the cloud loop.
		var c dkSession
		dkJSON(t, dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "create", "--repo", repo, "--runner-mode", "cloud_subscription", "--json"), 0), &c)
		if c.Engine != "cloud" || c.ContainerID != "" {
			t.Fatalf("cloud_subscription with XMODE_SANDBOX_ENGINE=docker: %+v, want the cloud engine and no container", c)
		}
		r := dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "exec", c.ID, "--", "true"), 125)
		if !strings.Contains(r.stderr, "xmode cloud submit") {
			t.Fatalf("a step in a cloud_subscription session: the refusal does not point to `xmode cloud submit`\n%s", r)
		}
		dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "stop", c.ID), 0)
	})

	t.Run("missing-image", func(t *testing.T) {
		t.Parallel()
		if !local {
			testenv.Skip(t, "needs a local daemon, the daemon is at %s", host)
		}
		root := filepath.Join(t.TempDir(), "root")
		dkRemoveSandboxes(t, cli, "", root)
		// on a closed loopback port: no pull leaves this machine
		const missing = "127.0.0.1:1/xmode-no-such-image:nope"
		r := dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "create", "--repo", repo, "--image", missing), 5)
		if r.took > 10*time.Second {
			t.Fatalf("a missing image took %s to fail: it must not hang on the pull", r.took)
		}
		if !strings.Contains(r.stderr, missing) {
			t.Fatalf("the error does not name the image\n%s", r)
		}
		if r.stdout != "" {
			t.Fatalf("a failed create printed a session ID\n%s", r)
		}
		var all []dkSession
		dkJSON(t, dkWant(t, dkXmode(t, root, dockerEnv, "sandbox", "list", "--all", "--json"), 0), &all)
		if len(all) != 1 || all[0].Status != "failed" || all[0].EndReason != "provision_failed" || all[0].Engine != "docker" {
			t.Fatalf("after a failed create the sessions are %+v, want one failed/provision_failed docker session", all)
		}
		if wt, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree")); len(wt) != 0 {
			t.Fatalf("a failed create left worktrees: %v", wt)
		}
		if !dkGone(t, cli, "xmode-"+all[0].ID) {
			t.Fatalf("a failed create left its container")
		}
		t.Logf("missing image: exit 5 after %s", r.took.Round(time.Millisecond))
	})

	t.Run("unreachable-daemon", func(t *testing.T) {
		t.Parallel()
		root := filepath.Join(t.TempDir(), "root")
		env := with(dockerEnv, "XMODE_SANDBOX_DOCKER_HOST=tcp://127.0.0.1:1")
		r := dkWant(t, dkXmode(t, root, env, "sandbox", "create", "--repo", repo), 5)
		if r.took > 10*time.Second {
			t.Fatalf("an unreachable daemon took %s to fail", r.took)
		}
		if !strings.Contains(r.stderr, "127.0.0.1:1") {
			t.Fatalf("the error does not name the daemon's address\n%s", r)
		}
		if wt, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree")); len(wt) != 0 {
			t.Fatalf("a failed create left worktrees: %v", wt)
		}
		d := dkWant(t, dkXmode(t, root, env, "doctor"), 1)
		if !regexp.MustCompile(`(?m)^fail\s+docker daemon\s+.*127\.0\.0\.1:1`).MatchString(d.stdout) {
			t.Fatalf("doctor has no fail line for the daemon\n%s", d)
		}
		var checks []dkCheck
		dkJSON(t, dkWant(t, dkXmode(t, root, env, "doctor", "--json"), 1), &checks)
		if c := dkFind(checks, "docker daemon"); c == nil || c.Status != "fail" || c.Fix == "" {
			t.Fatalf("doctor --json, docker daemon: %+v", c)
		}
		// Without the engine configured docker problems only warn.
		dkWant(t, dkXmode(t, root, []string{"XMODE_SANDBOX_DOCKER_HOST=tcp://127.0.0.1:1"}, "doctor"), 0)
	})
}

// dkSessionLifecycle is one cloud_worker session through the CLI: create,
// the container on the daemon, steps and their evidence, stop.
func dkSessionLifecycle(t *testing.T, cli *client.Client, root, repo, img string, env []string, mode string) {
	t.Helper()
	x := func(args ...string) dkResult { t.Helper(); return dkXmode(t, root, env, args...) }
	start := time.Now()
	var s dkSession
	cr := dkWant(t, x("sandbox", "create", "--repo", repo, "--json"), 0)
	dkJSON(t, cr, &s)
	t.Logf("%s: create took %s", mode, cr.took.Round(time.Millisecond))
	if s.Engine != "docker" || s.ContainerID == "" || s.MountMode != mode || s.Image != img || s.Status != "open" || s.RunnerMode != "cloud_worker" {
		t.Fatalf("create --json: %+v, want an open docker session in %s mode with image %s", s, mode, img)
	}

	// The container: named, running, labelled, mounting the worktree only.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ci, err := cli.ContainerInspect(ctx, "xmode-"+s.ID)
	if err != nil {
		t.Fatalf("container xmode-%s: %v", s.ID, err)
	}
	if ci.ID != s.ContainerID || ci.State == nil || !ci.State.Running {
		t.Fatalf("container xmode-%s: id %s (session says %s), state %+v", s.ID, ci.ID, s.ContainerID, ci.State)
	}
	labels := ci.Config.Labels
	if labels["xmode.managed"] != "true" || labels["xmode.session"] != s.ID || labels["xmode.run"] != s.RunID || labels["xmode.instance"] == "" {
		t.Fatalf("container labels %v", labels)
	}
	dkRemoveInstance(t, cli, labels["xmode.instance"])
	wantDest, wantWorkdir := "/workspace", "/workspace"
	if mode == "volume" {
		wantDest, wantWorkdir = s.WorktreePath, s.WorktreePath
	}
	if len(ci.Mounts) != 1 || ci.Mounts[0].Destination != wantDest || !ci.Mounts[0].RW {
		t.Fatalf("mounts %+v, want only the worktree, writable, at %s", ci.Mounts, wantDest)
	}
	if m := ci.Mounts[0]; m.Type == "bind" && m.Source != s.WorktreePath {
		t.Fatalf("the bind mount's source is %s, want the worktree %s", m.Source, s.WorktreePath)
	}
	if ci.Config.WorkingDir != wantWorkdir {
		t.Fatalf("workdir %q, want %q", ci.Config.WorkingDir, wantWorkdir)
	}
	hc := ci.HostConfig
	if mode == "volume" {
		if !slices.Contains(hc.CapDrop, "ALL") || !slices.Contains(hc.SecurityOpt, "no-new-privileges") || hc.Memory == 0 || hc.NanoCPUs == 0 || hc.PidsLimit == nil || string(hc.NetworkMode) != "none" {
			t.Fatalf("volume mode is not hardened: capdrop %v secopt %v memory %d cpus %d pids %v network %s",
				hc.CapDrop, hc.SecurityOpt, hc.Memory, hc.NanoCPUs, hc.PidsLimit, hc.NetworkMode)
		}
	} else if len(hc.CapDrop) != 0 || hc.Memory != 0 {
		t.Fatalf("bind mode is the lightweight argv, got capdrop %v memory %d", hc.CapDrop, hc.Memory)
	}

	// Steps.
	if r := dkWant(t, x("sandbox", "exec", s.ID, "--", "cat", "README"), 0); r.stdout != "version two\n" {
		t.Fatalf("README in the sandbox: %q\n%s", r.stdout, r)
	}
	if r := dkWant(t, x("sandbox", "exec", s.ID, "--", "pwd"), 0); strings.TrimSpace(r.stdout) != wantWorkdir {
		t.Fatalf("a step runs in %q, want %s", r.stdout, wantWorkdir)
	}
	r := dkWant(t, x("sandbox", "exec", s.ID, "--name", "status", "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"), 3)
	if r.stdout != "to-stdout\n" || !strings.Contains(r.stderr, "to-stderr") || strings.Contains(r.stderr, "to-stdout") {
		t.Fatalf("stdout and stderr are not kept apart\n%s", r)
	}
	r = dkWant(t, x("sandbox", "exec", s.ID, "--name", "slow", "--timeout", "500ms", "--", "sleep", "30"), 124)
	if r.took > 15*time.Second {
		t.Fatalf("--timeout 500ms took %s", r.took)
	}
	if !strings.Contains(r.stderr, "timed out") {
		t.Fatalf("a timed-out step does not say so\n%s", r)
	}
	dkWant(t, x("sandbox", "exec", s.ID, "--name", "missing", "--", "xmode-no-such-command"), 127)
	// What a step writes is in the worktree on the host.
	dkWant(t, x("sandbox", "exec", s.ID, "--", "sh", "-c", "echo from-the-sandbox > made-in-sandbox"), 0)
	if b, err := os.ReadFile(filepath.Join(s.WorktreePath, "made-in-sandbox")); err != nil || string(b) != "from-the-sandbox\n" {
		t.Fatalf("the file a step wrote, on the host: %q %v", b, err)
	}
	if mode == "volume" {
		// The sandbox sees its worktree and nothing else of the storage root.
		r = dkWant(t, x("sandbox", "exec", s.ID, "--", "sh", "-c",
			`ls -A "$1"; ls -A "$1/runs"; ls -A "$1/runs/$2"; test ! -e "$1/xmode.db"`, "sh", root, s.RunID), 0)
		if got := strings.Fields(r.stdout); !slices.Equal(got, []string{"runs", s.RunID, "worktree"}) {
			t.Fatalf("the sandbox sees %q of the storage root, want only its worktree", got)
		}
		if _, err := os.Stat(filepath.Join(root, "xmode.db")); err != nil {
			t.Fatalf("xmode.db is not in the storage volume, the isolation check proves nothing: %v", err)
		}
	}
	// An unreachable daemon is xmode's failure, not the command's: 125.
	if r := dkXmode(t, root, append(slices.Clone(env), "XMODE_SANDBOX_DOCKER_HOST=tcp://127.0.0.1:1"), "sandbox", "exec", s.ID, "--", "true"); r.code != 125 {
		t.Fatalf("exec with the daemon unreachable: want 125\n%s", r)
	}

	// Evidence.
	steps := filepath.Join(s.RunDir, "steps")
	step := func(name string) (dkStep, string) {
		t.Helper()
		m, _ := filepath.Glob(filepath.Join(steps, "*-"+name))
		if len(m) != 1 {
			t.Fatalf("step %s: evidence directories %v", name, m)
		}
		for _, f := range []string{"command.json", "result.json", "stdout.log", "stderr.log"} {
			if _, err := os.Stat(filepath.Join(m[0], f)); err != nil {
				t.Fatalf("step %s: %v", name, err)
			}
		}
		var res dkStep
		dkReadJSON(t, filepath.Join(m[0], "result.json"), &res)
		return res, m[0]
	}
	res, sd := step("status")
	if res.ExitCode != 3 || res.TimedOut {
		t.Fatalf("result.json of the exit-3 step: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(sd, "stdout.log")); string(b) != "to-stdout\n" {
		t.Fatalf("stdout.log: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(sd, "stderr.log")); string(b) != "to-stderr\n" {
		t.Fatalf("stderr.log: %q", b)
	}
	var cmdRec struct {
		Engine string   `json:"engine"`
		Argv   []string `json:"argv"`
	}
	dkReadJSON(t, filepath.Join(sd, "command.json"), &cmdRec)
	if cmdRec.Engine != "docker" || len(cmdRec.Argv) != 3 || cmdRec.Argv[0] != "sh" {
		t.Fatalf("command.json: %+v", cmdRec)
	}
	if res, _ := step("slow"); res.ExitCode != 124 || !res.TimedOut {
		t.Fatalf("result.json of the timed-out step: %+v", res)
	}
	if res, _ := step("missing"); res.ExitCode != 127 {
		t.Fatalf("result.json of the missing command: %+v", res)
	}

	// Stop: the container goes, the evidence stays.
	dkWant(t, x("sandbox", "stop", s.ID), 0)
	if !dkGone(t, cli, s.ContainerID) || !dkGone(t, cli, "xmode-"+s.ID) {
		t.Fatalf("sandbox stop left container xmode-%s", s.ID)
	}
	step("status") // its evidence survived the stop
	if _, err := os.Stat(s.WorktreePath); !os.IsNotExist(err) {
		t.Fatalf("sandbox stop did not reclaim the worktree: %v", err)
	}
	var after dkSession
	dkJSON(t, dkWant(t, x("sandbox", "show", s.ID, "--json"), 0), &after)
	if after.Status != "destroyed" || after.EndReason != "stopped" {
		t.Fatalf("after stop: %+v", after)
	}
	if r := x("sandbox", "exec", s.ID, "--", "true"); r.code != 125 {
		t.Fatalf("exec in a stopped session: want 125\n%s", r)
	}
	t.Logf("%s: session lifecycle took %s", mode, time.Since(start).Round(time.Millisecond))
}

// dkDoctorOK runs `xmode doctor` with the engine configured and a daemon
// that answers: everything ok, the API version, the image, and in volume
// mode the isolation method the daemon allows.
func dkDoctorOK(t *testing.T, cli *client.Client, root, img string, env []string, vol string) {
	t.Helper()
	r := dkWant(t, dkXmode(t, root, env, "doctor"), 0)
	for _, re := range []string{
		`(?m)^ok\s+docker daemon\s+.*API \d+\.\d+`,
		`(?m)^ok\s+engine\s+`,
		`(?m)^ok\s+image\s+` + regexp.QuoteMeta(img) + ` is present`,
		`(?m)^ok\s+git\s+git version`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("doctor: no line matching %s\n%s", re, r)
		}
	}
	method := ""
	if vol != "" {
		// Engine 26+ (API 1.45) mounts volume subpaths; older daemons (20.10
		// here) bind the worktree from the volume's mountpoint.
		method = "mountpoint"
		if !versions.LessThan(cli.ClientVersion(), "1.45") {
			method = "subpath"
		}
		for _, re := range []string{`(?m)^ok\s+storage volume\s+` + regexp.QuoteMeta(vol), `(?m)^ok\s+isolation\s+` + method + `\b`} {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Fatalf("doctor: no line matching %s\n%s", re, r)
			}
		}
	}
	var checks []dkCheck
	dkJSON(t, dkWant(t, dkXmode(t, root, env, "doctor", "--json"), 0), &checks)
	// Two warnings are about the machine and the mode, not the daemon: a
	// storage root without nosuid, and bind mode's unapplied limits.
	for _, c := range checks {
		if c.Status != "ok" && !(c.Status == "warn" && (c.Name == "setuid" || c.Name == "limits" && vol == "")) {
			t.Errorf("doctor --json: %+v is not ok", c)
		}
	}
	if c := dkFind(checks, "limits"); (c != nil) != (vol == "") {
		t.Errorf("doctor --json: limits line %+v in %s mode; bind mode must say what it does not apply, volume mode must not", c, map[bool]string{true: "bind", false: "volume"}[vol == ""])
	}
	if c := dkFind(checks, "docker daemon"); c == nil || !strings.Contains(c.Detail, "API") {
		t.Fatalf("doctor --json, docker daemon: %+v", c)
	}
	if vol != "" {
		if c := dkFind(checks, "isolation"); c == nil || !strings.HasPrefix(c.Detail, method) {
			t.Fatalf("doctor --json, isolation: %+v, want %s", c, method)
		}
	}
}

func dkFind(checks []dkCheck, name string) *dkCheck {
	for i := range checks {
		if checks[i].Name == name {
			return &checks[i]
		}
	}
	return nil
}

// dkRemoveInstance removes, when the test ends, whatever carries the label
// xmode.instance of a storage root this test made.
func dkRemoveInstance(t *testing.T, cli *client.Client, instance string) {
	t.Helper()
	if instance == "" {
		return
	}
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, instance) })
}
