package fsguard

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/testenv"
)

func newGuard(t *testing.T) (Guard, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	if err := os.MkdirAll(filepath.Join(root, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Guard{Root: root}, base
}

func TestRemoveWorktreeStaysInside(t *testing.T) {
	g, base := newGuard(t)
	outside := filepath.Join(base, "outside")
	os.MkdirAll(outside, 0o755)
	precious := filepath.Join(outside, "precious.txt")
	os.WriteFile(precious, []byte("keep"), 0o644)

	run := "run_abcdefgh"
	wt, _ := g.Worktree(run)
	os.MkdirAll(filepath.Join(wt, "sub"), 0o755)
	os.Symlink(outside, filepath.Join(wt, "link-dir"))
	os.Symlink(precious, filepath.Join(wt, "sub", "link-file"))
	steps := filepath.Join(filepath.Dir(wt), "steps", "0001-x")
	os.MkdirAll(steps, 0o755)
	os.WriteFile(filepath.Join(steps, "stdout.log"), []byte("evidence"), 0o644)

	removed, err := g.RemoveWorktree(run)
	if err != nil || !removed {
		t.Fatalf("RemoveWorktree: %v %v", removed, err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatal("a file outside the storage root was deleted")
	}
	if _, err := os.Stat(filepath.Join(steps, "stdout.log")); err != nil {
		t.Fatal("evidence was deleted")
	}
	if _, err := os.Lstat(wt); !os.IsNotExist(err) {
		t.Fatal("worktree still there")
	}
	if removed, err := g.RemoveWorktree(run); err != nil || removed {
		t.Fatalf("second removal: %v %v", removed, err)
	}
}

// A run with no evidence (a create that failed) leaves no empty directory
// behind, nor its object store alone (the create seeded it); a run with
// evidence keeps its directory, the evidence and its object store.
func TestRemoveWorktreeRemovesEmptyRun(t *testing.T) {
	g, _ := newGuard(t)
	bare, seeded, withSteps := "run_emptyrun", "run_seededrn", "run_hassteps"
	for _, run := range []string{bare, seeded, withSteps} {
		wt, _ := g.Worktree(run)
		if err := os.MkdirAll(filepath.Join(wt, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runDir := func(run string) string { d, _ := g.RunDir(run); return d }
	if err := os.MkdirAll(filepath.Join(runDir(withSteps), "steps", "0001-x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{seeded, withSteps} {
		if err := os.MkdirAll(filepath.Join(runDir(run), "objects.git", "objects", "ab"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(runDir(run), "objects.git", "xmode-stat-cache"), []byte("XSC1"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, run := range []string{bare, seeded, withSteps} {
		if removed, err := g.RemoveWorktree(run); err != nil || !removed {
			t.Fatalf("RemoveWorktree(%s): %v %v", run, removed, err)
		}
	}
	for _, run := range []string{bare, seeded} {
		if _, err := os.Lstat(runDir(run)); !os.IsNotExist(err) {
			t.Errorf("the run directory of %s is still there: %v", run, err)
		}
	}
	if _, err := os.Stat(filepath.Join(runDir(withSteps), "steps", "0001-x")); err != nil {
		t.Errorf("a run's evidence went with its worktree: %v", err)
	}
	if _, err := os.Stat(filepath.Join(runDir(withSteps), "objects.git", "xmode-stat-cache")); err != nil {
		t.Errorf("the object store of a run with evidence went with its worktree: %v", err)
	}
	// A run whose worktree never existed (failed before the clone).
	if err := os.MkdirAll(runDir("run_noworktr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if removed, err := g.RemoveWorktree("run_noworktr"); err != nil || removed {
		t.Fatalf("RemoveWorktree without a worktree: %v %v", removed, err)
	}
	if _, err := os.Lstat(runDir("run_noworktr")); !os.IsNotExist(err) {
		t.Errorf("the empty run directory is still there: %v", err)
	}
}

func TestRemoveWorktreeReplacedBySymlink(t *testing.T) {
	g, base := newGuard(t)
	outside := filepath.Join(base, "outside")
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "f"), []byte("keep"), 0o644)
	run := "run_abcdefgh"
	wt, _ := g.Worktree(run)
	os.MkdirAll(filepath.Dir(wt), 0o755)
	if err := os.Symlink(outside, wt); err != nil {
		t.Fatal(err)
	}
	if _, err := g.RemoveWorktree(run); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "f")); err != nil {
		t.Fatal("followed the worktree symlink out of the root")
	}
	// the run directory itself replaced by a symlink: refused, nothing outside touched
	os.RemoveAll(filepath.Dir(wt))
	os.MkdirAll(filepath.Join(outside, "worktree"), 0o755)
	os.Symlink(outside, filepath.Dir(wt))
	if _, err := g.RemoveWorktree(run); err == nil {
		t.Log("removal through a symlinked run dir reported no error")
	}
	if _, err := os.Stat(filepath.Join(outside, "worktree")); err != nil {
		t.Fatal("removed a directory outside the root through a symlinked run directory")
	}
}

func TestRunIDsCannotFormPaths(t *testing.T) {
	g, _ := newGuard(t)
	for _, id := range []string{"", "run_", "../..", "run_../../x", "run_ABCDEFGH", "run_abcdefg/", "/", "run_abcdefgh/../../"} {
		if _, err := g.RunDir(id); fail.KindOf(err) != fail.Refused {
			t.Errorf("RunDir(%q): %v", id, err)
		}
	}
}

func TestCheckWorktreeRefusesTamperedRows(t *testing.T) {
	g, _ := newGuard(t)
	run := "run_abcdefgh"
	want, _ := g.Worktree(run)
	if got, err := g.CheckWorktree(run, want); err != nil || got != want {
		t.Fatal(got, err)
	}
	for _, claim := range []string{"/", os.Getenv("HOME"), want + "/../..", "/etc"} {
		if _, err := g.CheckWorktree(run, claim); err == nil {
			t.Errorf("claimed %q accepted", claim)
		}
	}
}

func TestResolveWorkdir(t *testing.T) {
	g, base := newGuard(t)
	wt, _ := g.Worktree("run_abcdefgh")
	os.MkdirAll(filepath.Join(wt, "a", "b"), 0o755)
	os.Symlink(base, filepath.Join(wt, "out"))
	os.Symlink("a/b", filepath.Join(wt, "in"))
	if d, err := ResolveWorkdir(wt, "a/b"); err != nil || d != filepath.Join(wt, "a", "b") {
		t.Errorf("a/b: %q %v", d, err)
	}
	if _, err := ResolveWorkdir(wt, "in"); err != nil {
		t.Errorf("symlink inside the worktree refused: %v", err)
	}
	for _, bad := range []string{"..", "../x", "/etc", "out", "a/../../..", "missing"} {
		if _, err := ResolveWorkdir(wt, bad); fail.KindOf(err) != fail.Usage {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func FuzzResolveWorkdir(f *testing.F) {
	base := f.TempDir()
	wt := filepath.Join(base, "wt")
	os.MkdirAll(filepath.Join(wt, "a", "b"), 0o755)
	os.Symlink(base, filepath.Join(wt, "out"))
	for _, s := range []string{"a", "a/b", "..", "out", "a/../..", "/", "./a/./b/", "out/wt"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		d, err := ResolveWorkdir(wt, rel)
		if err != nil {
			return
		}
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			t.Fatalf("%q → %q does not resolve", rel, d)
		}
		if real != wt && !strings.HasPrefix(real, wt+"/") {
			t.Fatalf("%q escaped to %q", rel, real)
		}
	})
}

func FuzzValidID(f *testing.F) {
	for _, s := range []string{"run_abcdefgh", "run_../..", "run_", "run_abcdefgh/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidID("run_", id) && (strings.ContainsAny(id, "/.\\\x00") || filepath.Base(id) != id) {
			t.Fatalf("%q accepted", id)
		}
	})
}

// AllowsSetuid tells a nosuid mount from one that honours setuid bits.
func TestAllowsSetuid(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.Skip(t, "mounting a nosuid tmpfs needs root")
	}
	dir := t.TempDir()
	for _, opts := range []string{"nosuid", "suid"} {
		mnt := filepath.Join(dir, opts)
		os.Mkdir(mnt, 0o755)
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts+",size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
			testenv.Skip(t, "mount: %v %s", err, out)
		}
		defer exec.Command("umount", "-l", mnt).Run()
		got, err := AllowsSetuid(mnt)
		if err != nil || got != (opts == "suid") {
			t.Errorf("AllowsSetuid(%s mount) = %v, %v", opts, got, err)
		}
	}
}
