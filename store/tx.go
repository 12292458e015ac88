package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The store lends its database to a package that keeps a table of its own
// (package pool: pool_entries), so that the store stays the one owner of
// the database — its connection, schema, immediate transactions, the
// disk-full reserve and what a failed write means — while that package
// alone writes the SQL of its table. What such a package must change of the
// store's own rows in the same transaction (a run, a session) goes through
// the Tx methods below, never its own SQL.

// Tx is one immediate transaction of the store (Write).
type Tx struct{ tx *sql.Tx }

// Write runs fn in an immediate transaction: the write lock is taken up
// front, and a full disk gives back a chunk of the reserve and runs fn
// again (fn must not keep anything of a failed attempt).
func (s *Store) Write(ctx context.Context, fn func(*Tx) error) error {
	return s.tx(ctx, func(tx *sql.Tx) error { return fn(&Tx{tx: tx}) })
}

// Exec runs one statement of the caller's table in the transaction.
func (t *Tx) Exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, q, args...)
}

// QueryRow runs one query of the caller's table in the transaction.
func (t *Tx) QueryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, q, args...)
}

// Exec runs one write of the caller's table outside a transaction, with the
// reserve's retry on a full disk.
func (s *Store) Exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return s.exec(ctx, q, args...)
}

// Query runs one query of the caller's table.
func (s *Store) Query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return s.db.QueryContext(ctx, q, args...)
}

// QueryRow runs one query of the caller's table that returns one row.
func (s *Store) QueryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return s.db.QueryRowContext(ctx, q, args...)
}

// Millis is how the store writes a time: Unix milliseconds.
func Millis(t time.Time) int64 { return millis(t) }

// FromMillis reads a time the store wrote (UTC).
func FromMillis(ms int64) time.Time { return fromMillis(ms) }

// InsertMachineRun inserts the row of a new run of a project machine's
// (a pool entry's, made ahead of its session).
func (t *Tx) InsertMachineRun(ctx context.Context, runID, repo, ref, project string, now time.Time) error {
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO runs (id, created_at, repo, ref, project, machine) VALUES (?, ?, ?, ?, ?, ?)`,
		runID, millis(now), repo, ref, project, project); err != nil {
		return fmt.Errorf("insert run %s: %w", runID, err)
	}
	return nil
}

// CheckQuota refuses a new open session of user beyond maxOpen (0:
// unlimited), counted in the transaction: as CreateSession counts.
func (t *Tx) CheckQuota(ctx context.Context, user string, maxOpen int, now time.Time) error {
	return checkQuota(ctx, t.tx, user, maxOpen, now)
}

// InsertSessionOnRun inserts a session on a run that exists, as it is
// (its status included), and restarts the run as the session's: made when
// the session was, of its repo, ref and base commit. A pool claim turns an
// entry into its session this way.
func (t *Tx) InsertSessionOnRun(ctx context.Context, s Session) error {
	if err := insertSession(ctx, t.tx, s); err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(ctx, `UPDATE runs SET created_at = ?, repo = ?, ref = ?, base_commit = ? WHERE id = ?`,
		millis(s.CreatedAt), s.Repo, s.Ref, s.BaseCommit, s.RunID); err != nil {
		return fmt.Errorf("start run %s: %w", s.RunID, err)
	}
	return nil
}

// StartLoop makes a run a run of the loop, as CreateSession does for a
// new run: a pool claim's run becomes `xmode run`'s this way.
func (t *Tx) StartLoop(ctx context.Context, runID string, l NewLoop) error {
	return startLoop(ctx, t.tx, runID, l)
}

// MarkRunReclaimed marks a run's worktree as reclaimed (or being), so that
// the reaper's run sweep finds it should its removal not follow.
func (t *Tx) MarkRunReclaimed(ctx context.Context, runID string, now time.Time) error {
	_, err := t.tx.ExecContext(ctx, `UPDATE runs SET reclaimed_at = ? WHERE id = ? AND reclaimed_at IS NULL`, millis(now), runID)
	return err
}
