package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/xmode/xmode/fail"
)

// Snapshot statuses (docs/reference.md, "Snapshot status").
const (
	SnapshotMaking = "making" // recorded, its store and image being made
	SnapshotReady  = "ready"
)

// Snapshot is what `sandbox snapshot` kept of a session; its JSON is
// docs/reference.md, "Snapshot".
type Snapshot struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	User   string `json:"user"`
	Status string `json:"status"`
	// SessionID is the session it was taken of, Seq the last step that
	// session's run had begun then (0: none).
	SessionID string `json:"session_id"`
	Seq       int    `json:"seq"`
	Repo      string `json:"repo"`
	Ref       string `json:"ref"`
	Project   string `json:"project"`
	// Machine is the project machine the session's worktree came from
	// ("" for a clone): a session made from the snapshot gets a worktree
	// of it too.
	Machine string `json:"machine"`
	// BaseCommit is the session's base; Head the commit a session made
	// from it gets as HEAD (the agent's last readable commit, else the
	// base); Tree what its worktree holds; Commit the commit of that tree
	// in the snapshot's store.
	BaseCommit  string    `json:"base_commit"`
	Head        string    `json:"head"`
	Tree        string    `json:"tree"`
	Commit      string    `json:"commit"`
	RunnerMode  string    `json:"runner_mode"`
	Engine      string    `json:"engine"`
	Image       string    `json:"image"`
	Network     string    `json:"network"`
	WithIgnored bool      `json:"with_ignored"`
	Bytes       int64     `json:"bytes"`
	Warnings    []string  `json:"warnings"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	Dir         string    `json:"dir"`
}

// Expired reports whether the snapshot's lifetime ran out at now.
func (s *Snapshot) Expired(now time.Time) bool { return !now.Before(s.ExpiresAt) }

// NewSnapshotID returns a fresh snp_ id.
func NewSnapshotID() string { return newID("snp_") }

const snapshotCols = `id, name, user, status, session_id, seq, repo, ref, project, machine, base_commit, head, tree,
	commit_id, runner_mode, engine, image, network, with_ignored, bytes, warnings, created_at, expires_at`

func (st *Store) scanSnapshot(row scanner) (*Snapshot, error) {
	var s Snapshot
	var created, expires int64
	var warnings string
	if err := row.Scan(&s.ID, &s.Name, &s.User, &s.Status, &s.SessionID, &s.Seq, &s.Repo, &s.Ref, &s.Project, &s.Machine,
		&s.BaseCommit, &s.Head, &s.Tree, &s.Commit, &s.RunnerMode, &s.Engine, &s.Image, &s.Network,
		&s.WithIgnored, &s.Bytes, &warnings, &created, &expires); err != nil {
		return nil, err
	}
	s.CreatedAt, s.ExpiresAt = fromMillis(created), fromMillis(expires)
	if err := json.Unmarshal([]byte(warnings), &s.Warnings); err != nil {
		return nil, fmt.Errorf("snapshot %s: bad warnings column: %w", s.ID, err)
	}
	s.Warnings = nonNil(s.Warnings)
	s.Dir, _ = st.guard.SnapshotDir(s.ID)
	return &s, nil
}

// CreateSnapshot inserts a snapshot in status making, before anything of
// it exists. It refuses (in the insert's transaction, so racing snapshots
// cannot overshoot) a user who already has max live snapshots — unexpired
// ones, whatever their status (0: unlimited) — and a name the user already
// gave another snapshot.
func (s *Store) CreateSnapshot(ctx context.Context, sn Snapshot, max int) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var other string
		var expires int64
		err := tx.QueryRowContext(ctx, `SELECT id, expires_at FROM snapshots WHERE user = ? AND name = ?`, sn.User, sn.Name).Scan(&other, &expires)
		switch {
		case err == nil && fromMillis(expires).After(sn.CreatedAt):
			return fail.Refusedf("user %s already has a snapshot named %s (%s): give another %s, or remove it with `xmode sandbox snapshots rm %s`", sn.User, sn.Name, other, fail.Name, sn.Name)
		case err == nil:
			return fail.Refusedf("user %s already has a snapshot named %s (%s, expired, not reaped yet): remove it with `xmode sandbox snapshots rm %s`, or give another %s", sn.User, sn.Name, other, sn.Name, fail.Name)
		case err != sql.ErrNoRows:
			return fmt.Errorf("look up snapshot %s: %w", sn.Name, err)
		}
		if max > 0 {
			live, err := strings1(ctx, tx, `SELECT name FROM snapshots WHERE user = ? AND expires_at > ? ORDER BY created_at`, sn.User, millis(sn.CreatedAt))
			if err != nil {
				return fmt.Errorf("count snapshots: %w", err)
			}
			if len(live) >= max {
				return fail.Refusedf("user %s already has %d snapshots, the limit (XMODE_SNAPSHOT_MAX=%d): %s; remove one with `xmode sandbox snapshots rm NAME`",
					sn.User, len(live), max, strings.Join(live, ", "))
			}
		}
		warnings, _ := json.Marshal(nonNil(sn.Warnings))
		_, err = tx.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotCols+`)
			VALUES (?, ?, ?, 'making', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)`,
			sn.ID, sn.Name, sn.User, sn.SessionID, sn.Seq, sn.Repo, sn.Ref, sn.Project, sn.Machine, sn.BaseCommit, sn.Head, sn.Tree,
			sn.Commit, sn.RunnerMode, sn.Engine, sn.Image, sn.Network, sn.WithIgnored, string(warnings),
			millis(sn.CreatedAt), millis(sn.ExpiresAt))
		if err != nil {
			return fmt.Errorf("insert snapshot %s: %w", sn.ID, err)
		}
		return nil
	})
}

// SnapshotMade records what a snapshot holds and makes it ready; its
// lifetime counts from now (expires), not from the start of its making.
func (s *Store) SnapshotMade(ctx context.Context, sn *Snapshot) error {
	warnings, _ := json.Marshal(nonNil(sn.Warnings))
	res, err := s.exec(ctx, `UPDATE snapshots SET status = 'ready', head = ?, tree = ?, commit_id = ?, image = ?,
		bytes = ?, warnings = ?, expires_at = ? WHERE id = ? AND status = 'making'`,
		sn.Head, sn.Tree, sn.Commit, sn.Image, sn.Bytes, string(warnings), millis(sn.ExpiresAt), sn.ID)
	if err != nil {
		return fmt.Errorf("record snapshot %s: %w", sn.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fail.Refusedf("snapshot %s is no longer being made (removed meanwhile?)", sn.ID)
	}
	return nil
}

// SetSnapshotImage records the image of a snapshot being made as soon as
// it exists, so that a snapshot that dies after it leaves it findable.
func (s *Store) SetSnapshotImage(ctx context.Context, id, image string) error {
	if _, err := s.exec(ctx, `UPDATE snapshots SET image = ? WHERE id = ?`, image, id); err != nil {
		return fmt.Errorf("record the image of snapshot %s: %w", id, err)
	}
	return nil
}

// GetSnapshot returns the snapshot with exactly this ID.
func (s *Store) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	sn, err := s.scanSnapshot(s.db.QueryRowContext(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ?`, id))
	if err != nil {
		return nil, errNoRows(err, "no snapshot %s", id)
	}
	return sn, nil
}

// ResolveSnapshot finds a snapshot by what a user typed: a name of their
// own snapshots, else an ID or a unique prefix of one (at least 4
// characters, with or without snp_).
func (s *Store) ResolveSnapshot(ctx context.Context, user, ref string) (*Snapshot, error) {
	sn, err := s.scanSnapshot(s.db.QueryRowContext(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE user = ? AND name = ?`, user, ref))
	if err == nil {
		return sn, nil
	}
	if err != sql.ErrNoRows {
		return nil, fmt.Errorf("look up snapshot %s: %w", ref, err)
	}
	notFound := fail.NotFoundf("no snapshot %s of user %s: `xmode sandbox snapshots` lists them", ref, user)
	rest := strings.TrimPrefix(ref, "snp_")
	if len(rest) < 4 || len(rest) > 32 || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return nil, notFound
	}
	prefix := "snp_" + rest
	found, err := s.snapshots(ctx, `WHERE id >= ? AND id < ? ORDER BY id LIMIT 11`, prefix, prefix+"~")
	if err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, notFound
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, f := range found {
		ids[i] = f.ID
	}
	return nil, fail.Usagef("snapshot %q is ambiguous: it matches %s; give more characters, or its name", ref, strings.Join(ids, ", "))
}

// ListSnapshots returns the snapshots of user ("" for every user's),
// newest first.
func (s *Store) ListSnapshots(ctx context.Context, user string) ([]*Snapshot, error) {
	if user == "" {
		return s.snapshots(ctx, `ORDER BY created_at DESC, id`)
	}
	return s.snapshots(ctx, `WHERE user = ? ORDER BY created_at DESC, id`, user)
}

// ExpiredSnapshots are the snapshots whose lifetime ran out at now, and
// those still being made since before stuck (their maker died).
func (s *Store) ExpiredSnapshots(ctx context.Context, now, stuck time.Time) ([]*Snapshot, error) {
	return s.snapshots(ctx, `WHERE (status = 'ready' AND expires_at <= ?) OR (status = 'making' AND created_at < ?) ORDER BY created_at, id`,
		millis(now), millis(stuck))
}

// SnapshotIDs are the IDs of every snapshot the store knows, whatever its
// status: what the reaper's orphan sweep keeps the images of.
func (s *Store) SnapshotIDs(ctx context.Context) (map[string]bool, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM snapshots`)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids[id] = true
	}
	return ids, rows.Err()
}

// DeleteSnapshot removes a snapshot's row (its store and image are gone
// first) and reports whether this call removed it; one already gone is not
// an error.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) (bool, error) {
	res, err := s.exec(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	if err != nil {
		return false, fmt.Errorf("forget snapshot %s: %w", id, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

func (s *Store) snapshots(ctx context.Context, where string, args ...any) ([]*Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+snapshotCols+` FROM snapshots `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	defer rows.Close()
	out := []*Snapshot{}
	for rows.Next() {
		sn, err := s.scanSnapshot(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sn)
	}
	return out, rows.Err()
}

// strings1 runs a query of one string column in db (a transaction, or the
// database) and returns its rows.
func strings1(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ForkPoint is what a fork or a snapshot of a run needs to know of its
// steps: the last one begun so far (0: none) and those still running.
func (s *Store) ForkPoint(ctx context.Context, runID string) (int, []StepRow, error) {
	var last sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT max(seq) FROM steps WHERE run_id = ?`, runID).Scan(&last); err != nil {
		return 0, nil, fmt.Errorf("read the steps of %s: %w", runID, err)
	}
	running, err := s.steps(ctx, `WHERE run_id = ? AND state = 'running' ORDER BY seq`, runID)
	return int(last.Int64), running, err
}

// StepsAfter are the steps of a run numbered above seq.
func (s *Store) StepsAfter(ctx context.Context, runID string, seq int) ([]StepRow, error) {
	return s.steps(ctx, `WHERE run_id = ? AND seq > ? ORDER BY seq`, runID, seq)
}

// CheckQuota refuses a new session of user when it would have more than
// max open, unexpired sessions (0: unlimited), as CreateSession does: for
// a caller with work to do before it inserts the session (a fork reads its
// parent first), so that a refusal comes before anything is made.
func (s *Store) CheckQuota(ctx context.Context, user string, max int, now time.Time) error {
	if max <= 0 {
		return nil
	}
	return s.tx(ctx, func(tx *sql.Tx) error { return checkQuota(ctx, tx, user, max, now) })
}
