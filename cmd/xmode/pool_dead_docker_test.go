package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/internal/proc"
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/store"
)

// poolEnv is a docker pool of a fresh project (volume mode) in a storage
// root of its own.
type poolEnv struct {
	t       *testing.T
	cli     *client.Client
	img     string
	root    string
	project string
	env     []string
}

func newPoolEnv(t *testing.T) *poolEnv {
	t.Helper()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	vol, root := dockertest.StorageVolume(t, cli)
	dkRemoveSandboxes(t, cli, vol, root)
	repo := filepath.Join(t.TempDir(), "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	p := &poolEnv{t: t, cli: cli, img: img, root: root, project: "pool-" + strings.TrimPrefix(store.NewRunID(), "run_")}
	p.env = []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host(), "XMODE_SANDBOX_STORAGE_VOLUME=" + vol,
		"XMODE_SANDBOX_STORAGE_MOUNT=" + root, "XMODE_PROJECT_MACHINES=1", "XMODE_SANDBOX_MAX_OPEN=0"}
	t.Cleanup(func() { removeProjectVolumes(cli, p.project) })
	p.x("machine", "warm", p.project, "--repo", repo, "--pool", "2")
	ci, err := cli.ContainerInspect(context.Background(), "xmode-"+p.show().Pool.Entries[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	dkRemoveInstance(t, cli, ci.Config.Labels["xmode.instance"])
	return p
}

func (p *poolEnv) x(args ...string) dkResult {
	p.t.Helper()
	return dkWant(p.t, dkXmode(p.t, p.root, p.env, args...), 0)
}

func (p *poolEnv) show() poolShow {
	p.t.Helper()
	var s poolShow
	dkJSON(p.t, p.x("machine", "show", p.project, "--json"), &s)
	return s
}

// sql runs one statement on the store, as a crash or a restore would leave
// it.
func (p *poolEnv) sql(q string, args ...any) {
	p.t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(p.root, "xmode.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		p.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(q, args...); err != nil {
		p.t.Fatal(err)
	}
}

// A pool claim never hands out a dead sandbox: an entry whose container was
// removed (or stopped) behind xmode's back is retired at the claim, and the
// claim takes the next entry, or falls back to making a sandbox; either
// way the first step of the new session runs.
func TestPoolClaimSkipsDeadEntries(t *testing.T) {
	t.Parallel()
	p := newPoolEnv(t)
	ctx := context.Background()
	s := p.show()
	if len(s.Pool.Entries) != 2 || s.Pool.Ready != 2 {
		t.Fatalf("pool after warm --pool 2: %+v", s.Pool)
	}
	dead, live := s.Pool.Entries[0], s.Pool.Entries[1] // a claim takes the oldest first
	if err := p.cli.ContainerRemove(ctx, dead.ContainerID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	r := p.x("sandbox", "create", "--project", p.project)
	var got dkSession
	dkJSON(t, p.x("sandbox", "show", strings.TrimSpace(r.stdout), "--json"), &got)
	if got.ID != live.ID || got.ContainerID != live.ContainerID {
		t.Fatalf("create claimed %s (%s), want the live entry %s", got.ID, got.ContainerID, live.ID)
	}
	if !strings.Contains(r.stderr, "pool entry "+dead.ID+" of "+p.project+" was dead") {
		t.Fatalf("create did not say it retired the dead entry:\n%s", r)
	}
	p.x("sandbox", "exec", got.ID, "--", "true")
	if ids := p.show().ids(); slices.Contains(ids, dead.ID) {
		t.Fatalf("the dead entry is still in the pool: %v", ids)
	}
	if _, err := os.Stat(dead.Worktree); !os.IsNotExist(err) {
		t.Fatalf("the dead entry's worktree: %v", err)
	}

	// Every entry dead (one removed, one stopped): a fresh sandbox.
	p.x("reap")
	s = p.show()
	if len(s.Pool.Entries) != 2 {
		t.Fatalf("pool after reap: %+v", s.Pool)
	}
	if err := p.cli.ContainerRemove(ctx, s.Pool.Entries[0].ContainerID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if err := p.cli.ContainerStop(ctx, s.Pool.Entries[1].ContainerID, container.StopOptions{Timeout: &zero}); err != nil {
		t.Fatal(err)
	}
	dkJSON(t, p.x("sandbox", "create", "--project", p.project, "--json"), &got)
	if slices.Contains(s.ids(), got.ID) || got.ContainerID == "" {
		t.Fatalf("create with every entry dead claimed %+v from %v", got, s.ids())
	}
	if r := p.x("sandbox", "exec", got.ID, "--", "cat", "README"); r.stdout != "version two\n" {
		t.Fatalf("the first step of the fresh sandbox: %s", r)
	}
	left := p.show().ids()
	for _, id := range s.ids() {
		if slices.Contains(left, id) {
			t.Fatalf("dead entry %s is still in the pool: %v", id, left)
		}
	}
	if !dkGone(t, p.cli, s.Pool.Entries[1].ContainerID) {
		t.Fatal("the stopped entry's container was not removed")
	}
}

// A reap killed between creating an entry's container and recording it
// leaves the container in state Created and the entry provisioning, its
// maker gone: the next pass removes that container. A Created container
// of an entry whose maker lives, and one of another instance, stay.
func TestReapRemovesContainerOfKilledRefill(t *testing.T) {
	t.Parallel()
	p := newPoolEnv(t)
	ctx := context.Background()
	s := p.show()
	killed, making := s.Pool.Entries[0], s.Pool.Entries[1]
	// created replaces an entry's container with what a killed Provision
	// leaves: the same name and labels, never started.
	created := func(name string, labels map[string]string) string {
		t.Helper()
		c, err := p.cli.ContainerCreate(ctx, &container.Config{Image: p.img, Cmd: []string{"sleep", "1000"}, Labels: labels},
			nil, nil, nil, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
		return c.ID
	}
	replace := func(id, containerID, owner string) string {
		t.Helper()
		ci, err := p.cli.ContainerInspect(ctx, containerID)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.cli.ContainerRemove(ctx, containerID, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		p.sql(`UPDATE pool_entries SET state = 'provisioning', container_id = '', ready_at = NULL, owner = ?, owner_at = ?
			WHERE session_id = ?`, owner, time.Now().UnixMilli(), id)
		return created(strings.TrimPrefix(ci.Name, "/"), ci.Config.Labels)
	}
	deadMaker := "2147483646:1/0badc0de" // a PID no process has
	orphan := replace(killed.ID, killed.ContainerID, deadMaker)
	needed := replace(making.ID, making.ContainerID, proc.Self()+"/0000beef") // this test lives
	other := dockertest.NewInstance(t, p.cli)
	otherID := dockertest.NewID("sbx_")
	foreign := created("xmode-"+otherID, dockertest.Labels(other, otherID, dockertest.NewID("run_")))

	r := p.x("reap", "-v")
	if !dkGone(t, p.cli, orphan) {
		t.Fatalf("the Created container of the killed refill survived a pass:\n%s", r)
	}
	if !strings.Contains(r.stdout, killed.ID+" removed container xmode-"+killed.ID) {
		t.Fatalf("the pass did not say it removed the killed refill's container:\n%s", r)
	}
	for what, id := range map[string]string{"an entry whose maker lives": needed, "another instance": foreign} {
		if dkGone(t, p.cli, id) {
			t.Fatalf("the pass removed the Created container of %s:\n%s", what, r)
		}
	}
	ids := p.show().ids()
	if slices.Contains(ids, killed.ID) || !slices.Contains(ids, making.ID) {
		t.Fatalf("pool after the pass: %v (killed %s, still being made %s)", ids, killed.ID, making.ID)
	}

	// Its maker gone too, the other one goes at the next pass.
	p.sql(`UPDATE pool_entries SET owner = ? WHERE session_id = ?`, deadMaker, making.ID)
	p.x("reap")
	if !dkGone(t, p.cli, needed) || dkGone(t, p.cli, foreign) {
		t.Fatal("after its maker died: the entry's Created container should be gone, the other instance's not")
	}
}
