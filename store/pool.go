package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
)

// Pool entry states (0005_pool.sql).
const (
	PoolProvisioning = "provisioning"
	PoolReady        = "ready"
	PoolRetiring     = "retiring"
)

// PoolEntry is a sandbox made ahead of time for a project machine: the
// session it becomes when claimed, before anyone owns it.
type PoolEntry struct {
	SessionID   string     `json:"id"`
	RunID       string     `json:"run_id"`
	Project     string     `json:"project"`
	Commit      string     `json:"commit"`
	Files       int        `json:"files"`
	Engine      string     `json:"engine"`
	Shape       string     `json:"shape"`
	MountMode   string     `json:"mount_mode"`
	Image       string     `json:"image"`
	ContainerID string     `json:"container_id"`
	Volumes     []string   `json:"-"`
	State       string     `json:"state"`
	Owner       string     `json:"-"`
	OwnerAt     time.Time  `json:"-"`
	CreatedAt   time.Time  `json:"created_at"`
	ReadyAt     *time.Time `json:"ready_at"`
	// WorktreePath is derived from the run, like a session's.
	WorktreePath string `json:"worktree_path"`
}

// Sandbox is what the engine needs to address the entry's sandbox (to
// destroy it).
func (e *PoolEntry) Sandbox() engine.Sandbox {
	return engine.Sandbox{
		Engine: e.Engine, ContainerID: e.ContainerID, MountMode: e.MountMode, Image: e.Image,
		Volumes: e.Volumes, Worktree: e.WorktreePath, RunID: e.RunID, SessionID: e.SessionID, Project: e.Project,
	}
}

const poolCols = `session_id, run_id, project, base_commit, files, engine, shape, mount_mode, image,
	container_id, volumes, state, owner, owner_at, created_at, ready_at`

func (st *Store) scanPoolEntry(row scanner) (*PoolEntry, error) {
	var e PoolEntry
	var volumes string
	var ownerAt, created int64
	var ready sql.NullInt64
	if err := row.Scan(&e.SessionID, &e.RunID, &e.Project, &e.Commit, &e.Files, &e.Engine, &e.Shape, &e.MountMode,
		&e.Image, &e.ContainerID, &volumes, &e.State, &e.Owner, &ownerAt, &created, &ready); err != nil {
		return nil, err
	}
	e.OwnerAt, e.CreatedAt = fromMillis(ownerAt), fromMillis(created)
	if ready.Valid {
		t := fromMillis(ready.Int64)
		e.ReadyAt = &t
	}
	if err := json.Unmarshal([]byte(volumes), &e.Volumes); err != nil {
		return nil, fmt.Errorf("pool entry %s: bad volumes column: %w", e.SessionID, err)
	}
	e.WorktreePath, _ = st.guard.Worktree(e.RunID)
	return &e, nil
}

// NewPoolEntry describes entries to reserve for one machine.
type NewPoolEntry struct {
	Project, Repo, Ref string
	Commit             string // the machine's commit: only entries at it count towards Size
	Engine, Shape      string
	MountMode, Image   string
	Size               int // the pool's size: reserve what it lacks
	Owner              string
	Now                time.Time
	NewID, NewRunID    func() string // NewSessionID and NewRunID; tests may pin them
	MaxReserve         int           // reserve at most this many (0: no limit)
}

// ReservePool inserts, in one immediate transaction, as many provisioning
// entries (each with its run, marked as the machine's) as the pool of this
// project and shape lacks: Size less the entries at Commit that are ready
// or being made. Two processes filling one pool at once therefore never
// overshoot it. The caller makes each entry and marks it ready (or tears
// it down).
func (s *Store) ReservePool(ctx context.Context, n NewPoolEntry) ([]*PoolEntry, error) {
	var out []*PoolEntry
	newID, newRun := n.NewID, n.NewRunID
	if newID == nil {
		newID = NewSessionID
	}
	if newRun == nil {
		newRun = NewRunID
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		out = nil
		var have int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pool_entries WHERE project = ? AND shape = ?
			AND state IN ('provisioning', 'ready') AND base_commit = ?`, n.Project, n.Shape, n.Commit).Scan(&have); err != nil {
			return fmt.Errorf("count the pool of %s: %w", n.Project, err)
		}
		want := n.Size - have
		if n.MaxReserve > 0 {
			want = min(want, n.MaxReserve)
		}
		now := millis(n.Now)
		for range max(want, 0) {
			e := &PoolEntry{SessionID: newID(), RunID: newRun(), Project: n.Project, Commit: n.Commit, Engine: n.Engine,
				Shape: n.Shape, MountMode: n.MountMode, Image: n.Image, State: PoolProvisioning, Owner: n.Owner,
				OwnerAt: fromMillis(now), CreatedAt: fromMillis(now), Volumes: []string{}}
			if _, err := tx.ExecContext(ctx, `INSERT INTO runs (id, created_at, repo, ref, project, machine) VALUES (?, ?, ?, ?, ?, ?)`,
				e.RunID, now, n.Repo, n.Ref, n.Project, n.Project); err != nil {
				return fmt.Errorf("insert run of a pool entry: %w", err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO pool_entries (`+poolCols+`)
				VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, '', '[]', ?, ?, ?, ?, NULL)`,
				e.SessionID, e.RunID, e.Project, e.Commit, e.Engine, e.Shape, e.MountMode, e.Image, e.State, e.Owner, now, now); err != nil {
				return fmt.Errorf("insert pool entry: %w", err)
			}
			e.WorktreePath, _ = s.guard.Worktree(e.RunID)
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// RecordPoolEngine stores what the engine made for an entry as soon as it
// exists, so a crash leaves it findable (as RecordEngine for a session).
func (s *Store) RecordPoolEngine(ctx context.Context, id, containerID, mountMode, image string, volumes []string) error {
	vols, _ := json.Marshal(nonNil(volumes))
	if _, err := s.exec(ctx, `UPDATE pool_entries SET container_id = ?, mount_mode = ?, image = ?, volumes = ? WHERE session_id = ?`,
		containerID, mountMode, image, string(vols), id); err != nil {
		return fmt.Errorf("record engine objects of pool entry %s: %w", id, err)
	}
	return nil
}

// PoolEntryReady makes a provisioning entry claimable, at the commit its
// worktree was checked out at. An entry someone took over meanwhile (its
// maker was taken for dead) is not made ready: fail.Refused.
func (s *Store) PoolEntryReady(ctx context.Context, id, owner, commit string, files int, now time.Time) error {
	res, err := s.exec(ctx, `UPDATE pool_entries SET state = 'ready', base_commit = ?, files = ?, ready_at = ?, owner = '', owner_at = ?
		WHERE session_id = ? AND state = 'provisioning' AND owner = ?`, commit, files, millis(now), millis(now), id, owner)
	if err != nil {
		return fmt.Errorf("make pool entry %s ready: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fail.Refusedf("pool entry %s is no longer being made here (retired meanwhile?)", id)
	}
	return nil
}

// PoolEntries lists the entries of project ("" for every project), oldest
// first.
func (s *Store) PoolEntries(ctx context.Context, project string) ([]*PoolEntry, error) {
	q := `SELECT ` + poolCols + ` FROM pool_entries`
	var args []any
	if project != "" {
		q += ` WHERE project = ?`
		args = append(args, project)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created_at, session_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list pool entries: %w", err)
	}
	defer rows.Close()
	var out []*PoolEntry
	for rows.Next() {
		e, err := s.scanPoolEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// ReadyCommits returns the commits of the ready entries of a project and
// shape, the most common first: what a claim can choose from. One small
// read, so a create with an empty pool pays next to nothing for it.
func (s *Store) ReadyCommits(ctx context.Context, project, shape string) ([]PoolCommit, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT base_commit, max(files), count(*) FROM pool_entries
		WHERE project = ? AND shape = ? AND state = 'ready' GROUP BY base_commit ORDER BY count(*) DESC, base_commit`, project, shape)
	if err != nil {
		return nil, fmt.Errorf("read the pool of %s: %w", project, err)
	}
	defer rows.Close()
	var out []PoolCommit
	for rows.Next() {
		var c PoolCommit
		if err := rows.Scan(&c.Commit, &c.Files, &c.Entries); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// PoolCommit is one commit ready entries of a pool are at.
type PoolCommit struct {
	Commit  string
	Files   int // files of a worktree at Commit
	Entries int
}

// RetirePoolEntry takes an entry for teardown: a ready one, one owner is
// already taking down or making (its own failure), or one whose owner is
// gone (stale). It reports false when the entry is claimed, gone, or
// another live process holds it.
func (s *Store) RetirePoolEntry(ctx context.Context, id, owner string, now time.Time, stale Stale) (bool, error) {
	took := false
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var state, other string
		var at int64
		err := tx.QueryRowContext(ctx, `SELECT state, owner, owner_at FROM pool_entries WHERE session_id = ?`, id).Scan(&state, &other, &at)
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read pool entry %s: %w", id, err)
		}
		if state != PoolReady && other != owner && (stale == nil || !stale(other, fromMillis(at))) {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE pool_entries SET state = 'retiring', owner = ?, owner_at = ? WHERE session_id = ?`,
			owner, millis(now), id); err != nil {
			return fmt.Errorf("retire pool entry %s: %w", id, err)
		}
		took = true
		return nil
	})
	return took, err
}

// DropPoolEntry forgets an entry whose engine objects are gone, and marks
// its run reclaimed in the same transaction: should the removal of its
// worktree not follow, the reaper's run sweep finds it.
func (s *Store) DropPoolEntry(ctx context.Context, id, runID string, now time.Time) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM pool_entries WHERE session_id = ?`, id); err != nil {
			return fmt.Errorf("forget pool entry %s: %w", id, err)
		}
		_, err := tx.ExecContext(ctx, `UPDATE runs SET reclaimed_at = ? WHERE id = ? AND reclaimed_at IS NULL`, millis(now), runID)
		return err
	})
}

// ForgetRun deletes the row of a run that no session ever used and no pool
// entry holds (a retired entry's, once its worktree is gone): nothing of it
// is left to show.
func (s *Store) ForgetRun(ctx context.Context, runID string) error {
	_, err := s.exec(ctx, `DELETE FROM runs WHERE id = ? AND reclaimed_at IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM sessions WHERE run_id = ?)
		AND NOT EXISTS (SELECT 1 FROM pool_entries WHERE run_id = ?)`, runID, runID, runID)
	if err != nil {
		return fmt.Errorf("forget run %s: %w", runID, err)
	}
	return nil
}

// PoolClaim is a claim of a ready entry by `sandbox create`.
type PoolClaim struct {
	Project, Shape string
	// Want is the commit the session is to be at; Also, when not empty,
	// another commit whose entries the caller can move to Want. Entries
	// at Want are taken first, oldest first.
	Want, Also string
	// Entry, when not empty, is the one entry to claim (NextPoolEntry's,
	// checked alive meanwhile); the claim takes nothing else.
	Entry string
	// Session is the new session: owner, runner mode, repo, ref, times.
	// Its ID, run and engine fields come from the entry.
	Session Session
	MaxOpen int
}

// claimWhere picks the entry a claim takes: one at Want before one at
// Also, then the oldest.
const claimWhere = `project = ? AND shape = ? AND state = 'ready' AND base_commit IN (?, ?) AND (? = '' OR session_id = ?)
	ORDER BY base_commit = ? DESC, created_at, session_id LIMIT 1`

// NextPoolEntry returns the entry ClaimPoolEntry would take now, without
// taking it (nil when none fits): the caller checks that its sandbox lives
// before claiming it by Entry.
func (s *Store) NextPoolEntry(ctx context.Context, c PoolClaim) (*PoolEntry, error) {
	e, err := s.scanPoolEntry(s.db.QueryRowContext(ctx, `SELECT `+poolCols+` FROM pool_entries WHERE `+claimWhere,
		c.Project, c.Shape, c.Want, c.Also, c.Entry, c.Entry, c.Want))
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the pool of %s: %w", c.Project, err)
	}
	return e, nil
}

// ClaimPoolEntry turns a ready entry into the session, in one immediate
// transaction: the quota check, the choice of the entry, its removal from
// the pool and the session's insertion. Two racing creates never get the
// same entry; one over quota gets none. The session is open at once when
// the entry is at Want (its lifetime starting now), else provisioning
// until the caller has moved its worktree (Provisioned). It returns nil
// when no entry fits.
func (s *Store) ClaimPoolEntry(ctx context.Context, c PoolClaim) (*PoolEntry, *Session, error) {
	var entry *PoolEntry
	var sess Session
	err := s.tx(ctx, func(tx *sql.Tx) error {
		entry = nil
		now := c.Session.CreatedAt
		if err := checkQuota(ctx, tx, c.Session.User, c.MaxOpen, now); err != nil {
			return err
		}
		e, err := s.scanPoolEntry(tx.QueryRowContext(ctx, `SELECT `+poolCols+` FROM pool_entries WHERE `+claimWhere,
			c.Project, c.Shape, c.Want, c.Also, c.Entry, c.Entry, c.Want))
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim from the pool of %s: %w", c.Project, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM pool_entries WHERE session_id = ? AND state = 'ready'`, e.SessionID); err != nil {
			return fmt.Errorf("claim pool entry %s: %w", e.SessionID, err)
		}
		sess = c.Session
		sess.ID, sess.RunID, sess.Project, sess.Engine = e.SessionID, e.RunID, e.Project, e.Engine
		sess.ContainerID, sess.MountMode, sess.Image, sess.Volumes = e.ContainerID, e.MountMode, e.Image, e.Volumes
		sess.WorktreePath = e.WorktreePath
		sess.Status, sess.BaseCommit = StatusProvisioning, ""
		if e.Commit == c.Want {
			sess.Status, sess.BaseCommit = StatusOpen, e.Commit
		}
		sess.CreatedAt = now
		if err := insertSession(ctx, tx, sess); err != nil {
			return fmt.Errorf("claim pool entry %s: %w", e.SessionID, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET created_at = ?, repo = ?, ref = ?, base_commit = ? WHERE id = ?`,
			millis(now), sess.Repo, sess.Ref, sess.BaseCommit, sess.RunID); err != nil {
			return fmt.Errorf("claim the run of pool entry %s: %w", e.SessionID, err)
		}
		entry = e
		return nil
	})
	if err != nil || entry == nil {
		return nil, nil, err
	}
	sess.RunDir, _ = s.guard.RunDir(sess.RunID)
	return entry, &sess, nil
}

// SetPoolSize records the pool size of a machine (`machine warm --pool N`).
func (s *Store) SetPoolSize(ctx context.Context, project string, size int) error {
	res, err := s.exec(ctx, `UPDATE project_machines SET pool_size = ? WHERE project = ?`, size, project)
	if err != nil {
		return fmt.Errorf("record the pool size of %s: %w", project, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fail.NotFoundf("no project machine %s", project)
	}
	return nil
}
