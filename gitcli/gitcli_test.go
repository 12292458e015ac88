package gitcli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/gitcli/gittest"
)

// TestMain doubles as an xmode that runs a git for TestDiesWithParent.
func TestMain(m *testing.M) {
	if os.Getenv("GITCLI_TEST_RUN_GIT") == "1" {
		Run(context.Background(), nil, "", "-c", "alias.hang=!sleep 60", "hang")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// git runs the real git for a fixture (gittest.Git).
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return gittest.Git(t, dir, args...)
}

func repo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	git(t, ".", "init", "-q", "-b", "main", dir)
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "one")
	return dir
}

func TestRunReturnsTrimmedStdoutInDir(t *testing.T) {
	dir := repo(t)
	out, err := Run(context.Background(), nil, dir, "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if want := git(t, dir, "rev-parse", "HEAD"); out != want {
		t.Fatalf("Run = %q, want %q", out, want)
	}
}

func TestErrorCarriesArgsAndLastStderrLines(t *testing.T) {
	dir := repo(t)
	_, err := Run(context.Background(), nil, dir, "rev-parse", "--verify", "nosuch")
	var ge *Error
	if !errors.As(err, &ge) {
		t.Fatalf("err = %v (%T), want *Error", err, err)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128 {
		t.Fatalf("err does not unwrap to git's exit 128: %v", err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "git rev-parse --verify nosuch: exit status 128: ") || !strings.Contains(msg, "Needed a single revision") {
		t.Fatalf("message %q", msg)
	}
}

func TestLastLines(t *testing.T) {
	in := "one\ntwo\nReceiving objects:  50% (1/2)\rReceiving objects: 100% (2/2), done.\n\nthree\nfour\nfive\nsix\n"
	if got := lastLines(in, 5); got != "two; three; four; five; six" {
		t.Fatalf("lastLines = %q", got)
	}
	if got := lastLines("a\nb\n", 5); got != "a; b" {
		t.Fatalf("lastLines = %q", got)
	}
}

// git's stderr reaches the progress writer while git runs: the alias
// waits on a FIFO that the test opens only once progress has its line.
func TestProgressGetsStderrLive(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	progress := &lineSeen{want: "to-progress\n", seen: make(chan struct{})}
	go func() {
		<-progress.seen
		if f, err := os.OpenFile(gate, os.O_WRONLY, 0); err == nil {
			f.WriteString("go\n")
			f.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := Run(ctx, progress, "", "-c", "alias.say=!echo to-progress >&2; read x < "+gate, "say"); err != nil {
		t.Fatalf("git ran until it was stopped: progress did not get its stderr while it ran (%v)", err)
	}
}

// lineSeen is a writer that closes seen once it has been given want.
type lineSeen struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func (w *lineSeen) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.buf.String(), w.want)
	w.buf.Write(p)
	if !had && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
	}
	return len(p), nil
}

// Without a progress writer nobody can answer a prompt: git must not ask.
func TestNoPromptWithoutProgress(t *testing.T) {
	t.Setenv("GIT_TERMINAL_PROMPT", "1")
	show := []string{"-c", `alias.prompt=!echo "p=$GIT_TERMINAL_PROMPT"`, "prompt"}
	if out, err := Run(context.Background(), nil, "", show...); err != nil || out != "p=0" {
		t.Fatalf("without progress: %q %v", out, err)
	}
	if out, err := Run(context.Background(), &bytes.Buffer{}, "", show...); err != nil || out != "p=1" {
		t.Fatalf("with progress: %q %v", out, err)
	}
}

// A GIT_DIR (or the like) in xmode's environment must not point git at
// another repository than dir.
func TestRelocatingVariablesDropped(t *testing.T) {
	dir, other := repo(t), repo(t)
	t.Setenv("GIT_DIR", filepath.Join(other, ".git"))
	t.Setenv("GIT_WORK_TREE", other)
	out, err := Run(context.Background(), nil, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := filepath.EvalSymlinks(out); got != mustEval(t, dir) {
		t.Fatalf("toplevel %q, want %q", out, dir)
	}
}

func mustEval(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The repository's own hooks and fsmonitor are commands a sandboxed step
// could have written: xmode's git never runs them.
func TestHooksAndFsmonitorDisabled(t *testing.T) {
	dir := repo(t)
	marker := filepath.Join(t.TempDir(), "ran")
	hooks := filepath.Join(t.TempDir(), "hooks")
	os.MkdirAll(hooks, 0o755)
	script := "#!/bin/sh\necho $0 >> " + marker + "\n"
	if err := os.WriteFile(filepath.Join(hooks, "post-checkout"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	fsmon := filepath.Join(t.TempDir(), "fsmonitor")
	if err := os.WriteFile(fsmon, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "config", "core.hooksPath", hooks)
	git(t, dir, "config", "core.fsmonitor", fsmon)
	if _, err := Run(context.Background(), nil, dir, "checkout", "--quiet", "--detach", "HEAD"); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), nil, dir, "status", "--porcelain"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("xmode's git ran %s", b)
	}
	// The control: git without the safety runs them, so the test can fail.
	git(t, dir, "checkout", "--quiet", "--detach", "HEAD")
	if b, _ := os.ReadFile(marker); !strings.Contains(string(b), "post-checkout") {
		t.Fatalf("the hook does not run even without the safety: %q", b)
	}
}

// Cancelling sends git SIGTERM (not SIGKILL), so git can clean up: here git
// passes the signal to its alias, whose trap leaves a mark.
func TestCancelTerminatesGit(t *testing.T) {
	dir := t.TempDir()
	marker, ready := filepath.Join(dir, "terminated"), filepath.Join(dir, "ready")
	ctx, cancel := context.WithCancel(context.Background())
	alias := `alias.hang=!sleep 60 & trap "kill $!; echo term > ` + marker + `; exit 143" TERM; echo $PPID > ` + ready + `.tmp; mv ` + ready + `.tmp ` + ready + `; wait`
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := Run(ctx, nil, "", "-c", alias, "hang")
		done <- err
	}()
	// Cancel once the trap is set and git has its handler for TERM (it
	// installs the one that passes the signal on to the alias's shell just
	// after forking it: on a loaded machine the shell can get to its trap
	// first), not after a guessed delay.
	for i := 0; ; i++ {
		if b, err := os.ReadFile(ready); err == nil && catchesTERM(t, strings.TrimSpace(string(b))) {
			break
		}
		if i == 1000 {
			cancel()
			t.Fatal("git's alias never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start = time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(waitDelay + 5*time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Run took %v after cancel: git did not end on SIGTERM", d)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("git's child never got SIGTERM: %v", err)
	}
}

// git dies with the xmode that started it, even when xmode is SIGKILLed.
func TestDiesWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig and /proc are Linux")
	}
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), "GITCLI_TEST_RUN_GIT=1")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	gitPid := 0
	for i := 0; i < 1000 && gitPid == 0; i++ {
		time.Sleep(5 * time.Millisecond)
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(c.Process.Pid) + "/task/*/children")
		for _, f := range tasks {
			if b, _ := os.ReadFile(f); len(strings.Fields(string(b))) > 0 {
				gitPid, _ = strconv.Atoi(strings.Fields(string(b))[0])
			}
		}
	}
	if gitPid == 0 {
		c.Process.Kill()
		t.Fatal("git never started")
	}
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	for i := 0; i < 300; i++ {
		if err := syscall.Kill(gitPid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(gitPid) + "/status"); strings.Contains(string(b), "State:\tZ") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(gitPid, syscall.SIGKILL)
	t.Fatalf("git %d outlived its killed parent", gitPid)
}

func TestGitMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Run(context.Background(), nil, "", "version")
	var ge *Error
	if err == nil || errors.As(err, &ge) || !strings.Contains(err.Error(), "run git version") {
		t.Fatalf("err = %v", err)
	}
}

// xmode's git reads no configuration xmode does not own: a filter driver
// (or fsmonitor, or textconv) defined in the user's or the system's config
// is not run by a clone and checkout of a repository whose .gitattributes
// asks for it, and GIT_CONFIG_* in the environment add nothing.
func TestRunsNothingOthersConfigured(t *testing.T) {
	dir := t.TempDir()
	src := repo(t)
	os.WriteFile(filepath.Join(src, ".gitattributes"), []byte("* filter=evil diff=evil\n"), 0o644)
	git(t, src, "add", ".")
	git(t, src, "commit", "-qm", "attrs")
	marker := filepath.Join(dir, "marker")
	planted := "[filter \"evil\"]\n\tsmudge = touch " + marker + "-smudge; cat\n\tclean = touch " + marker + "-clean; cat\n" +
		"[diff \"evil\"]\n\ttextconv = touch " + marker + "-textconv; cat\n" +
		"[core]\n\tfsmonitor = touch " + marker + "-fsmonitor\n"
	global := filepath.Join(dir, "global")
	system := filepath.Join(dir, "system")
	for _, f := range []string{global, system} {
		if err := os.WriteFile(f, []byte(planted), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GIT_CONFIG_GLOBAL", global)
	t.Setenv("GIT_CONFIG_SYSTEM", system)
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "filter.evil.smudge")
	t.Setenv("GIT_CONFIG_VALUE_0", "touch "+marker+"-env; cat")
	ctx := context.Background()
	dst := filepath.Join(dir, "clone")
	if _, err := Run(ctx, nil, "", "clone", "-q", "--no-local", "--", src, dst); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dst, "README"), []byte("changed\n"), 0o644)
	for _, args := range [][]string{{"status", "--porcelain"}, {"diff"}, {"add", "-A"}, {"checkout", "-q", "HEAD", "--", "."}} {
		if _, err := Run(ctx, nil, dst, args...); err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
	}
	if m, _ := filepath.Glob(marker + "*"); len(m) > 0 {
		t.Fatalf("xmode's git ran what others configured: %v", m)
	}
	// the planted config is live for a plain git (the test is not vacuous)
	c := exec.Command("git", "-C", dst, "status", "--porcelain")
	c.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+global)
	c.Run()
	if m, _ := filepath.Glob(marker + "*"); len(m) == 0 {
		t.Fatal("a plain git ran none of the planted commands either: the test proves nothing")
	}
}

// The ext:: transport runs a command: never through xmode.
func TestExtTransportRefused(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ext")
	_, err := Run(context.Background(), nil, "", "ls-remote", "ext::sh -c touch% "+marker)
	if err == nil {
		t.Fatal("ls-remote over ext:: succeeded")
	}
	if _, serr := os.Stat(marker); serr == nil {
		t.Fatal("the ext:: transport ran its command")
	}
}

// catchesTERM reports whether process pid has a handler for SIGTERM (its
// SigCgt mask in /proc/PID/status).
func catchesTERM(t *testing.T, pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("git (pid %s) is gone before the cancel: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if mask, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			if err != nil {
				t.Fatalf("SigCgt of %s: %v", pid, err)
			}
			return m&(1<<(uint(syscall.SIGTERM)-1)) != 0
		}
	}
	t.Fatalf("no SigCgt in /proc/%s/status", pid)
	return false
}
