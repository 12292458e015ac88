package pool

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/store"
)

// The pool's rows: the table pool_entries (store/migrations/0008_pool.sql)
// is this package's, and all of its SQL is here. The store keeps the
// database and lends it through store.Tx; what a pool entry changes of the
// store's own rows (its run, the session a claim inserts) goes through the
// store's methods. The store only reads pool_entries, where a run or
// session of its own must be seen held by an entry in the same statement:
// ActiveSessions, ClaimRun, ForgetRun and a join of a run (CreateSession).

// Entry states (0008_pool.sql).
const (
	Provisioning = "provisioning"
	Ready        = "ready"
	Retiring     = "retiring"
)

// Entry is a sandbox made ahead of time for a project machine: the
// session it becomes when claimed, before anyone owns it.
type Entry struct {
	SessionID   string     `json:"id"`
	RunID       string     `json:"run_id"`
	Project     string     `json:"project"`
	Commit      string     `json:"commit"`
	Files       int        `json:"files"`
	Engine      string     `json:"engine"`
	Shape       string     `json:"shape"`
	User        string     `json:"user"` // whose cache it mounts, and creates claim it (Pools.Users); "" for none
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
// check or destroy it).
func (e *Entry) Sandbox() engine.Sandbox {
	return engine.Sandbox{
		Engine: e.Engine, ContainerID: e.ContainerID, MountMode: e.MountMode, Image: e.Image,
		Volumes: e.Volumes, Worktree: e.WorktreePath, RunID: e.RunID, SessionID: e.SessionID, Project: e.Project,
	}
}

const entryCols = `session_id, run_id, project, base_commit, files, engine, shape, user, mount_mode, image,
	container_id, volumes, state, owner, owner_at, created_at, ready_at`

type scanner interface{ Scan(...any) error }

func (p *Pools) scanEntry(row scanner) (*Entry, error) {
	var e Entry
	var volumes string
	var ownerAt, created int64
	var ready sql.NullInt64
	if err := row.Scan(&e.SessionID, &e.RunID, &e.Project, &e.Commit, &e.Files, &e.Engine, &e.Shape, &e.User, &e.MountMode,
		&e.Image, &e.ContainerID, &volumes, &e.State, &e.Owner, &ownerAt, &created, &ready); err != nil {
		return nil, err
	}
	e.OwnerAt, e.CreatedAt = store.FromMillis(ownerAt), store.FromMillis(created)
	if ready.Valid {
		t := store.FromMillis(ready.Int64)
		e.ReadyAt = &t
	}
	if err := json.Unmarshal([]byte(volumes), &e.Volumes); err != nil {
		return nil, fmt.Errorf("pool entry %s: bad volumes column: %w", e.SessionID, err)
	}
	e.WorktreePath, _ = p.Guard.Worktree(e.RunID)
	return &e, nil
}

// newEntries describes entries to reserve for one machine.
type newEntries struct {
	Project, Repo, Ref string
	Commit             string // the machine's commit: only entries at it count towards Size
	Engine, Shape      string
	User               string // whose cache it mounts (Entry.User)
	MountMode, Image   string
	Size               int // the pool's size: reserve what it lacks
	Owner              string
	Now                time.Time
	NewID, NewRunID    func() string // store.NewSessionID and store.NewRunID; tests may pin them
	MaxReserve         int           // reserve at most this many (0: no limit)
}

// reserve inserts, in one immediate transaction, as many provisioning
// entries (each with its run, marked as the machine's) as the pool of this
// project and shape lacks: Size less the entries at Commit that are ready
// or being made. Two processes filling one pool at once therefore never
// overshoot it. The caller makes each entry and marks it ready (or tears
// it down).
func (p *Pools) reserve(ctx context.Context, n newEntries) ([]*Entry, error) {
	var out []*Entry
	newID, newRun := n.NewID, n.NewRunID
	if newID == nil {
		newID = store.NewSessionID
	}
	if newRun == nil {
		newRun = store.NewRunID
	}
	err := p.Store.Write(ctx, func(tx *store.Tx) error {
		out = nil
		var have int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pool_entries WHERE project = ? AND shape = ?
			AND state IN ('provisioning', 'ready') AND base_commit = ?`, n.Project, n.Shape, n.Commit).Scan(&have); err != nil {
			return fmt.Errorf("count the pool of %s: %w", n.Project, err)
		}
		want := n.Size - have
		if n.MaxReserve > 0 {
			want = min(want, n.MaxReserve)
		}
		now := store.Millis(n.Now)
		for range max(want, 0) {
			e := &Entry{SessionID: newID(), RunID: newRun(), Project: n.Project, Commit: n.Commit, Engine: n.Engine,
				Shape: n.Shape, User: n.User, MountMode: n.MountMode, Image: n.Image, State: Provisioning, Owner: n.Owner,
				OwnerAt: store.FromMillis(now), CreatedAt: store.FromMillis(now), Volumes: []string{}}
			if err := tx.InsertMachineRun(ctx, e.RunID, n.Repo, n.Ref, n.Project, e.CreatedAt); err != nil {
				return fmt.Errorf("insert run of a pool entry: %w", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO pool_entries (`+entryCols+`)
				VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?, '', '[]', ?, ?, ?, ?, NULL)`,
				e.SessionID, e.RunID, e.Project, e.Commit, e.Engine, e.Shape, e.User, e.MountMode, e.Image, e.State, e.Owner, now, now); err != nil {
				return fmt.Errorf("insert pool entry: %w", err)
			}
			e.WorktreePath, _ = p.Guard.Worktree(e.RunID)
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// recordEngine stores what the engine made for an entry as soon as it
// exists, so a crash leaves it findable (as store.RecordEngine for a
// session).
func (p *Pools) recordEngine(ctx context.Context, id, containerID, mountMode, image string, volumes []string) error {
	if volumes == nil {
		volumes = []string{}
	}
	vols, _ := json.Marshal(volumes)
	if _, err := p.Store.Exec(ctx, `UPDATE pool_entries SET container_id = ?, mount_mode = ?, image = ?, volumes = ? WHERE session_id = ?`,
		containerID, mountMode, image, string(vols), id); err != nil {
		return fmt.Errorf("record engine objects of pool entry %s: %w", id, err)
	}
	return nil
}

// markReady makes a provisioning entry claimable, at the commit its
// worktree was checked out at. An entry someone took over meanwhile (its
// maker was taken for dead) is not made ready: fail.Refused.
func (p *Pools) markReady(ctx context.Context, id, owner, commit string, files int, now time.Time) error {
	at := store.Millis(now)
	res, err := p.Store.Exec(ctx, `UPDATE pool_entries SET state = 'ready', base_commit = ?, files = ?, ready_at = ?, owner = '', owner_at = ?
		WHERE session_id = ? AND state = 'provisioning' AND owner = ?`, commit, files, at, at, id, owner)
	if err != nil {
		return fmt.Errorf("make pool entry %s ready: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fail.Refusedf("pool entry %s is no longer being made here (retired meanwhile?)", id)
	}
	return nil
}

// Entries lists the entries of project ("" for every project), oldest
// first.
func (p *Pools) Entries(ctx context.Context, project string) ([]*Entry, error) {
	q := `SELECT ` + entryCols + ` FROM pool_entries`
	var args []any
	if project != "" {
		q += ` WHERE project = ?`
		args = append(args, project)
	}
	rows, err := p.Store.Query(ctx, q+` ORDER BY created_at, session_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list pool entries: %w", err)
	}
	defer rows.Close()
	var out []*Entry
	for rows.Next() {
		e, err := p.scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// readyCommit is one commit ready entries of a pool are at.
type readyCommit struct {
	Commit  string
	Files   int // files of a worktree at Commit
	Entries int
}

// readyCommits returns the commits of the ready entries of a project and
// shape, the most common first: what a claim can choose from. One small
// read, so a create with an empty pool pays next to nothing for it.
func (p *Pools) readyCommits(ctx context.Context, project, shape string) ([]readyCommit, error) {
	rows, err := p.Store.Query(ctx, `SELECT base_commit, max(files), count(*) FROM pool_entries
		WHERE project = ? AND shape = ? AND state = 'ready' GROUP BY base_commit ORDER BY count(*) DESC, base_commit`, project, shape)
	if err != nil {
		return nil, fmt.Errorf("read the pool of %s: %w", project, err)
	}
	defer rows.Close()
	var out []readyCommit
	for rows.Next() {
		var c readyCommit
		if err := rows.Scan(&c.Commit, &c.Files, &c.Entries); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// take takes an entry for teardown: a ready one, one owner is already
// taking down or making (its own failure), or one whose owner is gone
// (stale). It reports false when the entry is claimed, gone, or another
// live process holds it.
func (p *Pools) take(ctx context.Context, id, owner string, now time.Time, stale store.Stale) (bool, error) {
	took := false
	err := p.Store.Write(ctx, func(tx *store.Tx) error {
		took = false
		var state, other string
		var at int64
		err := tx.QueryRow(ctx, `SELECT state, owner, owner_at FROM pool_entries WHERE session_id = ?`, id).Scan(&state, &other, &at)
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read pool entry %s: %w", id, err)
		}
		if state != Ready && other != owner && (stale == nil || !stale(other, store.FromMillis(at))) {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE pool_entries SET state = 'retiring', owner = ?, owner_at = ? WHERE session_id = ?`,
			owner, store.Millis(now), id); err != nil {
			return fmt.Errorf("retire pool entry %s: %w", id, err)
		}
		took = true
		return nil
	})
	return took, err
}

// drop forgets an entry whose engine objects are gone, and marks its run
// reclaimed in the same transaction: should the removal of its worktree
// not follow, the reaper's run sweep finds it.
func (p *Pools) drop(ctx context.Context, id, runID string, now time.Time) error {
	return p.Store.Write(ctx, func(tx *store.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM pool_entries WHERE session_id = ?`, id); err != nil {
			return fmt.Errorf("forget pool entry %s: %w", id, err)
		}
		return tx.MarkRunReclaimed(ctx, runID, now)
	})
}

// pick says which entry a claim takes.
type pick struct {
	Project, Shape string
	// Want is the commit the session is to be at; Also, when not empty,
	// another commit whose entries the caller can move to Want. Entries
	// at Want are taken first, oldest first.
	Want, Also string
	// Entry, when not empty, is the one entry to claim (next's, checked
	// alive meanwhile); the claim takes nothing else.
	Entry string
	// Session is the new session: owner, runner mode, repo, ref, times.
	// Its ID, run and engine fields come from the entry.
	Session store.Session
	MaxOpen int
	// Loop, when set, is recorded with the run (xmode run's objective).
	Loop *store.NewLoop
}

// pickWhere picks the entry a claim takes: one at Want before one at
// Also, then the oldest.
const pickWhere = `project = ? AND shape = ? AND state = 'ready' AND base_commit IN (?, ?) AND (? = '' OR session_id = ?)
	ORDER BY base_commit = ? DESC, created_at, session_id LIMIT 1`

func (c pick) args() []any {
	return []any{c.Project, c.Shape, c.Want, c.Also, c.Entry, c.Entry, c.Want}
}

// next returns the entry takeEntry would take now, without taking it (nil
// when none fits): the caller checks that its sandbox lives before
// claiming it by Entry.
func (p *Pools) next(ctx context.Context, c pick) (*Entry, error) {
	e, err := p.scanEntry(p.Store.QueryRow(ctx, `SELECT `+entryCols+` FROM pool_entries WHERE `+pickWhere, c.args()...))
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the pool of %s: %w", c.Project, err)
	}
	return e, nil
}

// takeEntry turns a ready entry into the session, in one immediate
// transaction: the quota check, the choice of the entry, its removal from
// the pool and the session's insertion. Two racing creates never get the
// same entry; one over quota gets none. The session is open at once when
// the entry is at Want (its lifetime starting now), else provisioning
// until the caller has moved its worktree (store.Provisioned). It returns
// nil when no entry fits.
func (p *Pools) takeEntry(ctx context.Context, c pick) (*Entry, *store.Session, error) {
	var entry *Entry
	var sess store.Session
	err := p.Store.Write(ctx, func(tx *store.Tx) error {
		entry = nil
		now := c.Session.CreatedAt
		if err := tx.CheckQuota(ctx, c.Session.User, c.MaxOpen, now); err != nil {
			return err
		}
		e, err := p.scanEntry(tx.QueryRow(ctx, `SELECT `+entryCols+` FROM pool_entries WHERE `+pickWhere, c.args()...))
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim from the pool of %s: %w", c.Project, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM pool_entries WHERE session_id = ? AND state = 'ready'`, e.SessionID); err != nil {
			return fmt.Errorf("claim pool entry %s: %w", e.SessionID, err)
		}
		sess = c.Session
		sess.ID, sess.RunID, sess.Project, sess.Engine = e.SessionID, e.RunID, e.Project, e.Engine
		sess.ContainerID, sess.MountMode, sess.Image, sess.Volumes = e.ContainerID, e.MountMode, e.Image, e.Volumes
		sess.WorktreePath = e.WorktreePath
		sess.Status, sess.BaseCommit = store.StatusProvisioning, ""
		if e.Commit == c.Want {
			sess.Status, sess.BaseCommit = store.StatusOpen, e.Commit
		}
		sess.CreatedAt = now
		if err := tx.InsertSessionOnRun(ctx, sess); err != nil {
			return fmt.Errorf("claim pool entry %s: %w", e.SessionID, err)
		}
		if c.Loop != nil {
			if err := tx.StartLoop(ctx, sess.RunID, *c.Loop); err != nil {
				return err
			}
		}
		entry = e
		return nil
	})
	if err != nil || entry == nil {
		return nil, nil, err
	}
	sess.RunDir, _ = p.Guard.RunDir(sess.RunID)
	return entry, &sess, nil
}
