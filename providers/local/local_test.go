package local

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/engine/enginetest"
	"github.com/xmode/xmode/fail"
)

// The test binary doubles as a helper process: with XMODE_LOCAL_HELPER set
// it does what the variable says instead of running tests.
func TestMain(m *testing.M) {
	switch os.Getenv("XMODE_LOCAL_HELPER") {
	case "":
		os.Exit(m.Run())
	case "setsid-sleep":
		// Escape the step's process group and session, keep its stdout.
		if _, err := syscall.Setsid(); err != nil {
			os.Exit(3)
		}
		_ = os.WriteFile(os.Getenv("XMODE_LOCAL_PIDFILE"), []byte(strconv.Itoa(os.Getpid())), 0o644)
		os.Stdout.WriteString("escaped\n")
		time.Sleep(30 * time.Second)
		os.Exit(0)
	default:
		os.Exit(2)
	}
}

func newSandbox(t *testing.T) (engine.Provider, engine.Sandbox) {
	t.Helper()
	p := New()
	sb, err := p.Provision(context.Background(), newSpec(t))
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Destroy(context.Background(), sb); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return p, sb
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, enginetest.Harness{Spec: func(t *testing.T) (engine.Provider, engine.Spec) {
		return New(), newSpec(t)
	}})
}

// newSpec is the spec of a host sandbox in a fresh worktree.
func newSpec(t *testing.T) engine.Spec {
	return engine.Spec{SessionID: "sbx_aaaaaaaa", RunID: "run_aaaaaaaa", Project: "proj", Worktree: t.TempDir()}
}

type capture struct {
	out, err bytes.Buffer
}

func runStep(t *testing.T, ctx context.Context, sb engine.Sandbox, req engine.ExecRequest) (engine.Status, *capture, time.Duration) {
	t.Helper()
	var c capture
	if req.Stdout == nil {
		req.Stdout = &c.out
	}
	if req.Stderr == nil {
		req.Stderr = &c.err
	}
	start := time.Now()
	st, err := New().Exec(ctx, sb, req)
	if err != nil {
		t.Fatalf("Exec(%q): %v", req.Argv, err)
	}
	return st, &c, time.Since(start)
}

func TestRegistered(t *testing.T) {
	a, err := engine.Open("host", &config.Config{})
	if err != nil {
		t.Fatalf("engine.Open(host): %v", err)
	}
	if _, ok := a.(*Provider); !ok || a.Name() != "host" {
		t.Fatalf("engine.Open(host) = %T named %q", a, a.Name())
	}
}

func TestProvision(t *testing.T) {
	p := New()
	dir := t.TempDir()
	spec := engine.Spec{SessionID: "sbx_bbbbbbbb", RunID: "run_bbbbbbbb", Project: "p", Worktree: dir, Image: "ignored"}
	sb, err := p.Provision(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Sandbox{Engine: "host", Worktree: dir, RunID: "run_bbbbbbbb", SessionID: "sbx_bbbbbbbb", Project: "p"}
	if sb.Engine != want.Engine || sb.Worktree != want.Worktree || sb.RunID != want.RunID ||
		sb.SessionID != want.SessionID || sb.Project != want.Project || sb.ContainerID != "" {
		t.Errorf("Provision = %+v, want %+v", sb, want)
	}

	for _, bad := range []string{"", filepath.Join(dir, "missing")} {
		spec.Worktree = bad
		if _, err := p.Provision(context.Background(), spec); err == nil {
			t.Errorf("Provision with worktree %q succeeded", bad)
		}
	}
	// An egress policy: refused with exit 4, naming the engine that has one.
	spec.Worktree = dir
	pol, _ := egress.Merge("sbx_bbbbbbbb", egress.ModeAllow, egress.Source{Name: "--allow", Allow: []string{"example.test"}})
	spec.Egress = &pol
	if _, err := p.Provision(context.Background(), spec); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "use the docker or kubernetes engine") {
		t.Errorf("Provision with an egress policy: %v", err)
	}
	spec.Egress = nil
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Worktree = f
	if _, err := p.Provision(context.Background(), spec); err == nil {
		t.Error("Provision with a file as worktree succeeded")
	}
	if err := p.Destroy(context.Background(), sb); err != nil {
		t.Errorf("Destroy: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("Destroy touched the worktree: %v", err)
	}
}

func TestPathFromRequestEnv(t *testing.T) {
	_, sb := newSandbox(t)
	bin := t.TempDir()
	tool := filepath.Join(bin, "xmode-local-test-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho tool ran with $# args\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	st, c, _ := runStep(t, context.Background(), sb, engine.ExecRequest{
		Argv: []string{"xmode-local-test-tool", "a"},
		Env:  []string{"PATH=/nonexistent", "PATH=" + bin + ":/usr/bin:/bin"},
	})
	if st != (engine.Status{}) || c.out.String() != "tool ran with 1 args\n" {
		t.Errorf("with the tool's dir on req.Env's PATH: %+v, stdout %q, stderr %q", st, c.out.String(), c.err.String())
	}

	st, c, _ = runStep(t, context.Background(), sb, engine.ExecRequest{
		Argv: []string{"xmode-local-test-tool"},
		Env:  []string{"PATH=/usr/bin:/bin"},
	})
	if st.ExitCode != 127 {
		t.Errorf("tool not on PATH: %+v, want 127", st)
	}
	if want := `xmode: exec: "xmode-local-test-tool": executable file not found in $PATH` + "\n"; c.err.String() != want {
		t.Errorf("stderr = %q, want %q", c.err.String(), want)
	}

	// A relative PATH entry is looked up in the step's directory, like sh.
	if err := os.Mkdir(filepath.Join(sb.Worktree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sb.Worktree, "bin", "wt-tool"), []byte("#!/bin/sh\necho wt\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, c, _ = runStep(t, context.Background(), sb, engine.ExecRequest{Argv: []string{"wt-tool"}, Env: []string{"PATH=bin:/usr/bin:/bin"}})
	if st != (engine.Status{}) || c.out.String() != "wt\n" {
		t.Errorf("relative PATH entry: %+v, stdout %q, stderr %q", st, c.out.String(), c.err.String())
	}
}

func TestNotExecutableOnPath(t *testing.T) {
	_, sb := newSandbox(t)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "noexec-tool"), []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, c, _ := runStep(t, context.Background(), sb, engine.ExecRequest{
		Argv: []string{"noexec-tool"},
		Env:  []string{"PATH=" + bin},
	})
	if st.ExitCode != 126 || !strings.Contains(c.err.String(), "permission denied") {
		t.Errorf("non-executable file on PATH: %+v, stderr %q; want 126 and permission denied", st, c.err.String())
	}
}

func TestExecFormatError(t *testing.T) {
	_, sb := newSandbox(t)
	if err := os.WriteFile(filepath.Join(sb.Worktree, "garbage"), []byte("\x7fELF-not-really\x00\x01"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, c, _ := runStep(t, context.Background(), sb, engine.ExecRequest{Argv: []string{"./garbage"}})
	if st.ExitCode != 126 || !strings.Contains(c.err.String(), `xmode: exec: "./garbage"`) {
		t.Errorf("exec format error: %+v, stderr %q; want 126 with a message", st, c.err.String())
	}
	// A script whose interpreter does not exist: 127, like docker.
	if err := os.WriteFile(filepath.Join(sb.Worktree, "badinterp"), []byte("#!/nonexistent/interp\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, c, _ = runStep(t, context.Background(), sb, engine.ExecRequest{Argv: []string{"./badinterp"}})
	if st.ExitCode != 127 || c.err.Len() == 0 {
		t.Errorf("missing interpreter: %+v, stderr %q; want 127 with a message", st, c.err.String())
	}
}

func TestSetsidEscapeDoesNotHang(t *testing.T) {
	_, sb := newSandbox(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidfile := filepath.Join(t.TempDir(), "escaped.pid")
	st, c, elapsed := runStep(t, context.Background(), sb, engine.ExecRequest{
		Argv: []string{"sh", "-c", `"$0" & i=0; while [ ! -s "$XMODE_LOCAL_PIDFILE" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; echo leader done`, self},
		Env:  []string{"XMODE_LOCAL_HELPER=setsid-sleep", "XMODE_LOCAL_PIDFILE=" + pidfile},
	})
	// Clean up the escapee, which we started.
	if b, err := os.ReadFile(pidfile); err == nil {
		if pid, err := strconv.Atoi(string(b)); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	} else {
		t.Fatalf("the helper never wrote its pid: %v (stdout %q, stderr %q)", err, c.out.String(), c.err.String())
	}
	if st != (engine.Status{}) {
		t.Errorf("status %+v, want 0 (stderr %q)", st, c.err.String())
	}
	if elapsed > drainTimeout+2*time.Second {
		t.Errorf("Exec took %v with an escaped process holding stdout; want about %v", elapsed, drainTimeout)
	}
	if !strings.Contains(c.out.String(), "leader done") {
		t.Errorf("stdout %q lacks the leader's output", c.out.String())
	}
}

func TestTimeoutStatusNamesSignal(t *testing.T) {
	_, sb := newSandbox(t)
	st, _, _ := runStep(t, context.Background(), sb, engine.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 100 * time.Millisecond})
	if want := (engine.Status{ExitCode: 124, TimedOut: true, Signal: "SIGTERM"}); st != want {
		t.Errorf("timed out sleep: %+v, want %+v", st, want)
	}
	st, _, _ = runStep(t, context.Background(), sb, engine.ExecRequest{
		Argv:    []string{"sh", "-c", `trap "" TERM; while :; do sleep 1; done`},
		Timeout: 100 * time.Millisecond, Grace: 100 * time.Millisecond,
	})
	if want := (engine.Status{ExitCode: 124, TimedOut: true, Signal: "SIGKILL"}); st != want {
		t.Errorf("timed out TERM-ignoring loop: %+v, want %+v", st, want)
	}
}

func TestCancelStatus(t *testing.T) {
	_, sb := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	st, _, _ := runStep(t, ctx, sb, engine.ExecRequest{Argv: []string{"sleep", "30"}})
	if want := (engine.Status{ExitCode: 143, Signal: "SIGTERM"}); st != want {
		t.Errorf("cancelled sleep: %+v, want %+v", st, want)
	}
	// A step that exits cleanly on TERM reports its own status.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	st, _, _ = runStep(t, ctx2, sb, engine.ExecRequest{Argv: []string{"sh", "-c", `trap "exit 7" TERM; while :; do sleep 0.05; done`}})
	if want := (engine.Status{ExitCode: 7}); st != want {
		t.Errorf("cancelled step that traps TERM: %+v, want %+v", st, want)
	}
}

func TestErrorsBeforeStart(t *testing.T) {
	_, sb := newSandbox(t)
	p := New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Exec(ctx, sb, engine.ExecRequest{Argv: []string{"true"}}); err == nil {
		t.Error("Exec with a cancelled context started the command")
	}
	if _, err := p.Exec(context.Background(), sb, engine.ExecRequest{}); err == nil {
		t.Error("Exec with an empty argv succeeded")
	}
	if _, err := p.Exec(context.Background(), sb, engine.ExecRequest{Argv: []string{"true"}, Workdir: "vanished"}); err == nil {
		t.Error("Exec in a missing workdir succeeded")
	}
	gone := sb
	gone.Worktree = filepath.Join(sb.Worktree, "gone")
	if _, err := p.Exec(context.Background(), gone, engine.ExecRequest{Argv: []string{"true"}}); err == nil {
		t.Error("Exec in a missing worktree succeeded")
	}
}

// blockingReader never returns: like a terminal nobody types into.
type blockingReader struct{ ch chan struct{} }

func (b blockingReader) Read([]byte) (int, error) { <-b.ch; return 0, io.EOF }

func TestBlockingStdinDoesNotHoldUpStep(t *testing.T) {
	_, sb := newSandbox(t)
	r := blockingReader{make(chan struct{})}
	defer close(r.ch)
	st, _, elapsed := runStep(t, context.Background(), sb, engine.ExecRequest{Argv: []string{"true"}, Stdin: r})
	if st != (engine.Status{}) || elapsed > 2*time.Second {
		t.Errorf("step with a stdin that never delivers: %+v after %v", st, elapsed)
	}
}

type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("disk full")
}

func TestFailingWriterDoesNotBlockStep(t *testing.T) {
	_, sb := newSandbox(t)
	w := &failingWriter{}
	st, _, elapsed := runStep(t, context.Background(), sb, engine.ExecRequest{
		Argv:    []string{"head", "-c", "10000000", "/dev/zero"},
		Stdout:  w,
		Timeout: 20 * time.Second,
	})
	if st != (engine.Status{}) {
		t.Errorf("step whose stdout writer fails: %+v after %v, want exit 0 (output drained)", st, elapsed)
	}
	if w.n != 1 {
		t.Errorf("failing writer called %d times, want once", w.n)
	}
}

func TestNilWriters(t *testing.T) {
	_, sb := newSandbox(t)
	st, err := New().Exec(context.Background(), sb, engine.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 4"}})
	if err != nil || st.ExitCode != 4 {
		t.Errorf("Exec with nil writers: %+v, %v", st, err)
	}
}

func TestOwnProcessGroup(t *testing.T) {
	_, sb := newSandbox(t)
	st, c, _ := runStep(t, context.Background(), sb, engine.ExecRequest{Argv: []string{"sh", "-c", `echo $$; grep -o '^[0-9]* ([^)]*) . [0-9]* [0-9]*' /proc/$$/stat`}})
	if st != (engine.Status{}) {
		t.Fatalf("%+v %q", st, c.err.String())
	}
	lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("unexpected output %q", c.out.String())
	}
	f := strings.Fields(lines[1]) // pid (comm) state ppid pgrp
	if len(f) != 5 || f[4] != lines[0] {
		t.Errorf("step's process group: /proc/self/stat %q, want pgrp = pid %s", lines[1], lines[0])
	}
	if f[4] == strconv.Itoa(syscall.Getpgrp()) {
		t.Errorf("step runs in xmode's own process group %s", f[4])
	}
}

func TestSignalName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL", syscall.SIGINT: "SIGINT",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGPIPE: "SIGPIPE", syscall.Signal(40): "SIG40",
	} {
		if got := SignalName(sig); got != want {
			t.Errorf("SignalName(%d) = %q, want %q", int(sig), got, want)
		}
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"A=1", "B=2", "C=3"}, []string{"B=x", "D=4", "A=y", "A=z"})
	want := []string{"C=3", "B=x", "D=4", "A=z"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("mergeEnv = %q, want %q", got, want)
	}
	if p := envPath([]string{"X=1"}); p != defaultPath {
		t.Errorf("envPath without PATH = %q", p)
	}
}

func TestTimeoutOfStoppedStep(t *testing.T) {
	_, sb := newSandbox(t)
	// Stopped, TERM stays pending until CONT: the deadline must not have to
	// wait for the grace period.
	st, _, elapsed := runStep(t, context.Background(), sb, engine.ExecRequest{
		Argv:    []string{"sh", "-c", "kill -STOP $$; sleep 30"},
		Timeout: 200 * time.Millisecond,
	})
	if want := (engine.Status{ExitCode: 124, TimedOut: true, Signal: "SIGTERM"}); st != want || elapsed > 2*time.Second {
		t.Errorf("timed out stopped step: %+v after %v, want %+v well before the %v grace", st, elapsed, want, engine.DefaultGrace)
	}
}
