package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/gitcli/gittest"
)

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

// fixture is a repository whose HEAD is trunk (not main):
//
//	c1 "one"  ← tags v1 (annotated), lw (lightweight), both (annotated)
//	c2 "two"  ← trunk (HEAD)
//	c3 "feat" ← feature, both (a branch named like a tag), on c1
type fixture struct {
	dir        string
	c1, c2, c3 string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "origin")
	git(t, ".", "init", "-q", "-b", "trunk", dir)
	write(t, filepath.Join(dir, "README"), "one\n")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "one")
	git(t, dir, "tag", "-a", "-m", "v1", "v1")
	git(t, dir, "tag", "lw")
	git(t, dir, "tag", "-a", "-m", "both", "both")
	git(t, dir, "checkout", "-q", "-b", "feature")
	write(t, filepath.Join(dir, "README"), "feat\n")
	git(t, dir, "commit", "-qam", "feat")
	git(t, dir, "branch", "both")
	git(t, dir, "checkout", "-q", "trunk")
	write(t, filepath.Join(dir, "README"), "two\n")
	git(t, dir, "commit", "-qam", "two")
	return fixture{
		dir: dir,
		c1:  git(t, dir, "rev-parse", "v1^{commit}"),
		c2:  git(t, dir, "rev-parse", "trunk"),
		c3:  git(t, dir, "rev-parse", "feature"),
	}
}

func TestResolveAndCloneRefs(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for _, tc := range []struct {
		name, repo, ref string
		want            target
		short           string // what `sandbox show` records without --ref
		commit, readme  string
		shallow         bool
	}{
		{"default is the remote's HEAD, not main", f.dir, "", target{ref: "refs/heads/trunk"}, "trunk", f.c2, "two", true},
		{"HEAD", f.dir, "HEAD", target{ref: "refs/heads/trunk"}, "trunk", f.c2, "two", true},
		{"branch", f.dir, "feature", target{ref: "refs/heads/feature"}, "feature", f.c3, "feat", true},
		{"branch over file://", "file://" + f.dir, "feature", target{ref: "refs/heads/feature"}, "feature", f.c3, "feat", true},
		{"full branch name", f.dir, "refs/heads/feature", target{ref: "refs/heads/feature"}, "feature", f.c3, "feat", true},
		{"annotated tag", f.dir, "v1", target{ref: "refs/tags/v1"}, "v1", f.c1, "one", true},
		{"lightweight tag", f.dir, "lw", target{ref: "refs/tags/lw"}, "lw", f.c1, "one", true},
		{"branch wins over a tag of the same name", f.dir, "both", target{ref: "refs/heads/both"}, "both", f.c3, "feat", true},
		{"tag named like a branch", f.dir, "refs/tags/both", target{hash: f.c1}, "", f.c1, "one", false},
		{"full commit", f.dir, f.c1, target{hash: f.c1}, "", f.c1, "one", false},
		{"abbreviated commit, any case", f.dir, strings.ToUpper(f.c3[:9]), target{hash: f.c3[:9]}, "", f.c3, "feat", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tgt, err := resolveRef(ctx, tc.repo, tc.ref)
			if err != nil {
				t.Fatal(err)
			}
			if tgt != tc.want || tgt.short() != tc.short {
				t.Fatalf("resolveRef(%q) = %+v (short %q), want %+v (short %q)", tc.ref, tgt, tgt.short(), tc.want, tc.short)
			}
			dir := filepath.Join(t.TempDir(), "worktree")
			commit, err := clone(ctx, tc.repo, tgt, dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if commit != tc.commit || git(t, dir, "rev-parse", "HEAD") != tc.commit {
				t.Fatalf("clone = %s, HEAD %s, want %s", commit, git(t, dir, "rev-parse", "HEAD"), tc.commit)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "README")); strings.TrimSpace(string(b)) != tc.readme {
				t.Fatalf("README = %q, want %q", b, tc.readme)
			}
			if st := git(t, dir, "status", "--porcelain"); st != "" {
				t.Fatalf("checkout is not clean: %s", st)
			}
			// A local path is cloned like file:// (--no-local): shallow.
			if got := git(t, dir, "rev-parse", "--is-shallow-repository"); got != strconv.FormatBool(tc.shallow) {
				t.Fatalf("shallow = %s, want %v", got, tc.shallow)
			}
			if tc.shallow {
				if tags := git(t, dir, "tag"); tags != "" && tgt.ref != "refs/tags/"+tags {
					t.Fatalf("a shallow clone brought tags %q", tags)
				}
			}
		})
	}
}

// The worktree's objects are its own: a step writing them cannot reach the
// user's repository through hard links.
func TestCloneOfLocalPathHasNoHardLinks(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(t.TempDir(), "worktree")
	if _, err := clone(context.Background(), f.dir, target{hash: f.c1}, dir, nil); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(filepath.Join(dir, ".git", "objects"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Sys().(*syscall.Stat_t).Nlink > 1 {
			t.Errorf("%s is hard-linked", p)
		}
		return nil
	})
}

func TestResolveRefDetachedHead(t *testing.T) {
	f := newFixture(t)
	git(t, f.dir, "checkout", "-q", "--detach", f.c3)
	tgt, err := resolveRef(context.Background(), f.dir, "")
	if err != nil || tgt != (target{hash: f.c3}) {
		t.Fatalf("resolveRef = %+v, %v; want the detached commit %s", tgt, err, f.c3)
	}
}

func TestResolveRefUnknownIsUsage(t *testing.T) {
	f := newFixture(t)
	for _, ref := range []string{"nope", "v1^{}", "refs/tags/nope", "-x", "zzzz"} {
		_, err := resolveRef(context.Background(), f.dir, ref)
		if fail.KindOf(err) != fail.Usage || fail.ExitCode(err) != 2 || !strings.Contains(err.Error(), "no such branch, tag or commit") {
			t.Errorf("resolveRef(%q) = %v (kind %v), want a usage error", ref, err, fail.KindOf(err))
		}
	}
}

func TestResolveRefUnreadableOrEmpty(t *testing.T) {
	notRepo := t.TempDir()
	_, err := resolveRef(context.Background(), notRepo, "")
	if fail.KindOf(err) != fail.Failed || !strings.Contains(err.Error(), "cannot read repository "+notRepo+": ") ||
		!strings.Contains(err.Error(), "does not appear to be a git repository") {
		t.Fatalf("not a repository: %v (kind %v)", err, fail.KindOf(err))
	}
	empty := filepath.Join(t.TempDir(), "empty")
	git(t, ".", "init", "-q", "-b", "main", empty)
	for _, ref := range []string{"", "main"} {
		_, err = resolveRef(context.Background(), empty, ref)
		if fail.KindOf(err) != fail.Usage || !strings.HasSuffix(err.Error(), " has no commits: commit something first") {
			t.Fatalf("empty repository, ref %q: %v (kind %v)", ref, err, fail.KindOf(err))
		}
	}
	// Commits, but HEAD names a branch that does not exist.
	git(t, empty, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "x")
	git(t, empty, "symbolic-ref", "HEAD", "refs/heads/unborn")
	_, err = resolveRef(context.Background(), empty, "")
	if fail.KindOf(err) != fail.Failed || !strings.Contains(err.Error(), "has no HEAD (empty?)") {
		t.Fatalf("HEAD on an unborn branch: %v (kind %v)", err, fail.KindOf(err))
	}
}

// A repository that git could read as an option is refused before git runs.
func TestRepoStartingWithDashRefused(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "pwned")
	repo := "--upload-pack=touch " + marker + ";false"
	if _, err := resolveRef(context.Background(), repo, ""); fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "cannot start with '-'") {
		t.Fatalf("resolveRef: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "worktree")
	if _, err := clone(context.Background(), repo, target{ref: "refs/heads/main"}, dir, nil); fail.KindOf(err) != fail.Usage {
		t.Fatalf("clone: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the repository ran as an option")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("clone created the directory")
	}
}

// A commit the repository lacks is the same mistake as a missing branch: a
// usage error (exit 2), found by the clone for a remote repository, and
// before anything is written for a local one (resolveRef).
func TestCloneCommitNotFound(t *testing.T) {
	f := newFixture(t)
	for _, h := range []string{"deadbeef", strings.Repeat("ab", 20)} {
		_, err := clone(context.Background(), f.dir, target{hash: h}, filepath.Join(t.TempDir(), "w"), nil)
		if fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), `--ref "`+h+`": no such branch, tag or commit in `+f.dir) {
			t.Errorf("clone %s: %v (kind %v)", h, err, fail.KindOf(err))
		}
		_, err = resolveRef(context.Background(), f.dir, h)
		if fail.KindOf(err) != fail.Usage {
			t.Errorf("resolveRef %s in a local repository: %v (kind %v), want a usage error before any clone", h, err, fail.KindOf(err))
			t.Errorf("clone %s: %v (kind %v)", h, err, fail.KindOf(err))
		}
	}
}

func TestCloneFailureSaysWhy(t *testing.T) {
	f := newFixture(t)
	_, err := clone(context.Background(), f.dir, target{ref: "refs/heads/gone"}, filepath.Join(t.TempDir(), "w"), nil)
	if err == nil || !strings.Contains(err.Error(), "git clone "+f.dir+": ") || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("clone of a missing branch: %v", err)
	}
}

func TestCloneProgressOnlyWhenAsked(t *testing.T) {
	f := newFixture(t)
	var progress bytes.Buffer
	if _, err := clone(context.Background(), f.dir, target{ref: "refs/heads/trunk"}, filepath.Join(t.TempDir(), "w"), &progress); err != nil {
		t.Fatal(err)
	}
	// git's progress, drawn as bars (internal/progress), not git's lines.
	if got := progress.String(); !strings.Contains(got, "Receiving objects 100%") || strings.Contains(got, "Cloning into") {
		t.Fatalf("progress = %q", got)
	}
}

// Ctrl-C during a clone ends git (with SIGTERM, so git removes what it
// wrote) and returns context.Canceled. The remote is an ssh
// URL whose "ssh" never answers, and ends, like ssh, when git closes its
// input.
func TestCloneCancelKillsGit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds git's process in /proc")
	}
	tmp := t.TempDir()
	fakeSSH, called := filepath.Join(tmp, "ssh"), filepath.Join(tmp, "called")
	// git starts its transport once it has made the clone's directories.
	write(t, fakeSSH, "#!/bin/sh\ntouch "+called+"\ncat >/dev/null\n")
	os.Chmod(fakeSSH, 0o755)
	t.Setenv("GIT_SSH_COMMAND", fakeSSH)
	t.Setenv("GIT_SSH_VARIANT", "ssh")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := filepath.Join(t.TempDir(), "worktree")
	done := make(chan error, 1)
	go func() {
		_, err := clone(ctx, "ssh://example.invalid/repo", target{ref: "refs/heads/main"}, dir, nil)
		done <- err
	}()
	gitPid := waitChildNamed(t, "git")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(called); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("git never ran its ssh")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("clone did not return within 5s of cancel")
	}
	if err := syscall.Kill(gitPid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("git %d still exists after clone returned: %v", gitPid, err)
	}
	// git empties the directory xmode made for it (the reaper removes it).
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("the half-made clone is still there (%v, %v): git was not given the chance to clean up", entries, err)
	}
}

// waitChildNamed returns the pid of this process's child called name.
func waitChildNamed(t *testing.T, name string) int {
	t.Helper()
	for range 1000 {
		tasks, _ := filepath.Glob("/proc/self/task/*/children")
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, p := range strings.Fields(string(b)) {
				if comm, _ := os.ReadFile("/proc/" + p + "/comm"); strings.TrimSpace(string(comm)) == name {
					pid, _ := strconv.Atoi(p)
					return pid
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no %s child started", name)
	return 0
}
