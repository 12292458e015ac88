package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/proc"
)

// A step's states (docs/reference.md, "Step state"): StepRow.State.
const (
	StateRunning  = "running"  // its xmode runs it, or did until it died
	StateFinished = "finished" // its xmode recorded its end
	StateLost     = "lost"     // its xmode was gone, and the reaper (or a kill) recorded it so
)

// StepStaleAfter: a running step whose heartbeat is this old has lost its
// xmode (its exec process was killed): six missed heartbeats of sandbox's
// default interval, so a busy database cannot make a live step look dead.
const StepStaleAfter = 30 * time.Second

// StepRow is a step as the store keeps it.
type StepRow struct {
	RunID      string
	Seq        int
	SessionID  string
	Name       string
	Argv       []string
	Dir        string
	State      string
	StartedAt  time.Time
	FinishedAt *time.Time
	ExitCode   *int
	Signal     string
	TimedOut   bool
	OOMKilled  bool
	Tag        string
	Owner      string // the xmode process running it (internal/proc)
	Heartbeat  time.Time
	// EvidenceIncomplete, Truncated: what the step's files lack.
	EvidenceIncomplete bool
	Truncated          bool
	LostReason         string
	// StoppedBy names what stopped the step while it ran ("sandbox
	// stop", "sandbox kill"), "" when nothing did.
	StoppedBy string
	// Detached: a background step (`sandbox exec --detach`), run by a
	// supervisor xmode of its own (Owner) rather than a terminal's.
	Detached bool
}

// EncodeArgv is how the store keeps an argv byte for byte: a JSON array of
// strings, or, when an argument is not valid UTF-8 (which JSON would turn
// into U+FFFD), {"b64": [base64 of each argument]}.
func EncodeArgv(argv []string) (string, error) {
	var v any = argv
	if !allUTF8(argv) {
		b := make([]string, len(argv))
		for i, a := range argv {
			b[i] = base64.StdEncoding.EncodeToString([]byte(a))
		}
		v = map[string][]string{"b64": b}
	}
	out, err := json.Marshal(v)
	return string(out), err
}

// DecodeArgv reads what EncodeArgv wrote.
func DecodeArgv(s string) ([]string, error) {
	var argv []string
	if strings.HasPrefix(s, "{") {
		var v struct{ B64 []string }
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return nil, err
		}
		for _, a := range v.B64 {
			b, err := base64.StdEncoding.DecodeString(a)
			if err != nil {
				return nil, err
			}
			argv = append(argv, string(b))
		}
		return argv, nil
	}
	err := json.Unmarshal([]byte(s), &argv)
	return argv, err
}

func allUTF8(ss []string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// ArgvBase64 is argv in base64 when an argument is not valid UTF-8 (JSON
// output shows such bytes as U+FFFD), nil otherwise.
func ArgvBase64(argv []string) []string {
	if allUTF8(argv) {
		return nil
	}
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = base64.StdEncoding.EncodeToString([]byte(a))
	}
	return out
}

// NewStep is a step about to run.
type NewStep struct {
	SessionID, RunID, Name string
	Argv                   []string
	Tag                    string // the XMODE_EXEC_TAG its processes carry
	Detached               bool   // a background step (StepRow.Detached)
	Started                time.Time
	DirFor                 func(seq int) string // the step directory of a number
}

// BeginStep allocates the run's next step number and inserts the step as
// running, in one immediate transaction: concurrent execs on one run get
// unique, gapless numbers. It returns the number and its directory.
func (s *Store) BeginStep(ctx context.Context, n NewStep) (int, string, error) {
	argvJSON, err := EncodeArgv(n.Argv)
	if err != nil {
		return 0, "", err
	}
	var seq int
	var dir string
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var status string
		var expires int64
		if err := tx.QueryRowContext(ctx, `SELECT status, expires_at FROM sessions WHERE id = ?`, n.SessionID).Scan(&status, &expires); err != nil {
			return errNoRows(err, "no session %s", n.SessionID)
		}
		if status != StatusOpen {
			return errNotOpen(n.SessionID, status)
		}
		// No new step under a reaper: the step's lease and the reaper's
		// claim are taken in immediate transactions, so one sees the other.
		if c, err := claimed(ctx, tx, n.SessionID); err != nil {
			return err
		} else if c {
			return fail.Refusedf("session %s expired and is being reaped: create a new one with `xmode sandbox create`", n.SessionID)
		}
		if expires <= millis(n.Started) {
			return CheckOpen(&Session{ID: n.SessionID, Status: status, ExpiresAt: fromMillis(expires)}, n.Started)
		}
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM steps WHERE run_id = ?`, n.RunID).Scan(&seq); err != nil {
			return fmt.Errorf("next step number: %w", err)
		}
		dir = n.DirFor(seq)
		_, err := tx.ExecContext(ctx, `INSERT INTO steps (run_id, seq, session_id, name, argv, dir, started_at, heartbeat_at, tag, owner, detached)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, n.RunID, seq, n.SessionID, n.Name, string(argvJSON), dir, millis(n.Started), millis(n.Started), n.Tag, proc.Self(), n.Detached)
		if err != nil {
			return fmt.Errorf("insert step: %w", err)
		}
		return nil
	})
	return seq, dir, err
}

// StepEnd is how a step ended.
type StepEnd struct {
	RunID                         string
	Seq                           int
	Finished                      time.Time
	ExitCode                      int
	Signal                        string
	TimedOut, OOMKilled           bool
	Truncated, EvidenceIncomplete bool
}

// FinishStep records a step's outcome and returns what stopped it, if
// something did (StopSteps). A step the reaper marked lost while its xmode
// was suspended is finished all the same: its own end is better evidence
// than the reaper's guess.
func (s *Store) FinishStep(ctx context.Context, e StepEnd) (stoppedBy string, err error) {
	// On a full disk it takes a chunk of the reserve and tries again, as
	// exec does: the step's status is the evidence that matters most.
	for i := 0; ; i++ {
		err = s.db.QueryRowContext(ctx, `UPDATE steps SET state = 'finished', finished_at = ?, exit_code = ?, signal = ?,
		timed_out = ?, oom_killed = ?, truncated = ?, evidence_incomplete = ?, lost_reason = ''
		WHERE run_id = ? AND seq = ? RETURNING stopped_by`,
			millis(e.Finished), e.ExitCode, e.Signal, e.TimedOut, e.OOMKilled, e.Truncated, e.EvidenceIncomplete, e.RunID, e.Seq).Scan(&stoppedBy)
		if err == nil || i == reserveTries || !isFull(err) || !s.releaseReserve() {
			break
		}
	}
	err = s.writeError(err)
	if err != nil {
		return "", fmt.Errorf("record step %s/%d: %w", e.RunID, e.Seq, err)
	}
	return stoppedBy, nil
}

// SetEvidenceIncomplete marks a finished step's evidence incomplete (its
// result.json could not be written after its row was).
func (s *Store) SetEvidenceIncomplete(ctx context.Context, runID string, seq int) error {
	_, err := s.exec(ctx, `UPDATE steps SET evidence_incomplete = 1 WHERE run_id = ? AND seq = ?`, runID, seq)
	return err
}

// StepRow.StoppedBy for a step ended while it ran: by `sandbox stop` (a
// background step, or any with --force), or by `sandbox kill` (the
// MCP server's step_kill too: sandbox.Service.KillStep).
const (
	StoppedBySandboxStop = "sandbox stop"
	StoppedByKill        = "sandbox kill"
)

// StopSteps marks the session's running steps as stopped by by, before
// their processes are ended: their xmode records it with their end. With
// all false only its background steps are marked (`sandbox stop` ends those
// without --force).
func (s *Store) StopSteps(ctx context.Context, sessionID, by string, all bool) error {
	if _, err := s.exec(ctx, `UPDATE steps SET stopped_by = ? WHERE session_id = ? AND state = 'running' AND (? OR detached)`,
		by, sessionID, all); err != nil {
		return fmt.Errorf("mark the steps of %s stopped: %w", sessionID, err)
	}
	return nil
}

// StopStep marks one running step as stopped by by, before its processes
// are ended (`sandbox kill`). It reports false, changing nothing, when the
// step is not running (finished or lost meanwhile).
func (s *Store) StopStep(ctx context.Context, runID string, seq int, by string) (bool, error) {
	res, err := s.exec(ctx, `UPDATE steps SET stopped_by = ? WHERE run_id = ? AND seq = ? AND state = 'running'`, by, runID, seq)
	if err != nil {
		return false, fmt.Errorf("mark step %s/%d stopped: %w", runID, seq, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// Step reads one step of a run.
func (s *Store) Step(ctx context.Context, runID string, seq int) (StepRow, error) {
	rows, err := s.steps(ctx, `WHERE run_id = ? AND seq = ?`, runID, seq)
	if err != nil {
		return StepRow{}, err
	}
	if len(rows) == 0 {
		return StepRow{}, fail.NotFoundf("no step %d in run %s", seq, runID)
	}
	return rows[0], nil
}

// Steps lists a run's steps in order.
func (s *Store) Steps(ctx context.Context, runID string) ([]StepRow, error) {
	return s.steps(ctx, `WHERE run_id = ? ORDER BY seq`, runID)
}

// RunningSteps lists the steps of a session still marked running.
func (s *Store) RunningSteps(ctx context.Context, sessionID string) ([]StepRow, error) {
	return s.steps(ctx, `WHERE session_id = ? AND state = 'running' ORDER BY seq`, sessionID)
}

// AllRunningSteps lists the steps of every session still marked running.
func (s *Store) AllRunningSteps(ctx context.Context) ([]StepRow, error) {
	return s.steps(ctx, `WHERE state = 'running' ORDER BY run_id, seq`)
}

// Gone reports whether the step's xmode is gone (stepGone).
func (r StepRow) Gone(staleBefore time.Time) bool {
	return stepGone(r.Heartbeat, r.Owner, staleBefore)
}

// stepGone is the one rule for whether a running step's xmode is gone. The
// owner process decides when this process can see it: alive, the step
// lives whatever its heartbeat says (a heartbeat is a write, and a full
// disk refuses writes to a step that runs on); ended, it is gone at once.
// Only an owner it cannot see (another PID namespace: an xmode in another
// container) leaves it to the heartbeat, gone once it is at or before
// staleBefore.
func stepGone(heartbeat time.Time, owner string, staleBefore time.Time) bool {
	switch {
	case owner == "":
	case proc.Alive(owner):
		return false
	case proc.Gone(owner):
		return true
	}
	return !heartbeat.After(staleBefore)
}

// Live reports whether the step still runs at now: recorded running, and
// its xmode not gone (StepStaleAfter). A step that is not live has ended,
// or will be recorded lost: its logs will not grow. Every front end asks
// this one question (the CLI, MCP, the UI, the log follower).
func (r StepRow) Live(now time.Time) bool {
	return r.State == StateRunning && !r.Gone(now.Add(-StepStaleAfter))
}

// LoseStep finishes a running step whose xmode is gone as lost, with the
// reason, unless it finished meanwhile. It reports whether it did.
func (s *Store) LoseStep(ctx context.Context, runID string, seq int, now time.Time, reason string) (bool, error) {
	res, err := s.exec(ctx, `UPDATE steps SET state = 'lost', finished_at = ?, lost_reason = ?
		WHERE run_id = ? AND seq = ? AND state = 'running'`, millis(now), reason, runID, seq)
	if err != nil {
		return false, fmt.Errorf("mark step %s/%d lost: %w", runID, seq, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

func (s *Store) steps(ctx context.Context, where string, args ...any) ([]StepRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT run_id, seq, session_id, name, argv, dir, state, started_at,
		finished_at, exit_code, signal, timed_out, oom_killed, tag, owner, heartbeat_at, evidence_incomplete, truncated,
		lost_reason, stopped_by, detached FROM steps `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("list steps: %w", err)
	}
	defer rows.Close()
	var out []StepRow
	for rows.Next() {
		var r StepRow
		var argv string
		var started, beat int64
		var finished, code sql.NullInt64
		if err := rows.Scan(&r.RunID, &r.Seq, &r.SessionID, &r.Name, &argv, &r.Dir, &r.State, &started,
			&finished, &code, &r.Signal, &r.TimedOut, &r.OOMKilled, &r.Tag, &r.Owner, &beat, &r.EvidenceIncomplete,
			&r.Truncated, &r.LostReason, &r.StoppedBy, &r.Detached); err != nil {
			return nil, err
		}
		if r.Argv, err = DecodeArgv(argv); err != nil {
			return nil, fmt.Errorf("step %s/%d: bad argv: %w", r.RunID, r.Seq, err)
		}
		r.StartedAt, r.Heartbeat = fromMillis(started), fromMillis(beat)
		if finished.Valid {
			t := fromMillis(finished.Int64)
			r.FinishedAt = &t
		}
		if code.Valid {
			c := int(code.Int64)
			r.ExitCode = &c
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
