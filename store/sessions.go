package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
)

// Session statuses and end reasons (docs/reference.md, "Session status",
// "Session end reason").
const (
	StatusProvisioning = "provisioning"
	StatusOpen         = "open"
	StatusDestroyed    = "destroyed"
	StatusFailed       = "failed"
	// A cloud_subscription session whose work went to the Codex cloud
	// (docs/codex-cloud.md): submitted while the task runs, then ready (its diff
	// captured for review) or failed.
	StatusSubmitted = "submitted"
	StatusReady     = "ready"

	ReasonStopped         = "stopped"
	ReasonExpired         = "expired"
	ReasonOrphaned        = "orphaned"
	ReasonProvisionFailed = "provision_failed"
	ReasonTaskReady       = "task_ready"
	ReasonTaskFailed      = "task_failed"
	ReasonSubmitFailed    = "submit_failed"
)

// Session origins (docs/reference.md, "Session origin"): what made it.
const (
	OriginCLI = "cli" // the command line, and what it drives (run, pools, the cloud)
	OriginMCP = "mcp" // an MCP client, through `xmode mcp`
)

// activeStatuses, as SQL: the sessions that are not over. They count
// against the quota (while unexpired), keep their run's worktree, and can be
// stopped. A submitted session is active, but the reaper's expiry passes it
// by: the cloud poller ends it (docs/codex-cloud.md).
const activeStatuses = `'provisioning', 'open', 'submitted'`

// Session is one sandbox; its JSON is docs/reference.md, "Session".
type Session struct {
	ID           string     `json:"id"`
	RunID        string     `json:"run_id"`
	User         string     `json:"user"`
	Project      string     `json:"project"`
	RunnerMode   string     `json:"runner_mode"`
	Engine       string     `json:"engine"`
	Status       string     `json:"status"`
	EndReason    string     `json:"end_reason"`
	Error        string     `json:"error,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	ExpiresAt    time.Time  `json:"expires_at"`
	EndedAt      *time.Time `json:"ended_at"`
	WorktreePath string     `json:"worktree_path"`
	RunDir       string     `json:"run_dir"`
	Repo         string     `json:"repo"`
	Ref          string     `json:"ref"`
	BaseCommit   string     `json:"base_commit"`
	ContainerID  string     `json:"container_id"`
	MountMode    string     `json:"mount_mode"`
	Image        string     `json:"image"`
	Volumes      []string   `json:"-"`
	// Network is the docker network of a volume-mode session ("" when the
	// session's network is not xmode's to choose: host steps, bind mode).
	Network string `json:"network"`
	// WorktreeBytes is the worktree's size on disk: measured at teardown
	// for an ended session, live (by the caller) for an open one.
	WorktreeBytes *int64 `json:"worktree_bytes"`
	// Origin is what made the session (OriginCLI, OriginMCP); OriginClient
	// the MCP client's name and version as it gave them, "" for the CLI.
	Origin       string `json:"origin"`
	OriginClient string `json:"origin_client"`
	// Title is what the sandbox is for, as its maker said ("" when none).
	Title string `json:"title"`
	// NetworkPolicy is the egress policy of a session whose network is
	// proxied (allow, open: docs/network.md); nil for any other network.
	NetworkPolicy *NetworkPolicy `json:"network_policy"`
	// HostEnv is the environment policy of a host session's steps
	// (internal/hostenv, its String form): "" when its steps do not run on
	// the host, or for a session made before it was recorded (everything
	// inherited).
	HostEnv string `json:"host_env"`
	// ForkedFrom is the session `sandbox fork` made this one of ("" for
	// any other), and ForkedAtSeq the last step that session's run had
	// begun then (0: none); FromSnapshot the snapshot `sandbox create
	// --from-snapshot` started it from.
	ForkedFrom   string `json:"forked_from"`
	ForkedAtSeq  int    `json:"forked_at_seq"`
	FromSnapshot string `json:"from_snapshot"`
}

// Ended reports whether the session is over.
func (s *Session) Ended() bool {
	return s.Status == StatusDestroyed || s.Status == StatusFailed || s.Status == StatusReady
}

// Expired reports whether the session's lifetime ran out at now.
func (s *Session) Expired(now time.Time) bool { return !now.Before(s.ExpiresAt) }

const sessionCols = `id, run_id, user, project, runner_mode, engine, status, end_reason, error,
	created_at, expires_at, ended_at, worktree_path, repo, ref, base_commit,
	container_id, mount_mode, image, volumes, worktree_bytes, network, origin, origin_client, title, host_env,
	forked_from, forked_at_seq, from_snapshot, network_policy`

type scanner interface{ Scan(...any) error }

func (st *Store) scanSession(row scanner) (*Session, error) {
	var s Session
	var created, expires int64
	var ended sql.NullInt64
	var volumes string
	var size sql.NullInt64
	var policy sql.NullString
	if err := row.Scan(&s.ID, &s.RunID, &s.User, &s.Project, &s.RunnerMode, &s.Engine, &s.Status,
		&s.EndReason, &s.Error, &created, &expires, &ended, &s.WorktreePath, &s.Repo, &s.Ref,
		&s.BaseCommit, &s.ContainerID, &s.MountMode, &s.Image, &volumes, &size, &s.Network,
		&s.Origin, &s.OriginClient, &s.Title, &s.HostEnv, &s.ForkedFrom, &s.ForkedAtSeq, &s.FromSnapshot, &policy); err != nil {
		return nil, err
	}
	var err error
	if s.NetworkPolicy, err = decodePolicy(s.ID, policy); err != nil {
		return nil, err
	}
	if size.Valid {
		s.WorktreeBytes = &size.Int64
	}
	s.CreatedAt, s.ExpiresAt = fromMillis(created), fromMillis(expires)
	if ended.Valid {
		t := fromMillis(ended.Int64)
		s.EndedAt = &t
	}
	if err := json.Unmarshal([]byte(volumes), &s.Volumes); err != nil {
		return nil, fmt.Errorf("session %s: bad volumes column: %w", s.ID, err)
	}
	s.RunDir, _ = st.guard.RunDir(s.RunID)
	return &s, nil
}

func millis(t time.Time) int64 { return t.UnixMilli() }

func expiresMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return millis(t)
}
func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// NewSession describes a session to insert.
type NewSession struct {
	Session
	// NewRun: insert the run too (false: join the existing run Session.RunID).
	NewRun bool
	// MaxOpen limits the user's open, unexpired sessions (0: unlimited).
	MaxOpen int
	// Loop makes the new run a run of the governed loop (xmode run).
	Loop *NewLoop
}

// CreateSession inserts a session in status provisioning, with its run when
// it is new. The quota check and the insert share one immediate transaction,
// so racing creates cannot overshoot the limit.
func (s *Store) CreateSession(ctx context.Context, n NewSession) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		now := millis(n.CreatedAt)
		if err := checkQuota(ctx, tx, n.User, n.MaxOpen, n.CreatedAt); err != nil {
			return err
		}
		if n.NewRun {
			if _, err := tx.ExecContext(ctx, `INSERT INTO runs (id, created_at, repo, ref, project) VALUES (?, ?, ?, ?, ?)`,
				n.RunID, now, n.Repo, n.Ref, n.Project); err != nil {
				return fmt.Errorf("insert run: %w", err)
			}
			if n.Loop != nil {
				if err := startLoop(ctx, tx, n.RunID, *n.Loop); err != nil {
					return err
				}
			}
		} else {
			var reclaimed sql.NullInt64
			err := tx.QueryRowContext(ctx, `SELECT reclaimed_at FROM runs WHERE id = ?`, n.RunID).Scan(&reclaimed)
			if err != nil {
				return errNoRows(err, "no run %s", n.RunID)
			}
			if reclaimed.Valid {
				return fail.Refusedf("run %s has ended and its worktree was reclaimed: create a new sandbox without %s", n.RunID, fail.RunID)
			}
			// A pool entry's run is nobody's yet: the claim gives it to one session.
			var pooled int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pool_entries WHERE run_id = ?`, n.RunID).Scan(&pooled); err != nil {
				return err
			}
			if pooled > 0 {
				return fail.NotFoundf("no run %s", n.RunID)
			}
		}
		s := n.Session
		s.Status = StatusProvisioning
		return insertSession(ctx, tx, s)
	})
}

// insertSession inserts a new session row (no end, no measured size yet).
func insertSession(ctx context.Context, tx *sql.Tx, s Session) error {
	vols, _ := json.Marshal(nonNil(s.Volumes))
	origin := s.Origin
	if origin == "" {
		origin = OriginCLI
	}
	policy, err := encodePolicy(s.NetworkPolicy)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO sessions (`+sessionCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, '', '', ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.ID, s.RunID, s.User, s.Project, s.RunnerMode, s.Engine, s.Status,
		millis(s.CreatedAt), millis(s.ExpiresAt), s.WorktreePath, s.Repo, s.Ref, s.BaseCommit,
		s.ContainerID, s.MountMode, s.Image, string(vols), s.Network, origin, s.OriginClient, s.Title, s.HostEnv,
		s.ForkedFrom, s.ForkedAtSeq, s.FromSnapshot, policy)
	if err != nil {
		return fmt.Errorf("insert session %s: %w", s.ID, err)
	}
	return nil
}

// checkQuota refuses a new session of user when it would have more than
// max open, unexpired sessions (0: unlimited); inside the transaction that
// inserts it, so racing creates cannot overshoot.
func checkQuota(ctx context.Context, tx *sql.Tx, user string, max int, now time.Time) error {
	if max <= 0 {
		return nil
	}
	open, err := strings1(ctx, tx, `SELECT id FROM sessions
		WHERE user = ? AND status IN (`+activeStatuses+`) AND expires_at > ? ORDER BY created_at`, user, millis(now))
	if err != nil {
		return fmt.Errorf("count open sessions: %w", err)
	}
	if len(open) >= max {
		return fail.Refusedf("user %s already has %d open sandboxes, the limit (XMODE_SANDBOX_MAX_OPEN=%d): %s; free one with %s",
			user, len(open), max, strings.Join(open, ", "), fail.Do("sandbox stop").Some("ID"))
	}
	return nil
}

func nonNil(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

// Get returns the session with exactly this ID.
func (s *Store) Get(ctx context.Context, id string) (*Session, error) {
	sess, err := s.scanSession(s.db.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, id))
	if err != nil {
		return nil, errNoRows(err, "no session %s", id)
	}
	return sess, nil
}

// Resolve finds the one session whose ID starts with what the user typed.
func (s *Store) Resolve(ctx context.Context, ref string) (*Session, error) {
	prefix, err := ParseSessionRef(ref)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE id >= ? AND id < ? ORDER BY id LIMIT 11`, prefix, prefix+"~")
	if err != nil {
		return nil, fmt.Errorf("look up session %s: %w", ref, err)
	}
	defer rows.Close()
	var found []*Session
	for rows.Next() {
		sess, err := s.scanSession(rows)
		if err != nil {
			return nil, err
		}
		found = append(found, sess)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, fail.NotFoundf("no session %s: `xmode sandbox list --all` shows them", ref)
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, f := range found {
		ids[i] = f.ID
	}
	return nil, fail.Usagef("session %q is ambiguous: it matches %s; give more characters", ref, strings.Join(ids, ", "))
}

// Filter selects sessions for List.
type Filter struct {
	All    bool   // include ended sessions
	User   string // only this owner
	Origin string // only sessions of this origin (OriginMCP)
}

// List returns sessions, newest first.
func (s *Store) List(ctx context.Context, f Filter) ([]*Session, error) {
	q := `SELECT ` + sessionCols + ` FROM sessions WHERE 1=1`
	var args []any
	if !f.All {
		q += ` AND status IN (` + activeStatuses + `)`
	}
	if f.User != "" {
		q += ` AND user = ?`
		args = append(args, f.User)
	}
	if f.Origin != "" {
		q += ` AND origin = ?`
		args = append(args, f.Origin)
	}
	q += ` ORDER BY created_at DESC, id`
	return s.query(ctx, q, args...)
}

func (s *Store) query(ctx context.Context, q string, args ...any) ([]*Session, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var out []*Session
	for rows.Next() {
		sess, err := s.scanSession(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sess)
	}
	return out, rows.Err()
}

// Provisioned records what the engine created for a provisioning session and
// opens it, expiring at expires (its lifetime counts from now, not from the
// start of a create that may have waited on a clone or a pull; the zero
// time keeps the expiry set at insert). Only a provisioning session can be
// opened: a reaper that gave up on it in the meantime wins.
func (s *Store) Provisioned(ctx context.Context, id, baseCommit, containerID, mountMode, image string, volumes []string, expires time.Time) error {
	vols, _ := json.Marshal(nonNil(volumes))
	return s.tx(ctx, func(tx *sql.Tx) error {
		// A session the reaper has claimed (provisioning past its grace) is
		// not opened under it.
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET status = 'open', base_commit = ?, container_id = ?,
			mount_mode = ?, image = ?, volumes = ?, expires_at = CASE WHEN ? > 0 THEN ? ELSE expires_at END
			WHERE id = ? AND status = 'provisioning'
			AND NOT EXISTS (SELECT 1 FROM meta WHERE key = ?)`,
			baseCommit, containerID, mountMode, image, string(vols), expiresMillis(expires), expiresMillis(expires), id, claimKey(id))
		if err != nil {
			return fmt.Errorf("open session %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fail.Refusedf("session %s is no longer provisioning (reaped meanwhile?)", id)
		}
		if baseCommit != "" {
			_, err = tx.ExecContext(ctx, `UPDATE runs SET base_commit = ? WHERE id = (SELECT run_id FROM sessions WHERE id = ?) AND base_commit = ''`, baseCommit, id)
		}
		return err
	})
}

// RecordEngine stores the engine objects of a session as soon as they exist,
// so a crash before the session opens still leaves them findable.
func (s *Store) RecordEngine(ctx context.Context, id, containerID, mountMode, image string, volumes []string) error {
	vols, _ := json.Marshal(nonNil(volumes))
	_, err := s.exec(ctx, `UPDATE sessions SET container_id = ?, mount_mode = ?, image = ?, volumes = ? WHERE id = ?`,
		containerID, mountMode, image, string(vols), id)
	if err != nil {
		return fmt.Errorf("record engine objects of %s: %w", id, err)
	}
	return nil
}

// End marks a session ended, if it is not already, and reports whether this
// call ended it and whether it was the last open session of its run. When it
// was, the run is marked reclaimed in the same transaction, so no session can
// join a run whose worktree is about to be removed.
func (s *Store) End(ctx context.Context, id, status, reason, errMsg string, now time.Time) (ended, lastOfRun bool, err error) {
	err = s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET status = ?, end_reason = ?, error = ?, ended_at = ?
			WHERE id = ? AND status IN (`+activeStatuses+`)`, status, reason, errMsg, millis(now), id)
		if err != nil {
			return fmt.Errorf("end session %s: %w", id, err)
		}
		n, _ := res.RowsAffected()
		ended = n == 1
		var runID string
		if err := tx.QueryRowContext(ctx, `SELECT run_id FROM sessions WHERE id = ?`, id).Scan(&runID); err != nil {
			return errNoRows(err, "no session %s", id)
		}
		var others int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE run_id = ? AND status IN (`+activeStatuses+`)`, runID).Scan(&others); err != nil {
			return err
		}
		lastOfRun = others == 0
		if lastOfRun {
			_, err = tx.ExecContext(ctx, `UPDATE runs SET reclaimed_at = ? WHERE id = ? AND reclaimed_at IS NULL`, millis(now), runID)
		}
		return err
	})
	return ended, lastOfRun, err
}

// Run is a run as the store keeps it, with the engines its sessions used.
type Run struct {
	ID, Repo, Ref, BaseCommit, Project string
	// Engines lists "<engine>/<mount mode>" of every session the run ever
	// had: whoever wrote its worktree.
	Engines []string
}

// GetRun returns a run; fail.NotFound when there is none.
func (s *Store) GetRun(ctx context.Context, id string) (*Run, error) {
	r := Run{ID: id}
	err := s.db.QueryRowContext(ctx, `SELECT repo, ref, base_commit, project FROM runs WHERE id = ?`, id).Scan(&r.Repo, &r.Ref, &r.BaseCommit, &r.Project)
	if err != nil {
		return nil, errNoRows(err, "no run %s: `xmode sandbox list --all --json` shows the runs of sessions", id)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT engine || '/' || mount_mode FROM sessions WHERE run_id = ? ORDER BY 1`, id)
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			return nil, err
		}
		r.Engines = append(r.Engines, e)
	}
	return &r, rows.Err()
}

// SetWorktreeBytes records the size of a session's worktree, measured at
// its teardown.
func (s *Store) SetWorktreeBytes(ctx context.Context, id string, n int64) error {
	if _, err := s.exec(ctx, `UPDATE sessions SET worktree_bytes = ? WHERE id = ?`, n, id); err != nil {
		return fmt.Errorf("record the worktree size of %s: %w", id, err)
	}
	return nil
}

// OpenOnRun counts the open or provisioning sessions of a run.
func (s *Store) OpenOnRun(ctx context.Context, runID string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE run_id = ? AND status IN (`+activeStatuses+`)`, runID).Scan(&n)
	return n, err
}

// Extend sets a new expiry on an open session. A session a reaper has
// claimed (it expired and its teardown has begun) cannot be extended.
func (s *Store) Extend(ctx context.Context, id string, expires time.Time) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if c, err := claimed(ctx, tx, id); err != nil {
			return fmt.Errorf("extend %s: %w", id, err)
		} else if c {
			return fail.Refusedf("session %s expired and is being reaped: create a new one with `xmode sandbox create`", id)
		}
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET expires_at = ? WHERE id = ? AND status = 'open'`, millis(expires), id)
		if err != nil {
			return fmt.Errorf("extend %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fail.Refusedf("session %s is not open: only open sessions can be extended", id)
		}
		return nil
	})
}

func errNotOpen(id, status string) error {
	switch status {
	case StatusProvisioning:
		return fail.Refusedf("session %s is still provisioning: wait for `xmode sandbox create` to finish", id)
	case StatusSubmitted, StatusReady:
		return fail.Refusedf("session %s is %s: its work runs in the Codex cloud, not here; follow it with `xmode cloud show %s`", id, status, id)
	}
	return fail.Refusedf("session %s is %s, not open: create a new one with `xmode sandbox create`", id, status)
}

// CheckOpen refuses a session that cannot run steps.
func CheckOpen(sess *Session, now time.Time) error {
	if sess.Status != StatusOpen {
		return errNotOpen(sess.ID, sess.Status)
	}
	if sess.Expired(now) {
		return fail.Refusedf("session %s expired at %s: extend it with %s or create a new one",
			sess.ID, sess.ExpiresAt.Format(time.RFC3339), fail.Do("sandbox extend", sess.ID).With(fail.TTL, "1h"))
	}
	return nil
}

// Sandbox is what the engine needs to address this session's sandbox.
func (s *Session) Sandbox() engine.Sandbox {
	return engine.Sandbox{
		Engine: s.Engine, ContainerID: s.ContainerID, MountMode: s.MountMode, Image: s.Image,
		Volumes: s.Volumes, Worktree: s.WorktreePath, RunID: s.RunID, SessionID: s.ID, Project: s.Project,
		HostEnv: s.HostEnv,
	}
}
