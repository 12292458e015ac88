package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/internal/testenv"
)

// runQuick runs xmode and fails the test when it has not ended within
// limit (a FIFO nobody writes used to block `pipeline run` for ever).
func runQuick(t *testing.T, c *exec.Cmd, limit time.Duration) (int, string) {
	t.Helper()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String()
	case <-time.After(limit):
		c.Process.Kill()
		<-done
		t.Fatalf("%v still running after %s:\n%s", c.Args[1:], limit, out.String())
		return 0, ""
	}
}

// A plan that is not a regular file — a FIFO nobody writes, a directory, a
// device, a link in the worktree — is refused at once with exit 2 saying
// what it is, by `pipeline run` and `xmode run`, given by -f or found in
// the worktree.
func TestPlanNotARegularFile(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "plan.fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	wts, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree"))
	if len(wts) != 1 {
		t.Fatalf("worktrees: %v", wts)
	}
	plan := filepath.Join(wts[0], "xmode.yaml")
	check := func(what, want string, args ...string) {
		t.Helper()
		code, out := runQuick(t, xmode(t, root, args...), 20*time.Second)
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("%s: exit %d, want 2 saying %q:\n%s", what, code, want, out)
		}
	}
	check("-f FIFO", "-f "+fifo+" is a FIFO: a plan must be a regular file", "pipeline", "run", id, "-f", fifo)
	check("-f directory", "-f "+dir+" is a directory", "pipeline", "run", id, "-f", dir)
	check("-f /dev/null", "-f /dev/null is a character device", "pipeline", "run", id, "-f", "/dev/null")

	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	loop := func(what, want string, args ...string) {
		t.Helper()
		c := xmode(t, root, append([]string{"run", "--repo", repo, "--objective", "x", "--agent", "command"}, args...)...)
		c.Env = append(c.Env, "XMODE_AGENT_COMMAND_TEMPLATE=true")
		code, out := runQuick(t, c, 20*time.Second)
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("xmode run %s: exit %d, want 2 saying %q:\n%s", what, code, want, out)
		}
	}
	loop("-f FIFO", "-f "+fifo+" is a FIFO", "-f", fifo)
	loop("-f directory", "-f "+dir+" is a directory", "-f", dir)

	// In the worktree, where a step may have put it.
	if err := unix.Mkfifo(plan, 0o644); err != nil {
		t.Fatal(err)
	}
	check("xmode.yaml FIFO", "xmode.yaml in the worktree is a FIFO", "pipeline", "run", id)
	os.Remove(plan)
	if err := os.Mkdir(plan, 0o755); err != nil {
		t.Fatal(err)
	}
	check("xmode.yaml directory", "xmode.yaml in the worktree is a directory", "pipeline", "run", id)
	os.Remove(plan)
	// A link, even one that stays in the worktree, is not followed.
	os.WriteFile(filepath.Join(wts[0], "real.yaml"), []byte("steps:\n  - name: a\n    run: [true]\n"), 0o644)
	if err := os.Symlink("real.yaml", plan); err != nil {
		t.Fatal(err)
	}
	check("xmode.yaml link", "xmode.yaml in the worktree is a symlink", "pipeline", "run", id)
	os.Remove(plan)
	if err := unix.Mknod(plan, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
		testenv.Skip(t, "mknod of a device in the worktree needs root: %v", err)
	}
	check("xmode.yaml device", "xmode.yaml in the worktree is a character device", "pipeline", "run", id)
	os.Remove(plan)

	// A repository whose xmode.yaml is a link: `xmode run` refuses it before
	// any step.
	if err := os.Symlink("README", filepath.Join(repo, "xmode.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, a := range [][]string{{"add", "xmode.yaml"}, {"commit", "-qm", "linked plan"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, a...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", a, err, out)
		}
	}
	loop("xmode.yaml link", "xmode.yaml in the worktree is a symlink")
}

// What can still take long in `pipeline run` — its steps — ends promptly
// on SIGTERM: the step gets the signal, the command exits 143.
func TestPipelineRunHonoursSIGTERM(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	plan := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(plan, []byte("steps:\n  - name: slow\n    run: 'echo started > started; sleep 300'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := xmode(t, root, "pipeline", "run", id, "-f", plan)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(root, "runs", "*", "worktree", "started"))
	start := time.Now()
	c.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		c.Process.Kill()
		t.Fatalf("pipeline run ignored SIGTERM:\n%s", out.String())
	}
	took := time.Since(start)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 143 {
		t.Fatalf("exit %v, want 143:\n%s", err, out.String())
	}
	if took > 15*time.Second {
		t.Fatalf("pipeline run took %s to end after SIGTERM", took)
	}
}

// A directory xmode reads from a worktree is opened the way its files are:
// a FIFO in place of .git/objects/pack does not hang `sandbox diff` or
// `cr create` (the objects are read without the packs), and a FIFO in
// place of the worktree itself makes `pipeline run`, `sandbox cp` and
// `sandbox diff` fail at once.
func TestWorktreeDirectoryNotADirectory(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	quick := func(want int, args ...string) string {
		t.Helper()
		code, out := runQuick(t, xmode(t, root, args...), 20*time.Second)
		if code != want {
			t.Fatalf("%v: exit %d, want %d:\n%s", args, code, want, out)
		}
		return out
	}
	quick(0, "sandbox", "exec", id, "--", "sh", "-c", "echo more >> README; rm -rf .git/objects/pack && mkfifo .git/objects/pack")
	if out := quick(0, "sandbox", "diff", id); !strings.Contains(out, "+more") {
		t.Fatalf("diff:\n%s", out)
	}
	quick(0, "cr", "create", id)

	wts, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree"))
	if len(wts) != 1 {
		t.Fatalf("worktrees: %v", wts)
	}
	if err := os.Rename(wts[0], wts[0]+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(wts[0], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"pipeline", "run", id}, {"sandbox", "cp", id + ":README", t.TempDir()}, {"sandbox", "diff", id}} {
		code, out := runQuick(t, xmode(t, root, args...), 20*time.Second)
		if code == 0 || !strings.Contains(out, "is a FIFO") && !strings.Contains(out, "is not a directory") {
			t.Errorf("%v with a FIFO for the worktree: exit %d, want a failure saying so:\n%s", args, code, out)
		}
	}
	os.Remove(wts[0])
	os.Rename(wts[0]+".moved", wts[0])
}
