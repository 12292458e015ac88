package sandbox

import (
	"bytes"
	"compress/zlib"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// sh runs script in the session (sh -c) and fails t unless it exits 0.
func sh(t *testing.T, svc *Service, sess *store.Session, script string) {
	t.Helper()
	var out bytes.Buffer
	res, err := svc.Exec(context.Background(), sess, ExecOptions{Argv: []string{"sh", "-c", script}, LiveStdout: &out, LiveStderr: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sh -c %q: %v %+v\n%s", script, err, res, out.String())
	}
}

// agentWork is what a stand-in agent does in a worktree: two commits, then
// a change left uncommitted, a deletion, an untracked file in a new
// directory, an executable, a symlink and an ignored file.
const agentWork = `set -e
g() { git -c user.name=agent -c user.email=agent@example.com "$@"; }
echo one > a.txt && g add a.txt && g commit -qm "agent one"
echo two >> a.txt && g commit -qam "agent two"
echo uncommitted >> README
rm gone.txt
mkdir -p new/dir && echo untracked > new/dir/u.txt
printf '#!/bin/sh\necho hi\n' > run.sh && chmod +x run.sh
ln -s README link
echo ignored > debug.log && mkdir -p build && echo out > build/out.bin
`

// forkFixture is a repository with an ignore file and a file to delete.
func forkFixture(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "origin")
	git(t, ".", "init", "-q", "-b", "main", dir)
	write(t, filepath.Join(dir, "README"), "base\n")
	write(t, filepath.Join(dir, "gone.txt"), "to be deleted\n")
	write(t, filepath.Join(dir, ".gitignore"), "*.log\nbuild/\n")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "base")
	return dir
}

// gitState is what git says of a worktree: its history, what differs
// from HEAD uncommitted, its untracked and ignored files.
type gitState struct{ log, diff, status, ignored string }

func stateOf(t *testing.T, dir string) gitState {
	t.Helper()
	return gitState{
		log:     git(t, dir, "log", "--format=%H %s"),
		diff:    git(t, dir, "diff", "HEAD"),
		status:  git(t, dir, "status", "--porcelain", "--untracked-files=all"),
		ignored: git(t, dir, "status", "--porcelain", "--ignored", "--untracked-files=all"),
	}
}

func treeOf(t *testing.T, svc *Service, sess *store.Session) string {
	t.Helper()
	cr := &changes.Service{Store: svc.Store, Guard: svc.Guard, MaxBytes: svc.Cfg.CRMaxBytes}
	sn, err := cr.Snapshot(context.Background(), sess, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	return sn.Tree.String()
}

// A fork's worktree is its parent's as it was: the agent's commits (git
// log), what it had not committed (git diff), its untracked files (git
// status), not its ignored files; the fork records its parent and step,
// and from there the two diverge.
func TestForkTakesTheWorktree(t *testing.T) {
	ctx := context.Background()
	svc := newService(t, nil)
	parent, err := svc.Create(ctx, CreateOptions{Repo: forkFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, svc, parent, agentWork)
	want := stateOf(t, parent.WorktreePath)
	wantTree := treeOf(t, svc, parent)

	fork, err := svc.Fork(ctx, parent, ForkOptions{Title: "another way"})
	if err != nil {
		t.Fatal(err)
	}
	if fork.ForkedFrom != parent.ID || fork.ForkedAtSeq != 1 || fork.Title != "another way" || fork.RunID == parent.RunID ||
		fork.BaseCommit != parent.BaseCommit || fork.Status != store.StatusOpen {
		t.Fatalf("fork %+v: want an open session of its own run, forked from %s after step 1, on the parent's base", fork, parent.ID)
	}
	got := stateOf(t, fork.WorktreePath)
	if got.log != want.log {
		t.Errorf("git log in the fork:\n%s\nin the parent:\n%s", got.log, want.log)
	}
	if got.diff != want.diff || !strings.Contains(got.diff, "+uncommitted") || !strings.Contains(got.diff, "deleted file mode") {
		t.Errorf("git diff HEAD in the fork:\n%s\nin the parent:\n%s", got.diff, want.diff)
	}
	if got.status != want.status || !strings.Contains(got.status, "?? new/dir/u.txt") {
		t.Errorf("git status in the fork:\n%s\nin the parent:\n%s", got.status, want.status)
	}
	for _, p := range []string{"debug.log", "build"} {
		if _, err := os.Lstat(filepath.Join(fork.WorktreePath, p)); !os.IsNotExist(err) {
			t.Errorf("the fork has the ignored %s (%v) without --with-ignored", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(fork.WorktreePath, "run.sh")); err != nil || fi.Mode()&0o100 == 0 {
		t.Errorf("run.sh in the fork: %v %v; want executable", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(fork.WorktreePath, "link")); err != nil || l != "README" {
		t.Errorf("link in the fork: %q %v; want the symlink", l, err)
	}
	if got := treeOf(t, svc, fork); got != wantTree {
		t.Errorf("the fork's snapshot is tree %s, the parent's %s", got, wantTree)
	}
	if out := git(t, fork.WorktreePath, "fsck", "--no-dangling"); out != "" {
		t.Errorf("git fsck in the fork: %s", out)
	}

	// They diverge: each one's writes stay its own.
	sh(t, svc, fork, `echo fork > only-fork.txt && git -c user.name=f -c user.email=f@x commit -qam "fork's commit"`)
	sh(t, svc, parent, `echo parent > only-parent.txt && echo more >> a.txt`)
	if _, err := os.Stat(filepath.Join(parent.WorktreePath, "only-fork.txt")); !os.IsNotExist(err) {
		t.Errorf("the fork's file reached the parent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(fork.WorktreePath, "only-parent.txt")); !os.IsNotExist(err) {
		t.Errorf("the parent's file reached the fork: %v", err)
	}
	if pl, fl := git(t, parent.WorktreePath, "log", "-1", "--format=%s"), git(t, fork.WorktreePath, "log", "-1", "--format=%s"); pl != "agent two" || fl != "fork's commit" {
		t.Errorf("HEADs after diverging: parent %q, fork %q", pl, fl)
	}

	// A fork of the fork has both histories.
	grand, err := svc.Fork(ctx, fork, ForkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, grand.WorktreePath, "log", "--format=%s"); got != "fork's commit\nagent two\nagent one\nbase" {
		t.Errorf("git log in a fork of the fork:\n%s", got)
	}
	if grand.ForkedFrom != fork.ID || grand.BaseCommit != parent.BaseCommit {
		t.Errorf("a fork of the fork: %+v", grand)
	}

	// --with-ignored takes the ignored files too, still ignored there.
	withIgn, err := svc.Fork(ctx, parent, ForkOptions{WithIgnored: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(withIgn.WorktreePath, "build", "out.bin")); err != nil || string(b) != "out\n" {
		t.Errorf("build/out.bin with --with-ignored: %q %v", b, err)
	}
	st := stateOf(t, withIgn.WorktreePath)
	if !strings.Contains(st.ignored, "!! debug.log") || !strings.Contains(st.ignored, "!! build/out.bin") || strings.Contains(st.status, "debug.log") {
		t.Errorf("git status --ignored in a fork --with-ignored:\n%s", st.ignored)
	}
	if withIgn.ForkedAtSeq != 2 {
		t.Errorf("forked_at_seq %d, want 2 (the parent's last step)", withIgn.ForkedAtSeq)
	}

	// A fork's stop reclaims its worktree only; the parent goes on.
	if _, err := svc.Stop(ctx, fork, false); err != nil {
		t.Fatal(err)
	}
	sh(t, svc, parent, "test -f only-parent.txt")
}

// The parent's worktree is hostile input: its .git configuration and hooks
// never run, a link to a host file is copied as a link and the file is not
// read, a FIFO does not stall the fork, a forged object is not taken, and a
// .git file that points elsewhere is not followed.
func TestForkOfAHostileParent(t *testing.T) {
	ctx := context.Background()
	svc := newService(t, nil)
	outside := t.TempDir()
	secret := "the host's secret " + outside + "\n"
	write(t, filepath.Join(outside, "secret.txt"), secret)
	marker := filepath.Join(outside, "ran")
	parent, err := svc.Create(ctx, CreateOptions{Repo: forkFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, svc, parent, `set -e
g() { git -c user.name=agent -c user.email=agent@example.com "$@"; }
echo one > a.txt && g add a.txt && g commit -qm "agent one"
echo forged > forged.txt && g add forged.txt && g commit -qm "agent two"`)
	commits := git(t, parent.WorktreePath, "rev-list", "HEAD")
	head := git(t, parent.WorktreePath, "rev-parse", "HEAD")
	base := parent.BaseCommit
	// Forge the agent's last commit: its object holds another's bytes.
	loose := func(id string) string { return filepath.Join(parent.WorktreePath, ".git", "objects", id[:2], id[2:]) }
	forgedObj := loose(head)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write([]byte("commit 9\x00not this\n"))
	zw.Close()
	os.Chmod(forgedObj, 0o644)
	write(t, forgedObj, z.String())
	sh(t, svc, parent, `set -e
cfg=.git/config
printf '[core]\n\tfsmonitor = "touch `+marker+`"\n[filter "x"]\n\tsmudge = touch `+marker+`\n\tclean = touch `+marker+`\n' >> $cfg
mkdir -p .git/hooks && for h in post-checkout pre-commit reference-transaction post-index-change; do printf '#!/bin/sh\ntouch `+marker+`\n' > .git/hooks/$h; chmod +x .git/hooks/$h; done
echo '* filter=x' > .gitattributes
ln -s `+filepath.Join(outside, "secret.txt")+` leak
ln -s `+outside+` dirlink
mkfifo pipe
echo untracked > u.txt`)

	fork, err := svc.Fork(ctx, parent, ForkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a program the parent's .git configured ran")
	}
	if l, err := os.Readlink(filepath.Join(fork.WorktreePath, "leak")); err != nil || l != filepath.Join(outside, "secret.txt") {
		t.Errorf("leak in the fork: %q %v; want the link itself", l, err)
	}
	if fi, err := os.Lstat(filepath.Join(fork.WorktreePath, "dirlink")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("dirlink in the fork: %v %v; want a link, not a copy of what it names", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(fork.WorktreePath, "pipe")); !os.IsNotExist(err) {
		t.Errorf("the FIFO reached the fork: %v", err)
	}
	secretID := git(t, outside, "hash-object", "secret.txt")
	if err := exec.Command("git", "-C", fork.WorktreePath, "cat-file", "-e", secretID).Run(); err == nil {
		t.Error("the fork's repository holds the secret's content")
	}
	// The forged commit is not taken: the fork's history is what could be
	// verified (the base), the agent's files are there uncommitted.
	if got := git(t, fork.WorktreePath, "rev-parse", "HEAD"); got != base {
		t.Errorf("the fork's HEAD is %s; want the base %s (the agent's commits could not be verified: %s)", got, base, commits)
	}
	if b, err := os.ReadFile(filepath.Join(fork.WorktreePath, "forged.txt")); err != nil || string(b) != "forged\n" {
		t.Errorf("forged.txt in the fork: %q %v", b, err)
	}
	if out := git(t, fork.WorktreePath, "fsck", "--no-dangling"); out != "" {
		t.Errorf("git fsck in the fork: %s", out)
	}
	if fi, err := os.Lstat(filepath.Join(fork.WorktreePath, ".git")); err != nil || !fi.IsDir() {
		t.Errorf("the fork's .git: %v %v; want its own repository", fi, err)
	}
	if out, err := exec.Command("git", "-C", fork.WorktreePath, "config", "--get", "core.fsmonitor").Output(); err == nil {
		t.Errorf("the fork's config has the parent's fsmonitor: %q", out)
	}

	// A .git file that redirects elsewhere is not followed: the files come
	// along, the history does not, and the repository it names is not run.
	elsewhere := filepath.Join(outside, "elsewhere")
	git(t, ".", "init", "-q", elsewhere)
	git(t, elsewhere, "config", "core.fsmonitor", "touch "+marker)
	parent2, err := svc.Create(ctx, CreateOptions{Repo: forkFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, svc, parent2, `rm -rf .git && echo "gitdir: `+filepath.Join(elsewhere, ".git")+`" > .git && echo mine > mine.txt`)
	fork2, err := svc.Fork(ctx, parent2, ForkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the repository a .git file named was run")
	}
	if got := git(t, fork2.WorktreePath, "rev-parse", "HEAD"); got != parent2.BaseCommit {
		t.Errorf("the fork's HEAD %s; want the base %s", got, parent2.BaseCommit)
	}
	if st := git(t, fork2.WorktreePath, "status", "--porcelain"); st != "?? mine.txt" {
		t.Errorf("git status in the fork: %q", st)
	}

	// The traps were armed: git run in either parent runs them.
	for _, p := range []*store.Session{parent, parent2} {
		os.Remove(marker)
		exec.Command("git", "-C", p.WorktreePath, "status").Run()
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("git status in %s did not run its trap: the test proves nothing (%v)", p.ID, err)
		}
	}
}

// A huge sparse file is refused from its size, unread, and leaves nothing.
func TestForkOfAHugeFileIsRefused(t *testing.T) {
	ctx := context.Background()
	svc := newService(t, nil)
	parent, err := svc.Create(ctx, CreateOptions{Repo: forkFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, svc, parent, "truncate -s 50G huge.bin")
	before, _ := svc.Store.List(ctx, store.Filter{All: true})
	_, err = svc.Fork(ctx, parent, ForkOptions{})
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "huge.bin") {
		t.Fatalf("fork of a 50 GB file: %v; want refused (exit 4) naming it", err)
	}
	after, _ := svc.Store.List(ctx, store.Filter{All: true})
	if len(after) != len(before) {
		t.Errorf("a refused fork recorded a session: %d sessions, %d before", len(after), len(before))
	}
	if runs, _ := os.ReadDir(svc.Guard.RunsDir()); len(runs) != 1 {
		t.Errorf("a refused fork left a run directory: %d", len(runs))
	}
}

// A step running in the foreground stops a fork (exit 4, naming it and what
// to do); a background step does not, and the fork records it as the step
// it was taken after.
func TestForkWhileAStepRuns(t *testing.T) {
	ctx := context.Background()
	svc := newService(t, nil)
	parent, err := svc.Create(ctx, CreateOptions{Repo: forkFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(parent.WorktreePath, "started")
	done := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_, err := svc.Exec(sctx, parent, ExecOptions{Name: "long", Argv: []string{"sh", "-c", "touch started; exec sleep 60"}})
		done <- err
	}()
	waitFor(t, 10*time.Second, "the step's start", func() bool { _, err := os.Stat(started); return err == nil })
	_, err = svc.Fork(ctx, parent, ForkOptions{})
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "step 1 (long") || !strings.Contains(err.Error(), "sandbox kill "+parent.ID+" 1") {
		t.Fatalf("fork while step 1 runs: %v; want refused naming the step and `sandbox kill`", err)
	}
	_, err = svc.Snapshot(ctx, parent, SnapshotOptions{})
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "step 1 (long") {
		t.Fatalf("snapshot while step 1 runs: %v; want refused", err)
	}
	if sns, _ := svc.Store.ListSnapshots(ctx, ""); len(sns) != 0 {
		t.Errorf("a refused snapshot was recorded: %+v", sns)
	}
	stop()
	<-done

	seq, err := svc.ExecDetached(ctx, parent, ExecOptions{Name: "bg", Argv: []string{"sh", "-c", "echo bg > .bg.tmp && mv .bg.tmp bg.txt; exec sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.KillStep(ctx, parent, seq, syscall.SIGTERM)
	waitFor(t, 10*time.Second, "the background step's file", func() bool {
		_, err := os.Stat(filepath.Join(parent.WorktreePath, "bg.txt"))
		return err == nil
	})
	fork, err := svc.Fork(ctx, parent, ForkOptions{})
	if err != nil {
		t.Fatalf("fork while only a background step runs: %v", err)
	}
	if fork.ForkedAtSeq != seq {
		t.Errorf("forked_at_seq %d; want %d, the background step", fork.ForkedAtSeq, seq)
	}
	if b, err := os.ReadFile(filepath.Join(fork.WorktreePath, "bg.txt")); err != nil || string(b) != "bg\n" {
		t.Errorf("the background step's file in the fork: %q %v", b, err)
	}
	if steps, _ := svc.Store.Steps(ctx, fork.RunID); len(steps) != 0 {
		t.Errorf("the fork's run has steps of its own already: %+v (processes are not copied)", steps)
	}
}

// A fork counts as a session, a snapshot against XMODE_SNAPSHOT_MAX: each
// refused (exit 4) before anything is made.
func TestForkAndSnapshotQuota(t *testing.T) {
	ctx := context.Background()
	svc := newService(t, map[string]string{"XMODE_SANDBOX_MAX_OPEN": "1", "XMODE_SNAPSHOT_MAX": "1"})
	parent, err := svc.Create(ctx, CreateOptions{Repo: forkFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, svc, parent, "echo x > x.txt")
	_, err = svc.Fork(ctx, parent, ForkOptions{})
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "XMODE_SANDBOX_MAX_OPEN=1") {
		t.Fatalf("fork over the quota: %v; want refused (exit 4)", err)
	}
	if all, _ := svc.Store.List(ctx, store.Filter{All: true}); len(all) != 1 {
		t.Errorf("a fork over the quota recorded a session: %d sessions", len(all))
	}
	if runs, _ := os.ReadDir(svc.Guard.RunsDir()); len(runs) != 1 {
		t.Errorf("a fork over the quota made a run directory: %d", len(runs))
	}
	if _, err := svc.Snapshot(ctx, parent, SnapshotOptions{Name: "one"}); err != nil {
		t.Fatal(err)
	}
	_, err = svc.Snapshot(ctx, parent, SnapshotOptions{Name: "two"})
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "XMODE_SNAPSHOT_MAX=1") || !strings.Contains(err.Error(), "one") {
		t.Fatalf("a second snapshot over XMODE_SNAPSHOT_MAX=1: %v; want refused naming the first", err)
	}
	if d, _ := os.ReadDir(svc.Guard.SnapshotsDir()); len(d) != 1 {
		t.Errorf("a refused snapshot left a store: %d", len(d))
	}
}

// A snapshot outlives its session: create --from-snapshot starts from it
// after the session ended, checked with git; names are checked and one's
// own; it expires, and the reaper removes it.
func TestSnapshotStopAndCreate(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	svc := newService(t, nil)
	svc.Clock = func() time.Time { return now }
	parent, err := svc.Create(ctx, CreateOptions{Repo: forkFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, svc, parent, agentWork)
	want := stateOf(t, parent.WorktreePath)
	for _, bad := range []string{"123", "-x", "a b", strings.Repeat("n", 64), "../x"} {
		if _, err := svc.Snapshot(ctx, parent, SnapshotOptions{Name: bad}); fail.KindOf(err) != fail.Usage {
			t.Errorf("snapshot named %q: %v; want a usage error", bad, err)
		}
	}
	sn, err := svc.Snapshot(ctx, parent, SnapshotOptions{Name: "before-stop", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Status != store.SnapshotReady || sn.SessionID != parent.ID || sn.Seq != 1 || sn.Image != "" || sn.Bytes <= 0 ||
		!sn.ExpiresAt.Equal(now.Add(time.Hour).UTC().Truncate(time.Millisecond)) {
		t.Fatalf("snapshot %+v", sn)
	}
	if _, err := svc.Snapshot(ctx, parent, SnapshotOptions{Name: "before-stop"}); fail.KindOf(err) != fail.Refused {
		t.Errorf("a second snapshot of the same name: %v; want refused", err)
	}
	if _, err := svc.Stop(ctx, parent, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(parent.WorktreePath); !os.IsNotExist(err) {
		t.Fatalf("the parent's worktree outlived it: %v", err)
	}
	if _, err := svc.Create(ctx, CreateOptions{FromSnapshot: "before-stop", Repo: "/elsewhere"}); fail.KindOf(err) != fail.Usage {
		t.Errorf("--from-snapshot with --repo: %v; want a usage error", err)
	}
	if _, err := svc.Create(ctx, CreateOptions{FromSnapshot: "no-such"}); fail.KindOf(err) != fail.NotFound {
		t.Errorf("--from-snapshot of no snapshot: %v; want not found", err)
	}
	from, err := svc.Create(ctx, CreateOptions{FromSnapshot: "before-stop"})
	if err != nil {
		t.Fatal(err)
	}
	if from.FromSnapshot != sn.ID || from.BaseCommit != parent.BaseCommit {
		t.Errorf("session %+v: want from_snapshot %s on base %s", from, sn.ID, parent.BaseCommit)
	}
	if got := stateOf(t, from.WorktreePath); got.log != want.log || got.diff != want.diff || got.status != want.status {
		t.Errorf("git in the session from the snapshot:\n%+v\nin the parent:\n%+v", got, want)
	}
	byID, err := svc.Create(ctx, CreateOptions{FromSnapshot: strings.TrimPrefix(sn.ID, "snp_")[:6]})
	if err != nil || byID.FromSnapshot != sn.ID {
		t.Errorf("--from-snapshot by an ID prefix: %v %+v", err, byID)
	}

	// It expires: refused, then reaped, store and row.
	now = now.Add(2 * time.Hour)
	if _, err := svc.Create(ctx, CreateOptions{FromSnapshot: "before-stop"}); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "expired") {
		t.Errorf("--from-snapshot of an expired snapshot: %v; want refused", err)
	}
	r := &reaper.Reaper{Cfg: svc.Cfg, Store: svc.Store, Guard: svc.Guard, Now: svc.Clock}
	sum, err := r.Pass(ctx, reaper.PassOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.SnapshotsRemoved != 1 {
		t.Errorf("the pass removed %d snapshots, want 1: %+v", sum.SnapshotsRemoved, sum)
	}
	if _, err := os.Stat(sn.Dir); !os.IsNotExist(err) {
		t.Errorf("the expired snapshot's store outlived it: %v", err)
	}
	if _, err := svc.Store.GetSnapshot(ctx, sn.ID); fail.KindOf(err) != fail.NotFound {
		t.Errorf("the expired snapshot's row: %v", err)
	}
	again, err := svc.Create(ctx, CreateOptions{Repo: from.Repo})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Snapshot(ctx, again, SnapshotOptions{Name: "before-stop"}); err != nil {
		t.Errorf("the name of a reaped snapshot is free again: %v", err)
	}
}

// A session of a project machine forks into another worktree of the
// machine, which carries the parent's commits and goes with the fork.
func TestForkOfAProjectMachineSession(t *testing.T) {
	ctx := context.Background()
	svc := newService(t, map[string]string{"XMODE_PROJECT_MACHINES": "1"})
	parent, err := svc.Create(ctx, CreateOptions{Repo: forkFixture(t), Project: "proj"})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, svc, parent, agentWork)
	want := stateOf(t, parent.WorktreePath)
	fork, err := svc.Fork(ctx, parent, ForkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(fork.WorktreePath, ".git")); err != nil || !strings.HasPrefix(string(b), "gitdir: ") {
		t.Fatalf("the fork's .git: %q %v; want a linked worktree of the machine", b, err)
	}
	if got := stateOf(t, fork.WorktreePath); got.log != want.log || got.diff != want.diff || got.status != want.status {
		t.Errorf("git in the fork:\n%+v\nin the parent:\n%+v", got, want)
	}
	machine := filepath.Join(svc.Guard.Root, "project_machines", "proj", "repo")
	if n := strings.Count(git(t, machine, "worktree", "list"), "\n") + 1; n != 3 {
		t.Errorf("git worktree list in the machine shows %d worktrees, want 3 (its own, the parent's, the fork's)", n)
	}
	if _, err := svc.Stop(ctx, fork, false); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(git(t, machine, "worktree", "list"), "\n") + 1; n != 2 {
		t.Errorf("after the fork's stop, git worktree list shows %d worktrees, want 2", n)
	}

	// The machine moved on by more commits than git's negotiation walks
	// before it gives up (256 without an answer): the base is still what
	// the fetch from the store names as had.
	origin := parent.Repo
	for i := range 300 {
		write(t, filepath.Join(origin, "later.txt"), fmt.Sprintf("%d\n", i))
		git(t, origin, "add", "later.txt")
		git(t, origin, "commit", "-qm", fmt.Sprintf("later %d", i))
	}
	if _, _, err := svc.Machines().Warm(ctx, "proj", "", ""); err != nil {
		t.Fatal(err)
	}
	again, err := svc.Fork(ctx, parent, ForkOptions{})
	if err != nil {
		t.Fatalf("fork after the machine moved on: %v", err)
	}
	if got := stateOf(t, again.WorktreePath); got.log != want.log || got.diff != want.diff || got.status != want.status {
		t.Errorf("git in the fork after the machine moved on:\n%+v\nin the parent:\n%+v", got, want)
	}
}
