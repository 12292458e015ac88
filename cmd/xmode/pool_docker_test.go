package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/store"
)

// The pool on the docker engine, volume mode, through the CLI: an entry is
// a running, hardened container made exactly as a create makes one; the
// reaper leaves it alone while it is in the pool and removes it once its
// row is gone; a claim gives the session that very container, the worktree
// moving to another ref as the sandbox user's; settings other than the
// pool's are not claimed and get the pool retired; stop destroys.
func TestPoolDocker(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	vol, root := dockertest.StorageVolume(t, cli)
	dkRemoveSandboxes(t, cli, vol, root)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	// Cache volumes are named by project, per daemon: a unique project.
	project := "pool-" + strings.TrimPrefix(store.NewRunID(), "run_")
	env := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host(), "XMODE_SANDBOX_STORAGE_VOLUME=" + vol,
		"XMODE_SANDBOX_STORAGE_MOUNT=" + root, "XMODE_PROJECT_MACHINES=1", "XMODE_SANDBOX_MAX_OPEN=0"}
	x := func(more []string, args ...string) dkResult {
		t.Helper()
		return dkWant(t, dkXmode(t, root, append(slices.Clone(env), more...), args...), 0)
	}
	show := func() poolShow {
		t.Helper()
		var p poolShow
		dkJSON(t, x(nil, "machine", "show", project, "--json"), &p)
		return p
	}
	ctx := context.Background()
	inspect := func(ref string) container.InspectResponse {
		t.Helper()
		ci, err := cli.ContainerInspect(ctx, ref)
		if err != nil {
			t.Fatalf("inspect %s: %v", ref, err)
		}
		return ci
	}
	t.Cleanup(func() { removeProjectVolumes(cli, project) })

	x(nil, "machine", "warm", project, "--repo", repo, "--pool", "1")
	p := show()
	if p.Pool.Ready != 1 || p.Pool.Entries[0].ContainerID == "" {
		t.Fatalf("pool after warm --pool 1: %+v", p.Pool)
	}
	entry := p.Pool.Entries[0]
	ci := inspect("xmode-" + entry.ID)
	dkRemoveInstance(t, cli, ci.Config.Labels["xmode.instance"])
	if !ci.State.Running || ci.ID != entry.ContainerID || ci.Config.Labels["xmode.session"] != entry.ID || ci.Config.Labels["xmode.run"] != entry.RunID {
		t.Fatalf("the entry's container: running %v, id %s, labels %v; entry %+v", ci.State.Running, ci.ID, ci.Config.Labels, entry)
	}

	// A reap pass leaves the pool alone: its container and worktree live.
	x(nil, "reap")
	if !inspect(entry.ContainerID).State.Running {
		t.Fatal("a reap removed a pool entry's container")
	}
	if _, err := os.Stat(entry.Worktree); err != nil {
		t.Fatalf("a reap removed a pool entry's worktree: %v", err)
	}

	// The claim: that container, open, at the machine's commit; the worktree
	// the sandbox user's, clean.
	var claimed dkSession
	dkJSON(t, x(nil, "sandbox", "create", "--project", project, "--json"), &claimed)
	if claimed.ID != entry.ID || claimed.ContainerID != entry.ContainerID || claimed.Status != "open" || claimed.MountMode != "volume" {
		t.Fatalf("claimed %+v from entry %+v", claimed, entry)
	}
	if r := x(nil, "sandbox", "exec", claimed.ID, "--", "sh", "-c", "id -u; cat README; touch made-by-step"); r.stdout != "65532\nversion two\n" {
		t.Fatalf("a step in the claimed sandbox: %q", r.stdout)
	}
	os.Remove(filepath.Join(claimed.WorktreePath, "made-by-step"))
	if st := gitOut(t, claimed.WorktreePath, "-c", "safe.directory=*", "status", "--porcelain"); st != "" {
		t.Fatalf("the claimed worktree is not clean: %s", st)
	}
	if head := gitOut(t, claimed.WorktreePath, "-c", "safe.directory=*", "rev-parse", "HEAD"); head != p.Commit {
		t.Fatalf("the claimed worktree is at %s, the machine at %s", head, p.Commit)
	}

	// A fresh session (the pool is empty) gets exactly the same container:
	// mounts, limits, hardening, user, environment — but for its IDs.
	var fresh dkSession
	dkJSON(t, x(nil, "sandbox", "create", "--project", project, "--json"), &fresh)
	if fresh.ID == entry.ID {
		t.Fatal("an empty pool claimed")
	}
	a, b := dkShape(t, inspect(claimed.ContainerID), claimed), dkShape(t, inspect(fresh.ContainerID), fresh)
	if a != b {
		t.Fatalf("a claimed sandbox differs from a fresh one:\nclaimed %s\nfresh   %s", a, b)
	}

	// Another ref: the refilled entry moves there; what git wrote is the
	// sandbox user's, so steps can write it.
	x(nil, "reap")
	p = show()
	var moved dkSession
	dkJSON(t, x(nil, "sandbox", "create", "--project", project, "--ref", "v1", "--json"), &moved)
	if moved.ID != p.Pool.Entries[0].ID || moved.ContainerID != p.Pool.Entries[0].ContainerID {
		t.Fatalf("create --ref v1 made %s, the pool held %+v", moved.ID, p.Pool.Entries)
	}
	if r := x(nil, "sandbox", "exec", moved.ID, "--", "sh", "-c", "cat README; echo edited > README && echo writable"); r.stdout != "version one\nwritable\n" {
		t.Fatalf("README in the moved sandbox: %q", r.stdout)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(moved.WorktreePath, "sub", "dir", "file.txt"), &st); err != nil || st.Uid != 65532 {
		t.Fatalf("a file of the moved worktree belongs to uid %d (%v), want the sandbox user", st.Uid, err)
	}

	// Settings other than the pool's: not claimed, and a reap with them
	// retires the pool and makes it anew for them.
	x(nil, "reap")
	p = show()
	other := []string{"XMODE_SANDBOX_MEMORY=256m"}
	var mismatched dkSession
	dkJSON(t, x(other, "sandbox", "create", "--project", project, "--json"), &mismatched)
	if mismatched.ID == p.Pool.Entries[0].ID {
		t.Fatal("a create with another memory limit claimed the pool's entry")
	}
	if m := inspect(mismatched.ContainerID).HostConfig.Memory; m != 256<<20 {
		t.Fatalf("the create with XMODE_SANDBOX_MEMORY=256m got memory %d", m)
	}
	r := x(other, "reap", "-v")
	if !strings.Contains(r.stdout, "made for other settings") {
		t.Fatalf("a reap with other settings did not retire the pool:\n%s", r.stdout)
	}
	if !dkGone(t, cli, p.Pool.Entries[0].ContainerID) {
		t.Fatal("the retired entry's container is still there")
	}
	p = show()
	if len(p.Pool.Entries) != 1 || inspect(p.Pool.Entries[0].ContainerID).HostConfig.Memory != 256<<20 {
		t.Fatalf("the pool after a reap with other settings: %+v", p.Pool)
	}

	// An entry whose row vanished (a restored store): its container is an
	// orphan, its worktree too.
	lost := p.Pool.Entries[0]
	db, err := sql.Open("sqlite", "file:"+filepath.Join(root, "xmode.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM pool_entries WHERE session_id = ?`, lost.ID); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r = dkWant(t, dkXmode(t, root, env, "reap", "-v", "--reclaim-unknown"), 0)
	if !strings.Contains(r.stdout, lost.ID+" removed orphan container") || !dkGone(t, cli, lost.ContainerID) {
		t.Fatalf("the container of a vanished entry was not reaped:\n%s", r.stdout)
	}
	if _, err := os.Stat(lost.Worktree); !os.IsNotExist(err) {
		t.Fatalf("the worktree of a vanished entry was not reclaimed: %v", err)
	}

	// Stop destroys a claimed sandbox; it never comes back to the pool.
	x(nil, "sandbox", "stop", claimed.ID)
	if !dkGone(t, cli, claimed.ContainerID) {
		t.Fatal("stop left the claimed container")
	}
	if p = show(); slices.Contains(p.ids(), claimed.ID) {
		t.Fatal("a stopped session is back in the pool")
	}

	// Older than XMODE_POOL_MAX_AGE: replaced.
	old := p.ids()
	r = x([]string{"XMODE_POOL_MAX_AGE=1ms"}, "reap", "-v")
	if p = show(); len(p.Pool.Entries) != 1 || slices.Contains(old, p.Pool.Entries[0].ID) || !strings.Contains(r.stdout, "older than XMODE_POOL_MAX_AGE") {
		t.Fatalf("aged pool %v is now %v:\n%s", old, p.ids(), r.stdout)
	}

	// machine rm takes the pool with it.
	last := p.Pool.Entries[0]
	x(nil, "machine", "rm", project, "--force")
	if !dkGone(t, cli, last.ContainerID) {
		t.Fatal("machine rm left the pool's container")
	}
}

var recordName = regexp.MustCompile(`/worktrees/[^/"]+`)

// dkShape is everything about a session's container that the daemon
// recorded (configuration, host configuration, mounts), with the
// session's own IDs and its worktree record's name taken out.
func dkShape(t *testing.T, ci container.InspectResponse, s dkSession) string {
	t.Helper()
	norm := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out := strings.NewReplacer(s.ID, "SESSION", s.RunID, "RUN").Replace(string(b))
		return recordName.ReplaceAllString(out, "/worktrees/RECORD")
	}
	ci.Config.Hostname = ""
	var mounts []string
	for _, m := range ci.Mounts {
		mounts = append(mounts, norm(m))
	}
	slices.Sort(mounts) // the daemon lists them in no set order
	return norm(ci.Config) + norm(ci.HostConfig) + strings.Join(mounts, "")
}

// Pools with several users on the docker engine, where each user's
// sandboxes mount a cache of their own, so an entry serves its user alone:
// one user's reap never retires another's entries; the pool is filled for
// the users who made sessions of the project lately (the warming user on a
// machine nobody has used yet), or for those XMODE_POOL_USERS names; each
// claim gets an entry that mounts its own user's cache; an entry made
// before entries recorded their user is retired, saying so.
func TestPoolDockerUsers(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	vol, root := dockertest.StorageVolume(t, cli)
	dkRemoveSandboxes(t, cli, vol, root)
	repo := filepath.Join(t.TempDir(), "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	project := "pool-" + strings.TrimPrefix(store.NewRunID(), "run_")
	t.Cleanup(func() { removeProjectVolumes(cli, project) })
	env := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host(), "XMODE_SANDBOX_STORAGE_VOLUME=" + vol,
		"XMODE_SANDBOX_STORAGE_MOUNT=" + root, "XMODE_PROJECT_MACHINES=1", "XMODE_SANDBOX_MAX_OPEN=0"}
	as := func(user string, more []string, args ...string) dkResult {
		t.Helper()
		return dkWant(t, dkXmode(t, root, append(slices.Concat(env, more), "XMODE_USER="+user), args...), 0)
	}
	show := func() poolShow {
		t.Helper()
		var p poolShow
		dkJSON(t, as("alice", nil, "machine", "show", project, "--json"), &p)
		return p
	}
	// whose lists the pool's ready entries as user:ID, by user.
	whose := func(p poolShow) []string {
		var out []string
		for _, e := range p.Pool.Entries {
			if e.State == "ready" {
				out = append(out, e.User+":"+e.ID)
			}
		}
		slices.Sort(out)
		return out
	}
	ctx := context.Background()
	cacheOf := func(containerID string) string {
		t.Helper()
		ci, err := cli.ContainerInspect(ctx, containerID)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ci.Mounts {
			if m.Destination == "/cache" {
				return m.Name
			}
		}
		t.Fatalf("container %s mounts no cache: %+v", containerID, ci.Mounts)
		return ""
	}
	claim := func(user string) dkSession {
		t.Helper()
		var s dkSession
		dkJSON(t, as(user, nil, "sandbox", "create", "--project", project, "--json"), &s)
		return s
	}

	// Nobody has used the project: the pool alice warms is hers.
	as("alice", nil, "machine", "warm", project, "--repo", repo, "--pool", "1")
	p := show()
	if got := whose(p); len(got) != 1 || !strings.HasPrefix(got[0], "alice:") {
		t.Fatalf("the pool alice warmed: %v", got)
	}
	alices := p.Pool.Entries[0]
	if out := as("alice", nil, "machine", "show", project).stdout; !strings.Contains(out, "1 ready, of 1 for each user (alice 1)") {
		t.Fatalf("machine show does not say whose the pool is:\n%s", out)
	}

	// bob's create does not take alice's entry; bob has now used the project.
	bobsOwn := claim("bob")
	if bobsOwn.ID == alices.ID || cacheOf(bobsOwn.ContainerID) != machines.CacheVolume(project, "bob") {
		t.Fatalf("bob's create %s (cache %s), alice's entry %s", bobsOwn.ID, cacheOf(bobsOwn.ContainerID), alices.ID)
	}

	// bob's reap fills bob's pool and leaves alice's entry alone; alice's
	// reap then has nothing to do.
	r := as("bob", nil, "reap", "-v")
	p = show()
	got := whose(p)
	if len(got) != 2 || got[0] != "alice:"+alices.ID || !strings.HasPrefix(got[1], "bob:") || strings.Contains(r.stdout, "retired") {
		t.Fatalf("after bob's reap the pool is %v:\n%s", got, r.stdout)
	}
	bobs := strings.TrimPrefix(got[1], "bob:")
	if r := as("alice", nil, "reap", "-v"); strings.Contains(r.stdout, "retired") || strings.Contains(r.stdout, "made pool entry") || !slices.Equal(whose(show()), got) {
		t.Fatalf("alice's reap changed the pool %v to %v:\n%s", got, whose(show()), r.stdout)
	}

	// Each claims their own, mounting their own cache.
	for user, want := range map[string]string{"alice": alices.ID, "bob": bobs} {
		s := claim(user)
		if s.ID != want || cacheOf(s.ContainerID) != machines.CacheVolume(project, user) {
			t.Fatalf("%s claimed %s (cache %s), want %s and their own cache", user, s.ID, cacheOf(s.ContainerID), want)
		}
	}
	// Both made sessions lately: one reap refills both pools.
	as("bob", nil, "reap")
	if got := whose(show()); len(got) != 2 || !strings.HasPrefix(got[0], "alice:") || !strings.HasPrefix(got[1], "bob:") {
		t.Fatalf("the pools after both claimed and a reap: %v", got)
	}

	// XMODE_POOL_USERS names whose pools to fill: carol's is made, and the
	// others' are kept.
	before := whose(show())
	r = as("alice", []string{"XMODE_POOL_USERS=carol"}, "reap", "-v")
	got = whose(show())
	if len(got) != 3 || got[0] != before[0] || got[1] != before[1] || !strings.HasPrefix(got[2], "carol:") || strings.Contains(r.stdout, "retired") {
		t.Fatalf("a reap for carol: %v (before %v):\n%s", got, before, r.stdout)
	}
	carols := strings.TrimPrefix(got[2], "carol:")
	if c := cacheOf("xmode-" + carols); c != machines.CacheVolume(project, "carol") {
		t.Fatalf("carol's entry mounts %s", c)
	}

	// An entry made before entries recorded their user may mount the cache
	// all users shared: retired, saying so.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(root, "xmode.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE pool_entries SET user = '' WHERE session_id = ?`, carols); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r = as("alice", nil, "reap", "-v")
	if !strings.Contains(r.stdout, carols+" retired pool entry of "+project+": made before pool entries recorded whose cache they mount") ||
		!dkGone(t, cli, "xmode-"+carols) || !slices.Equal(whose(show()), before) {
		t.Fatalf("an entry of before: pool %v:\n%s", whose(show()), r.stdout)
	}
	as("alice", nil, "machine", "rm", project, "--force")
}
