package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/fail"
	_ "github.com/xmode/xmode/providers/docker" // the docker engine
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// dockerService is a service whose sessions are docker sandboxes (bind
// mode, the test image, run as root so that a step can write outside the
// worktree), on a clock the test moves; everything it made on the daemon
// is removed when the test ends.
func dockerService(t *testing.T, now *time.Time) (*Service, *client.Client) {
	t.Helper()
	cli := dockertest.Require(t)
	env := map[string]string{
		"XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker",
		"XMODE_SANDBOX_IMAGE": dockertest.Image(t), "XMODE_SANDBOX_USER": "0:0",
	}
	if h := dockertest.Host(); h != client.DefaultDockerHost {
		env["XMODE_SANDBOX_DOCKER_HOST"] = h
	}
	svc := newService(t, env)
	svc.Clock = func() time.Time { return *now }
	instance, err := svc.Store.InstanceID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, instance) })
	return svc, cli
}

// out runs script in the session and returns what it printed.
func out(t *testing.T, svc *Service, sess *store.Session, script string) string {
	t.Helper()
	var b bytes.Buffer
	res, err := svc.Exec(context.Background(), sess, ExecOptions{Argv: []string{"sh", "-c", script}, LiveStdout: &b, LiveStderr: &b})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sh -c %q: %v %+v\n%s", script, err, res, b.String())
	}
	return strings.TrimSpace(b.String())
}

func imageGone(t *testing.T, cli *client.Client, ref string) bool {
	t.Helper()
	_, err := cli.ImageInspect(context.Background(), ref)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err != nil
}

// In docker a fork's container starts from an image of its parent's: a
// file the parent wrote outside the worktree (/opt/x) is the fork's too,
// with the worktree as git sees it; the two diverge; the fork's image goes
// with it. A snapshot keeps both past its session's end, a session made
// from it has them, and the reaper removes an expired snapshot's image once
// no sandbox runs it.
func TestForkAndSnapshotInDocker(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	svc, cli := dockerService(t, &now)
	parent, err := svc.Create(ctx, CreateOptions{Repo: forkFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	if parent.ContainerID == "" {
		t.Fatalf("parent %+v has no container", parent)
	}
	out(t, svc, parent, "mkdir -p /opt && echo parent > /opt/x && "+agentWork)
	want := stateOf(t, parent.WorktreePath)

	fork, err := svc.Fork(ctx, parent, ForkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forkImage := "xmode-image:" + fork.ID
	if fork.Image != forkImage || fork.ContainerID == "" || fork.ContainerID == parent.ContainerID {
		t.Fatalf("fork %+v: want a container of its own on image %s", fork, forkImage)
	}
	if got := out(t, svc, fork, "cat /opt/x"); got != "parent" {
		t.Errorf("/opt/x in the fork: %q", got)
	}
	if got := stateOf(t, fork.WorktreePath); got.log != want.log || got.diff != want.diff || got.status != want.status {
		t.Errorf("git in the fork:\n%+v\nin the parent:\n%+v", got, want)
	}
	if got := out(t, svc, fork, "git log --format=%s | head -1"); got != "agent two" {
		t.Errorf("git log in the fork's container: %q", got)
	}
	ii, err := cli.ImageInspect(ctx, forkImage)
	if err != nil {
		t.Fatal(err)
	}
	instance, _ := svc.Store.InstanceID(ctx)
	if l := ii.Config.Labels; l["xmode.managed"] != "true" || l["xmode.session"] != fork.ID || l["xmode.instance"] != instance || l["xmode.run"] != fork.RunID {
		t.Errorf("the fork's image is labelled %v", l)
	}
	out(t, svc, parent, "echo later > /opt/x && echo p > parent-only.txt")
	out(t, svc, fork, "echo f > fork-only.txt")
	if got := out(t, svc, fork, "cat /opt/x; test ! -e parent-only.txt && echo apart"); got != "parent\napart" {
		t.Errorf("the fork after the parent wrote: %q", got)
	}
	if got := out(t, svc, parent, "test ! -e fork-only.txt && echo apart"); got != "apart" {
		t.Errorf("the parent after the fork wrote: %q", got)
	}

	// A step in the foreground stops a fork here too.
	started := filepath.Join(fork.WorktreePath, "started")
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Exec(sctx, fork, ExecOptions{Name: "long", Argv: []string{"sh", "-c", "touch started; exec sleep 60"}})
	}()
	waitFor(t, 30*time.Second, "the step's start", func() bool { _, err := os.Stat(started); return err == nil })
	if _, err := svc.Snapshot(ctx, fork, SnapshotOptions{}); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "(long") {
		t.Errorf("snapshot while a step runs: %v; want refused", err)
	}
	stop()
	<-done

	sn, err := svc.Snapshot(ctx, fork, SnapshotOptions{Name: "kept", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Image != "xmode-image:"+sn.ID {
		t.Fatalf("snapshot %+v: want its image", sn)
	}
	if _, err := svc.Stop(ctx, fork, false); err != nil {
		t.Fatal(err)
	}
	if !imageGone(t, cli, forkImage) {
		t.Errorf("the fork's image %s outlived it", forkImage)
	}
	from, err := svc.Create(ctx, CreateOptions{FromSnapshot: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	if from.Image != sn.Image || from.FromSnapshot != sn.ID {
		t.Errorf("session from the snapshot %+v", from)
	}
	if got := out(t, svc, from, "cat /opt/x; cat fork-only.txt; git log --format=%s | head -1"); got != "parent\nf\nagent two" {
		t.Errorf("the session from the snapshot: %q", got)
	}

	// Expired while a session runs its image: the snapshot goes, the image
	// stays until that session ends, then the next pass removes it.
	now = now.Add(90 * time.Minute)
	if _, err := svc.Extend(ctx, from, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Extend(ctx, parent, time.Hour); err != nil {
		t.Fatal(err)
	}
	r := &reaper.Reaper{Cfg: svc.Cfg, Store: svc.Store, Guard: svc.Guard, Now: svc.Clock}
	sum, err := r.Pass(ctx, reaper.PassOptions{})
	if err != nil || sum.SnapshotsRemoved != 1 || len(sum.Errors) != 0 {
		t.Fatalf("pass: %+v %v; want the snapshot removed", sum, err)
	}
	if _, err := os.Stat(sn.Dir); !os.IsNotExist(err) {
		t.Errorf("the snapshot's store outlived it: %v", err)
	}
	if imageGone(t, cli, sn.Image) {
		t.Fatal("the snapshot's image went while a session runs it")
	}
	if _, err := svc.Stop(ctx, from, false); err != nil {
		t.Fatal(err)
	}
	sum, err = r.Pass(ctx, reaper.PassOptions{})
	if err != nil || len(sum.Errors) != 0 || sum.OrphansRemoved != 1 {
		t.Fatalf("pass: %+v %v; want the image removed as an orphan", sum, err)
	}
	if !imageGone(t, cli, sn.Image) {
		t.Errorf("the expired snapshot's image %s outlived its last user", sn.Image)
	}
	// The parent's image is its configured one, never touched.
	if imageGone(t, cli, parent.Image) {
		t.Errorf("the parent's image %s was removed", parent.Image)
	}
}
