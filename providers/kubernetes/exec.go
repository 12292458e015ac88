package kubernetes

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/providers/internal/stepshell"
)

// A step is one pods/exec. The exec API takes a command and nothing else —
// no environment, no working directory — and its command line is in the
// request's URL, which the apiserver's audit log records: so the step's
// environment (an agent's API key among it), its directory and its argv go
// over the exec's stdin instead, as a set-up the shell below reads (a line
// at a time: the shell's read takes no byte past the line, so the step's
// own input follows untouched), ending with a random sentinel line. Then
// it execs the step's wrapper (stepshell.Wrapper) with the environment
// exported, so the wrapper's own /proc/PID/environ carries the step's tag
// and the kill helper finds it. A step on a terminal cannot have its
// set-up on stdin (the terminal would echo it): a helper exec writes it to
// a file of the pod's /tmp that only the sandbox user reads, and the step
// sources and removes it.
const setupReader = `ok=; s=
while IFS= read -r l; do
	if [ "$l" = "$1" ]; then ok=1; break; fi
	s="$s$l
"
done
[ -n "$ok" ] || { echo "` + setupFailed + `its set-up did not arrive" >&2; exit 125; }
eval "$s"
exec /bin/sh -c "$0" xmode-step "$@"`

// setupFile runs a terminal step's set-up from the file $1.
const setupFile = `f=$1
[ -f "$f" ] || { echo "` + setupFailed + `its set-up did not arrive" >&2; exit 125; }
. "$f"
rm -f -- "$f"
exec /bin/sh -c "$0" xmode-step "$@"`

// writeSetup writes a terminal step's set-up, read from stdin, to $1, a new
// file only the sandbox user may read.
const writeSetup = `umask 077; set -C
while IFS= read -r l; do printf '%s\n' "$l"; done >"$1"`

// setupFailed starts the message of a set-up that failed before the step's
// command could run: Exec reports it as xmode's failure (exit 125).
const setupFailed = "xmode: cannot run the step: "

// waitStarted exits 0 once the step tagged $1 has forked its command (a
// process whose parent is the step's tagged wrapper, itself an exec root),
// 3 when that has not happened within 10 s; builtins but for sleep.
const waitStarted = `tag=$1; E=` + engine.ExecTagEnv + `; i=0
while [ "$i" -lt 400 ]; do
	root=
	for d in /proc/[0-9]*; do
		read -r st <"$d/stat" 2>/dev/null || continue
		set -- ${st##*) }
		[ "$2" = 0 ] || continue
		while IFS= read -r l || [ -n "$l" ]; do
			case $l in *"$E=$tag"*) root=${d#/proc/}; break;; esac
		done <"$d/environ" 2>/dev/null
		[ -n "$root" ] && break
	done
	if [ -n "$root" ]; then
		for d in /proc/[0-9]*; do
			read -r st <"$d/stat" 2>/dev/null || continue
			set -- ${st##*) }
			[ "$2" = "$root" ] && exit 0
		done
	fi
	sleep 0.025 2>/dev/null || sleep 1
	i=$((i+1))
done
exit 3`

// oomCount prints the container's OOM-kill counter: memory.events on
// cgroup v2, memory.oom_control on v1; "-" when neither can be read.
const oomCount = `for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
	[ -r "$f" ] || continue
	while read -r k v; do [ "$k" = oom_kill ] && { echo "$v"; exit 0; }; done <"$f"
done
echo -`

// Exec runs one step in the session's pod and returns its status (the
// design's raw triple: output to the request's writers). A timeout or a
// cancelled ctx ends the step's processes through the kill helper (its
// signal first — TERM, or the one that interrupted xmode — KILL after the
// grace period); a timeout reports 124. An error means xmode could not run
// the step (the cluster unreachable: exit 5; the pod gone; no /bin/sh).
func (p *Provider) Exec(ctx context.Context, sb engine.Sandbox, req engine.ExecRequest) (engine.Status, error) {
	if len(req.Argv) == 0 {
		return engine.Status{}, fail.Usagef("no command to run: give one after --")
	}
	pod, err := p.runningPod(ctx, sb)
	if err != nil {
		return engine.Status{}, err
	}
	dir, err := execDir(sb.Worktree, req.Workdir)
	if err != nil {
		return engine.Status{}, err
	}
	tag := stepshell.Tag(req.Tag)
	setup, err := setupScript(req.Env, tag, dir, req.Argv)
	if err != nil {
		return engine.Status{}, err
	}
	wrapper := stepshell.Wrapper
	s := &step{p: p, ctx: ctx, pod: pod.Name, tag: tag, req: req}
	if req.TTY {
		// Ctrl-C on the terminal signals its foreground group, the wrapper
		// included: a handler (reset to the default in the command) keeps
		// the wrapper alive to sweep up and report the command's status.
		wrapper = "trap : INT QUIT; " + wrapper
		select {
		case ws, ok := <-req.Resize:
			if ok {
				// The API sets the size once the exec runs, maybe after
				// the command asked for it: the step sets it itself first.
				s.first = &ws
				setup = fmt.Sprintf("stty rows %d cols %d 2>/dev/null\n", ws.Rows, ws.Cols) + setup
			}
		default:
		}
		file := path.Join(p.cfg.TmpfsPath, ".xmode-step-"+tag)
		code, out, err := p.runHelper(ctx, pod.Name, []string{"/bin/sh", "-c", writeSetup, "xmode-setup", file}, strings.NewReader(setup), 30*time.Second)
		if err != nil {
			return engine.Status{}, err
		}
		if code != 0 {
			return engine.Status{}, fail.Failedf("could not hand the step its set-up in pod %s (exit %d): %s", pod.Name, code, strings.TrimSpace(out))
		}
		s.cmd = []string{"/bin/sh", "-c", setupFile, wrapper, file}
		s.stdin = req.Stdin
	} else {
		sentinel := newSentinel(setup)
		s.cmd = []string{"/bin/sh", "-c", setupReader, wrapper, sentinel}
		in := []io.Reader{strings.NewReader(setup + sentinel + "\n")}
		if req.Stdin != nil {
			in = append(in, req.Stdin)
		}
		s.stdin = io.MultiReader(in...)
	}
	return s.run()
}

// setupScript is what a step's shell runs before its wrapper: the
// environment exported (the tag last, so it wins), the working directory,
// the argv as the positional parameters.
func setupScript(env []string, tag, dir string, argv []string) (string, error) {
	var b strings.Builder
	for _, kv := range append(append([]string(nil), env...), engine.ExecTagEnv+"="+tag) {
		k, v, _ := strings.Cut(kv, "=")
		if !shellName(k) {
			return "", fail.Usagef("%q is not a variable name a step's shell can set: use letters, digits and '_', not starting with a digit", k)
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	fmt.Fprintf(&b, "cd -- %s 2>/dev/null || { echo %s >&2; exit 125; }\n", shellQuote(dir), shellQuote(setupFailed+"no directory "+dir+" in the sandbox's worktree"))
	b.WriteString("set --")
	for _, a := range argv {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString("\n")
	return b.String(), nil
}

// newSentinel is a line the set-up does not contain.
func newSentinel(setup string) string {
	for {
		var r [12]byte
		_, _ = rand.Read(r[:])
		s := "xmode-end-" + hex.EncodeToString(r[:])
		if !strings.Contains(setup, s) {
			return s
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shellName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// execDir maps --workdir (relative to the worktree, or an absolute host path
// inside it as fsguard.ResolveWorkdir returns) into the pod.
func execDir(worktree, rel string) (string, error) {
	if rel == "" || rel == "." {
		return Worktree, nil
	}
	if filepath.IsAbs(rel) {
		r, err := filepath.Rel(worktree, rel)
		if worktree == "" || err != nil {
			return "", fail.Usagef("%s %q is not inside the worktree %s", fail.Workdir, rel, worktree)
		}
		rel = r
	}
	clean := path.Clean(filepath.ToSlash(rel))
	if clean == ".." || strings.HasPrefix(clean, "../") || path.IsAbs(clean) {
		return "", fail.Usagef("%s %q escapes the worktree", fail.Workdir, rel)
	}
	return path.Join(Worktree, clean), nil
}

// step is one running exec.
type step struct {
	p     *Provider
	ctx   context.Context
	pod   string
	tag   string
	req   engine.ExecRequest
	cmd   []string
	stdin io.Reader
	first *engine.WinSize // a terminal's first size, taken from req.Resize
}

func (s *step) grace() time.Duration {
	if s.req.Grace > 0 {
		return s.req.Grace
	}
	return engine.DefaultGrace
}

func (s *step) run() (engine.Status, error) {
	p := s.p
	bg := context.WithoutCancel(s.ctx)
	// The stream outlives a cancelled ctx: the step's output keeps flowing
	// while its processes are being ended.
	sctx, stopStream := context.WithCancel(bg)
	defer stopStream()
	// The head of stderr (a terminal's one stream) tells a set-up that
	// failed from the command's own exit 125.
	head := &headBuffer{limit: 1 << 10}
	stdout := &streamWriter{w: orDiscard(s.req.Stdout)}
	stderr := &streamWriter{w: io.MultiWriter(head, orDiscard(s.req.Stderr))}
	r := streamReq{cmd: s.cmd, stdin: s.stdin, stdout: stdout, stderr: stderr}
	if s.req.TTY {
		stdout.w = io.MultiWriter(head, orDiscard(s.req.Stdout))
		r.tty, r.stderr = true, nil
		r.sizes = sizeQueue(s.first, s.req.Resize)
	}
	if s.req.TTY && r.stdin != nil {
		// On a terminal the end of input is a key (Ctrl-D), sent already:
		// the end of the reader must not end the exec's stdin, which the
		// kubelet takes for the end of the terminal (its output cut off).
		r.stdin = &holdOpen{r: r.stdin, done: sctx.Done()}
	}
	done := make(chan error, 1)
	go func() { done <- p.stream(sctx, s.pod, r) }()
	var timer <-chan time.Time
	if s.req.Timeout > 0 {
		t := time.NewTimer(s.req.Timeout)
		defer t.Stop()
		timer = t.C
	}
	var err error
	ended := false
	if s.req.Started != nil {
		// Only once the wrapper has forked the command can the kill helper
		// find it by its tag (a helper exec, for a caller that asked:
		// sandbox.ExecDetached).
		err, ended = s.waitCommand(bg, done)
		s.req.Started()
	}
	timedOut, interrupted := false, false
	if !ended {
		select {
		case err = <-done:
		case <-timer:
			timedOut = true
		case <-s.ctx.Done():
			interrupted = true
		}
	}
	if timedOut || interrupted {
		sig := syscall.SIGTERM
		var hurry <-chan struct{}
		if interrupted {
			sig, hurry = engine.StopSignal(s.ctx)
		}
		err = s.end(bg, done, stopStream, sig, hurry)
	}
	code, serr := exitCode(err)
	if serr != nil {
		if fail.KindOf(serr) == fail.EngineUnavailable {
			return engine.Status{}, serr
		}
		return engine.Status{}, fail.Failedf("the sandbox could not run the step (%v): xmode runs every step through /bin/sh, which the image must have; the pod may also be out of processes or memory, or gone", serr)
	}
	if code == 125 && strings.HasPrefix(head.String(), setupFailed) {
		return engine.Status{}, fail.Failedf("%s", strings.TrimSpace(strings.TrimPrefix(head.String(), "xmode: ")))
	}
	status := engine.Status{ExitCode: code}
	if code > 128 && code < 128+65 {
		status.Signal = signalName(code - 128)
	}
	switch {
	case timedOut:
		status.ExitCode, status.TimedOut = 124, true
	case code == 137 && !interrupted:
		status.OOMKilled = p.oomKilled(bg, s.pod)
	}
	return status, nil
}

// exitCode is the status of a finished exec: 0 without an error, the
// command's code from the error stream, else the error (the exec failed).
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code, nil
	}
	var ee utilexec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitStatus(), nil
	}
	return 0, err
}

// end ends a step that timed out or was interrupted and waits for its exec
// to end. A deadline can come before the step's wrapper runs (its set-up
// is still being read); the kill helper then finds nothing, so it is run
// again each second until the exec ends.
func (s *step) end(ctx context.Context, done <-chan error, stopStream func(), sig syscall.Signal, hurry <-chan struct{}) error {
	if hurry != nil {
		// A second Ctrl-C: KILL now, beside the helper still in its grace.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-hurry:
				_ = s.p.endProcesses(ctx, s.pod, s.tag, 0, syscall.SIGKILL)
			case <-stop:
			}
		}()
	}
	giveUp := time.Now().Add(15*time.Second + s.grace())
	for {
		err := s.p.endProcesses(ctx, s.pod, s.tag, s.grace(), sig)
		if err != nil && fail.KindOf(err) == fail.EngineUnavailable {
			stopStream()
			<-done
			return err
		}
		select {
		case r := <-done:
			return r
		case <-time.After(time.Second):
		}
		if time.Now().After(giveUp) {
			s.p.warnf("a step of pod %s did not end after KILL; closing its stream", s.pod)
			stopStream()
			<-done
			return utilexec.CodeExitError{Err: errors.New("killed"), Code: 137}
		}
	}
}

// waitCommand waits (10 s at most) until the step's wrapper has forked its
// command: before that a kill by its tag finds only the wrapper, which it
// spares, and the command would start after the kill. When the exec ends
// meanwhile, its result comes back with ended set.
func (s *step) waitCommand(ctx context.Context, done <-chan error) (err error, ended bool) {
	hctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	res := make(chan struct{})
	go func() {
		_, _, _ = s.p.runHelper(hctx, s.pod, []string{"/bin/sh", "-c", waitStarted, "xmode-started", s.tag}, nil, 15*time.Second)
		close(res)
	}()
	select {
	case <-res:
		return nil, false
	case err = <-done:
		cancel()
		<-res
		return err, true
	}
}

// oomKilled reports whether the container's memory cgroup killed a process
// since xmode last looked: its OOM-kill counter, read by a helper exec,
// against the count the pod's annotation says was reported already. The
// container status's OOMKilled covers only the main process (the
// keep-alive), as docker's does.
func (p *Provider) oomKilled(ctx context.Context, name string) bool {
	code, out, err := p.runHelper(ctx, name, []string{"/bin/sh", "-c", oomCount}, nil, 10*time.Second)
	n, perr := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || code != 0 || perr != nil {
		return false
	}
	c, err := p.client()
	if err != nil {
		return false
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	pod, err := c.getPod(cctx, name)
	if err != nil {
		return false
	}
	seen, _ := strconv.Atoi(pod.Annotations[AnnotationOOMKills])
	if n <= seen {
		return false
	}
	_, _ = c.patchPod(cctx, name, annotationPatch(AnnotationOOMKills, strconv.Itoa(n)))
	return true
}

// endProcesses runs the kill helper in the pod: sig (and CONT) to every
// process of the step, KILL after grace. An error means it could not run
// or something survived.
func (p *Provider) endProcesses(ctx context.Context, pod, tag string, grace time.Duration, sig syscall.Signal) error {
	tenths := int((grace + 99*time.Millisecond) / (100 * time.Millisecond))
	cmd := []string{"/bin/sh", "-c", stepshell.Kill, "xmode-kill", tag, strconv.Itoa(tenths), strings.TrimPrefix(signalName(int(sig)), "SIG")}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
		}
		code, out, err := p.runHelper(ctx, pod, cmd, nil, grace+30*time.Second)
		switch {
		case err != nil && fail.KindOf(err) == fail.EngineUnavailable:
			return err
		case err != nil:
			last = err
		case code == 0:
			return nil
		case code == 3:
			return fmt.Errorf("processes of the step survived KILL (%s)", strings.TrimSpace(out))
		default:
			last = fmt.Errorf("the kill helper exited %d: %s", code, strings.TrimSpace(out))
		}
	}
	return last
}

// KillStep ends the processes of one step in the session's pod by its tag,
// as a timeout does: for a step whose xmode is gone (the reaper, teardown).
// A pod that is gone or ended has nothing left to end.
func (p *Provider) KillStep(ctx context.Context, sb engine.Sandbox, tag string) error {
	return p.SignalStep(ctx, sb, tag, syscall.SIGTERM, engine.DefaultGrace)
}

// SignalStep is KillStep with the first signal and the grace period of the
// caller's choosing (engine.StepSignaler).
func (p *Provider) SignalStep(ctx context.Context, sb engine.Sandbox, tag string, sig syscall.Signal, grace time.Duration) error {
	if tag == "" || sb.SessionID == "" {
		return nil
	}
	pod, err := p.ownedPod(ctx, sb)
	if err != nil {
		if errors.Is(err, errPodGone) {
			return nil
		}
		return err
	}
	if ok, _, _ := podStarted(pod); !ok {
		return nil
	}
	return p.endProcesses(ctx, pod.Name, stepshell.Tag(tag), grace, sig)
}

// Containment says how a kubernetes step is contained (engine.StepContainer).
func (p *Provider) Containment() engine.Containment {
	return engine.Containment{
		Method: "pod",
		Detail: "each step runs in the session's pod (its own PID namespace); when it ends, every process there that belongs to no running step is KILLed, and a killed xmode's step is ended by `sandbox stop` or `xmode reap` — or with the pod, at its deadline",
	}
}

// streamReq is one exec's command and streams.
type streamReq struct {
	container      string // "": the sandbox's
	cmd            []string
	stdin          io.Reader
	stdout, stderr io.Writer
	tty            bool
	sizes          remotecommand.TerminalSizeQueue
}

// stream runs one exec in the pod's container through the API: WebSocket
// first, SPDY when the apiserver (or a proxy on the way) does not upgrade
// to it, as kubectl does.
func (p *Provider) stream(ctx context.Context, pod string, r streamReq) error {
	c, err := p.client()
	if err != nil {
		return err
	}
	opts := &corev1.PodExecOptions{Container: cmp.Or(r.container, containerName), Command: r.cmd, Stdin: r.stdin != nil, Stdout: r.stdout != nil, Stderr: r.stderr != nil, TTY: r.tty}
	u := c.core.Post().Namespace(c.ns).Resource("pods").Name(pod).SubResource("exec").VersionedParams(opts, c.codec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(c.rest, "GET", u.String())
	if err != nil {
		return fmt.Errorf("exec in pod %s: %w", pod, err)
	}
	sp, err := remotecommand.NewSPDYExecutor(c.rest, "POST", u)
	if err != nil {
		return fmt.Errorf("exec in pod %s: %w", pod, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return fmt.Errorf("exec in pod %s: %w", pod, err)
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: r.stdin, Stdout: r.stdout, Stderr: r.stderr, Tty: r.tty, TerminalSizeQueue: r.sizes})
	if _, xerr := exitCode(err); err != nil && xerr != nil {
		return p.wrap(err, "exec in pod "+pod)
	}
	return err
}

// runHelper runs a short command of xmode's own in the pod and returns its
// exit code and (bounded) output.
func (p *Provider) runHelper(ctx context.Context, pod string, cmd []string, stdin io.Reader, limit time.Duration) (int, string, error) {
	hctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	out := &headBuffer{limit: 64 << 10}
	err := p.stream(hctx, pod, streamReq{cmd: cmd, stdin: stdin, stdout: out, stderr: out})
	code, xerr := exitCode(err)
	if xerr != nil {
		if hctx.Err() != nil && ctx.Err() == nil {
			return 0, out.String(), fmt.Errorf("helper exec in pod %s did not finish within %s", pod, limit)
		}
		return 0, out.String(), xerr
	}
	return code, out.String(), nil
}

// holdOpen reads r and, at its end, blocks until done instead of saying so.
type holdOpen struct {
	r    io.Reader
	done <-chan struct{}
}

func (h *holdOpen) Read(b []byte) (int, error) {
	n, err := h.r.Read(b)
	if err == io.EOF {
		if n > 0 {
			return n, nil
		}
		<-h.done
	}
	return n, err
}

// sizeQueue turns the request's window sizes (first, taken from them
// already, then the rest) into remotecommand's queue.
func sizeQueue(first *engine.WinSize, sizes <-chan engine.WinSize) remotecommand.TerminalSizeQueue {
	if first == nil && sizes == nil {
		return nil
	}
	return &winSizes{first: first, rest: sizes}
}

type winSizes struct {
	first *engine.WinSize
	rest  <-chan engine.WinSize
}

func (w *winSizes) Next() *remotecommand.TerminalSize {
	if f := w.first; f != nil {
		w.first = nil
		return &remotecommand.TerminalSize{Width: f.Cols, Height: f.Rows}
	}
	if w.rest == nil {
		return nil
	}
	ws, ok := <-w.rest
	if !ok {
		return nil
	}
	return &remotecommand.TerminalSize{Width: ws.Cols, Height: ws.Rows}
}

// signalName is the conventional name of signal n ("SIGTERM").
func signalName(n int) string {
	if name := unix.SignalName(syscall.Signal(n)); name != "" {
		return name
	}
	return "SIG" + strconv.Itoa(n)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// streamWriter passes output on and counts it; after the first write error
// (a closed terminal, a full disk) it drops the rest, so the step still runs
// to its end instead of stalling the stream.
type streamWriter struct {
	w      io.Writer
	n      atomic.Int64
	failed bool
}

func (s *streamWriter) Write(b []byte) (int, error) {
	s.n.Add(int64(len(b)))
	if !s.failed {
		if _, err := s.w.Write(b); err != nil {
			s.failed = true
		}
	}
	return len(b), nil
}

// headBuffer keeps the first limit bytes written to it and drops the rest.
type headBuffer struct {
	limit int
	mu    sync.Mutex
	buf   bytes.Buffer
}

func (h *headBuffer) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.limit - h.buf.Len(); room > 0 {
		h.buf.Write(b[:min(room, len(b))])
	}
	return len(b), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.String()
}

// errPodGone: the session's pod no longer exists (or is not the one made).
var errPodGone = errors.New("is gone")

// ownedPod gets the session's pod and checks that it is xmode's, the
// session's and, when the session recorded one, of the recorded UID.
func (p *Provider) ownedPod(ctx context.Context, sb engine.Sandbox) (*corev1.Pod, error) {
	if !fsguard.ValidID("sbx_", sb.SessionID) {
		return nil, fail.Refusedf("session id %q is malformed: refusing to derive a pod name from it", sb.SessionID)
	}
	name, uid, err := podRef(sb)
	if err != nil {
		return nil, err
	}
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	pod, err := c.getPod(cctx, name)
	if notFound(err) {
		return nil, fail.Failedf("the pod of session %s (%s in namespace %s) %w: stop the session and create a new one", sb.SessionID, name, c.ns, errPodGone)
	}
	if err != nil {
		return nil, p.wrap(err, "get pod "+name)
	}
	if uid != "" && string(pod.UID) != uid {
		return nil, fail.Failedf("the pod of session %s (%s) was replaced by another of the same name: its own %w; stop the session", sb.SessionID, name, errPodGone)
	}
	if err := checkOwned(pod.Labels, sb.SessionID); err != nil {
		return nil, err
	}
	return pod, nil
}

// runningPod is ownedPod of a pod whose container runs.
func (p *Provider) runningPod(ctx context.Context, sb engine.Sandbox) (*corev1.Pod, error) {
	pod, err := p.ownedPod(ctx, sb)
	if err != nil {
		return nil, err
	}
	if ok, why, _ := podStarted(pod); !ok {
		if pod.Status.Phase == corev1.PodSucceeded || keepAliveExited(pod) {
			why = "it ended at its deadline (" + pod.Annotations[AnnotationDeadline] + ", the session's expiry plus XMODE_KUBE_DEADLINE_GRACE), as a sandbox no xmode reaped does"
		}
		if why == "" {
			why = "it is " + strings.ToLower(string(pod.Status.Phase))
		}
		return nil, fail.Failedf("the pod of session %s (%s) is not running: %s — stop the session and create a new one", sb.SessionID, pod.Name, why)
	}
	return pod, nil
}

// keepAliveExited reports whether the pod's keep-alive exited by itself
// (0: its deadline passed), before the pod's phase says so.
func keepAliveExited(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// checkOwned refuses a pod that is not the session's: a stale or tampered
// session row must not run commands in somebody else's pod.
func checkOwned(labels map[string]string, sessionID string) error {
	if labels[LabelManaged] != "true" {
		return fail.Refusedf("the pod is not managed by xmode (no %s=true label): refusing to touch it", LabelManaged)
	}
	if sessionID != "" && labels[LabelSession] != sessionID {
		return fail.Refusedf("the pod belongs to session %q, not %s: refusing to touch it", labels[LabelSession], sessionID)
	}
	return nil
}
