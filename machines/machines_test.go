package machines

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli/gittest"
	"github.com/xmode/xmode/store"
)

// TestMain doubles as a lock holder for TestLockReleasedWhenHolderKilled.
func TestMain(m *testing.M) {
	if dir := os.Getenv("XMODE_TEST_HOLD_LOCK"); dir != "" {
		lk, err := lockMachine(context.Background(), dir, "p", nil)
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("locked\n")
		time.Sleep(time.Minute)
		lk.unlock()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// git runs the real git for a fixture (gittest.Git).
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return gittest.Git(t, dir, args...)
}

// origin makes a repository with branch main (two commits) and tag v1.
func origin(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "origin")
	git(t, ".", "init", "-q", "-b", "main", dir)
	os.WriteFile(filepath.Join(dir, "README"), []byte("one\n"), 0o644)
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "one")
	git(t, dir, "tag", "-a", "-m", "v1", "v1")
	os.WriteFile(filepath.Join(dir, "README"), []byte("two\n"), 0o644)
	git(t, dir, "commit", "-qam", "two")
	return dir
}

func manager(t *testing.T) *Manager {
	t.Helper()
	root := t.TempDir()
	st, err := store.Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &Manager{Cfg: &config.Config{StorageRoot: root}, Store: st, Guard: fsguard.Guard{Root: root}}
}

func TestCacheEnv(t *testing.T) {
	env := CacheEnv("/cache")
	want := []string{"XDG_CACHE_HOME=/cache", "GOMODCACHE=/cache/", "npm_config_cache=/cache/", "PIP_CACHE_DIR=/cache/", "BUNDLE_PATH=/cache/"}
	if len(env) != len(want) {
		t.Fatalf("CacheEnv = %v", env)
	}
	for i, w := range want {
		if !strings.HasPrefix(env[i], w) {
			t.Errorf("CacheEnv[%d] = %q, want prefix %q", i, env[i], w)
		}
	}
	if VolumeName("prom") != "xmode_proj_prom" {
		t.Fatal(VolumeName("prom"))
	}
}

func TestWarmThenFetchAndResolve(t *testing.T) {
	ctx := context.Background()
	m, src := manager(t), origin(t)
	mach, cloned, err := m.Warm(ctx, "p", src, "")
	if err != nil || !cloned {
		t.Fatalf("first warm: cloned=%v err=%v", cloned, err)
	}
	if mach.DefaultRef != "main" || mach.HeadCommit != git(t, src, "rev-parse", "main") || mach.Volume != "xmode_proj_p" {
		t.Fatalf("machine %+v", mach)
	}
	repoDir, _ := m.RepoDir("p")
	// the annotated tag peels to its commit
	if c, found, err := resolve(ctx, repoDir, "v1"); err != nil || !found || c != git(t, src, "rev-parse", "v1^{commit}") {
		t.Fatalf("resolve v1: %s %v %v", c, found, err)
	}
	short := git(t, src, "rev-parse", "--short", "main~1")
	if c, found, err := resolve(ctx, repoDir, short); err != nil || !found || c != git(t, src, "rev-parse", "main~1") {
		t.Fatalf("resolve %s: %s %v %v", short, c, found, err)
	}
	git(t, src, "commit", "-q", "--allow-empty", "-m", "three")
	mach, cloned, err = m.Warm(ctx, "p", "", "")
	if err != nil || cloned {
		t.Fatalf("second warm: cloned=%v err=%v", cloned, err)
	}
	if mach.HeadCommit != git(t, src, "rev-parse", "main") {
		t.Fatalf("warm did not fetch: %s", mach.HeadCommit)
	}
	if _, _, err := m.Warm(ctx, "p", "file://"+src, ""); fail.KindOf(err) != fail.Refused {
		t.Fatalf("warm from another repo: %v", err)
	}
	// A path that is no repository is a usage error, before anything else.
	if _, _, err := m.Warm(ctx, "p", t.TempDir(), ""); fail.KindOf(err) != fail.Usage {
		t.Fatalf("warm from a directory that is no repository: %v", err)
	}
	if _, _, err := m.Warm(ctx, "q", "", ""); fail.KindOf(err) != fail.Usage {
		t.Fatalf("first warm without --repo: %v", err)
	}
}

// An interrupted first clone leaves a clone-* directory that is not taken
// for a machine; the next warm clears it and clones.
func TestInterruptedCloneIsRedone(t *testing.T) {
	ctx := context.Background()
	m, src := manager(t), origin(t)
	dir, _ := m.Guard.MachineDir("p")
	os.MkdirAll(filepath.Join(dir, "clone-0123", ".git"), 0o755)
	os.MkdirAll(filepath.Join(dir, "repo"), 0o755) // no .git: not a machine
	if _, cloned, err := m.Warm(ctx, "p", src, ""); err != nil || !cloned {
		t.Fatalf("warm: %v %v", cloned, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "clone-0123")); !os.IsNotExist(err) {
		t.Fatalf("leftover clone kept: %v", err)
	}
}

// The kernel releases a machine's lock when its holder is killed.
func TestLockReleasedWhenHolderKilled(t *testing.T) {
	dir := t.TempDir()
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), "XMODE_TEST_HOLD_LOCK="+dir)
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		c.Process.Kill()
		t.Fatalf("holder: %q %v", buf, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := lockMachine(ctx, dir, "p", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock while held: %v", err)
	}
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	lk, err := lockMachine(ctx2, dir, "p", nil)
	if err != nil {
		t.Fatalf("lock after the holder was killed: %v", err)
	}
	lk.unlock()
}

// A waiter whose lock file was removed (machine rm) does not take a lock
// on the unlinked file.
func TestLockOnRemovedMachine(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	os.MkdirAll(dir, 0o755)
	lk, err := lockMachine(context.Background(), dir, "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := lockMachine(context.Background(), dir, "p", nil)
		done <- err
	}()
	// The waiter has the lock file open (a second descriptor on it in this
	// process): what it locks once it may is the file removed meanwhile.
	lockPath := filepath.Join(dir, LockFile)
	deadline := time.Now().Add(10 * time.Second)
	for openedBy(lockPath) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never opened the lock file")
		}
		time.Sleep(time.Millisecond)
	}
	os.RemoveAll(dir)
	lk.unlock()
	select {
	case err := <-done:
		if !errors.Is(err, errGone) {
			t.Fatalf("waiter: %v, want errGone", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter never returned")
	}
}

// openedBy counts this process's descriptors open on path.
func openedBy(path string) int {
	fds, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && target == path {
			n++
		}
	}
	return n
}

func TestCheckoutAddAndRelease(t *testing.T) {
	ctx := context.Background()
	m, src := manager(t), origin(t)
	if _, _, err := m.Warm(ctx, "p", src, ""); err != nil {
		t.Fatal(err)
	}
	repoDir, _ := m.RepoDir("p")
	var runs []string
	for i := 0; i < 2; i++ {
		co, err := m.Checkout(ctx, "p", "", "v1", false)
		if err != nil {
			t.Fatal(err)
		}
		run := store.NewRunID()
		wt, _ := m.Guard.Worktree(run)
		if _, err := co.AddWorktree(ctx, run, wt); err != nil {
			t.Fatal(err)
		}
		co.Close()
		b, _ := os.ReadFile(filepath.Join(wt, ".git"))
		if !strings.HasPrefix(string(b), "gitdir: ../../../project_machines/p/repo/.git/worktrees/") {
			t.Fatalf(".git = %q, want a relative gitdir", b)
		}
		if got := git(t, wt, "rev-parse", "HEAD"); got != co.Commit {
			t.Fatalf("worktree HEAD %s, want %s", got, co.Commit)
		}
		runs = append(runs, run)
	}
	// A sandbox plants a record-lookalike that is a symlink out of the
	// machine, and a real directory outside that names the run.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "gitdir"), []byte("/x/runs/"+runs[0]+"/worktree/.git\n"), 0o644)
	os.Symlink(outside, filepath.Join(repoDir, ".git", "worktrees", "planted"))

	if removed, err := m.Guard.RemoveWorktree(runs[0]); err != nil || !removed {
		t.Fatalf("RemoveWorktree: %v %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(repoDir, ".git", "HEAD")); err != nil {
		t.Fatalf("removing the worktree touched the machine: %v", err)
	}
	if removed, err := ReleaseWorktree(m.Guard, "p", runs[0]); err != nil || !removed {
		t.Fatalf("ReleaseWorktree: %v %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "gitdir")); err != nil {
		t.Fatalf("followed a planted symlink: %v", err)
	}
	os.Remove(filepath.Join(repoDir, ".git", "worktrees", "planted"))
	list := git(t, repoDir, "worktree", "list", "--porcelain")
	if strings.Contains(list, runs[0]) || !strings.Contains(list, runs[1]) {
		t.Fatalf("worktree list after release:\n%s", list)
	}
	if out := git(t, repoDir, "worktree", "prune", "--dry-run", "-v"); out != "" {
		t.Fatalf("prune finds: %s", out)
	}
	if removed, err := ReleaseWorktree(m.Guard, "p", runs[0]); err != nil || removed {
		t.Fatalf("second release: %v %v", removed, err)
	}
	if _, err := ReleaseWorktree(m.Guard, "p", "run_../../x"); err == nil {
		t.Fatal("malformed run id accepted")
	}
}

// A `git worktree add` killed before it wrote anything in its record (a
// create killed at once) leaves a record with neither gitdir nor locked:
// the next add removes it, so git has nothing stale to prune, and leaves a
// session's locked record and a planted symlink alone.
func TestAddSweepsHalfMadeRecords(t *testing.T) {
	ctx := context.Background()
	m, src := manager(t), origin(t)
	if _, _, err := m.Warm(ctx, "p", src, ""); err != nil {
		t.Fatal(err)
	}
	repoDir, _ := m.RepoDir("p")
	records := filepath.Join(repoDir, ".git", "worktrees")
	add := func() string {
		co, err := m.Checkout(ctx, "p", "", "", false)
		if err != nil {
			t.Fatal(err)
		}
		defer co.Close()
		run := store.NewRunID()
		wt, _ := m.Guard.Worktree(run)
		record, err := co.AddWorktree(ctx, run, wt)
		if err != nil {
			t.Fatal(err)
		}
		return record
	}
	add()
	os.MkdirAll(filepath.Join(records, "junk"), 0o755)
	os.MkdirAll(filepath.Join(records, "starting"), 0o755)
	os.WriteFile(filepath.Join(records, "starting", "locked"), []byte("initializing"), 0o644)
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(records, "planted"))
	if out := git(t, repoDir, "worktree", "prune", "--dry-run", "-v"); !strings.Contains(out, "junk") {
		t.Fatalf("git does not see the junk record as stale: %q", out)
	}
	add()
	if _, err := os.Stat(filepath.Join(records, "junk")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the half-made record is still there: %v", err)
	}
	for _, keep := range []string{"starting/locked", "planted"} {
		if _, err := os.Lstat(filepath.Join(records, keep)); err != nil {
			t.Fatalf("%s went: %v", keep, err)
		}
	}
	os.Remove(filepath.Join(records, "planted"))
	if out := git(t, repoDir, "worktree", "prune", "--dry-run", "-v"); out != "" {
		t.Fatalf("prune finds: %s", out)
	}
}

func TestCheckoutErrors(t *testing.T) {
	ctx := context.Background()
	m, src := manager(t), origin(t)
	if _, err := m.Checkout(ctx, "p", "", "", false); fail.KindOf(err) != fail.NotFound ||
		!strings.Contains(err.Error(), "xmode machine warm p --repo URL") {
		t.Fatalf("missing machine: %v", err)
	}
	co, err := m.Checkout(ctx, "p", src, "", false) // warms on first use
	if err != nil || !co.Warmed || co.Ref != "main" {
		t.Fatalf("warm on first use: %+v %v", co, err)
	}
	co.Close()
	for _, ref := range []string{"nope", "-x", "a..b", "refs/heads/../../x", "x.lock", "a b"} {
		if _, err := m.Checkout(ctx, "p", "", ref, false); fail.KindOf(err) != fail.Usage {
			t.Errorf("--ref %q: %v, want a usage error", ref, err)
		}
	}
	if _, err := m.Checkout(ctx, "p", t.TempDir(), "", false); fail.KindOf(err) != fail.Usage {
		t.Fatalf("another --repo: %v", err)
	}
	// a commit no ref reaches is fetched by name
	git(t, src, "checkout", "-q", "--detach")
	git(t, src, "commit", "-q", "--allow-empty", "-m", "dangling")
	dangling := git(t, src, "rev-parse", "HEAD")
	git(t, src, "checkout", "-q", "main")
	co, err = m.Checkout(ctx, "p", "", dangling, false)
	if err != nil || co.Commit != dangling {
		t.Fatalf("unreachable commit: %+v %v", co, err)
	}
	co.Close()
}

// A worktree's record is the sandbox's to rewrite (HEAD, gitdir, commondir):
// that can neither block the project's fetch nor hide the record from
// teardown, which removes it by the name stored at create.
func TestTamperedRecordCannotBlockOrHide(t *testing.T) {
	ctx := context.Background()
	m, src := manager(t), origin(t)
	if _, _, err := m.Warm(ctx, "p", src, ""); err != nil {
		t.Fatal(err)
	}
	repoDir, _ := m.RepoDir("p")
	co, err := m.Checkout(ctx, "p", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	run := store.NewRunID()
	wt, _ := m.Guard.Worktree(run)
	record, err := co.AddWorktree(ctx, run, wt)
	co.Close()
	if err != nil {
		t.Fatal(err)
	}
	sess := store.NewSession{NewRun: true, Session: store.Session{ID: store.NewSessionID(), RunID: run, User: "u",
		RunnerMode: "local_worktree", Engine: "host", CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour), WorktreePath: wt}}
	if err := m.Store.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	m.Store.MarkRunMachine(ctx, run, "p")
	if err := m.Store.SetRunRecord(ctx, run, record); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(repoDir, ".git", "worktrees", record)
	// What a step in the sandbox can write:
	os.WriteFile(filepath.Join(rec, "HEAD"), []byte("ref: refs/remotes/origin/main\n"), 0o644)
	os.WriteFile(filepath.Join(rec, "gitdir"), []byte("/somewhere/else/.git\n"), 0o644)
	// a new commit upstream, so the fetch has to move refs/remotes/origin/main
	os.WriteFile(filepath.Join(src, "README"), []byte("three\n"), 0o644)
	git(t, src, "commit", "-qam", "three")
	if _, _, err := m.Warm(ctx, "p", "", ""); err != nil {
		t.Fatalf("a worktree whose HEAD names origin/main blocked the fetch: %v", err)
	}
	if removed, err := m.Guard.RemoveWorktree(run); err != nil || !removed {
		t.Fatalf("RemoveWorktree: %v %v", removed, err)
	}
	if removed, err := ReleaseRun(ctx, m.Store, m.Guard, run); err != nil || !removed {
		t.Fatalf("ReleaseRun with a rewritten gitdir: %v %v", removed, err)
	}
	if _, err := os.Lstat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the record is still there: %v", err)
	}
	if list := git(t, repoDir, "worktree", "list", "--porcelain"); strings.Contains(list, "locked") {
		t.Fatalf("worktree list still shows the run:\n%s", list)
	}
	if _, err := RemoveRecord(m.Guard, "p", "../../x"); fail.KindOf(err) != fail.Refused {
		t.Fatalf("a record name with a slash: %v", err)
	}
}

// git's own reason reaches the user when a fetch fails.
func TestFetchErrorSaysWhy(t *testing.T) {
	ctx := context.Background()
	m, src := manager(t), origin(t)
	if _, _, err := m.Warm(ctx, "p", src, ""); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(src)
	_, _, err := m.Warm(ctx, "p", "", "")
	if err == nil || strings.HasSuffix(strings.TrimSpace(err.Error()), ":") || !strings.Contains(err.Error(), "does not appear to be a git repository") {
		t.Fatalf("fetch from a missing origin: %v", err)
	}
}

// A checkout at the default ref takes the commit the last warm recorded,
// running no git to resolve it (as a pool's claim does): a ref moved in
// the machine behind xmode's back does not move it; another ref is
// resolved by git, and a refresh records and takes the new commit.
func TestCheckoutDefaultRefFromRecord(t *testing.T) {
	ctx := context.Background()
	m, src := manager(t), origin(t)
	mach, _, err := m.Warm(ctx, "p", src, "")
	if err != nil {
		t.Fatal(err)
	}
	repoDir, _ := m.RepoDir("p")
	older := git(t, repoDir, "rev-parse", "origin/main~1")
	git(t, repoDir, "update-ref", "refs/remotes/origin/main", older)
	co, err := m.Checkout(ctx, "p", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	co.Close()
	if co.Commit != mach.HeadCommit {
		t.Fatalf("checkout of the default ref: %s, want the recorded %s", co.Commit, mach.HeadCommit)
	}
	co, err = m.Checkout(ctx, "p", "", "v1", false)
	if err != nil {
		t.Fatal(err)
	}
	co.Close()
	if want := git(t, src, "rev-parse", "v1^{commit}"); co.Commit != want {
		t.Fatalf("checkout of v1: %s, want %s", co.Commit, want)
	}
	git(t, src, "commit", "-q", "--allow-empty", "-m", "four")
	co, err = m.Checkout(ctx, "p", "", "", true)
	if err != nil {
		t.Fatal(err)
	}
	co.Close()
	if want := git(t, src, "rev-parse", "main"); co.Commit != want {
		t.Fatalf("checkout after a refresh: %s, want %s", co.Commit, want)
	}
	if mach, _ := m.Store.GetMachine(ctx, "p"); mach.HeadCommit != co.Commit {
		t.Fatalf("the refresh recorded %s, took %s", mach.HeadCommit, co.Commit)
	}
}
