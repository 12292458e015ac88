package pool_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli/gittest"
	"github.com/xmode/xmode/internal/proc"
	"github.com/xmode/xmode/pool"
	_ "github.com/xmode/xmode/providers/local" // the host engine
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// The pool's life through the create that claims from it
// (sandbox.Service.Create) and the upkeep `reap` and `machine warm` run,
// on the host engine; the docker engine's in cmd/xmode/pool_docker_test.go.

// git runs the real git for a fixture (gittest.Git).
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return gittest.Git(t, dir, args...)
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newService is a sandbox service on a new storage root, configured by env.
func newService(t *testing.T, env map[string]string) *sandbox.Service {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	e := map[string]string{"XMODE_STORAGE_ROOT": root, "XMODE_USER": "tester", "HOME": t.TempDir()}
	for k, v := range env {
		e[k] = v
	}
	cfg, err := config.Load(func(k string) string { return e[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), cfg.StorageRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &sandbox.Service{Cfg: cfg, Store: st, Guard: fsguard.Guard{Root: cfg.StorageRoot}}
}

// poolFixture is a repository of six files with three commits — base, one
// file changed (near), every file rewritten (far) — and a host-engine
// service with project machines on, its machine warmed at near.
type poolFixture struct {
	svc             *sandbox.Service
	log             strings.Builder
	repo            string
	base, near, far string
}

func newPoolFixture(t *testing.T, env map[string]string) *poolFixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "origin")
	git(t, ".", "init", "-q", "-b", "main", dir)
	if err := os.MkdirAll(filepath.Join(dir, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(content string, n int) {
		for i := range n {
			write(t, filepath.Join(dir, "pkg", "f"+strconv.Itoa(i)), content+strconv.Itoa(i)+"\n")
		}
	}
	put("base", 6)
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "base")
	f := &poolFixture{repo: dir, base: git(t, dir, "rev-parse", "HEAD")}
	put("far", 6)
	git(t, dir, "commit", "-qam", "far")
	f.far = git(t, dir, "rev-parse", "HEAD")
	git(t, dir, "reset", "-q", "--hard", f.base)
	write(t, filepath.Join(dir, "pkg", "f0"), "near\n")
	git(t, dir, "commit", "-qam", "near")
	f.near = git(t, dir, "rev-parse", "HEAD")
	git(t, dir, "branch", "far", f.far)
	all := map[string]string{"XMODE_PROJECT_MACHINES": "1", "XMODE_SANDBOX_MAX_OPEN": "0"}
	for k, v := range env {
		all[k] = v
	}
	f.svc = newService(t, all)
	if _, _, err := f.svc.Machines().Warm(context.Background(), "demo", dir, "main"); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *poolFixture) maintain(t *testing.T) *pool.Report {
	t.Helper()
	f.log.Reset()
	rep, err := f.svc.Pools().Maintain(context.Background(), pool.Options{Log: &f.log})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Fatalf("maintain: %+v", rep.Errors)
	}
	return rep
}

// ready returns the IDs of the project's ready entries.
func (f *poolFixture) ready(t *testing.T) []string {
	t.Helper()
	es, err := f.svc.Pools().Entries(context.Background(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range es {
		if e.State == pool.Ready {
			ids = append(ids, e.SessionID)
		}
	}
	return ids
}

// checkWorktree asserts the session's worktree is a clean, detached
// checkout of commit that git knows as a worktree of the machine.
func (f *poolFixture) checkWorktree(t *testing.T, sess *store.Session, commit string) {
	t.Helper()
	if sess.Status != store.StatusOpen || sess.BaseCommit != commit {
		t.Fatalf("session %s: %s at %s, want open at %s", sess.ID, sess.Status, sess.BaseCommit, commit)
	}
	if head := git(t, sess.WorktreePath, "rev-parse", "HEAD"); head != commit {
		t.Fatalf("worktree of %s at %s, want %s", sess.ID, head, commit)
	}
	if st := git(t, sess.WorktreePath, "status", "--porcelain", "--untracked-files=all"); st != "" {
		t.Fatalf("worktree of %s is not clean:\n%s", sess.ID, st)
	}
	repo, _ := f.svc.Machines().RepoDir("demo")
	if !strings.Contains(git(t, repo, "worktree", "list"), sess.WorktreePath) {
		t.Fatalf("the machine does not list the worktree of %s", sess.ID)
	}
}

// firstDiffReads is how many files the session's first snapshot reads
// (its first `sandbox diff`): none when its entry was seeded at the commit
// it is at (changes.Service.Seed).
func (f *poolFixture) firstDiffReads(t *testing.T, sess *store.Session) int {
	t.Helper()
	cr := &changes.Service{Store: f.svc.Store, Guard: f.svc.Guard, MaxBytes: f.svc.Cfg.CRMaxBytes}
	sn, err := cr.Snapshot(context.Background(), sess, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	if !sn.Empty() {
		t.Fatalf("the worktree of %s differs from its base: %+v", sess.ID, sn.Changes)
	}
	return sn.Hashed
}

func TestPoolClaimsReadySandboxes(t *testing.T) {
	ctx := context.Background()
	f := newPoolFixture(t, map[string]string{"XMODE_POOL_SIZE": "2", "XMODE_SANDBOX_TTL": "1h"})
	if rep := f.maintain(t); rep.Filled != 2 {
		t.Fatalf("filled %d, want 2", rep.Filled)
	}
	inPool := f.ready(t)
	if len(inPool) != 2 {
		t.Fatalf("%d ready entries, want 2", len(inPool))
	}
	if list, _ := f.svc.Store.List(ctx, store.Filter{All: true}); len(list) != 0 {
		t.Fatalf("pool entries show as sessions: %+v", list)
	}

	// A claim: the entry's IDs, open at the machine's commit, the TTL from now.
	before := time.Now()
	sess, err := f.svc.Create(ctx, sandbox.CreateOptions{Project: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(inPool, sess.ID) {
		t.Fatalf("create made %s instead of claiming one of %v", sess.ID, inPool)
	}
	f.checkWorktree(t, sess, f.near)
	if n := f.firstDiffReads(t, sess); n != 0 {
		t.Fatalf("the first diff of a claimed entry read %d files: its stat cache was not seeded when it was made", n)
	}
	if sess.ExpiresAt.Before(before.Add(time.Hour)) || sess.CreatedAt.Before(before) || sess.Ref != "main" || sess.User != "tester" {
		t.Fatalf("claimed session %+v: the TTL must start at the claim, the ref and owner be the create's", sess)
	}
	if left := f.ready(t); len(left) != 1 || left[0] == sess.ID {
		t.Fatalf("after a claim the pool holds %v", left)
	}
	if list, _ := f.svc.Store.List(ctx, store.Filter{}); len(list) != 1 || list[0].ID != sess.ID {
		t.Fatalf("sandbox list shows %+v, want only the claimed session", list)
	}

	// Another ref: the entry moves there by a checkout in its worktree.
	moved, err := f.svc.Create(ctx, sandbox.CreateOptions{Project: "demo", Ref: f.base})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(inPool, moved.ID) {
		t.Fatalf("create --ref made %s instead of moving a pool entry", moved.ID)
	}
	f.checkWorktree(t, moved, f.base)
	if b, _ := os.ReadFile(filepath.Join(moved.WorktreePath, "pkg", "f0")); string(b) != "base0\n" {
		t.Fatalf("pkg/f0 after the move: %q", b)
	}
	if n := f.firstDiffReads(t, moved); n != 0 {
		t.Fatalf("the first diff of a moved entry read %d files: its stat cache was not seeded again after the move", n)
	}

	// Empty pool: a create makes its sandbox as before, without an error.
	fresh, err := f.svc.Create(ctx, sandbox.CreateOptions{Project: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(inPool, fresh.ID) {
		t.Fatal("the pool was empty, yet create claimed")
	}
	f.checkWorktree(t, fresh, f.near)

	// A stopped session is destroyed, never returned to the pool.
	if _, err := f.svc.Stop(ctx, sess, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sess.WorktreePath); !os.IsNotExist(err) {
		t.Fatalf("the stopped session's worktree is still there: %v", err)
	}
	if f.maintain(t); slices.Contains(f.ready(t), sess.ID) || len(f.ready(t)) != 2 {
		t.Fatalf("after a stop and a refill the pool is %v (the stopped %s must not be in it)", f.ready(t), sess.ID)
	}
}

// On the host a move writes what changed; when that is every file, a fresh
// worktree is as fast: the create makes one and leaves the pool alone.
func TestPoolMoveOrFresh(t *testing.T) {
	ctx := context.Background()
	f := newPoolFixture(t, map[string]string{"XMODE_POOL_SIZE": "1"})
	f.maintain(t)
	inPool := f.ready(t)
	sess, err := f.svc.Create(ctx, sandbox.CreateOptions{Project: "demo", Ref: "far"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(inPool, sess.ID) || !slices.Equal(f.ready(t), inPool) {
		t.Fatalf("a ref whose every file differs moved pool entry %s (pool %v → %v)", sess.ID, inPool, f.ready(t))
	}
	f.checkWorktree(t, sess, f.far)
}

func TestMaintainPools(t *testing.T) {
	ctx := context.Background()
	f := newPoolFixture(t, map[string]string{"XMODE_POOL_SIZE": "2"})
	f.maintain(t)
	first := f.ready(t)

	// A refresh moves the machine: entries behind it are retired once new
	// ones are ready.
	write(t, filepath.Join(f.repo, "pkg", "f1"), "newer\n")
	git(t, f.repo, "commit", "-qam", "newer")
	head := git(t, f.repo, "rev-parse", "HEAD")
	if _, _, err := f.svc.Machines().Warm(ctx, "demo", "", ""); err != nil {
		t.Fatal(err)
	}
	if rep := f.maintain(t); rep.Filled != 2 || rep.Retired != 2 || strings.Count(f.log.String(), "behind its machine") != 2 {
		t.Fatalf("after a refresh: filled %d, retired %d; want 2 and 2, behind the machine:\n%s", rep.Filled, rep.Retired, &f.log)
	}
	es, _ := f.svc.Pools().Entries(ctx, "demo")
	for _, e := range es {
		if slices.Contains(first, e.SessionID) || e.Commit != head {
			t.Fatalf("entry %s at %s after the refresh, want new entries at %s", e.SessionID, e.Commit, head)
		}
	}
	if out := git(t, f.svc.Guard.Root+"/project_machines/demo/repo", "worktree", "list"); strings.Count(out, "/runs/run_") != 2 {
		t.Fatalf("the retired entries %v left worktrees:\n%s", first, out)
	}
	if out := git(t, f.svc.Guard.Root+"/project_machines/demo/repo", "worktree", "prune", "--dry-run", "-v"); out != "" {
		t.Fatalf("retired entries left records: %s", out)
	}

	// A smaller pool retires the extras, the oldest first.
	if err := f.svc.Store.SetPoolSize(ctx, "demo", 1); err != nil {
		t.Fatal(err)
	}
	if rep := f.maintain(t); rep.Retired != 1 || len(f.ready(t)) != 1 {
		t.Fatalf("pool of 1: retired %d, %d ready", rep.Retired, len(f.ready(t)))
	}

	// An entry whose maker died is taken over and removed.
	dead := "2147483:1@" + strings.SplitN(proc.Self(), "@", 2)[1] + "/x"
	if err := pool.ReserveOne(ctx, f.svc.Pools(), "demo", "dead", dead); err != nil {
		t.Fatal(err)
	}
	if rep := f.maintain(t); rep.Retired != 1 {
		t.Fatalf("the entry of a dead maker: retired %d, want 1", rep.Retired)
	}

	// Entries older than XMODE_POOL_MAX_AGE are replaced.
	kept := f.ready(t)
	f.svc.Cfg.PoolMaxAge = time.Nanosecond
	if rep := f.maintain(t); rep.Retired != 1 || rep.Filled != 1 {
		t.Fatalf("aged pool: filled %d, retired %d", rep.Filled, rep.Retired)
	}
	if now := f.ready(t); len(now) != 1 || now[0] == kept[0] {
		t.Fatalf("aged entry %v still in the pool %v", kept, now)
	}

	// Without project machines no pool is kept (creates would not claim),
	// and an entry is retired only for its age.
	f.svc.Cfg.PoolMaxAge, f.svc.Cfg.ProjectMachines = time.Hour, false
	if rep := f.maintain(t); rep.Filled != 0 || rep.Retired != 0 {
		t.Fatalf("with project machines off: filled %d, retired %d", rep.Filled, rep.Retired)
	}

	// Drained (machine rm): nothing of the pool is left.
	if n, err := f.svc.Pools().Drain(ctx, "demo", nil); err != nil || n != 1 {
		t.Fatalf("drain: %d %v", n, err)
	}
	if _, err := f.svc.Machines().Remove(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(f.svc.Guard.RunsDir()); len(entries) != 0 {
		t.Fatalf("run directories left: %v", entries)
	}
}

// A session whose work runs in the Codex cloud has no sandbox here: its
// create from a machine claims nothing (no provider to ask for a shape)
// and gets a worktree of the machine as without a pool.
func TestCloudCreateClaimsNothing(t *testing.T) {
	f := newPoolFixture(t, map[string]string{"XMODE_POOL_SIZE": "1", "XMODE_RUNNER_MODE": "cloud_subscription"})
	sess, err := f.svc.Create(context.Background(), sandbox.CreateOptions{Project: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Engine != "cloud" {
		t.Fatalf("a cloud_subscription session on engine %q", sess.Engine)
	}
	f.checkWorktree(t, sess, f.near)
}

// An entry a live process is making survives a drain, and `machine rm`
// refuses the machine until it is made or gone.
func TestRemoveWaitsForAnEntryBeingMade(t *testing.T) {
	ctx := context.Background()
	f := newPoolFixture(t, nil)
	if err := pool.ReserveOne(ctx, f.svc.Pools(), "demo", f.near, reaper.NewHolder()); err != nil {
		t.Fatal(err)
	}
	if n, err := f.svc.Pools().Drain(ctx, "demo", nil); err != nil || n != 0 {
		t.Fatalf("drain took %d entries (%v), want none: a live process is making it", n, err)
	}
	_, err := f.svc.Machines().Remove(ctx, "demo")
	if fail.KindOf(err) != fail.Refused || !strings.Contains(fmt.Sprint(err), "still has 1 pool entries") {
		t.Fatalf("remove with an entry being made: %v, want refused", err)
	}
	if _, err := os.Stat(filepath.Join(f.svc.Guard.Root, "project_machines", "demo", "repo", ".git")); err != nil {
		t.Fatalf("a refused remove removed the machine: %v", err)
	}
}
