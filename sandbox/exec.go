package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/internal/redact"
	"github.com/xmode/xmode/store"
)

// ExecOptions are one step's inputs.
type ExecOptions struct {
	Argv    []string
	Env     []string // KEY=VALUE
	Name    string
	Workdir string
	Timeout time.Duration
	Grace   time.Duration
	Stdin   io.Reader
	// Live receives the output as it happens, besides the log files; nil
	// writers mean logs only (--json). A live stream that stalls or closes
	// never holds up the step or its evidence (see liveWriter).
	LiveStdout, LiveStderr io.Writer
	// SecretEnv is KEY=VALUE for the command like Env, but each value is a
	// secret (--env-pass, XMODE_AGENT_ENV): recorded as KEY=*** and masked
	// in the logs, the live streams and everything else the step records.
	// Env entries whose names look secret (redact.SecretName) are treated
	// the same.
	SecretEnv []string
	// Prompt is kept as prompt.txt in the step directory: what an agent
	// step was asked.
	Prompt string
	// Agent makes this an agent step: it gets the step's events.jsonl and
	// follows its stdout, and its summary becomes result.json's "agent".
	Agent func(events io.Writer) AgentStream
	// TTY runs the step on a terminal (`sandbox shell`, `exec -t`): one
	// stream, the transcript, kept in stdout.log; Resize carries the
	// window size (engine.ExecRequest).
	TTY    bool
	Resize <-chan engine.WinSize
	// LookupEnv gives an --env entry without "=" (a name) its value from
	// the host, as docker does; the evidence records only the name. Nil:
	// os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// OnStart, if set, is called once with the step's number when its
	// command runs (engine.ExecRequest.Started: its processes can be found
	// and ended from another xmode), or, when it could not start (127, or
	// xmode's own 125), once its end is recorded: what a caller reports
	// before the step ends.
	OnStart func(seq int)

	// detached: a background step, run by this process as its supervisor
	// (Supervise).
	detached bool
}

// AgentStream follows an agent step's stdout as it happens (secrets
// already masked) and summarises it once the command has ended.
type AgentStream interface {
	io.Writer
	Summary(engine.Status) *evidence.Agent
}

// Exec runs one step in an open session and records its evidence. An error
// with a nil Result means xmode failed before the command could start (exit
// 125). A Result with an error (an *evidence.Incomplete) means the command
// ran and the Result holds its status, but some of its evidence was lost.
func (s *Service) Exec(ctx context.Context, sess *store.Session, o ExecOptions) (*evidence.Result, error) {
	if len(o.Argv) == 0 {
		return nil, fail.Usagef("no command: give one after --, e.g. xmode sandbox exec %s -- make test", sess.ID)
	}
	if o.Timeout < 0 {
		return nil, fail.Usagef("%s %s must be positive (or left out for none)", fail.Timeout, o.Timeout)
	}
	env, err := o.environment()
	if err != nil {
		return nil, err
	}
	secrets, recordEnv := s.secrets(o)

	if err := store.CheckOpen(sess, s.Now()); err != nil {
		return nil, err
	}
	worktree, err := s.Guard.CheckWorktree(sess.RunID, sess.WorktreePath)
	if err != nil {
		return nil, err
	}
	dir, err := fsguard.ResolveWorkdir(worktree, o.Workdir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(worktree, dir)
	if err != nil {
		return nil, err
	}
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return nil, err
	}
	// A docker provider holds a client and its connections: a process that
	// runs many steps (a plan, the loop) must not keep one per step.
	defer engine.Close(provider)
	tag := newTag()
	// What is recorded has the secrets masked: the argv and the step name
	// derived from it too.
	step, err := evidence.Begin(ctx, s.Store, s.Guard, evidence.Request{
		Session: sess, Name: o.Name, Argv: secrets.Strings(o.Argv), Env: recordEnv, Workdir: rel, Timeout: o.Timeout,
		Tag: tag, MaxLogBytes: s.Cfg.EvidenceMaxBytes, TTY: o.TTY, Detached: o.detached, Now: s.Clock,
	})
	if err != nil {
		return nil, err
	}
	agent, err := s.agentEvidence(step, o, secrets)
	if err != nil {
		// Nothing ran: recorded like any failure of xmode's own (125).
		fmt.Fprintf(step.Stderr, "xmode: %v\n", err)
		_, _ = step.Finish(context.WithoutCancel(ctx), engine.Status{ExitCode: 125})
		return nil, err
	}
	sb := sess.Sandbox()
	sb.Worktree = worktree
	liveOut, liveErr := newLive(o.LiveStdout), newLive(o.LiveStderr)
	// Masking comes first, so the log, the terminal and the agent's events
	// all see the same masked stream.
	stdout := redact.NewWriter(tee(step.Stdout, liveOut, agent), secrets)
	stderr := redact.NewWriter(tee(step.Stderr, liveErr), secrets)
	var started func()
	if o.OnStart != nil {
		var once sync.Once
		started = func() { once.Do(func() { o.OnStart(step.Seq()) }) }
		// A step that never started is reported once it is recorded.
		defer started()
	}
	stopBeat := s.heartbeat(ctx, sess.RunID, step.Seq())
	status, runErr := provider.Exec(ctx, sb, engine.ExecRequest{
		Argv: o.Argv, Env: append(env, o.SecretEnv...), Workdir: rel, Timeout: o.Timeout, Grace: o.Grace,
		Stdin: o.Stdin, Tag: tag, Stdout: stdout, Stderr: stderr, TTY: o.TTY, Resize: o.Resize, Started: started,
	})
	stopBeat()
	redact.Flush(stdout)
	redact.Flush(stderr)
	liveOut.close()
	liveErr.close()
	if agent != nil && runErr == nil {
		step.SetAgent(agent.Summary(status))
	}
	if runErr != nil {
		// The command never ran: the step's evidence says why, as 125.
		fmt.Fprintf(step.Stderr, "xmode: %v\n", runErr)
		status = engine.Status{ExitCode: 125}
	}
	res, err := step.Finish(context.WithoutCancel(ctx), status)
	if runErr != nil {
		return nil, runErr
	}
	return res, err
}

// environment is the step's KEY=VALUE list: entries as given, and a bare
// name with the host's value (left out when the host has none, as docker
// does).
func (o ExecOptions) environment() ([]string, error) {
	lookup := o.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	env := make([]string, 0, len(o.Env))
	for _, kv := range o.Env {
		k, _, ok := strings.Cut(kv, "=")
		if k == "" || strings.ContainsAny(k, " \t\n") {
			// Not the entry itself: its value may be a secret.
			return nil, fail.Usagef("%s %q…: give KEY=VALUE, or a variable's NAME to pass its value from here", fail.Env, k)
		}
		if ok {
			env = append(env, kv)
		} else if v, set := lookup(k); set {
			env = append(env, k+"="+v)
		}
	}
	return env, nil
}

// newTag is a step's XMODE_EXEC_TAG: its processes carry it, so they can be
// found and ended even when the xmode that started them is gone.
func newTag() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// HeartbeatInterval is how often a running step renews its lease
// (steps.heartbeat_at). The reaper leaves an expired session alone while one
// of its steps has a fresh heartbeat (store.StepStaleAfter is six of
// these), and reaps it once the step has finished or its heartbeat stopped.
var HeartbeatInterval = 5 * time.Second

// heartbeat renews the step's lease every HeartbeatInterval until the
// returned function is called; the step's Finish then marks it finished.
// A missed beat (a busy database) is not an error: the next one catches up.
func (s *Service) heartbeat(ctx context.Context, runID string, seq int) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = s.Store.Heartbeat(ctx, runID, seq, s.Now())
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// tee writes to the log, the live stream and an agent's event parser. None
// can fail or block the step: the log keeps what it can, the live stream
// drops what it cannot deliver, the parser only reads.
func tee(log io.Writer, live *liveWriter, more ...AgentStream) io.Writer {
	ws := []io.Writer{log}
	if live != nil {
		ws = append(ws, live)
	}
	for _, m := range more {
		if m != nil {
			ws = append(ws, m)
		}
	}
	if len(ws) == 1 {
		return log
	}
	return io.MultiWriter(ws...)
}

// secrets is what a step must not record: the values of SecretEnv, of Env
// entries with secret-looking names, and of the host's variables that are
// secrets (XMODE_AGENT_ENV's, and any with a secret-looking name: host
// steps inherit them). recordEnv is Env and SecretEnv as command.json
// keeps them, secret values replaced by ***.
func (s *Service) secrets(o ExecOptions) (*redact.Set, []string) {
	set := redact.NewSet()
	recordEnv := make([]string, 0, len(o.Env)+len(o.SecretEnv))
	for _, kv := range o.Env {
		k, v, hasValue := strings.Cut(kv, "=")
		if hasValue && redact.SecretName(k) {
			set.Add(v)
			kv = k + "=" + redact.Mask
		}
		// A bare NAME (its value passed from the host) is recorded as the
		// name alone.
		recordEnv = append(recordEnv, kv)
	}
	for _, kv := range o.SecretEnv {
		k, v, _ := strings.Cut(kv, "=")
		set.Add(v)
		recordEnv = append(recordEnv, k+"="+redact.Mask)
	}
	for _, name := range s.Cfg.AgentEnv {
		set.Add(os.Getenv(name))
	}
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); redact.SecretName(k) {
			set.Add(v)
		}
	}
	return set, recordEnv
}

// agentEvidence writes an agent step's prompt.txt and opens its
// events.jsonl; nil for other steps.
func (s *Service) agentEvidence(step *evidence.Step, o ExecOptions, secrets *redact.Set) (AgentStream, error) {
	if o.Prompt != "" {
		w, err := step.AddLog("prompt.txt")
		if err != nil {
			return nil, err
		}
		_, _ = io.WriteString(w, secrets.String(o.Prompt))
	}
	if o.Agent == nil {
		return nil, nil
	}
	events, err := step.AddLog("events.jsonl")
	if err != nil {
		return nil, err
	}
	return o.Agent(events), nil
}
