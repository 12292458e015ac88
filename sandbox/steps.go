package sandbox

import (
	"context"
	"strconv"
	"syscall"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/store"
)

// Step is step seq of the session as the store records it: its state
// (running, finished or lost), its status once it ended, whether it runs in
// the background (Detached), what stopped it (StoppedBy). ViewStep gives its
// JSON (docs/reference.md, "Step"); its files are read with evidence.Open
// (s.Guard, row.RunID, row.Seq, row.Name, evidence.StdoutFile), which
// follows no link a step planted, and grow while it runs. Not found (exit
// 3) when the session ran no step seq (a shared run's other sessions' steps
// are not its own).
func (s *Service) Step(ctx context.Context, sess *store.Session, seq int) (store.StepRow, error) {
	row, err := s.Store.Step(ctx, sess.RunID, seq)
	if err == nil && row.SessionID != sess.ID {
		err = fail.NotFoundf("no step %d", seq)
	}
	if fail.KindOf(err) == fail.NotFound {
		return store.StepRow{}, fail.NotFoundf("no step %d in session %s: `xmode sandbox logs %s` lists its steps", seq, sess.ID, sess.ID)
	}
	return row, err
}

// StepView is a step as --json shows it (`sandbox logs`, `sandbox show`,
// `run show`, `sandbox exec --detach`): docs/reference.md, "Step".
// exit_code, finished_at and duration_ms are null while it runs.
type StepView struct {
	SessionID          string     `json:"session_id"`
	Seq                int        `json:"seq"`
	Name               string     `json:"name"`
	Argv               []string   `json:"argv"`
	State              string     `json:"state"`
	ExitCode           *int       `json:"exit_code"`
	Signal             string     `json:"signal"`
	TimedOut           bool       `json:"timed_out"`
	OOMKilled          bool       `json:"oom_killed"`
	StartedAt          time.Time  `json:"started_at"`
	FinishedAt         *time.Time `json:"finished_at"`
	DurationMS         *int64     `json:"duration_ms"`
	Dir                string     `json:"dir"`
	StdoutPath         string     `json:"stdout_path"`
	StderrPath         string     `json:"stderr_path"`
	Truncated          bool       `json:"truncated"`
	EvidenceIncomplete bool       `json:"evidence_incomplete,omitempty"`
	LostReason         string     `json:"lost_reason,omitempty"`
	StoppedBy          string     `json:"stopped_by,omitempty"`
	Detached           bool       `json:"detached,omitempty"`
	Stdout             *string    `json:"stdout,omitempty"`
	Stderr             *string    `json:"stderr,omitempty"`
}

// ViewStep is a step's StepView; its paths are derived from the run, the
// number and the name (never taken from the row), without its output.
func (s *Service) ViewStep(r store.StepRow) StepView {
	v := StepView{
		SessionID: r.SessionID, Seq: r.Seq, Name: r.Name, Argv: r.Argv, State: r.State, ExitCode: r.ExitCode,
		Signal: r.Signal, TimedOut: r.TimedOut, OOMKilled: r.OOMKilled, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		Truncated: r.Truncated, EvidenceIncomplete: r.EvidenceIncomplete, LostReason: r.LostReason,
		StoppedBy: r.StoppedBy, Detached: r.Detached,
	}
	if v.Argv == nil {
		v.Argv = []string{}
	}
	if r.FinishedAt != nil {
		d := r.FinishedAt.Sub(r.StartedAt).Milliseconds()
		v.DurationMS = &d
	}
	if dir, err := evidence.StepDir(s.Guard, r.RunID, r.Seq, r.Name); err == nil {
		v.Dir = dir
		v.StdoutPath, v.StderrPath = dir+"/"+evidence.StdoutFile, dir+"/"+evidence.StderrFile
	}
	return v
}

// killRecordWait bounds how long KillStep waits for the xmode running a
// step it ended to record the step's end (its status, result.json).
const killRecordWait = 15 * time.Second

// KillStep ends one running step of the session, in the foreground of
// another terminal or in the background (`sandbox kill`, the MCP server's
// step_kill), as Ctrl-C or --timeout end one: sig and CONT to its
// processes, KILL to whatever is left after the grace period
// (engine.DefaultGrace; at once for SIGKILL). The step is marked stopped_by
// "sandbox kill" first, so the xmode running it records that with its end,
// and its result says how it ended, as for any signal (143 for TERM, 137
// when it had to be KILLed). KillStep returns once that end is recorded
// (15 s at most); a step whose xmode is gone is recorded lost. Not found
// (3): the session ran no step seq; refused (4): it is not running.
func (s *Service) KillStep(ctx context.Context, sess *store.Session, seq int, sig syscall.Signal) error {
	row, err := s.Step(ctx, sess, seq)
	if err != nil {
		return err
	}
	if row.State != store.StateRunning {
		return notRunning(row)
	}
	if row.Tag == "" {
		return fail.Refusedf("step %d (%s) was recorded without a tag (by an older xmode): its processes cannot be found; stop the session with %s", row.Seq, row.Name, fail.Do("sandbox stop").With(fail.Force, "").Arg(sess.ID))
	}
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return err
	}
	defer engine.Close(provider)
	marked, err := s.Store.StopStep(ctx, row.RunID, row.Seq, store.StoppedByKill)
	if err != nil {
		return err
	}
	if !marked {
		// It ended meanwhile.
		if row, err = s.Step(ctx, sess, seq); err != nil {
			return err
		}
		return notRunning(row)
	}
	grace := engine.DefaultGrace
	if sig == syscall.SIGKILL {
		grace = 0
	}
	if err := engine.SignalStep(ctx, provider, sess.Sandbox(), row.Tag, sig, grace); err != nil {
		return err
	}
	stale := func() time.Time { return s.Now().Add(-store.StepStaleAfter) }
	deadline := time.Now().Add(killRecordWait)
	for {
		if row, err = s.Store.Step(ctx, row.RunID, row.Seq); err != nil {
			return err
		}
		if row.State != store.StateRunning {
			return nil
		}
		if row.Gone(stale()) {
			// Nobody will record its end: what its xmode would have said,
			// the reaper says.
			_, err := s.Store.LoseStep(ctx, row.RunID, row.Seq, s.Now(),
				"its xmode was gone (last heartbeat "+row.Heartbeat.Format(time.RFC3339)+"); `sandbox kill` ended its processes")
			return err
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// notRunning is the refusal (exit 4) to end a step that is not running.
func notRunning(r store.StepRow) error {
	how := r.State
	switch {
	case r.ExitCode != nil:
		how = "finished: exit " + strconv.Itoa(*r.ExitCode)
	case r.State == store.StateLost:
		how = "lost: " + r.LostReason
	}
	return fail.Refusedf("step %d (%s) is not running (%s)", r.Seq, r.Name, how)
}
