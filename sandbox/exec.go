package sandbox

import (
	"context"
	"fmt"
	"io"
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
	// writers mean logs only (--json).
	LiveStdout, LiveStderr io.Writer
}

// Exec runs one step in an open session and records its evidence. An error
// means xmode failed before or around the command (exit 125); the command's
// own outcome is in the Result.
func (s *Service) Exec(ctx context.Context, sess *store.Session, o ExecOptions) (*evidence.Result, error) {
	if len(o.Argv) == 0 {
		return nil, fail.Usagef("no command: give one after --, e.g. xmode sandbox exec %s -- make test", sess.ID)
	}
	for _, kv := range o.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fail.Usagef("--env %q must be KEY=VALUE", kv)
		}
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
	step, err := evidence.Begin(ctx, s.Store, s.Guard, evidence.Request{
		Session: sess, Name: o.Name, Argv: o.Argv, Env: o.Env, Workdir: rel, Timeout: o.Timeout,
	})
	if err != nil {
		return nil, err
	}
	sb := sess.Sandbox()
	sb.Worktree = worktree
	stopBeat := s.heartbeat(ctx, sess.RunID, step.Seq())
	status, runErr := adapter.Exec(ctx, sb, engine.ExecRequest{
		Argv: o.Argv, Env: o.Env, Workdir: rel, Timeout: o.Timeout, Grace: o.Grace, Stdin: o.Stdin,
		Stdout: tee(step.Stdout, o.LiveStdout), Stderr: tee(step.Stderr, o.LiveStderr),
	})
	stopBeat()
	if runErr != nil {
		// The command never ran: the step's evidence says why, as 125.
		fmt.Fprintf(step.Stderr, "xmode: %v\n", runErr)
		status = engine.Status{ExitCode: 125}
	}
	res, err := step.Finish(context.WithoutCancel(ctx), status)
	if runErr != nil {
		return res, runErr
	}
	return res, err
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

// tee writes to the log and, best effort, to the live stream: a closed
// terminal must not cost the evidence or kill the command with SIGPIPE.
func tee(log io.Writer, live io.Writer) io.Writer {
	if live == nil {
		return log
	}
	return &teeWriter{log: log, live: live}
}

type teeWriter struct {
	log, live io.Writer
	liveDead  bool
}

func (t *teeWriter) Write(p []byte) (int, error) {
	n, err := t.log.Write(p)
	if !t.liveDead {
		if _, lerr := t.live.Write(p); lerr != nil {
			t.liveDead = true
		}
	}
	return n, err
}
