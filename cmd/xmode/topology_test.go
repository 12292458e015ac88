package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// The storage root inside the job container (and, by default, inside every
// sibling sandbox).
const jobRoot = "/xmode-root"

// TestXmodeInJobContainer is the design's production topology with the real
// xmode binary: xmode runs in a job container that has the docker socket and
// the named storage volume mounted at its storage root, and its cloud_worker
// sessions are sibling containers in volume mode. The sibling sees the
// worktree xmode wrote through the volume, xmode sees what the sibling
// wrote, the sibling sees nothing else of the storage root, and a second job
// container (state lives in the volume, not in the job) stops the session.
func TestXmodeInJobContainer(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	host := dockertest.Host()
	if !strings.HasPrefix(host, "unix://") {
		testenv.Skip(t, "the daemon is at %s; the job container needs its unix socket and host binds", host)
	}
	sock := strings.TrimPrefix(host, "unix://")
	instance := dockertest.NewInstance(t, cli) // labels the job containers
	vol, mountpoint := dockertest.StorageVolume(t, cli)
	dkRemoveSandboxes(t, cli, vol, mountpoint) // before the volume goes

	bin := filepath.Join(t.TempDir(), "xmode")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	buildStart := time.Now()
	build := exec.Command(goTool, "build", "-o", bin, "github.com/xmode/xmode/cmd/xmode")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a static xmode: %v\n%s", err, out)
	}
	t.Logf("static xmode built in %s", time.Since(buildStart).Round(time.Millisecond))

	job := &jobContainer{t: t, cli: cli, image: img, instance: instance}
	job.mounts = []mount.Mount{
		{Type: mount.TypeBind, Source: sock, Target: "/var/run/docker.sock"},
		{Type: mount.TypeVolume, Source: vol, Target: jobRoot},
		{Type: mount.TypeBind, Source: bin, Target: "/xmode-bin/xmode", ReadOnly: true},
	}
	job.mounts = append(job.mounts, hostGitMounts(t)...)
	job.env = []string{
		"PATH=/xmode-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/tmp",
		"NO_COLOR=1",
		"XMODE_STORAGE_ROOT=" + jobRoot,
		"XMODE_SANDBOX_ENGINE=docker",
		"XMODE_RUNNER_MODE=cloud_worker",
		"XMODE_SANDBOX_STORAGE_VOLUME=" + vol,
		"XMODE_SANDBOX_IMAGE=" + img,
		"DOCKER_HOST=unix:///var/run/docker.sock",
	}

	// xmode clones with the git binary (git-upload-pack for a local path):
	// the host's git must work in the job container.
	if code, out, errb := job.run("git --version && command -v git-upload-pack && xmode version"); code != 0 || !strings.Contains(out, "git version") {
		t.Fatalf("git or xmode does not run in the job container (exit %d):\n%s%s", code, out, errb)
	}

	// Phase 1: a repository made in the job container, a session, steps.
	start := time.Now()
	code, out, errb := job.run(`
set -u
fail() { echo "FAIL: $*"; exit 1; }
git init -q -b main /tmp/src && cd /tmp/src &&
	git config user.name tester && git config user.email tester@example.com &&
	echo "written by xmode in the job container" > README &&
	git add README && git commit -qm one || fail "git"
cd /
ID=$(xmode sandbox create --repo /tmp/src -q) || fail "sandbox create exited $?"
echo "id=$ID"
echo "runs=$(ls /xmode-root/runs)"
readme=$(xmode sandbox exec "$ID" -- cat README); echo "readme_rc=$?"
echo "readme=$readme"
xmode sandbox exec "$ID" -- sh -c 'echo from-sibling > made-in-sibling'; echo "write_rc=$?"
echo "back=$(cat /xmode-root/runs/*/worktree/made-in-sibling)"
iso=$(xmode sandbox exec "$ID" -- sh -c 'ls -A /xmode-root; ls -A /xmode-root/runs/*; cat /xmode-root/xmode.db' 2>&1); echo "iso_rc=$?"
echo "iso=$(echo "$iso" | tr '\n' '|')"
test -s /xmode-root/xmode.db && echo "db_in_job=yes"
echo "show=$(xmode sandbox show "$ID" --json | tr -d ' \n')"
`)
	t.Logf("phase 1 (%s), job container said:\n%s%s", time.Since(start).Round(time.Millisecond), out, errb)
	if code != 0 {
		t.Fatalf("the job container exited %d", code)
	}
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	id, run := got["id"], got["runs"]
	if !strings.HasPrefix(id, "sbx_") || !strings.HasPrefix(run, "run_") || strings.Contains(run, " ") {
		t.Fatalf("session %q, runs %q", id, run)
	}
	worktree := jobRoot + "/runs/" + run + "/worktree"
	for k, v := range map[string]string{
		"readme_rc": "0",
		"readme":    "written by xmode in the job container", // the sibling reads what xmode wrote
		"write_rc":  "0",
		"back":      "from-sibling", // xmode reads what the sibling wrote
		"db_in_job": "yes",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	// The sibling sees its worktree and nothing else: not xmode.db, not its
	// own run's evidence (steps/).
	// Its stdout (the listings) and stderr (cat's complaint) are separate
	// streams all the way from the daemon: their interleaving is not fixed.
	iso := got["iso"]
	var listing []string
	catRefused := false
	for _, line := range strings.Split(iso, "|") {
		switch {
		case strings.Contains(line, "xmode.db"):
			catRefused = strings.Contains(line, "No such file")
		case line != "":
			listing = append(listing, line)
		}
	}
	if got["iso_rc"] == "0" || strings.Join(listing, ",") != "runs,worktree" || !catRefused || strings.Contains(iso, "SQLite") {
		t.Errorf("the sibling sees more than its worktree: exit %s, %q", got["iso_rc"], got["iso"])
	}
	var shown dkSession
	if err := json.Unmarshal([]byte(got["show"]), &shown); err != nil {
		t.Fatalf("sandbox show --json: %v: %q", err, got["show"])
	}
	if shown.ID != id || shown.Engine != "docker" || shown.MountMode != "volume" || shown.Status != "open" || shown.WorktreePath != worktree || shown.Image != img {
		t.Errorf("sandbox show --json: %+v", shown)
	}

	// From the host: the sibling runs, mounts the run's worktree from the
	// storage volume at the same path as the job container, and nothing
	// else — in particular no docker socket.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ci, err := cli.ContainerInspect(ctx, "xmode-"+id)
	if err != nil {
		t.Fatalf("the sibling xmode-%s: %v", id, err)
	}
	dkRemoveInstance(t, cli, ci.Config.Labels["xmode.instance"])
	if ci.State == nil || !ci.State.Running || ci.Config.Labels["xmode.session"] != id || ci.Config.Labels["xmode.run"] != run || ci.Config.Labels["xmode.managed"] != "true" {
		t.Errorf("the sibling: state %+v, labels %v", ci.State, ci.Config.Labels)
	}
	if len(ci.Mounts) != 1 {
		t.Errorf("the sibling has %d mounts, want the worktree only: %+v", len(ci.Mounts), ci.Mounts)
	}
	for _, m := range ci.Mounts {
		if dkIsDockerSocket(m) {
			t.Errorf("the docker socket is mounted into the sibling: %+v", m)
		}
	}
	if len(ci.Mounts) > 0 {
		m := ci.Mounts[0]
		fromVolume := (m.Type == mount.TypeVolume && m.Name == vol) || // subpath (API 1.45+)
			(m.Type == mount.TypeBind && m.Source == mountpoint+"/runs/"+run+"/worktree") // mountpoint
		if !fromVolume || m.Destination != worktree || !m.RW {
			t.Errorf("the sibling's mount %+v is not the storage volume's worktree at %s", m, worktree)
		}
	}
	if ci.Config.WorkingDir != worktree {
		t.Errorf("the sibling's workdir %q, want %s", ci.Config.WorkingDir, worktree)
	}
	// The volume on the host holds it all.
	if b, err := os.ReadFile(filepath.Join(mountpoint, "runs", run, "worktree", "made-in-sibling")); err != nil || string(b) != "from-sibling\n" {
		t.Errorf("made-in-sibling in the volume: %q %v", b, err)
	}

	// Phase 2: another job container stops the session.
	start = time.Now()
	code, out, errb = job.run(`xmode sandbox stop "$1" >&2 && xmode sandbox show "$1" --json`, id)
	t.Logf("phase 2 (%s), job container said:\n%s%s", time.Since(start).Round(time.Millisecond), out, errb)
	if code != 0 {
		t.Fatalf("sandbox stop in the job container exited %d", code)
	}
	var stopped dkSession
	if err := json.Unmarshal([]byte(out), &stopped); err != nil {
		t.Fatalf("sandbox show --json after stop: %v", err)
	}
	if stopped.Status != "destroyed" || stopped.EndReason != "stopped" {
		t.Errorf("after stop: status %s, end_reason %s", stopped.Status, stopped.EndReason)
	}
	if !dkGone(t, cli, ci.ID) {
		t.Errorf("the sibling xmode-%s is still there after sandbox stop", id)
	}
	if _, err := os.Stat(filepath.Join(mountpoint, "runs", run, "steps")); err != nil {
		t.Errorf("the evidence did not survive stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mountpoint, "runs", run, "worktree")); !os.IsNotExist(err) {
		t.Errorf("sandbox stop in the job container did not reclaim the worktree in the volume: %v", err)
	}
}

// jobContainer runs shell scripts in fresh job containers, one per run.
type jobContainer struct {
	t        *testing.T
	cli      *client.Client
	image    string
	instance string
	mounts   []mount.Mount
	env      []string
}

// run runs script (sh -c script sh ARGS...) in a new job container and
// returns its exit status and output. The container is removed afterwards
// (and, labelled with the test instance, when the test ends in any case).
func (j *jobContainer) run(script string, args ...string) (int64, string, string) {
	t := j.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := j.cli.ContainerCreate(ctx, &container.Config{
		Image:  j.image,
		Cmd:    append([]string{"sh", "-c", script, "sh"}, args...),
		Env:    j.env,
		Labels: map[string]string{"xmode.instance": j.instance, dockertest.LabelTest: "true", "xmode.test.job": "true"},
	}, &container.HostConfig{NetworkMode: "none", Mounts: j.mounts}, nil, nil, "")
	if err != nil {
		t.Fatalf("create the job container: %v", err)
	}
	defer func() {
		_ = j.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	}()
	waitC, errC := j.cli.ContainerWait(ctx, c.ID, container.WaitConditionNextExit)
	if err := j.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start the job container: %v", err)
	}
	var code int64
	select {
	case w := <-waitC:
		if w.Error != nil {
			t.Fatalf("wait for the job container: %s", w.Error.Message)
		}
		code = w.StatusCode
	case err := <-errC:
		t.Fatalf("wait for the job container: %v", err)
	}
	logs, err := j.cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("job container logs: %v", err)
	}
	defer logs.Close()
	var out, errb bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errb, logs); err != nil {
		t.Fatalf("job container logs: %v", err)
	}
	return code, out.String(), errb.String()
}

// hostGitMounts makes the host's git (and the libraries it links) usable in
// the busybox job container: /usr read-only, and /lib, /lib64 as on the host
// (merged-/usr hosts have them as symlinks into /usr).
func hostGitMounts(t *testing.T) []mount.Mount {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is not on PATH: %v", err)
	}
	if real, _ := filepath.EvalSymlinks(git); !strings.HasPrefix(real, "/usr/") {
		testenv.Skip(t, "git is %s, outside /usr: it cannot be lent to the job container", real)
	}
	ms := []mount.Mount{{Type: mount.TypeBind, Source: "/usr", Target: "/usr", ReadOnly: true}}
	for _, d := range []string{"/lib", "/lib64"} {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			continue
		}
		if st, err := os.Stat(real); err == nil && st.IsDir() {
			ms = append(ms, mount.Mount{Type: mount.TypeBind, Source: real, Target: d, ReadOnly: true})
		}
	}
	return ms
}
