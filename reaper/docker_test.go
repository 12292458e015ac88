package reaper_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	_ "github.com/xmode/xmode/providers/docker" // the docker engine
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// dockerEnv is an env whose sessions are docker containers (cloud_worker on
// the docker engine, bind mode), on the daemon at host ("" for the test
// daemon). Everything labelled with its instance is removed when the test
// ends.
func dockerEnv(t *testing.T, host string) (*env, *client.Client, string) {
	t.Helper()
	cli := dockertest.Require(t)
	vars := map[string]string{
		"XMODE_SANDBOX_ENGINE": "docker",
		"XMODE_RUNNER_MODE":    "cloud_worker",
		"XMODE_SANDBOX_IMAGE":  dockertest.Image(t),
	}
	if host == "" {
		host = dockertest.Host()
	}
	if host != client.DefaultDockerHost {
		vars["XMODE_SANDBOX_DOCKER_HOST"] = host
	}
	e := newEnv(t, vars)
	instance, err := e.st.InstanceID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, instance) })
	return e, cli, instance
}

// strayContainer starts a container labelled like xmode's, as a create
// killed before it recorded the container, or another install, would leave.
func strayContainer(t *testing.T, cli *client.Client, instance, session string) string {
	t.Helper()
	ctx := context.Background()
	labels := dockertest.Labels(instance, session, store.NewRunID())
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: dockertest.ImageRef, Cmd: []string{"sleep", "3600"}, Labels: labels},
		&container.HostConfig{Init: ptr(true)}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

func ptr[T any](v T) *T { return &v }

func containerExists(t *testing.T, cli *client.Client, id string) bool {
	t.Helper()
	_, err := cli.ContainerInspect(context.Background(), id)
	if cerrdefs.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// Expired docker sessions lose their containers (also one already removed
// behind xmode's back); containers of this install with no open session go;
// open sessions' containers and every container of another install sharing
// the daemon stay.
func TestDockerExpiredSessionsAndOrphans(t *testing.T) {
	t.Parallel()
	e, cli, me := dockerEnv(t, "")
	other := dockertest.NewInstance(t, cli)
	ctx := context.Background()

	expired := e.create("")
	gone := e.create("")
	live := e.create("")
	if expired.ContainerID == "" || expired.Engine != "docker" {
		t.Fatalf("not a docker session: %+v", expired)
	}
	if err := cli.ContainerRemove(ctx, gone.ContainerID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	orphan := strayContainer(t, cli, me, store.NewSessionID())
	theirs := strayContainer(t, cli, other, store.NewSessionID())
	theirsNoSession := strayContainer(t, cli, other, "")
	e.expire(expired.ID, gone.ID)

	sum := e.pass(nil, false)
	want(t, sum, reaper.Summary{Expired: 2, Destroyed: 2, ContainersRemoved: 2, WorktreesReclaimed: 2, OrphansRemoved: 1})
	for _, s := range []*store.Session{expired, gone} {
		if got := e.get(s.ID); got.Status != store.StatusDestroyed || got.EndReason != store.ReasonExpired {
			t.Errorf("%s: %s/%s", s.ID, got.Status, got.EndReason)
		}
	}
	if containerExists(t, cli, expired.ContainerID) || containerExists(t, cli, orphan) {
		t.Fatal("an expired session's or an orphan's container is still there")
	}
	if !containerExists(t, cli, live.ContainerID) {
		t.Fatal("an open session's container was removed")
	}
	if !containerExists(t, cli, theirs) || !containerExists(t, cli, theirsNoSession) {
		t.Fatal("another install's container was removed")
	}
	if !strings.Contains(e.log.String(), "removed orphan container") {
		t.Fatalf("no log line for the orphan:\n%s", e.log)
	}
	want(t, e.pass(nil, false), reaper.Summary{})
}

// With the daemon down, an expired docker session is NOT marked destroyed —
// its container may still run — the failure is reported and the pass goes on;
// the next pass, with the daemon back, finishes the job.
func TestDockerDaemonDownDuringReap(t *testing.T) {
	t.Parallel()
	px := dockertest.NewSocketProxy(t)
	e, cli, _ := dockerEnv(t, "unix://"+px.Path)
	s := e.create("")
	e.expire(s.ID)

	px.Stop()
	sum := e.pass(nil, false)
	if sum.Destroyed != 0 || len(sum.Errors) != 2 {
		t.Fatalf("daemon down: %+v", sum)
	}
	if sum.Errors[0].SessionID != s.ID || !strings.Contains(sum.Errors[0].Error, "unreachable") {
		t.Fatalf("teardown error: %+v", sum.Errors[0])
	}
	if !strings.Contains(sum.Errors[1].Error, "orphan containers") {
		t.Fatalf("orphan sweep error: %+v", sum.Errors[1])
	}
	if got := e.get(s.ID); got.Status != store.StatusOpen {
		t.Fatalf("the session was marked %s while its container may live", got.Status)
	}
	if !containerExists(t, cli, s.ContainerID) || !exists(filepath.Join(e.worktree(s), "README")) {
		t.Fatal("the container or the worktree went while the daemon was down")
	}
	if cl, _ := e.st.Claims(context.Background()); len(cl) != 0 {
		t.Fatalf("a failed teardown kept its claim: %v", cl)
	}

	if err := px.Start(); err != nil {
		t.Fatal(err)
	}
	want(t, e.pass(nil, false), reaper.Summary{Expired: 1, Destroyed: 1, ContainersRemoved: 1, WorktreesReclaimed: 1})
	if containerExists(t, cli, s.ContainerID) {
		t.Fatal("container left after the daemon came back")
	}
}

// A create killed between starting its container and recording it leaves a
// provisioning session whose container no row names: once the grace period
// is over, one pass ends the session and removes the container.
func TestDockerStuckProvisioningWithUnrecordedContainer(t *testing.T) {
	t.Parallel()
	e, cli, me := dockerEnv(t, "")
	ctx := context.Background()
	now := time.Now().Add(-time.Hour)
	n := store.NewSession{NewRun: true, Session: store.Session{
		ID: store.NewSessionID(), RunID: store.NewRunID(), User: "tester", RunnerMode: "cloud_worker", Engine: "docker",
		CreatedAt: now, ExpiresAt: now.Add(2 * time.Hour),
	}}
	n.WorktreePath = filepath.Join(e.root, "runs", n.RunID, "worktree")
	if err := e.st.CreateSession(ctx, n); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(n.WorktreePath, 0o755)
	stray := strayContainer(t, cli, me, n.ID)

	want(t, e.pass(nil, false), reaper.Summary{Destroyed: 1, WorktreesReclaimed: 1, OrphansRemoved: 1})
	if got := e.get(n.ID); got.Status != store.StatusFailed || got.EndReason != store.ReasonProvisionFailed {
		t.Fatalf("%s/%s", got.Status, got.EndReason)
	}
	if containerExists(t, cli, stray) {
		t.Fatal("the unrecorded container is still there")
	}
}
