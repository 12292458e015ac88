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
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/storage"
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
	// TTY runs the step on a terminal (`sandbox shell`, `exec -t`): one
	// stream, the transcript, kept in stdout.log; Resize carries the
	// window size (engine.ExecRequest).
	TTY    bool
	Resize <-chan engine.WinSize
	// LookupEnv gives an --env entry without "=" (a name) its value from
	// the host, as docker does; the evidence records only the name. Nil:
	// os.LookupEnv.
	LookupEnv func(string) (string, bool)
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
		return nil, fail.Usagef("--timeout %s must be positive (or left out for none)", o.Timeout)
	}
	env, err := o.environment()
	if err != nil {
		return nil, err
	}
	if err := store.CheckOpen(sess, time.Now()); err != nil {
		return nil, err
	}
	worktree, err := s.Guard.CheckWorktree(sess.RunID, sess.WorktreePath)
	if err != nil {
		return nil, err
	}
	dir, err := storage.ResolveWorkdir(worktree, o.Workdir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(worktree, dir)
	if err != nil {
		return nil, err
	}
	adapter, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return nil, err
	}
	tag := newTag()
	step, err := evidence.Begin(ctx, s.Store, s.Guard, evidence.Request{
		Session: sess, Name: o.Name, Argv: o.Argv, Env: o.Env, Workdir: rel, Timeout: o.Timeout,
		Tag: tag, MaxLogBytes: s.Cfg.EvidenceMaxBytes, TTY: o.TTY,
	})
	if err != nil {
		return nil, err
	}
	sb := sess.Sandbox()
	sb.Worktree = worktree
	stdout, stderr := newLive(o.LiveStdout), newLive(o.LiveStderr)
	stopBeat := s.heartbeat(ctx, sess.RunID, step.Seq())
	status, runErr := adapter.Exec(ctx, sb, engine.ExecRequest{
		Argv: o.Argv, Env: env, Workdir: rel, Timeout: o.Timeout, Grace: o.Grace, Stdin: o.Stdin, Tag: tag,
		Stdout: tee(step.Stdout, stdout), Stderr: tee(step.Stderr, stderr), TTY: o.TTY, Resize: o.Resize,
	})
	stopBeat()
	stdout.close()
	stderr.close()
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
			return nil, fail.Usagef("--env %q must be KEY=VALUE, or a variable's NAME to pass its value from here", kv)
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
// of its steps has a fresh heartbeat (reaper.DefaultStaleAfter is six of
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
			case now := <-t.C:
				_ = s.Store.Heartbeat(ctx, runID, seq, now)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// tee writes to the log and to the live stream. Neither can fail or block
// the step: the log keeps what it can, the live stream drops what it
// cannot deliver.
func tee(log io.Writer, live *liveWriter) io.Writer {
	if live == nil {
		return log
	}
	return io.MultiWriter(log, live)
}
