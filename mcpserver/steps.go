package mcpserver

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// A sandbox's steps: sandbox_exec (waited for, or in the background),
// step_status, step_logs, step_kill.

// stepView is a step as the tools show it.
type stepView struct {
	Step       int      `json:"step"`
	Name       string   `json:"name"`
	Argv       []string `json:"argv"`
	State      string   `json:"state" jsonschema:"running, finished or lost"`
	ExitCode   *int     `json:"exit_code"`
	Signal     string   `json:"signal,omitempty"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	StartedAt  string   `json:"started_at"`
	DurationMS *int64   `json:"duration_ms"`
	Background bool     `json:"background,omitempty" jsonschema:"started with sandbox_exec's background"`
	StoppedBy  string   `json:"stopped_by,omitempty" jsonschema:"what ended it early: sandbox kill (step_kill) or sandbox stop"`
	LostReason string   `json:"lost_reason,omitempty" jsonschema:"why a lost step's end is unknown"`
}

func viewStep(r store.StepRow) stepView {
	v := stepView{Step: r.Seq, Name: r.Name, Argv: r.Argv, State: r.State, ExitCode: r.ExitCode, Signal: r.Signal,
		TimedOut: r.TimedOut, StartedAt: stamp(r.StartedAt), Background: r.Detached, StoppedBy: r.StoppedBy, LostReason: r.LostReason}
	if v.Argv == nil {
		v.Argv = []string{}
	}
	if r.FinishedAt != nil {
		v.DurationMS = ptr(r.FinishedAt.Sub(r.StartedAt).Milliseconds())
	}
	return v
}

// execIn is sandbox_exec's input.
type execIn struct {
	Session        string   `json:"session" jsonschema:"the sandbox's ID"`
	Command        string   `json:"command,omitempty" jsonschema:"a shell command line, run by /bin/sh -c in the sandbox (give this or argv)"`
	Argv           []string `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell (give this or command)"`
	Workdir        string   `json:"workdir,omitempty" jsonschema:"directory to run in, relative to the worktree (default: its top)"`
	TimeoutSeconds int      `json:"timeout_seconds,omitempty" jsonschema:"end the command after this many seconds (default 600)"`
	Env            []string `json:"env,omitempty" jsonschema:"variables for the command: NAME=VALUE of your own, or the NAME of a variable of the server's environment the user allowed (XMODE_MCP_ENV), whose value is taken from the server and kept out of the evidence and the reply (masked), not out of the command's reach"`
	Name           string   `json:"name,omitempty" jsonschema:"the step's name (letters, digits, . _ -); default: from the command's words"`
	Background     bool     `json:"background,omitempty" jsonschema:"return the step number at once and let the command run on (a server, a watcher): step_status, step_logs and step_kill follow it; no timeout unless timeout_seconds is given"`
}

// execOut is how a step ended, with its output cut to OutputCap a stream.
type execOut struct {
	Step     int    `json:"step" jsonschema:"the step's number in the sandbox (step_status, step_logs)"`
	Name     string `json:"name"`
	State    string `json:"state" jsonschema:"finished, or running for a background step"`
	ExitCode *int   `json:"exit_code" jsonschema:"the command's exit status; null while a background step runs"`
	// Background: the step runs on; FollowAlong is how the user watches it.
	Background  bool     `json:"background,omitempty"`
	FollowAlong []string `json:"follow_along,omitempty" jsonschema:"for a background step: the command the user follows it with"`
	Signal      string   `json:"signal,omitempty"`
	TimedOut    bool     `json:"timed_out,omitempty"`
	OOMKilled   bool     `json:"oom_killed,omitempty"`
	DurationMS  int64    `json:"duration_ms"`
	Stdout      string   `json:"stdout"`
	Stderr      string   `json:"stderr"`
	StdoutBytes int64    `json:"stdout_bytes"`
	StderrBytes int64    `json:"stderr_bytes"`
	// Cut: a stream was longer than OutputCap; its whole log is in the evidence.
	Cut        bool   `json:"cut" jsonschema:"a stream was longer than output_cap: the middle is left out here (read it with step_logs)"`
	OutputCap  int    `json:"output_cap"`
	StdoutPath string `json:"stdout_path"`
	StderrPath string `json:"stderr_path"`
}

func (s *Server) addSandboxExec() {
	add(s, &mcp.Tool{Name: "sandbox_exec", Title: "Run a command in a sandbox",
		Description: `Run one command in the sandbox's worktree and wait for it: give command (a shell string, run by /bin/sh -c in the sandbox: pipes, &&, globs work) or argv (no shell). Returns the exit code, the step number and stdout and stderr — each cut to its first 16 KiB and last 48 KiB when longer (the whole output is in the step's evidence: step_logs). A non-zero exit is a result, not an error. The command runs in the sandbox's engine only: in a docker sandbox, a hardened container; with the host engine, on the user's machine as the user. timeout_seconds bounds it (default 600); a cancelled call ends the step's processes as Ctrl-C would. With background set, the call returns the step number at once while the command goes on (a server, a watcher, a long build): read it with step_status and step_logs, end it with step_kill; it has no timeout unless you give one and ends at the latest with the sandbox; later steps reach a server it starts on localhost. env gives the command variables: NAME=VALUE of your own, or the NAME of a variable of the server's environment the user allowed for MCP clients (XMODE_MCP_ENV; any other is refused), whose value is masked in what is recorded and returned — which keeps it out of the evidence, not away from the command.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)}}, s.sandboxExec)
}

func (s *Server) sandboxExec(ctx context.Context, req *mcp.CallToolRequest, in execIn) (*mcp.CallToolResult, execOut, error) {
	sess, o, err := s.execOptions(ctx, in)
	if err != nil {
		return nil, execOut{}, err
	}
	if in.Background {
		return s.startStep(ctx, sess, o)
	}
	return s.runStep(ctx, req, sess, o)
}

// startStep starts a background step and returns it running.
func (s *Server) startStep(ctx context.Context, sess *store.Session, o sandbox.ExecOptions) (*mcp.CallToolResult, execOut, error) {
	seq, err := s.o.Sandbox.ExecDetached(ctx, sess, o)
	if err != nil {
		return nil, execOut{}, err
	}
	row, err := s.o.Sandbox.Step(ctx, sess, seq)
	if err != nil {
		return nil, execOut{}, err
	}
	v := s.o.Sandbox.ViewStep(row)
	out := execOut{Step: seq, Name: row.Name, State: row.State, ExitCode: row.ExitCode, Background: true, OutputCap: OutputCap,
		StdoutPath: v.StdoutPath, StderrPath: v.StderrPath, Signal: row.Signal, TimedOut: row.TimedOut,
		FollowAlong: []string{s.xmodeCommand("sandbox", "logs", sess.ID, strconv.Itoa(seq), "--follow")}}
	if v.DurationMS != nil {
		out.DurationMS = *v.DurationMS
	}
	text := fmt.Sprintf("step %d (%s) runs in the background (%s): step_status and step_logs (session %s, step %d) read it, step_kill ends it; the user follows it with: %s\n",
		seq, row.Name, row.State, sess.ID, seq, out.FollowAlong[0])
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

// execOptions checks sandbox_exec's input and makes the step's options.
func (s *Server) execOptions(ctx context.Context, in execIn) (*store.Session, sandbox.ExecOptions, error) {
	var o sandbox.ExecOptions
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, o, err
	}
	switch {
	case in.Command != "" && len(in.Argv) > 0:
		return nil, o, fail.Usagef("give command (a shell line) or argv (no shell), not both")
	case in.Command != "":
		if strings.ContainsRune(in.Command, 0) {
			return nil, o, fail.Usagef("command holds a NUL byte, which no shell can take")
		}
		o.Argv = []string{"/bin/sh", "-c", in.Command}
		if in.Name == "" {
			o.Name, _ = evidence.StepName("", strings.Fields(in.Command))
		}
	case len(in.Argv) > 0:
		for _, a := range in.Argv {
			if strings.ContainsRune(a, 0) {
				return nil, o, fail.Usagef("argv holds a NUL byte, which no program can take")
			}
		}
		o.Argv = in.Argv
	default:
		return nil, o, fail.Usagef("give the command to run: command (a shell line, e.g. \"make test\") or argv ([\"make\", \"test\"])")
	}
	if in.Name != "" {
		o.Name = in.Name
	}
	switch {
	case in.TimeoutSeconds < 0 || in.TimeoutSeconds > 7*24*3600:
		return nil, o, fail.Usagef("timeout_seconds %d: give 1 to 604800 (default 600)", in.TimeoutSeconds)
	case in.TimeoutSeconds == 0 && !in.Background:
		o.Timeout = DefaultTimeout
	case in.TimeoutSeconds == 0:
		// A background step (a server) runs until it is ended or the
		// sandbox is.
	default:
		o.Timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	o.Workdir = in.Workdir
	lookup := s.o.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for _, e := range in.Env {
		name, value, isValue := strings.Cut(e, "=")
		if !config.ValidEnvName(name) {
			return nil, o, fail.Usagef("env %q: give a variable's name (one the user allowed: XMODE_MCP_ENV), or NAME=VALUE for a value of your own", e)
		}
		if isValue {
			// The client's own value: it knows it already.
			o.Env = append(o.Env, name+"="+value)
			continue
		}
		if !envAllowed(s.o.Sandbox.Cfg.MCPEnv, name) {
			s.logf("sandbox_exec: env %s refused: XMODE_MCP_ENV (%s) does not list it", name, strings.Join(s.o.Sandbox.Cfg.MCPEnv, ","))
			return nil, o, fail.Refusedf("env %s: the user has not allowed MCP clients to ask for that variable of the server's environment (XMODE_MCP_ENV lists those they may); give NAME=VALUE for a value of your own, or ask the user", name)
		}
		v, ok := lookup(name)
		if !ok {
			return nil, o, fail.NotFoundf("env %s: the server's environment has no %s (the user sets it where the server starts)", name, name)
		}
		o.SecretEnv = append(o.SecretEnv, name+"="+v)
	}
	return sess, o, nil
}

// runStep runs a step to its end: progress to a client that asked for it,
// Ctrl-C's interrupt to the step when the call is cancelled.
func (s *Server) runStep(ctx context.Context, req *mcp.CallToolRequest, sess *store.Session, o sandbox.ExecOptions) (*mcp.CallToolResult, execOut, error) {
	// The step's context: cancelled, with the interrupt of a Ctrl-C as its
	// cause, when the call is (notifications/cancelled, a client gone, the
	// server stopping), so the step's processes get SIGINT, then KILL.
	stepCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() {
		cancel(&engine.Interrupt{Signal: syscall.SIGINT})
	})
	defer stop()
	if token := req.Params.GetProgressToken(); token != nil {
		// What the step prints is counted for the client's progress only:
		// a live copy costs each step a goroutine a stream.
		var outBytes, errBytes atomic.Int64
		o.LiveStdout, o.LiveStderr = countingWriter{&outBytes}, countingWriter{&errBytes}
		done := make(chan struct{})
		defer close(done)
		go s.progress(ctx, req.Session, token, &outBytes, &errBytes, done)
	}
	res, err := s.o.Sandbox.Exec(stepCtx, sess, o)
	if res == nil {
		return nil, execOut{}, err
	}
	out := execOut{
		Step: res.Seq, Name: res.Name, State: store.StateFinished, ExitCode: ptr(res.ExitCode), Signal: res.Signal, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled,
		DurationMS: res.DurationMS, OutputCap: OutputCap, StdoutPath: res.StdoutPath, StderrPath: res.StderrPath,
	}
	var cut1, cut2 bool
	out.Stdout, out.StdoutBytes, cut1 = s.capped(sess, res, evidence.StdoutFile)
	out.Stderr, out.StderrBytes, cut2 = s.capped(sess, res, evidence.StderrFile)
	out.Cut = cut1 || cut2
	var text strings.Builder
	fmt.Fprintf(&text, "step %d (%s): exit %d", out.Step, out.Name, res.ExitCode)
	switch {
	case out.TimedOut:
		text.WriteString(" (timed out)")
	case out.OOMKilled:
		text.WriteString(" (killed: out of memory)")
	case out.Signal != "":
		text.WriteString(" (" + out.Signal + ")")
	}
	fmt.Fprintf(&text, " in %s\n", time.Duration(out.DurationMS)*time.Millisecond)
	for _, st := range []struct {
		name, text string
		n          int64
	}{{"stdout", out.Stdout, out.StdoutBytes}, {"stderr", out.Stderr, out.StderrBytes}} {
		fmt.Fprintf(&text, "--- %s (%d bytes) ---\n%s", st.name, st.n, st.text)
		if st.text != "" && !strings.HasSuffix(st.text, "\n") {
			text.WriteString("\n")
		}
	}
	if out.Cut {
		fmt.Fprintf(&text, "[output cut to %d bytes a stream; the whole logs: step_logs (session %s, step %d), or %s and %s]\n", OutputCap, sess.ID, out.Step, out.StdoutPath, out.StderrPath)
	}
	if err != nil {
		// The command ran; some of its evidence could not be kept.
		fmt.Fprintf(&text, "[xmode: %v]\n", err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text.String()}}}, out, nil
}

// progress tells the client every ProgressEvery how long the step has run
// and how much it has printed, until done.
func (s *Server) progress(ctx context.Context, ss *mcp.ServerSession, token any, out, errs *atomic.Int64, done <-chan struct{}) {
	start := time.Now()
	t := time.NewTicker(s.o.ProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case now := <-t.C:
			el := now.Sub(start)
			_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: el.Seconds(),
				Message: fmt.Sprintf("running for %s; %d bytes on stdout, %d on stderr", el.Round(time.Second), out.Load(), errs.Load()),
			})
		}
	}
}

// countingWriter counts what a step prints, for progress.
type countingWriter struct{ n *atomic.Int64 }

func (c countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// capped reads one of a step's logs for a reply: whole up to OutputCap,
// else its first outputHead bytes and its last OutputCap-outputHead, with a
// line saying what was left out.
func (s *Server) capped(sess *store.Session, res *evidence.Result, file string) (string, int64, bool) {
	f, err := evidence.Open(s.o.Sandbox.Guard, sess.RunID, res.Seq, res.Name, file)
	if err != nil {
		return "", 0, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, false
	}
	size := st.Size()
	if size <= OutputCap {
		b, _ := io.ReadAll(io.LimitReader(f, OutputCap))
		return string(b), size, false
	}
	head := make([]byte, outputHead)
	n, _ := io.ReadFull(f, head)
	tail := make([]byte, OutputCap-outputHead)
	m, _ := f.ReadAt(tail, size-int64(len(tail)))
	return fmt.Sprintf("%s\n[xmode: %d bytes left out here: the output is %d bytes, cut to its first %d and last %d]\n%s",
		head[:n], size-int64(n)-int64(m), size, n, m, tail[:m]), size, true
}

type stepIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Step    int    `json:"step" jsonschema:"the step's number (sandbox_exec and the file tools return it; sandbox_show lists them)"`
}

type stepStatusOut struct {
	stepView
	Running     bool   `json:"running"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	StdoutPath  string `json:"stdout_path"`
	StderrPath  string `json:"stderr_path"`
	Evidence    string `json:"evidence" jsonschema:"the step's evidence directory"`
}

// step is step seq of the session (of its own steps: a shared run's other
// sessions' are not in its scope).
func (s *Server) step(ctx context.Context, sessionID string, seq int) (*store.Session, store.StepRow, error) {
	sess, err := s.scoped(ctx, sessionID)
	if err != nil {
		return nil, store.StepRow{}, err
	}
	row, err := s.o.Sandbox.Store.Step(ctx, sess.RunID, seq)
	if err != nil || row.SessionID != sess.ID {
		return nil, store.StepRow{}, fail.NotFoundf("sandbox %s has no step %d: sandbox_show lists its steps", sess.ID, seq)
	}
	return sess, row, nil
}

func (s *Server) addStepStatus() {
	add(s, &mcp.Tool{Name: "step_status", Title: "A step's status",
		Description: `The status of one step of a sandbox (a command or a file operation, by its number): running or finished, exit code, duration, how many bytes of output each stream has, and where its evidence is.`,
		Annotations: readOnly}, s.stepStatus)
}

func (s *Server) stepStatus(ctx context.Context, _ *mcp.CallToolRequest, in stepIn) (*mcp.CallToolResult, stepStatusOut, error) {
	sess, row, err := s.step(ctx, in.Session, in.Step)
	if err != nil {
		return nil, stepStatusOut{}, err
	}
	out := stepStatusOut{stepView: viewStep(row), Running: row.Live(s.o.Sandbox.Now())}
	if dir, err := evidence.StepDir(s.o.Sandbox.Guard, row.RunID, row.Seq, row.Name); err == nil {
		out.Evidence, out.StdoutPath, out.StderrPath = dir, filepath.Join(dir, evidence.StdoutFile), filepath.Join(dir, evidence.StderrFile)
	}
	for _, l := range []struct {
		file string
		n    *int64
	}{{evidence.StdoutFile, &out.StdoutBytes}, {evidence.StderrFile, &out.StderrBytes}} {
		if f, err := evidence.Open(s.o.Sandbox.Guard, sess.RunID, row.Seq, row.Name, l.file); err == nil {
			if st, err := f.Stat(); err == nil {
				*l.n = st.Size()
			}
			f.Close()
		}
	}
	return nil, out, nil
}

type killIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Step    int    `json:"step" jsonschema:"the running step's number"`
	Signal  string `json:"signal,omitempty" jsonschema:"TERM (default), INT, HUP, QUIT or KILL"`
}

// killSignals are the signals step_kill sends: those `sandbox kill` takes
// that end a process.
var killSignals = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
}

func (s *Server) addStepKill() {
	add(s, &mcp.Tool{Name: "step_kill", Title: "End a running step",
		Description: `End a running step of a sandbox — a background step (sandbox_exec with background) or a long one another call is waiting for — as Ctrl-C or a timeout end one: signal (TERM by default; INT, HUP, QUIT, KILL) to its processes, KILL to what is left after a grace period. Returns once its end is recorded, with its status (143 for TERM, 137 when KILL was needed). A step that is not running is refused.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}}, s.stepKill)
}

func (s *Server) stepKill(ctx context.Context, req *mcp.CallToolRequest, in killIn) (*mcp.CallToolResult, stepStatusOut, error) {
	name := strings.TrimPrefix(strings.ToUpper(in.Signal), "SIG")
	if name == "" {
		name = "TERM"
	}
	sig, ok := killSignals[name]
	if !ok {
		return nil, stepStatusOut{}, fail.Usagef("signal %q: give TERM (the default), INT, HUP, QUIT or KILL", in.Signal)
	}
	sess, _, err := s.step(ctx, in.Session, in.Step)
	if err != nil {
		return nil, stepStatusOut{}, err
	}
	if err := s.o.Sandbox.KillStep(ctx, sess, in.Step, sig); err != nil {
		return nil, stepStatusOut{}, err
	}
	return s.stepStatus(ctx, req, stepIn{Session: in.Session, Step: in.Step})
}

type logsIn struct {
	Session  string `json:"session" jsonschema:"the sandbox's ID"`
	Step     int    `json:"step" jsonschema:"the step's number"`
	Stream   string `json:"stream,omitempty" jsonschema:"stdout (default) or stderr"`
	Tail     int64  `json:"tail,omitempty" jsonschema:"return the last this many bytes (default 16384), unless offset is given"`
	Offset   *int64 `json:"offset,omitempty" jsonschema:"return from this byte on (next_offset of an earlier call)"`
	MaxBytes int64  `json:"max_bytes,omitempty" jsonschema:"the most to return (default and at most 1048576)"`
}

type logsOut struct {
	Step       int    `json:"step"`
	Stream     string `json:"stream"`
	State      string `json:"state" jsonschema:"the step's state: running, finished or lost"`
	Offset     int64  `json:"offset" jsonschema:"where content starts in the log"`
	NextOffset int64  `json:"next_offset" jsonschema:"where the next read goes on"`
	Size       int64  `json:"size" jsonschema:"the log's size now"`
	Content    string `json:"content"`
	// EOF: nothing more will come (the step has ended and all was read).
	EOF bool `json:"eof"`
}

func (s *Server) addStepLogs() {
	add(s, &mcp.Tool{Name: "step_logs", Title: "A step's output",
		Description: `Read a step's recorded output (stdout or stderr), also while it runs: its last tail bytes (default 16 KiB), or from a byte offset (to read on where an earlier call stopped: next_offset). At most 1 MiB per call.`,
		Annotations: readOnly}, s.stepLogs)
}

func (s *Server) stepLogs(ctx context.Context, _ *mcp.CallToolRequest, in logsIn) (*mcp.CallToolResult, logsOut, error) {
	file := evidence.StdoutFile
	switch in.Stream {
	case "", "stdout":
		in.Stream = "stdout"
	case "stderr":
		file = evidence.StderrFile
	default:
		return nil, logsOut{}, fail.Usagef("stream %q: stdout or stderr", in.Stream)
	}
	if in.MaxBytes < 0 || in.Tail < 0 || in.Offset != nil && *in.Offset < 0 {
		return nil, logsOut{}, fail.Usagef("tail, offset and max_bytes are byte counts: 0 or more")
	}
	limit := in.MaxBytes
	if limit == 0 || limit > LogsCap {
		limit = LogsCap
	}
	_, row, err := s.step(ctx, in.Session, in.Step)
	if err != nil {
		return nil, logsOut{}, err
	}
	fw, err := evidence.Follow(s.o.Sandbox.Store, s.o.Sandbox.Guard, s.o.Sandbox.Now, row, file)
	if err != nil {
		return nil, logsOut{}, err
	}
	defer fw.Close()
	// Whether it has ended is asked before the log is read: then what is
	// read is all there is.
	ended, err := fw.Ended(ctx)
	if err != nil {
		return nil, logsOut{}, err
	}
	row = fw.Step()
	size, err := fw.Size(0)
	if err != nil {
		return nil, logsOut{}, err
	}
	var off int64
	if in.Offset != nil {
		off = min(*in.Offset, size)
	} else {
		tail := in.Tail
		if tail == 0 {
			tail = 16 << 10
		}
		off = max(0, size-min(tail, limit))
	}
	_ = fw.Seek(0, off)
	buf := make([]byte, min(limit, size-off))
	n, err := fw.Read(0, buf)
	if err != nil {
		return nil, logsOut{}, err
	}
	out := logsOut{Step: row.Seq, Stream: in.Stream, State: row.State, Offset: off, NextOffset: off + int64(n), Size: size, Content: string(buf[:n])}
	out.EOF = ended && out.NextOffset >= size
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("step %d %s, bytes %d-%d of %d (%s)%s\n%s",
		out.Step, out.Stream, out.Offset, out.NextOffset, out.Size, out.State, map[bool]string{true: ", all of it", false: ""}[out.EOF], out.Content)}}}, out, nil
}

// envAllowed: the user lets MCP clients ask for variable name of the
// server's environment (a pattern of XMODE_MCP_ENV matches it).
func envAllowed(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
