package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/xmode/xmode/fail"
)

// What the Codex cloud loop (docs/codex-cloud.md, package codexcloud) keeps:
// one task per submitted session, its transcript (the session's thread), and
// the poller's leases. A lease is a claim in meta, key "cloud:<task_id>",
// taken and released like the reaper's claims (see reap.go), so two pollers,
// or a poller and a sweep, never work on one task at once, and a poller killed
// with -9 leaves claims the next pass takes over.

// Task states: what the cloud last said, plus abandoned (the session ended
// some other way, e.g. `sandbox stop`).
const (
	TaskPending   = "pending"
	TaskRunning   = "running"
	TaskReady     = "ready"
	TaskFailed    = "failed"
	TaskAbandoned = "abandoned"
)

// Error classes of a task's last error.
const (
	// ErrTransient: retried with backoff (the backend was unreachable, a
	// call timed out).
	ErrTransient = "transient"
	// ErrPermanent: retrying cannot help until a person acts (codex is not
	// signed in, its output was not understood); the task is parked until
	// `cloud poll --sweep` re-queues it.
	ErrPermanent = "permanent"
)

// CloudClaimPrefix starts the meta key of every poller lease.
const CloudClaimPrefix = "cloud:"

// ErrLeaseLost: the caller no longer holds the task's lease (it was taken
// over), so what it learned is dropped.
var ErrLeaseLost = errors.New("the lease on this task was taken over by another poller")

// CloudTask is one Codex cloud task, as `xmode cloud show --json` prints it.
type CloudTask struct {
	TaskID        string     `json:"task_id"`
	SessionID     string     `json:"session_id"`
	SessionStatus string     `json:"session_status"`
	URL           string     `json:"url"`
	EnvID         string     `json:"env_id"`
	Branch        string     `json:"branch"`
	Attempts      int        `json:"attempts"`
	State         string     `json:"state"`
	Title         string     `json:"title"`
	Summary       string     `json:"summary"`
	SubmittedAt   time.Time  `json:"submitted_at"`
	LastPollAt    *time.Time `json:"last_poll_at"`
	NextDueAt     *time.Time `json:"next_due_at"`
	Polls         int        `json:"polls"`
	Failures      int        `json:"failures"`
	LastError     string     `json:"last_error"`
	ErrorClass    string     `json:"error_class"`
	TranscriptLen int        `json:"transcript_lines"`
	Capture       string     `json:"cr_id"` // the change request made of its diff
	FinishedAt    *time.Time `json:"finished_at"`
}

// Finished reports whether the loop is done with the task.
func (t *CloudTask) Finished() bool { return t.FinishedAt != nil }

// Parked reports whether the task waits for a person (a permanent error).
func (t *CloudTask) Parked() bool { return t.FinishedAt == nil && t.NextDueAt == nil }

const cloudTaskCols = `t.task_id, t.session_id, s.status, t.url, t.env_id, t.branch, t.attempts, t.state,
	t.title, t.summary, t.submitted_at, t.last_poll_at, t.next_due_at, t.polls, t.failures,
	t.last_error, t.error_class, t.transcript_len, t.capture, t.finished_at`

const cloudTaskFrom = ` FROM cloud_tasks t JOIN sessions s ON s.id = t.session_id`

func scanCloudTask(row scanner) (*CloudTask, error) {
	var t CloudTask
	var submitted int64
	var lastPoll, nextDue, finished sql.NullInt64
	if err := row.Scan(&t.TaskID, &t.SessionID, &t.SessionStatus, &t.URL, &t.EnvID, &t.Branch, &t.Attempts, &t.State,
		&t.Title, &t.Summary, &submitted, &lastPoll, &nextDue, &t.Polls, &t.Failures,
		&t.LastError, &t.ErrorClass, &t.TranscriptLen, &t.Capture, &finished); err != nil {
		return nil, err
	}
	t.SubmittedAt = fromMillis(submitted)
	t.LastPollAt, t.NextDueAt, t.FinishedAt = timePtr(lastPoll), timePtr(nextDue), timePtr(finished)
	return &t, nil
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMillis(v.Int64)
	return &t
}

func nullMillis(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: millis(*t), Valid: true}
}

// CloudTaskOf returns the task of a session (NotFound when it has none).
func (s *Store) CloudTaskOf(ctx context.Context, sessionID string) (*CloudTask, error) {
	t, err := scanCloudTask(s.db.QueryRowContext(ctx, `SELECT `+cloudTaskCols+cloudTaskFrom+` WHERE t.session_id = ?`, sessionID))
	if err != nil {
		return nil, errNoRows(err, "session %s has no cloud task: submit it with `xmode cloud submit %s --env ENV_ID --prompt TEXT`", sessionID, sessionID)
	}
	return t, nil
}

// CloudTask returns a task by its ID.
func (s *Store) CloudTask(ctx context.Context, taskID string) (*CloudTask, error) {
	t, err := scanCloudTask(s.db.QueryRowContext(ctx, `SELECT `+cloudTaskCols+cloudTaskFrom+` WHERE t.task_id = ?`, taskID))
	if err != nil {
		return nil, errNoRows(err, "no cloud task %s", taskID)
	}
	return t, nil
}

// ClaimSubmit claims an open, unexpired session for `cloud submit`, with the
// reaper's claim on it: the reaper leaves a session alone while it is being
// submitted, and two submits of one session exclude each other.
func (s *Store) ClaimSubmit(ctx context.Context, sessionID, holder string, now time.Time, stale Stale) (Claim, error) {
	var c Claim
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE id = ? AND status = 'open' AND expires_at > ?`,
			sessionID, millis(now)).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			c = Claim{Result: Gone}
			return nil
		}
		var err error
		c, err = takeClaim(ctx, tx, claimKey(sessionID), holder, now, stale)
		return err
	})
	return c, err
}

// RecordSubmitted records a task codex created for the session, moves the
// session to submitted and releases the submit claim, in one transaction.
// A session stopped meanwhile keeps its task as abandoned, and the call
// fails saying so.
func (s *Store) RecordSubmitted(ctx context.Context, t *CloudTask, holder string) error {
	var status string
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT status FROM sessions WHERE id = ?`, t.SessionID).Scan(&status); err != nil {
			return errNoRows(err, "no session %s", t.SessionID)
		}
		state, finished := TaskPending, sql.NullInt64{}
		if status != StatusOpen {
			state, finished = TaskAbandoned, sql.NullInt64{Int64: millis(t.SubmittedAt), Valid: true}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO cloud_tasks (task_id, session_id, url, env_id, branch, attempts, state,
			title, submitted_at, next_due_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			t.TaskID, t.SessionID, t.URL, t.EnvID, t.Branch, t.Attempts, state, t.Title,
			millis(t.SubmittedAt), millis(t.SubmittedAt), finished)
		if err != nil {
			return fmt.Errorf("record task %s of %s: %w", t.TaskID, t.SessionID, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM meta WHERE key = ? AND substr(value, instr(value, ' ') + 1) = ?`,
			claimKey(t.SessionID), holder); err != nil {
			return err
		}
		if status != StatusOpen {
			return nil // kept as abandoned, and refused below
		}
		_, err = tx.ExecContext(ctx, `UPDATE sessions SET status = 'submitted' WHERE id = ?`, t.SessionID)
		return err
	})
	if err == nil && status != StatusOpen {
		return fail.Refusedf("session %s became %s while it was being submitted: task %s runs in the cloud but is not followed", t.SessionID, status, t.TaskID)
	}
	return err
}

// DropStaleCloudClaims deletes the poller leases whose holder is gone.
func (s *Store) DropStaleCloudClaims(ctx context.Context, stale Stale) (int, error) {
	return s.dropStaleClaims(ctx, CloudClaimPrefix, stale)
}

// RequeueStaleCloudTasks makes every unfinished task whose last poll (or
// submit) was before before due at now: the sweep, for tasks parked after a
// permanent error or backing off for long. It returns how many it re-queued.
func (s *Store) RequeueStaleCloudTasks(ctx context.Context, before, now time.Time) (int, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE cloud_tasks SET next_due_at = ?
		WHERE finished_at IS NULL AND coalesce(last_poll_at, submitted_at) < ? AND (next_due_at IS NULL OR next_due_at > ?)`,
		millis(now), millis(before), millis(now))
	if err != nil {
		return 0, fmt.Errorf("re-queue stale cloud tasks: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// ClaimDueCloudTasks leases up to limit unfinished tasks due at now that no
// one holds, oldest due first, in one transaction.
func (s *Store) ClaimDueCloudTasks(ctx context.Context, holder string, now time.Time, limit int) ([]*CloudTask, error) {
	due, err := s.stmt(ctx, `SELECT `+cloudTaskCols+cloudTaskFrom+`
		WHERE t.finished_at IS NULL AND t.next_due_at <= ?
		AND NOT EXISTS (SELECT 1 FROM meta m WHERE m.key = ? || t.task_id)
		ORDER BY t.next_due_at, t.task_id LIMIT ?`)
	if err != nil {
		return nil, err
	}
	ins, err := s.stmt(ctx, `INSERT INTO meta (key, value) VALUES (?, ?)`)
	if err != nil {
		return nil, err
	}
	var out []*CloudTask
	err = s.tx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.StmtContext(ctx, due).QueryContext(ctx, millis(now), CloudClaimPrefix, limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			t, err := scanCloudTask(rows)
			if err != nil {
				rows.Close()
				return err
			}
			out = append(out, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		// Free, as the query checked in this same transaction: a plain
		// insert, prepared once for the batch.
		ins := tx.StmtContext(ctx, ins)
		for _, t := range out {
			if _, err := ins.ExecContext(ctx, CloudClaimPrefix+t.TaskID, claimValue(now, holder)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim due cloud tasks: %w", err)
	}
	return out, nil
}

// ReleaseCloudTask drops the holder's lease on a task.
func (s *Store) ReleaseCloudTask(ctx context.Context, taskID, holder string) error {
	return s.releaseKey(ctx, CloudClaimPrefix+taskID, holder)
}

// CloudClaims lists the poller leases: task ID → holder.
func (s *Store) CloudClaims(ctx context.Context) (map[string]string, error) {
	return s.claimsUnder(ctx, CloudClaimPrefix)
}

// PollUpdate is what one step of the poller learned about a task.
type PollUpdate struct {
	Now time.Time
	// Polled: a status call answered or failed (polls+1, last poll = Now);
	// one that answered without Err clears the last error.
	Polled bool
	// State, Title, Summary: what the cloud said ("" keeps the old value).
	State, Title, Summary string
	// Transcript is the task's whole transcript as reported; the lines past
	// those already stored are appended to the thread.
	Transcript []string
	// Err and ErrClass record a failure (failures+1).
	Err, ErrClass string
	// NextDue is when the task is due again; nil parks it.
	NextDue *time.Time
	// Capture records what the diff was captured as.
	Capture string
	// Finish ends the loop's work on the task (finished_at = Now).
	Finish bool
	// Release drops the lease in the same transaction.
	Release bool
}

// RecordPoll applies a PollUpdate under the holder's lease, in one
// transaction, and returns how many transcript lines it appended. A caller
// whose lease was taken over gets ErrLeaseLost and nothing changes.
func (s *Store) RecordPoll(ctx context.Context, taskID, holder string, u PollUpdate) (int, error) {
	added, errs, err := s.RecordPolls(ctx, holder, []PollRecord{{TaskID: taskID, Update: u}})
	if err != nil {
		return 0, err
	}
	return added[0], errs[0]
}

// PollRecord is one task's update in RecordPolls.
type PollRecord struct {
	TaskID string
	Update PollUpdate
}

// RecordPolls applies the updates of several tasks in one transaction, each
// statement prepared once: a poll pass records its answers in groups, so a
// thousand tasks cost a few dozen commits, not a thousand. For each record
// it returns the lines appended, or ErrLeaseLost (that record changed
// nothing); err is for the transaction as a whole.
func (s *Store) RecordPolls(ctx context.Context, holder string, recs []PollRecord) (added []int, errs []error, err error) {
	var prep pollStmts
	if err := prep.prepare(ctx, s); err != nil {
		return nil, nil, err
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		added, errs = make([]int, len(recs)), make([]error, len(recs))
		st := prep.in(ctx, tx)
		for i, r := range recs {
			n, err := st.record(ctx, r.TaskID, holder, r.Update)
			if errors.Is(err, ErrLeaseLost) {
				errs[i] = err
				continue
			}
			if err != nil {
				return err
			}
			added[i] = n
		}
		return nil
	})
	return added, errs, err
}

type pollStmts struct {
	lease, task, line, update, release *sql.Stmt
}

func (st *pollStmts) prepare(ctx context.Context, s *Store) error {
	for _, p := range []struct {
		to *(*sql.Stmt)
		q  string
	}{
		{&st.lease, `SELECT value FROM meta WHERE key = ?`},
		{&st.task, `SELECT state, title, summary, last_poll_at, next_due_at, polls, failures, last_error, error_class,
			transcript_len, capture, finished_at FROM cloud_tasks WHERE task_id = ?`},
		{&st.line, `INSERT OR IGNORE INTO cloud_transcript (task_id, idx, line, arrived_at) VALUES (?, ?, ?, ?)`},
		{&st.update, `UPDATE cloud_tasks SET state = ?, title = ?, summary = ?, last_poll_at = ?, next_due_at = ?, polls = ?,
			failures = ?, last_error = ?, error_class = ?, transcript_len = ?, capture = ?, finished_at = ? WHERE task_id = ?`},
		{&st.release, `DELETE FROM meta WHERE key = ? AND substr(value, instr(value, ' ') + 1) = ?`},
	} {
		stmt, err := s.stmt(ctx, p.q)
		if err != nil {
			return err
		}
		*p.to = stmt
	}
	return nil
}

// in is the statements as statements of tx.
func (st *pollStmts) in(ctx context.Context, tx *sql.Tx) *pollStmts {
	return &pollStmts{lease: tx.StmtContext(ctx, st.lease), task: tx.StmtContext(ctx, st.task), line: tx.StmtContext(ctx, st.line),
		update: tx.StmtContext(ctx, st.update), release: tx.StmtContext(ctx, st.release)}
}

func (st *pollStmts) record(ctx context.Context, taskID, holder string, u PollUpdate) (int, error) {
	// The lease is checked first: a record that releases it deletes it
	// (only if it is the holder's) in the same statement.
	if u.Release {
		res, err := st.release.ExecContext(ctx, CloudClaimPrefix+taskID, holder)
		if err != nil {
			return 0, err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return 0, ErrLeaseLost
		}
	} else {
		var lease string
		err := st.lease.QueryRowContext(ctx, CloudClaimPrefix+taskID).Scan(&lease)
		if err != nil && err != sql.ErrNoRows {
			return 0, err
		}
		if h, _ := parseClaim(lease); err == sql.ErrNoRows || h != holder {
			return 0, ErrLeaseLost
		}
	}
	var t CloudTask
	var lastPoll, nextDue, finished sql.NullInt64
	err := st.task.QueryRowContext(ctx, taskID).Scan(&t.State, &t.Title, &t.Summary, &lastPoll, &nextDue, &t.Polls, &t.Failures,
		&t.LastError, &t.ErrorClass, &t.TranscriptLen, &t.Capture, &finished)
	if err != nil {
		return 0, errNoRows(err, "no cloud task %s", taskID)
	}
	t.LastPollAt, t.FinishedAt = timePtr(lastPoll), timePtr(finished)
	added := 0
	now := millis(u.Now)
	for i := t.TranscriptLen; i < len(u.Transcript); i++ {
		res, err := st.line.ExecContext(ctx, taskID, i, u.Transcript[i], now)
		if err != nil {
			return 0, fmt.Errorf("append to the thread of %s: %w", taskID, err)
		}
		n, _ := res.RowsAffected()
		added += int(n)
	}
	t.TranscriptLen = max(t.TranscriptLen, len(u.Transcript))
	if u.Polled {
		t.Polls++
		t.LastPollAt = &u.Now
		if u.Err == "" {
			t.LastError, t.ErrorClass, t.Failures = "", "", 0
		}
	}
	if u.Err != "" {
		t.LastError, t.ErrorClass = u.Err, u.ErrClass
		t.Failures++
	}
	if u.State != "" {
		t.State = u.State
	}
	if u.Title != "" {
		t.Title = u.Title
	}
	if u.Summary != "" {
		t.Summary = u.Summary
	}
	if u.Capture != "" {
		t.Capture = u.Capture
	}
	t.NextDueAt = u.NextDue
	if u.Finish {
		t.FinishedAt, t.NextDueAt = &u.Now, nil
	}
	_, err = st.update.ExecContext(ctx, t.State, t.Title, t.Summary, nullMillis(t.LastPollAt), nullMillis(t.NextDueAt), t.Polls,
		t.Failures, t.LastError, t.ErrorClass, t.TranscriptLen, t.Capture, nullMillis(t.FinishedAt), taskID)
	if err != nil {
		return 0, fmt.Errorf("record poll of %s: %w", taskID, err)
	}
	return added, nil
}

// ThreadLine is one transcript line of a session's thread.
type ThreadLine struct {
	Index     int       `json:"index"`
	Line      string    `json:"line"`
	ArrivedAt time.Time `json:"arrived_at"`
}

// Thread returns a task's transcript lines from index from on, in order.
func (s *Store) Thread(ctx context.Context, taskID string, from int) ([]ThreadLine, error) {
	return s.ThreadPage(ctx, taskID, from, -1)
}

// ThreadPage is Thread of at most limit lines (-1: all).
func (s *Store) ThreadPage(ctx context.Context, taskID string, from, limit int) ([]ThreadLine, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT idx, line, arrived_at FROM cloud_transcript WHERE task_id = ? AND idx >= ? ORDER BY idx LIMIT ?`,
		taskID, from, limit)
	if err != nil {
		return nil, fmt.Errorf("read the thread of %s: %w", taskID, err)
	}
	defer rows.Close()
	var out []ThreadLine
	for rows.Next() {
		var l ThreadLine
		var at int64
		if err := rows.Scan(&l.Index, &l.Line, &at); err != nil {
			return nil, err
		}
		l.ArrivedAt = fromMillis(at)
		out = append(out, l)
	}
	return out, rows.Err()
}

// CloudTasks lists the Codex cloud tasks, newest submission first, at most
// limit of them (0: all).
func (s *Store) CloudTasks(ctx context.Context, limit int) ([]*CloudTask, error) {
	q := `SELECT ` + cloudTaskCols + cloudTaskFrom + ` ORDER BY t.submitted_at DESC, t.task_id`
	var args []any
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list cloud tasks: %w", err)
	}
	defer rows.Close()
	out := []*CloudTask{}
	for rows.Next() {
		t, err := scanCloudTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
