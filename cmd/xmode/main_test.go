package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/xmode/xmode/cmd"
	"github.com/xmode/xmode/codexcloud/codexcloudtest"
	"github.com/xmode/xmode/internal/kubetest"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// TestMain makes this test binary double as xmode: for testscript's scripts
// (the "xmode" command on their PATH) and, with XMODE_TEST_AS_MAIN=1, for Go
// tests that start it as a real process.
func TestMain(m *testing.M) {
	// Started as the Codex stand-in by an xmode that is this binary too:
	// the inherited XMODE_TEST_AS_MAIN must not make it xmode.
	codexcloudtest.Dispatch()
	if os.Getenv("XMODE_TEST_AS_MAIN") == "1" {
		os.Exit(testMain())
	}
	testscript.Main(stopDaemon{m}, map[string]func(){
		"xmode": func() { os.Exit(testMain()) },
		// The Codex CLI stand-in (codexcloudtest) and its control command.
		"codex":     func() { os.Exit(codexcloudtest.Main()) },
		"fakecodex": func() { os.Exit(codexcloudtest.Ctl()) },
	})
}

// testMain is xmode's main, on the test clock.
func testMain() int {
	if file := os.Getenv(clockEnv); file != "" {
		cmd.SetClock(func() time.Time { return time.Now().Add(clockOffset(file)) })
	}
	return cmd.Main()
}

// clockEnv names the file that says how far a test has moved xmode's clock
// ahead of the wall clock (a Go duration; no file: not at all), so that
// TTLs and expiry are tested without sleeping. Only this test binary reads
// it (through cmd.SetClock): the xmode binary has no such setting. Scripts
// move it with `advance`, Go tests with advanceClock; every xmode started
// after (or running during) the move sees it.
const clockEnv = "XMODE_TEST_CLOCK"

// clockOffset reads the clock file on every call, so that a command still
// running (a step, a watching poller) moves on with the test's clock.
func clockOffset(file string) time.Duration {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		panic(fmt.Sprintf("the test clock: %v", err))
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		panic(fmt.Sprintf("the test clock %s: %v", file, err))
	}
	return d
}

// moveClock moves the clock of file ahead by d. The file is replaced, never
// rewritten in place, so that a reader sees the old offset or the new.
func moveClock(file string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("the clock only moves forward (%s)", d)
	}
	tmp := file + ".new"
	if err := os.WriteFile(tmp, []byte((clockOffset(file)+d).String()+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// advance DURATION moves the clock of every xmode this script runs ahead
// by DURATION (a Go duration: 2h, 90s), as if that much time had passed.
func advance(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: advance DURATION")
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		ts.Fatalf("advance: %v", err)
	}
	ts.Check(moveClock(ts.Getenv(clockEnv), d))
}

// stopDaemon runs the tests, then stops the second (TLS) docker daemon if a
// test started one, and fails the run if tests left objects on it.
type stopDaemon struct{ m *testing.M }

func (s stopDaemon) Run() int {
	code := s.m.Run()
	dockertest.RemoveBuilt()
	if strays := dockertest.StopTLSDaemon(); len(strays) > 0 {
		fmt.Fprintln(os.Stderr, "docker objects left on the TLS daemon by tests (now removed):")
		for _, s := range strays {
			fmt.Fprintln(os.Stderr, "  "+s)
		}
		if code == 0 {
			code = 1
		}
	}
	return code
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		Setup:               setupScript,
		Cmds:                map[string]func(*testscript.TestScript, bool, []string){"capture": capture, "exits": exits, "advance": advance, "await": await},
		RequireExplicitExec: true,
	})
}

// setupScript gives every script its own storage root, HOME and a real git
// repository ($WORK/repo: branch main with two commits, tag v1, branch
// feature) made by the git binary.
func setupScript(env *testscript.Env) error {
	work := env.WorkDir
	env.Setenv("XMODE_STORAGE_ROOT", filepath.Join(work, "root"))
	env.Setenv(clockEnv, filepath.Join(work, ".clock"))
	env.Setenv("HOME", filepath.Join(work, "home"))
	env.Setenv("XMODE_USER", "tester")
	env.Setenv(codexcloudtest.DirEnv, filepath.Join(work, "fakecodex"))
	env.Setenv("NO_COLOR", "1")
	env.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	// a race-built xmode would otherwise sleep a second at every exit
	env.Setenv("GORACE", "atexit_sleep_ms=0")
	if examples, err := filepath.Abs(filepath.Join("..", "..", "examples")); err == nil {
		env.Setenv("EXAMPLES", examples)
	}
	for _, k := range []string{"XDG_DATA_HOME", "DOCKER_HOST", "CI"} {
		env.Setenv(k, "")
	}
	if tb, ok := env.T().(testing.TB); ok && strings.HasPrefix(path.Base(tb.Name()), "kube_") {
		// A kube_ script runs on the test cluster (skipped without one,
		// failed under CI=true), in a namespace of its own.
		_, cs := kubetest.Require(tb)
		for k, v := range map[string]string{
			"XMODE_SANDBOX_ENGINE": "kubernetes", "XMODE_RUNNER_MODE": "cloud_worker",
			"KUBECONFIG": kubetest.Kubeconfig(tb), "XMODE_KUBE_NAMESPACE": kubetest.Namespace(tb, cs),
			"XMODE_SANDBOX_IMAGE": kubetest.Image(tb), "XMODE_KUBE_IMAGE_PULL_POLICY": "Never",
			"XMODE_SANDBOX_CPUS": "0.1", "XMODE_SANDBOX_MEMORY": "128m", "XMODE_KUBE_EPHEMERAL_STORAGE": "1g",
		} {
			env.Setenv(k, v)
		}
	}
	return makeRepo(filepath.Join(work, "repo"))
}

func makeRepo(dir string) error {
	steps := [][]string{
		{"init", "-q", "-b", "main", dir},
		{"-C", dir, "config", "user.email", "t@example.com"},
		{"-C", dir, "config", "user.name", "tester"},
	}
	for _, s := range steps {
		if out, err := exec.Command("git", s...).CombinedOutput(); err != nil {
			return &cmdErr{s, out, err}
		}
	}
	write := func(name, content string) error {
		return os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	git := func(args ...string) error {
		c := exec.Command("git", append([]string{"-C", dir}, args...)...)
		if out, err := c.CombinedOutput(); err != nil {
			return &cmdErr{args, out, err}
		}
		return nil
	}
	if err := write("README", "version one\n"); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub", "dir"), 0o755); err != nil {
		return err
	}
	if err := write("sub/dir/file.txt", "nested\n"); err != nil {
		return err
	}
	for _, a := range [][]string{{"add", "."}, {"commit", "-qm", "one"}, {"tag", "v1"}, {"branch", "feature"}} {
		if err := git(a...); err != nil {
			return err
		}
	}
	if err := write("README", "version two\n"); err != nil {
		return err
	}
	for _, a := range [][]string{{"commit", "-qam", "two"}} {
		if err := git(a...); err != nil {
			return err
		}
	}
	return nil
}

type cmdErr struct {
	args []string
	out  []byte
	err  error
}

func (e *cmdErr) Error() string {
	return "git " + strings.Join(e.args, " ") + ": " + e.err.Error() + ": " + string(e.out)
}

// capture VAR sets $VAR to the previous command's stdout, trimmed: scripts
// use it to keep a session ID.
func capture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: capture VAR")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
}

// exits N PROG [ARG...] runs a program and checks its exact exit code; its
// output is kept for stdout/stderr checks like exec's.
func exits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE PROG [ARG...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad code %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exit code %d, want %d", got, want)
	}
}

// await [-timeout D] PROG [ARG...] runs a program until it succeeds (exit
// 0), for at most D (default 20s): scripts wait for an event (a file, a
// row, a call) with it instead of sleeping. Its last output is kept for
// stdout/stderr checks like exec's.
func await(ts *testscript.TestScript, neg bool, args []string) {
	timeout := 20 * time.Second
	if len(args) > 1 && args[0] == "-timeout" {
		d, err := time.ParseDuration(args[1])
		if err != nil {
			ts.Fatalf("await: -timeout: %v", err)
		}
		timeout, args = d, args[2:]
	}
	if neg || len(args) < 1 {
		ts.Fatalf("usage: await [-timeout D] PROG [ARG...]")
	}
	deadline := time.Now().Add(timeout)
	for {
		err := ts.Exec(args[0], args[1:]...)
		if err == nil {
			return
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("await: %v", err)
		}
		if time.Now().After(deadline) {
			ts.Fatalf("await: %s did not succeed within %s (last: %v)", strings.Join(args, " "), timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClockIsTestOnly: the clock file is read by this test binary alone;
// no source of xmode's names it, so the xmode binary cannot be moved in
// time by its environment.
func TestClockIsTestOnly(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), clockEnv) {
			t.Errorf("%s names %s: only the tests may move xmode's clock", path, clockEnv)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestScriptsLiveWhereTheRunnerLooks fails on a testscript script outside
// testdata/script: TestScripts never runs it, so it would pass silently.
func TestScriptsLiveWhereTheRunnerLooks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := filepath.Abs(filepath.Join("testdata", "script"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".txt" || filepath.Dir(path) == scripts {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && looksLikeScript(string(b)) {
			t.Errorf("%s looks like a testscript script but is outside %s, where TestScripts never runs it", path, scripts)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// looksLikeScript recognises a testscript script by its commands.
func looksLikeScript(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && (f[0] == "exec" || f[0] == "exits" || f[0] == "!") && strings.Contains(line, "xmode") {
			return true
		}
	}
	return false
}
