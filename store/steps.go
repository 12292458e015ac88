package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/xmode/xmode/fail"
)

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
}

// BeginStep allocates the run's next step number and inserts the step as
// running, in one immediate transaction: concurrent execs on one run get
// unique, gapless numbers. dirFor turns the number into the step directory.
func (s *Store) BeginStep(ctx context.Context, sessionID, runID, name string, argv []string, now time.Time, dirFor func(seq int) string) (int, string, error) {
	argvJSON, err := json.Marshal(argv)
	if err != nil {
		return 0, "", err
	}
	var seq int
	var dir string
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var status string
		var expires int64
		if err := tx.QueryRowContext(ctx, `SELECT status, expires_at FROM sessions WHERE id = ?`, sessionID).Scan(&status, &expires); err != nil {
			return errNoRows(err, "no session %s", sessionID)
		}
		if status != StatusOpen {
			return errNotOpen(sessionID, status)
		}
		// No new step under a reaper: the step's lease and the reaper's
		// claim are taken in immediate transactions, so one sees the other.
		if c, err := claimed(ctx, tx, sessionID); err != nil {
			return err
		} else if c {
			return fail.Refusedf("session %s expired and is being reaped: create a new one with `xmode sandbox create`", sessionID)
		}
		if expires <= millis(now) {
			return CheckOpen(&Session{ID: sessionID, Status: status, ExpiresAt: fromMillis(expires)}, now)
		}
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM steps WHERE run_id = ?`, runID).Scan(&seq); err != nil {
			return fmt.Errorf("next step number: %w", err)
		}
		dir = dirFor(seq)
		_, err := tx.ExecContext(ctx, `INSERT INTO steps (run_id, seq, session_id, name, argv, dir, started_at, heartbeat_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, runID, seq, sessionID, name, string(argvJSON), dir, millis(now), millis(now))
		if err != nil {
			return fmt.Errorf("insert step: %w", err)
		}
		return nil
	})
	return seq, dir, err
}

// FinishStep records a step's outcome.
func (s *Store) FinishStep(ctx context.Context, runID string, seq int, finished time.Time, exitCode int, signal string, timedOut, oomKilled bool) error {
	_, err := s.exec(ctx, `UPDATE steps SET state = 'finished', finished_at = ?, exit_code = ?, signal = ?,
		timed_out = ?, oom_killed = ? WHERE run_id = ? AND seq = ?`,
		millis(finished), exitCode, signal, timedOut, oomKilled, runID, seq)
	if err != nil {
		return fmt.Errorf("record step %s/%d: %w", runID, seq, err)
	}
	return nil
}

// Steps lists a run's steps in order.
func (s *Store) Steps(ctx context.Context, runID string) ([]StepRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT run_id, seq, session_id, name, argv, dir, state, started_at,
		finished_at, exit_code, signal, timed_out, oom_killed FROM steps WHERE run_id = ? ORDER BY seq`, runID)
	if err != nil {
		return nil, fmt.Errorf("list steps of %s: %w", runID, err)
	}
	defer rows.Close()
	var out []StepRow
	for rows.Next() {
		var r StepRow
		var argv string
		var started int64
		var finished, code sql.NullInt64
		if err := rows.Scan(&r.RunID, &r.Seq, &r.SessionID, &r.Name, &argv, &r.Dir, &r.State, &started,
			&finished, &code, &r.Signal, &r.TimedOut, &r.OOMKilled); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(argv), &r.Argv); err != nil {
			return nil, fmt.Errorf("step %s/%d: bad argv: %w", r.RunID, r.Seq, err)
		}
		r.StartedAt = fromMillis(started)
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
