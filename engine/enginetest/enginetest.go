// Package enginetest is the conformance suite every engine.Provider must
// pass: Provision (of a fresh spec, and refusing a spec it cannot
// provision without leaving anything in the way), exit statuses, signals,
// separate output streams, environment, workdir, timeouts with TERM→KILL,
// killing the whole process tree, ending a step by its tag
// (Provider.KillStep), cancellation, binary and very large output with
// bounded memory, 126/127, stdin, a terminal (TTY) and its resizes, Ctrl-C
// (engine.Interrupt), concurrent steps and idempotent Destroy. What it
// requires is engine.Provider; of the optional capabilities
// (engine/capabilities.go) it checks the answers a step can see: where the
// steps see the worktree (engine.StepWorktree), whether they run on this
// host (engine.OnHost), and whether a sandbox lives (engine.Alive).
//
// The commands it runs use only POSIX sh and busybox applets (sh, sleep,
// cat, echo, printf, head, kill, trap, grep, mkdir, ...) and paths relative
// to the step's working directory, so the same suite runs on the host and
// inside a busybox container.
package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/engine"
)

// Harness gives the suite a provider and the spec of a new sandbox, as
// xmode makes one: a new session and run (sbx_…, run_…), the labels
// (Spec.Labels), and a worktree of its own that exists, empty and writable.
// Spec is called once per subtest and registers its own cleanup
// (t.Cleanup); the suite provisions the spec and destroys the sandbox.
type Harness struct {
	Spec func(t *testing.T) (engine.Provider, engine.Spec)
}

// New provisions a sandbox of a fresh spec and destroys it when t ends.
func (h Harness) New(t *testing.T) (engine.Provider, engine.Sandbox) {
	t.Helper()
	a, spec := h.Spec(t)
	return a, provision(t, a, spec)
}

// provisionLimit bounds one Provision (a container's start, maybe a copy of
// the worktree).
const provisionLimit = 2 * time.Minute

// provision provisions spec, failing t when it cannot, and destroys the
// sandbox when t ends.
func provision(t *testing.T, a engine.Provider, spec engine.Spec) engine.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), provisionLimit)
	defer cancel()
	sb, err := a.Provision(ctx, spec)
	if err != nil {
		// What a failed Provision made is in sb, as teardown finds it.
		_ = a.Destroy(context.Background(), sb)
		t.Fatalf("Provision of session %s (worktree %s): %v", spec.SessionID, spec.Worktree, err)
	}
	t.Cleanup(func() {
		if err := a.Destroy(context.Background(), sb); err != nil {
			t.Errorf("Destroy of session %s: %v", sb.SessionID, err)
		}
	})
	return sb
}

// Run runs the whole suite against h, one subtest per behaviour.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Spec == nil {
		t.Fatal("enginetest: Harness.Spec is nil")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Name", testName},
		{"Provision", testProvision},
		{"StepWorktree", testStepWorktree},
		{"OnHost", testOnHost},
		{"ExitCodes", testExitCodes},
		{"KilledBySignal", testKilledBySignal},
		{"StdoutStderrSeparate", testStdoutStderr},
		{"Env", testEnv},
		{"Workdir", testWorkdir},
		{"Timeout", testTimeout},
		{"TimeoutIgnoringTERM", testTimeoutIgnoringTerm},
		{"ProcessTreeKilledAfterExit", testTreeAfterExit},
		{"ProcessTreeKilledOnTimeout", testTreeOnTimeout},
		{"KillStepByTag", testKillStep},
		{"SignalStepByTag", testSignalStep},
		{"StartedThenKilled", testStartedThenKilled},
		{"GitWorks", testGit},
		{"ContextCancel", testCancel},
		{"Interrupt", testInterrupt},
		{"InterruptHurried", testInterruptHurried},
		{"TTY", testTTY},
		{"TTYResize", testTTYResize},
		{"BinaryOutput", testBinaryOutput},
		{"BinaryStdinRoundTrip", testBinaryStdin},
		{"LargeOutputBoundedMemory", testLargeOutput},
		{"CommandNotFound", testNotFound},
		{"NotExecutable", testNotExecutable},
		{"Stdin", testStdin},
		{"ConcurrentSteps", testConcurrent},
		{"DestroyIdempotent", testDestroy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// defaultLimit is how long one Exec may take before the suite gives up on
// it (a hung provider fails the test instead of hanging it).
const defaultLimit = 30 * time.Second

// result is what one Exec gave back.
type result struct {
	st      engine.Status
	err     error
	stdout  []byte
	stderr  []byte
	elapsed time.Duration
}

// syncBuffer is a bytes.Buffer safe for the provider's copy goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// exec runs req with a watchdog. Stdout and Stderr are captured unless the
// request brings its own writers.
func exec(t *testing.T, ctx context.Context, a engine.Provider, sb engine.Sandbox, req engine.ExecRequest, limit time.Duration) result {
	t.Helper()
	var out, errb syncBuffer
	if req.Stdout == nil {
		req.Stdout = &out
	}
	if req.Stderr == nil {
		req.Stderr = &errb
	}
	type ret struct {
		st  engine.Status
		err error
	}
	done := make(chan ret, 1)
	start := time.Now()
	go func() {
		st, err := a.Exec(ctx, sb, req)
		done <- ret{st, err}
	}()
	select {
	case r := <-done:
		return result{st: r.st, err: r.err, stdout: out.Bytes(), stderr: errb.Bytes(), elapsed: time.Since(start)}
	case <-time.After(limit):
		t.Fatalf("Exec(%s) did not return within %v (stdout so far %q, stderr so far %q)",
			describe(req), limit, clip(out.Bytes()), clip(errb.Bytes()))
		return result{}
	}
}

// sh runs `sh -c script` and requires Exec to succeed (no error).
func sh(t *testing.T, a engine.Provider, sb engine.Sandbox, script string, mod ...func(*engine.ExecRequest)) result {
	t.Helper()
	req := engine.ExecRequest{Argv: []string{"sh", "-c", script}}
	for _, m := range mod {
		m(&req)
	}
	return mustExec(t, context.Background(), a, sb, req)
}

func mustExec(t *testing.T, ctx context.Context, a engine.Provider, sb engine.Sandbox, req engine.ExecRequest) result {
	t.Helper()
	r := exec(t, ctx, a, sb, req, defaultLimit)
	if r.err != nil {
		t.Fatalf("Exec(%s) returned error %v; want a status (errors are only for failures of xmode before the command starts)", describe(req), r.err)
	}
	return r
}

// wantExit checks the status of a step that was not signalled or timed out.
func wantExit(t *testing.T, what string, r result, code int) {
	t.Helper()
	want := engine.Status{ExitCode: code}
	if r.st != want {
		t.Fatalf("%s: status %+v, want %+v\nstdout: %q\nstderr: %q", what, r.st, want, clip(r.stdout), clip(r.stderr))
	}
}

// wantOK requires exit 0.
func wantOK(t *testing.T, what string, r result) {
	t.Helper()
	wantExit(t, what, r, 0)
}

func describe(req engine.ExecRequest) string {
	var b strings.Builder
	b.WriteString("argv=[")
	for i, a := range req.Argv {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(strconv.Quote(a))
	}
	b.WriteString("]")
	if req.Workdir != "" {
		fmt.Fprintf(&b, " workdir=%q", req.Workdir)
	}
	if len(req.Env) > 0 {
		fmt.Fprintf(&b, " env=%q", req.Env)
	}
	if req.Timeout > 0 {
		fmt.Fprintf(&b, " timeout=%v", req.Timeout)
	}
	if req.Grace > 0 {
		fmt.Fprintf(&b, " grace=%v", req.Grace)
	}
	return b.String()
}

func clip(b []byte) string {
	const max = 2048
	if len(b) > max {
		return string(b[:max]) + fmt.Sprintf("... (%d bytes)", len(b))
	}
	return string(b)
}

// ---------------------------------------------------------------------------

func testName(t *testing.T, h Harness) {
	a, sb := h.New(t)
	if a.Name() == "" {
		t.Fatal("Name() is empty")
	}
	if sb.Engine != "" && sb.Engine != a.Name() {
		t.Errorf("provisioned Sandbox.Engine = %q, but the provider's Name() is %q", sb.Engine, a.Name())
	}
}

// testProvision: a spec the provider cannot provision fails with an error,
// and teardown (Destroy of what it returned, with the session's IDs)
// succeeds; the same spec, made good, then provisions — so a failed
// Provision left nothing in the way — into a sandbox that is the spec's and
// runs steps; Destroy is idempotent and leaves no live sandbox.
func testProvision(t *testing.T, h Harness) {
	a, spec := h.Spec(t)
	ctx := context.Background()
	runDir := filepath.Dir(spec.Worktree)
	notDir := filepath.Join(runDir, "enginetest-not-a-directory")
	if err := os.WriteFile(notDir, []byte("a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(notDir) })
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		what string
		ctx  context.Context
		wt   string
	}{
		{"no worktree", ctx, ""},
		{"a worktree that does not exist", ctx, filepath.Join(runDir, "enginetest-missing")},
		{"a worktree that is a file", ctx, notDir},
		{"a cancelled context", cancelled, spec.Worktree},
	} {
		bad := spec
		bad.Worktree = c.wt
		sb, perr := a.Provision(c.ctx, bad)
		if perr == nil {
			_ = a.Destroy(ctx, sb)
			t.Errorf("Provision with %s succeeded; want an error", c.what)
			continue
		}
		// Teardown knows the session from its row even when Provision
		// returned nothing.
		sb.SessionID, sb.RunID, sb.Project = spec.SessionID, spec.RunID, spec.Project
		if err := a.Destroy(ctx, sb); err != nil {
			t.Errorf("Destroy after a Provision with %s failed (%v): %v", c.what, perr, err)
		}
	}

	sb := provision(t, a, spec)
	want := engine.Sandbox{Engine: a.Name(), Worktree: spec.Worktree, RunID: spec.RunID, SessionID: spec.SessionID, Project: spec.Project}
	if sb.Engine != want.Engine || sb.Worktree != want.Worktree || sb.RunID != want.RunID || sb.SessionID != want.SessionID || sb.Project != want.Project {
		t.Errorf("Provision returned %+v; want the spec's engine, worktree, run, session and project %+v", sb, want)
	}
	wantOK(t, "a step in a fresh sandbox", sh(t, a, sb, "echo ok > provisioned.txt"))
	if !fileIn(a, sb, "provisioned.txt") {
		t.Error("what a step wrote in the worktree is gone in the next step")
	}
	if alive, err := engine.Alive(ctx, a, sb); err != nil || !alive {
		t.Errorf("a provisioned sandbox: Alive = %v, %v; want true", alive, err)
	}
	for i := range 2 {
		if err := a.Destroy(ctx, sb); err != nil {
			t.Fatalf("Destroy #%d of a provisioned sandbox: %v", i+1, err)
		}
	}
	if _, ok := a.(engine.LivenessChecker); ok {
		if alive, err := engine.Alive(ctx, a, sb); err != nil || alive {
			t.Errorf("a destroyed sandbox: Alive = %v, %v; want false", alive, err)
		}
	}
}

// testStepWorktree: a step without Workdir runs where engine.StepWorktree
// says the sandbox sees its worktree — the directory agents are pointed at
// (codex -C) — and that path is the worktree from any workdir.
func testStepWorktree(t *testing.T, h Harness) {
	a, sb := h.New(t)
	want, err := engine.StepWorktree(a, sb)
	if err != nil {
		t.Fatalf("StepWorktree: %v", err)
	}
	r := sh(t, a, sb, "pwd -P")
	wantOK(t, "pwd -P", r)
	got := strings.TrimRight(string(r.stdout), "\n")
	if got != want {
		// A host path may pass through a symlink (/tmp on some systems).
		if real, err := filepath.EvalSymlinks(want); err != nil || real != got {
			t.Errorf("a step runs in %q, but StepWorktree says the sandbox sees its worktree at %q", got, want)
		}
	}
	wantOK(t, "a file at the worktree's root, a directory below it", sh(t, a, sb, "echo root > at-root.txt; mkdir -p sub"))
	r = sh(t, a, sb, `cd "$XMODE_ENGINETEST_WT" && cat at-root.txt`, func(r *engine.ExecRequest) {
		r.Workdir = "sub"
		r.Env = []string{"XMODE_ENGINETEST_WT=" + want}
	})
	if r.st.ExitCode != 0 || string(r.stdout) != "root\n" {
		t.Errorf("from workdir sub, cd %s && cat at-root.txt: status %+v, stdout %q, stderr %q; want the worktree's file", want, r.st, r.stdout, clip(r.stderr))
	}
}

// testOnHost: an engine whose steps run on this host (engine.OnHost) gives
// them xmode's environment and the host's files; one whose steps run in an
// environment of their own gives them neither.
func testOnHost(t *testing.T, h Harness) {
	a, sb := h.New(t)
	onHost := engine.OnHost(a)
	file := filepath.Join(t.TempDir(), "host-only.txt")
	if err := os.WriteFile(file, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Not t.Setenv: providers run the suite in parallel tests. A name of
	// this process alone, set for the one step.
	name := fmt.Sprintf("XMODE_ENGINETEST_HOST_%d_%d", os.Getpid(), time.Now().UnixNano())
	os.Setenv(name, "inherited")
	r := sh(t, a, sb, `printf '%s\n' "${`+name+`-unset}"; cat "$1" 2>/dev/null || echo absent`, func(r *engine.ExecRequest) {
		r.Argv = append(r.Argv, "sh", file)
	})
	os.Unsetenv(name)
	wantOK(t, "reading xmode's environment and a host file", r)
	got := string(r.stdout)
	want := "unset\nabsent\n"
	if onHost {
		want = "inherited\nhost\n"
	}
	if got != want {
		t.Errorf("OnHost = %v, but a step sees %q of xmode's variable and the host's file; want %q", onHost, got, want)
	}
}

func testExitCodes(t *testing.T, h Harness) {
	a, sb := h.New(t)
	for _, code := range []int{0, 1, 3, 255} {
		script := fmt.Sprintf("exit %d", code)
		wantExit(t, "sh -c '"+script+"'", sh(t, a, sb, script), code)
	}
	wantOK(t, "true", mustExec(t, context.Background(), a, sb, engine.ExecRequest{Argv: []string{"true"}}))
	wantExit(t, "false", mustExec(t, context.Background(), a, sb, engine.ExecRequest{Argv: []string{"false"}}), 1)
}

func testKilledBySignal(t *testing.T, h Harness) {
	a, sb := h.New(t)
	for _, c := range []struct {
		sig  string
		code int
		name string
	}{{"TERM", 143, "SIGTERM"}, {"KILL", 137, "SIGKILL"}} {
		script := "kill -" + c.sig + " $$; sleep 5"
		r := sh(t, a, sb, script)
		want := engine.Status{ExitCode: c.code, Signal: c.name}
		if r.st != want {
			t.Errorf("sh -c %q: status %+v, want %+v (128+N and the signal's name)\nstderr: %q", script, r.st, want, clip(r.stderr))
		}
	}
}

func testStdoutStderr(t *testing.T, h Harness) {
	a, sb := h.New(t)
	r := sh(t, a, sb, `printf 'out1\n'; printf 'err1\n' >&2; printf 'out2'; printf 'err2' >&2; printf '\n' >&2`)
	wantOK(t, "printing to both streams", r)
	if got, want := string(r.stdout), "out1\nout2"; got != want {
		t.Errorf("stdout = %q, want exactly %q", got, want)
	}
	if got, want := string(r.stderr), "err1\nerr2\n"; got != want {
		t.Errorf("stderr = %q, want exactly %q", got, want)
	}
}

func testEnv(t *testing.T, h Harness) {
	a, sb := h.New(t)
	withEnv := func(env ...string) func(*engine.ExecRequest) {
		return func(r *engine.ExecRequest) { r.Env = env }
	}

	r := sh(t, a, sb, `printf '%s' "$XMODE_ENGINETEST_A"`, withEnv("XMODE_ENGINETEST_A=a b=c"))
	wantOK(t, "env value", r)
	if got := string(r.stdout); got != "a b=c" {
		t.Errorf("req.Env XMODE_ENGINETEST_A=%q is seen by the step as %q", "a b=c", got)
	}

	r = sh(t, a, sb, `printf '%s' "$XMODE_ENGINETEST_B"`, withEnv("XMODE_ENGINETEST_B=first", "XMODE_ENGINETEST_B=second"))
	wantOK(t, "env override", r)
	if got := string(r.stdout); got != "second" {
		t.Errorf("req.Env sets XMODE_ENGINETEST_B twice (first, second): the step sees %q, want the later entry %q", got, "second")
	}

	r = sh(t, a, sb, `printf '%s' "$HOME"`, withEnv("HOME=/xmode-enginetest-home"))
	wantOK(t, "env overriding the sandbox's HOME", r)
	if got := string(r.stdout); got != "/xmode-enginetest-home" {
		t.Errorf("req.Env HOME=/xmode-enginetest-home does not override the sandbox's HOME: the step sees %q", got)
	}

	r = sh(t, a, sb, `printf '%s' "${XMODE_ENGINETEST_A-unset}"`)
	wantOK(t, "env does not leak between steps", r)
	if got := string(r.stdout); got != "unset" {
		t.Errorf("XMODE_ENGINETEST_A from an earlier step's req.Env is still set in a later step: %q", got)
	}
}

func testWorkdir(t *testing.T, h Harness) {
	a, sb := h.New(t)
	wantOK(t, "mkdir -p sub/dir", sh(t, a, sb, "mkdir -p sub/dir"))

	r := sh(t, a, sb, "pwd; echo here > made-in-workdir.txt", func(r *engine.ExecRequest) { r.Workdir = "sub/dir" })
	wantOK(t, "pwd in workdir sub/dir", r)
	if got := strings.TrimRight(string(r.stdout), "\n"); !strings.HasSuffix(got, "/sub/dir") {
		t.Errorf("pwd with Workdir %q printed %q, want a path ending in /sub/dir", "sub/dir", got)
	}

	r = sh(t, a, sb, "cat sub/dir/made-in-workdir.txt")
	wantOK(t, "the file made in the workdir is visible from the worktree root in the next step", r)
	if got := string(r.stdout); got != "here\n" {
		t.Errorf("sub/dir/made-in-workdir.txt = %q, want %q", got, "here\n")
	}

	r = sh(t, a, sb, "pwd")
	wantOK(t, "pwd without workdir", r)
	if got := strings.TrimRight(string(r.stdout), "\n"); strings.HasSuffix(got, "/sub/dir") {
		t.Errorf("a step without Workdir runs in %q: the previous step's workdir stuck", got)
	}
}

func testTimeout(t *testing.T, h Harness) {
	a, sb := h.New(t)
	req := engine.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond}
	r := mustExec(t, context.Background(), a, sb, req)
	if r.st.ExitCode != 124 || !r.st.TimedOut {
		t.Errorf("%s: status %+v, want ExitCode 124 and TimedOut (stderr %q)", describe(req), r.st, clip(r.stderr))
	}
	if r.elapsed < req.Timeout {
		t.Errorf("%s returned after %v, before its timeout", describe(req), r.elapsed)
	}
	if r.elapsed > 4*time.Second {
		t.Errorf("%s took %v: a process that dies on TERM must end at the deadline, not after the grace period", describe(req), r.elapsed)
	}
	t.Logf("timed out step: %+v after %v", r.st, r.elapsed)
}

func testTimeoutIgnoringTerm(t *testing.T, h Harness) {
	a, sb := h.New(t)
	req := engine.ExecRequest{
		Argv:    []string{"sh", "-c", `trap "" TERM; while :; do sleep 1; done`},
		Timeout: 300 * time.Millisecond,
		Grace:   300 * time.Millisecond,
	}
	r := mustExec(t, context.Background(), a, sb, req)
	if r.st.ExitCode != 124 || !r.st.TimedOut {
		t.Errorf("%s: status %+v, want ExitCode 124 and TimedOut", describe(req), r.st)
	}
	if r.elapsed < req.Timeout+req.Grace-50*time.Millisecond {
		t.Errorf("%s returned after %v: the step must get its grace period between TERM and KILL", describe(req), r.elapsed)
	}
	if r.elapsed > 4*time.Second {
		t.Errorf("%s took %v: KILL must follow TERM after the grace period", describe(req), r.elapsed)
	}
	t.Logf("TERM-ignoring step: %+v after %v", r.st, r.elapsed)
}

// bgScript starts a background sleep that ignores TERM and records its pid.
const bgScript = `trap "" TERM; sleep 300 & echo $! > bg.pid; trap - TERM; `

func testTreeAfterExit(t *testing.T, h Harness) {
	a, sb := h.New(t)
	r := sh(t, a, sb, bgScript+"echo started")
	wantOK(t, "a step that leaves a background process behind", r)
	if r.elapsed > 3*time.Second {
		t.Errorf("a step whose leader exited at once but left `sleep 300 &` behind took %v to return", r.elapsed)
	}
	wantGone(t, a, sb, "a background process (`sleep 300 &`) of a step that exited normally")
}

func testTreeOnTimeout(t *testing.T, h Harness) {
	a, sb := h.New(t)
	// The command would run for a minute: returning well before that is
	// the deadline's doing, however loaded the machine is.
	req := engine.ExecRequest{
		Argv:    []string{"sh", "-c", bgScript + "sleep 60"},
		Timeout: 300 * time.Millisecond,
		Grace:   200 * time.Millisecond,
	}
	r := mustExec(t, context.Background(), a, sb, req)
	if r.st.ExitCode != 124 || !r.st.TimedOut {
		t.Errorf("%s: status %+v, want ExitCode 124 and TimedOut", describe(req), r.st)
	}
	if r.elapsed > 30*time.Second {
		t.Errorf("%s took %v: the deadline did not end it", describe(req), r.elapsed)
	}
	wantGone(t, a, sb, "a TERM-ignoring background process of a step that timed out")
}

// testKillStep: a step's processes are found and ended by the tag they
// carry, from outside the Exec that runs them — what teardown and the
// reaper do when the xmode running a step is gone.
func testKillStep(t *testing.T, h Harness) {
	a, sb := h.New(t)
	tag := fmt.Sprintf("killsteptest%d", time.Now().UnixNano())
	done := make(chan result, 1)
	go func() {
		done <- exec(t, context.Background(), a, sb, engine.ExecRequest{
			Argv: []string{"sh", "-c", bgScript + "echo up > up; sleep 300"}, Tag: tag,
		}, defaultLimit)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !fileIn(a, sb, "up") {
		if time.Now().After(deadline) {
			t.Fatal("the step never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := engine.KillStep(context.Background(), a, sb, tag); err != nil {
		t.Fatalf("KillStep: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.st.ExitCode == 0 {
			t.Fatalf("a step ended by KillStep: status %+v, err %v; want a signal's status", r.st, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the step still runs 30s after KillStep")
	}
	wantGone(t, a, sb, "a TERM-ignoring background process of a step ended by KillStep")
	if err := engine.KillStep(context.Background(), a, sb, tag); err != nil {
		t.Fatalf("KillStep of a step already gone: %v", err)
	}
}

// testSignalStep: a step ended from outside the Exec that runs it with a
// first signal of the caller's choosing (engine.SignalStep, what `sandbox
// kill --signal INT` does) dies of that signal, as under Ctrl-C, and what
// ignores it (a non-interactive shell's background job ignores INT) is
// KILLed after the grace period. A provider without engine.StepSignaler
// ends steps with TERM.
func testSignalStep(t *testing.T, h Harness) {
	a, sb := h.New(t)
	sig := syscall.SIGINT
	if _, ok := a.(engine.StepSignaler); !ok {
		sig = syscall.SIGTERM
	}
	tag := fmt.Sprintf("signalsteptest%d", time.Now().UnixNano())
	done := make(chan result, 1)
	go func() {
		done <- exec(t, context.Background(), a, sb, engine.ExecRequest{
			Argv: []string{"sh", "-c", bgScript + "echo up > up; exec sleep 300"}, Tag: tag,
		}, defaultLimit)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !fileIn(a, sb, "up") {
		if time.Now().After(deadline) {
			t.Fatal("the step never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := engine.SignalStep(context.Background(), a, sb, tag, sig, time.Second); err != nil {
		t.Fatalf("SignalStep(%s): %v", sig, err)
	}
	select {
	case r := <-done:
		want := engine.Status{ExitCode: 128 + int(sig), Signal: sigName(sig)}
		if r.err != nil || r.st != want {
			t.Fatalf("a step ended by SignalStep(%s): status %+v, err %v; want %+v", sig, r.st, r.err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the step still runs 30s after SignalStep(%s)", sig)
	}
	wantGone(t, a, sb, "a background process that ignores the signal, of a step ended by SignalStep")
}

// testStartedThenKilled: once ExecRequest.Started has been called, the
// step's processes can be found by their tag from outside the Exec: a
// KillStep right then ends the step (a background step's number is
// reported then, and `sandbox kill` may follow at once). Started is called
// once, before Exec returns.
func testStartedThenKilled(t *testing.T, h Harness) {
	a, sb := h.New(t)
	tag := fmt.Sprintf("startedtest%d", time.Now().UnixNano())
	var calls atomic.Int32
	started := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		done <- exec(t, context.Background(), a, sb, engine.ExecRequest{
			Argv: []string{"sleep", "300"}, Tag: tag,
			Started: func() {
				if calls.Add(1) == 1 {
					close(started)
				}
			},
		}, defaultLimit)
	}()
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("Exec returned (%+v, %v) without calling Started", r.st, r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("Started was not called within 20s")
	}
	if err := engine.KillStep(context.Background(), a, sb, tag); err != nil {
		t.Fatalf("KillStep: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.st.ExitCode != 143 && r.st.ExitCode != 137 {
			t.Fatalf("a step killed right after Started: status %+v, err %v; want TERM's (143) or KILL's (137)", r.st, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the step still runs 30s after a KillStep that followed Started")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("Started was called %d times", n)
	}
}

// sigName is a signal's name as a Status gives it.
func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// testGit: agents and people use git in their worktree — status, diff,
// add, commit, branch, stash — so git must work in every sandbox.
func testGit(t *testing.T, h Harness) {
	a, sb := h.New(t)
	r := sh(t, a, sb, `set -e
export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.com GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.com HOME=$PWD
git init -q -b main repo && cd repo
echo one > f && git add f && git commit -qm one
echo two > f && git diff --stat | grep -q '1 file changed'
git status --porcelain | grep -q '^ M f'
git stash -q && test "$(cat f)" = one && git stash pop -q && test "$(cat f)" = two
git commit -qam two && git branch side HEAD~1 && git checkout -q side && test "$(cat f)" = one
git log --oneline main | wc -l`)
	if r.err != nil || r.st.ExitCode != 0 || strings.TrimSpace(string(r.stdout)) != "2" {
		t.Fatalf("git in the sandbox: status %+v err %v\nstdout: %s\nstderr: %s", r.st, r.err, r.stdout, r.stderr)
	}
}

// fileIn reports whether the step wrote name in the worktree (as the
// sandbox sees it: a sync-mode worktree is a copy).
func fileIn(a engine.Provider, sb engine.Sandbox, name string) bool {
	var out bytes.Buffer
	st, err := a.Exec(context.Background(), sb, engine.ExecRequest{Argv: []string{"test", "-s", name}, Stdout: &out})
	return err == nil && st.ExitCode == 0
}

// wantGone waits (briefly) until the process whose pid is in bg.pid is gone
// or a zombie. A zombie counts as gone: reaping orphans is PID 1's business.
func wantGone(t *testing.T, a engine.Provider, sb engine.Sandbox, what string) {
	t.Helper()
	const check = `pid=$(cat bg.pid) || exit 2
case "$pid" in ''|*[!0-9]*) echo "bad pid file: $pid"; exit 2;; esac
state=$(grep '^State:' /proc/$pid/status 2>/dev/null)
case "$state" in ''|*Z*|*X*) exit 0;; esac
echo "pid $pid $state"; exit 1`
	// Generous: a loaded machine may take a while to deliver the KILL; a
	// survivor is still alive after any of it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := sh(t, a, sb, check)
		switch r.st.ExitCode {
		case 0:
			return
		case 1:
			if time.Now().After(deadline) {
				// Do not leave it behind for the next test.
				sh(t, a, sb, `kill -9 "$(cat bg.pid)"`)
				t.Fatalf("%s is still alive 15s after Exec returned: %s", what, strings.TrimSpace(string(r.stdout)))
			}
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("checking %s: status %+v\nstdout: %q\nstderr: %q", what, r.st, r.stdout, r.stderr)
		}
	}
}

func testCancel(t *testing.T, h Harness) {
	a, sb := h.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lineWaiter{want: "up", seen: make(chan struct{})}
	onLine(out, cancel) // once the step runs
	req := engine.ExecRequest{Argv: []string{"sh", "-c", "echo up; exec sleep 30"}, Stdout: out}
	r := exec(t, ctx, a, sb, req, defaultLimit)
	if r.err != nil {
		t.Fatalf("Exec(%s) cancelled while running returned error %v; want the status the process died of", describe(req), r.err)
	}
	if r.st.ExitCode == 0 {
		t.Errorf("Exec(%s) cancelled while it ran: status %+v, want a non-zero status", describe(req), r.st)
	}
	if r.st.TimedOut {
		t.Errorf("Exec(%s) cancelled (no timeout set): status %+v says TimedOut", describe(req), r.st)
	}
	if r.elapsed > 4*time.Second {
		t.Errorf("Exec(%s) returned %v after it started; cancellation must end the step promptly", describe(req), r.elapsed)
	}
	t.Logf("cancelled step: %+v after %v", r.st, r.elapsed)
}

// interrupted cancels a context the way Ctrl-C does once the step printed
// ready: with an engine.Interrupt cause for SIGINT; closing hurry is the
// second Ctrl-C.
func interrupted(ready *lineWaiter) (ctx context.Context, hurry chan struct{}, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	hurry = make(chan struct{})
	onLine(ready, func() { cancel(&engine.Interrupt{Signal: syscall.SIGINT, Hurry: hurry}) })
	return ctx, hurry, func() { cancel(nil) }
}

// onLine runs f once w has seen its line, unless that takes more than a
// minute (then the step's own result says what went wrong).
func onLine(w *lineWaiter, f func()) {
	go func() {
		select {
		case <-w.seen:
			f()
		case <-time.After(time.Minute):
		}
	}()
}

// Ctrl-C reaches the step as SIGINT, as from a terminal: it dies of it, 130.
func testInterrupt(t *testing.T, h Harness) {
	a, sb := h.New(t)
	out := &lineWaiter{want: "up", seen: make(chan struct{})}
	ctx, _, stop := interrupted(out)
	defer stop()
	req := engine.ExecRequest{Argv: []string{"sh", "-c", "echo up; exec sleep 30"}, Stdout: out}
	r := exec(t, ctx, a, sb, req, defaultLimit)
	if r.err != nil {
		t.Fatalf("Exec(%s) interrupted: error %v", describe(req), r.err)
	}
	want := engine.Status{ExitCode: 130, Signal: "SIGINT"}
	if r.st != want {
		t.Errorf("Exec(%s) interrupted by Ctrl-C: status %+v, want %+v (SIGINT first, not TERM)", describe(req), r.st, want)
	}
	if r.elapsed > 4*time.Second {
		t.Errorf("Exec(%s) took %v to end after Ctrl-C", describe(req), r.elapsed)
	}
}

// A second Ctrl-C cuts the grace period short: a step that ignores INT and
// TERM is KILLed at once, not after its (long) grace.
func testInterruptHurried(t *testing.T, h Harness) {
	a, sb := h.New(t)
	// The step says when it is ready and when the first Ctrl-C reached it
	// (and changed nothing); then comes the second.
	out := &lineWaiter{want: "up", seen: make(chan struct{})}
	ctx, hurry, stop := interrupted(out)
	defer stop()
	got := &lineWaiter{want: "got INT", seen: make(chan struct{})}
	out.also = got
	onLine(got, func() { close(hurry) })
	req := engine.ExecRequest{Argv: []string{"sh", "-c", `trap "echo got INT" INT; trap "" TERM; echo up; while :; do sleep 0.1; done`},
		Grace: 30 * time.Second, Stdout: out}
	r := exec(t, ctx, a, sb, req, defaultLimit)
	if r.err != nil {
		t.Fatalf("Exec(%s) interrupted twice: error %v", describe(req), r.err)
	}
	if r.st.ExitCode != 137 {
		t.Errorf("Exec(%s) interrupted twice: status %+v, want 137 (KILLed)", describe(req), r.st)
	}
	if r.elapsed > 10*time.Second {
		t.Errorf("Exec(%s) took %v after a second Ctrl-C: the 30s grace was not cut short", describe(req), r.elapsed)
	}
}

// lineWaiter is a writer that tells when a line has been written (and
// passes what it gets on to also, when set).
type lineWaiter struct {
	syncBuffer
	want string
	seen chan struct{}
	once sync.Once
	also *lineWaiter
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if bytes.Contains(w.Bytes(), []byte(w.want)) {
		w.once.Do(func() { close(w.seen) })
	}
	if w.also != nil {
		w.also.Write(p)
	}
	return n, err
}

// A TTY step runs on a terminal of the requested size, gets its input and
// passes its status through.
func testTTY(t *testing.T, h Harness) {
	a, sb := h.New(t)
	sizes := make(chan engine.WinSize, 1)
	sizes <- engine.WinSize{Rows: 33, Cols: 101}
	close(sizes)
	req := engine.ExecRequest{
		Argv: []string{"sh", "-c", `test -t 0 && test -t 1 && echo is-a-tty; stty size; read x; echo "got:$x"; exit 7`},
		TTY:  true, Resize: sizes, Stdin: strings.NewReader("hello\n"),
	}
	r := mustExec(t, context.Background(), a, sb, req)
	out := string(r.stdout)
	if r.st.ExitCode != 7 {
		t.Errorf("Exec(%s): status %+v, want 7\noutput: %q", describe(req), r.st, out)
	}
	for _, want := range []string{"is-a-tty", "33 101", "got:hello"} {
		if !strings.Contains(out, want) {
			t.Errorf("Exec(%s): output %q lacks %q", describe(req), out, want)
		}
	}
	if len(r.stderr) != 0 {
		t.Errorf("Exec(%s): a terminal is one stream, but stderr got %q", describe(req), r.stderr)
	}
}

// A window resize reaches the step (SIGWINCH and the new size).
func testTTYResize(t *testing.T, h Harness) {
	a, sb := h.New(t)
	sizes := make(chan engine.WinSize, 1)
	sizes <- engine.WinSize{Rows: 20, Cols: 80}
	out := &lineWaiter{want: "ready", seen: make(chan struct{})}
	req := engine.ExecRequest{
		Argv:   []string{"sh", "-c", `trap 'stty size; exit 0' WINCH; echo ready; i=0; while [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; exit 9`},
		TTY:    true,
		Resize: sizes,
		Stdout: out,
	}
	go func() {
		defer close(sizes)
		select {
		case <-out.seen:
			sizes <- engine.WinSize{Rows: 50, Cols: 120}
		case <-time.After(15 * time.Second):
		}
	}()
	r := mustExec(t, context.Background(), a, sb, req)
	if got := string(out.Bytes()); r.st.ExitCode != 0 || !strings.Contains(got, "50 120") {
		t.Errorf("Exec(%s) resized to 50x120: status %+v, output %q; want 0 and the new size", describe(req), r.st, got)
	}
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func testBinaryOutput(t *testing.T, h Harness) {
	a, sb := h.New(t)
	var format strings.Builder
	for i := range 256 {
		fmt.Fprintf(&format, `\%03o`, i)
	}
	r := sh(t, a, sb, `printf "$1"; printf "$1" >&2`, func(r *engine.ExecRequest) {
		r.Argv = append(r.Argv, "sh", format.String())
	})
	wantOK(t, "printf of all 256 byte values", r)
	want := allBytes()
	if !bytes.Equal(r.stdout, want) {
		t.Errorf("stdout of all 256 byte values:\n got % x\nwant % x", r.stdout, want)
	}
	if !bytes.Equal(r.stderr, want) {
		t.Errorf("stderr of all 256 byte values:\n got % x\nwant % x", r.stderr, want)
	}
}

func testBinaryStdin(t *testing.T, h Harness) {
	a, sb := h.New(t)
	// 1 MiB, more than any pipe buffer, so a provider that feeds all of
	// stdin before reading stdout deadlocks here.
	in := bytes.Repeat(allBytes(), 4096)
	r := mustExec(t, context.Background(), a, sb, engine.ExecRequest{Argv: []string{"cat"}, Stdin: bytes.NewReader(in)})
	wantOK(t, "cat of 1 MiB of binary stdin", r)
	if !bytes.Equal(r.stdout, in) {
		i := 0
		for i < len(r.stdout) && i < len(in) && r.stdout[i] == in[i] {
			i++
		}
		t.Errorf("cat echoed %d bytes of the %d binary bytes given on stdin; first difference at offset %d", len(r.stdout), len(in), i)
	}
}

// countingWriter counts and drops what it is given.
type countingWriter struct{ n atomic.Int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

func testLargeOutput(t *testing.T, h Harness) {
	a, sb := h.New(t)
	const size = 100 << 20
	const maxGrowth = 32 << 20

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	peak.Store(base)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > peak.Load() {
					peak.Store(ms.HeapAlloc)
				}
			}
		}
	}()

	var out, errw countingWriter
	req := engine.ExecRequest{
		Argv:   []string{"head", "-c", strconv.Itoa(size), "/dev/zero"},
		Stdout: &out,
		Stderr: &errw,
	}
	r := exec(t, context.Background(), a, sb, req, 2*time.Minute)
	close(stop)
	<-sampled
	if r.err != nil {
		t.Fatalf("Exec(%s): %v", describe(req), r.err)
	}
	wantOK(t, "100 MiB of output", r)
	if got := out.n.Load(); got != size {
		t.Errorf("stdout carried %d bytes, want exactly %d", got, size)
	}
	if got := errw.n.Load(); got != 0 {
		t.Errorf("stderr carried %d bytes, want none", got)
	}
	growth := int64(peak.Load()) - int64(base)
	if growth > maxGrowth {
		t.Errorf("heap grew by %d MiB while streaming 100 MiB of output (limit %d MiB): output must be streamed, not buffered", growth>>20, maxGrowth>>20)
	}
	t.Logf("100 MiB in %v, peak heap growth %d KiB", r.elapsed, growth>>10)
}

func testNotFound(t *testing.T, h Harness) {
	a, sb := h.New(t)
	for _, argv := range [][]string{
		{"xmode-enginetest-no-such-command"},
		{"./xmode-enginetest-no-such-file"},
		{"sh", "-c", "xmode-enginetest-no-such-command"},
	} {
		req := engine.ExecRequest{Argv: argv}
		r := mustExec(t, context.Background(), a, sb, req)
		if r.st.ExitCode != 127 {
			t.Errorf("Exec(%s): status %+v, want ExitCode 127 (command not found)", describe(req), r.st)
		}
		if len(bytes.TrimSpace(r.stderr)) == 0 {
			t.Errorf("Exec(%s): nothing on stderr; want a message saying the command was not found", describe(req))
		}
	}
}

func testNotExecutable(t *testing.T, h Harness) {
	a, sb := h.New(t)
	// A file made by redirection has no x bit (0666 &^ umask).
	wantOK(t, "writing a script without x bit", sh(t, a, sb, `printf '#!/bin/sh\necho ran\n' > noexec.sh; mkdir -p adir`))
	for _, argv := range [][]string{{"./noexec.sh"}, {"./adir"}} {
		req := engine.ExecRequest{Argv: argv}
		r := mustExec(t, context.Background(), a, sb, req)
		if r.st.ExitCode != 126 {
			t.Errorf("Exec(%s): status %+v, want ExitCode 126 (found but not executable)\nstdout: %q\nstderr: %q", describe(req), r.st, r.stdout, r.stderr)
		}
		if len(bytes.TrimSpace(r.stderr)) == 0 {
			t.Errorf("Exec(%s): nothing on stderr; want a message saying why it could not be executed", describe(req))
		}
		if bytes.Contains(r.stdout, []byte("ran")) {
			t.Errorf("Exec(%s): the file without x bit ran anyway", describe(req))
		}
	}
}

func testStdin(t *testing.T, h Harness) {
	a, sb := h.New(t)
	r := mustExec(t, context.Background(), a, sb, engine.ExecRequest{
		Argv:  []string{"cat"},
		Stdin: strings.NewReader("hello stdin\nsecond line"),
	})
	wantOK(t, "cat with stdin", r)
	if got, want := string(r.stdout), "hello stdin\nsecond line"; got != want {
		t.Errorf("cat echoed %q, want the request's stdin %q", got, want)
	}

	// No stdin: the step must see end of input at once, not the test's
	// own stdin and not a pipe nobody closes.
	req := engine.ExecRequest{Argv: []string{"cat"}}
	r = exec(t, context.Background(), a, sb, req, 10*time.Second)
	if r.err != nil {
		t.Fatalf("Exec(%s) without stdin: %v", describe(req), r.err)
	}
	wantOK(t, "cat without stdin", r)
	if len(r.stdout) != 0 {
		t.Errorf("cat without stdin printed %q, want nothing", clip(r.stdout))
	}
}

func testConcurrent(t *testing.T, h Harness) {
	a, sb := h.New(t)
	const n = 8
	const lines = 200
	const script = `i=0; while [ $i -lt ` + "200" + ` ]; do echo "$1 line $i"; echo "$1 err $i" >&2; i=$((i+1)); done; printf '%s' "$XMODE_ENGINETEST_JOB" > "out-$1.txt"`
	expect := func(job string, stream string) string {
		var b strings.Builder
		for i := range lines {
			if stream == "out" {
				fmt.Fprintf(&b, "%s line %d\n", job, i)
			} else {
				fmt.Fprintf(&b, "%s err %d\n", job, i)
			}
		}
		return b.String()
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errb syncBuffer
			req := engine.ExecRequest{
				Argv:   []string{"sh", "-c", script, "sh", fmt.Sprintf("job%d", i)},
				Env:    []string{fmt.Sprintf("XMODE_ENGINETEST_JOB=%d", i)},
				Stdout: &out,
				Stderr: &errb,
			}
			start := time.Now()
			st, err := a.Exec(context.Background(), sb, req)
			results[i] = result{st: st, err: err, stdout: out.Bytes(), stderr: errb.Bytes(), elapsed: time.Since(start)}
		}()
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(defaultLimit):
		t.Fatalf("%d concurrent Execs on one sandbox did not all return within %v", n, defaultLimit)
	}
	for i, r := range results {
		job := fmt.Sprintf("job%d", i)
		if r.err != nil {
			t.Errorf("concurrent Exec %s: error %v", job, r.err)
			continue
		}
		if r.st != (engine.Status{}) {
			t.Errorf("concurrent Exec %s: status %+v, want exit 0\nstderr: %q", job, r.st, clip(r.stderr))
		}
		if got, want := string(r.stdout), expect(job, "out"); got != want {
			t.Errorf("concurrent Exec %s: stdout is not its own output:\n%s", job, clip(r.stdout))
		}
		if got, want := string(r.stderr), expect(job, "err"); got != want {
			t.Errorf("concurrent Exec %s: stderr is not its own output:\n%s", job, clip(r.stderr))
		}
	}
	if t.Failed() {
		return
	}
	r := sh(t, a, sb, `for i in 0 1 2 3 4 5 6 7; do cat "out-job$i.txt"; echo; done`)
	wantOK(t, "reading the concurrent steps' files", r)
	if got, want := string(r.stdout), "0\n1\n2\n3\n4\n5\n6\n7\n"; got != want {
		t.Errorf("files written by the concurrent steps with their own env hold %q, want %q", got, want)
	}
}

func testDestroy(t *testing.T, h Harness) {
	a, sb := h.New(t)
	wantOK(t, "a step before Destroy", sh(t, a, sb, "echo hi > f.txt"))
	ctx := context.Background()
	if err := a.Destroy(ctx, sb); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := a.Destroy(ctx, sb); err != nil {
		t.Fatalf("a second Destroy of the same sandbox: %v; destroying what is already gone must not be an error", err)
	}
}
