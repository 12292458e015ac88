package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/xmode/xmode/fail"
)

// Machine is a project machine as the store records it; its JSON is what
// `xmode machine show --json` prints (with the fields cmd adds).
type Machine struct {
	Project     string    `json:"project"`
	Repo        string    `json:"repo"`
	DefaultRef  string    `json:"default_ref"`
	HeadCommit  string    `json:"commit"` // the default ref's commit at the last warm
	Volume      string    `json:"volume"` // the dependency-cache volume (docker engine)
	CreatedAt   time.Time `json:"created_at"`
	LastFetchAt time.Time `json:"last_fetch_at"`
	// PoolSize is what `machine warm --pool N` set; nil follows
	// XMODE_POOL_SIZE.
	PoolSize *int `json:"-"`
}

const machineCols = `project, repo, default_ref, head_commit, volume, created_at, last_fetch_at`

func scanMachine(row scanner) (*Machine, error) {
	var m Machine
	var created, fetched int64
	var pool sql.NullInt64
	if err := row.Scan(&m.Project, &m.Repo, &m.DefaultRef, &m.HeadCommit, &m.Volume, &created, &fetched, &pool); err != nil {
		return nil, err
	}
	m.CreatedAt, m.LastFetchAt = fromMillis(created), fromMillis(fetched)
	if pool.Valid {
		n := int(pool.Int64)
		m.PoolSize = &n
	}
	return &m, nil
}

// PutMachine records a machine after a warm: inserted the first time,
// updated (repo, default ref, commit, last fetch) afterwards. CreatedAt is
// kept from the first insert.
func (s *Store) PutMachine(ctx context.Context, m Machine) error {
	_, err := s.exec(ctx, `INSERT INTO project_machines (`+machineCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (project) DO UPDATE SET repo = excluded.repo, default_ref = excluded.default_ref,
			head_commit = excluded.head_commit, volume = excluded.volume, last_fetch_at = excluded.last_fetch_at`,
		m.Project, m.Repo, m.DefaultRef, m.HeadCommit, m.Volume, millis(m.CreatedAt), millis(m.LastFetchAt))
	if err != nil {
		return fmt.Errorf("record project machine %s: %w", m.Project, err)
	}
	return nil
}

// GetMachine returns the machine of a project; fail.NotFound when there is none.
func (s *Store) GetMachine(ctx context.Context, project string) (*Machine, error) {
	m, err := scanMachine(s.db.QueryRowContext(ctx, `SELECT `+machineCols+`, pool_size FROM project_machines WHERE project = ?`, project))
	if err != nil {
		return nil, errNoRows(err, "no project machine %s: warm it with `xmode machine warm %s --repo URL`", project, project)
	}
	return m, nil
}

// ListMachines returns every machine, by project.
func (s *Store) ListMachines(ctx context.Context) ([]*Machine, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+machineCols+`, pool_size FROM project_machines ORDER BY project`)
	if err != nil {
		return nil, fmt.Errorf("list project machines: %w", err)
	}
	defer rows.Close()
	var out []*Machine
	for rows.Next() {
		m, err := scanMachine(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// DeleteMachine forgets a machine and reports whether there was a record.
// Runs keep the name of the machine they came from: that is history, like
// their evidence.
func (s *Store) DeleteMachine(ctx context.Context, project string) (bool, error) {
	res, err := s.exec(ctx, `DELETE FROM project_machines WHERE project = ?`, project)
	if err != nil {
		return false, fmt.Errorf("forget project machine %s: %w", project, err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// MarkRunMachine records that a run's worktree is branched from the machine
// of project. Called before the worktree exists, so `machine rm` sees the
// session as a user of the machine from then on.
func (s *Store) MarkRunMachine(ctx context.Context, runID, project string) error {
	if _, err := s.exec(ctx, `UPDATE runs SET machine = ? WHERE id = ?`, project, runID); err != nil {
		return fmt.Errorf("record machine of run %s: %w", runID, err)
	}
	return nil
}

// SetRunRecord records the name of the run's worktree record in its
// machine (.git/worktrees/<name>), as git chose it when making the worktree.
func (s *Store) SetRunRecord(ctx context.Context, runID, record string) error {
	if _, err := s.exec(ctx, `UPDATE runs SET machine_record = ? WHERE id = ?`, record, runID); err != nil {
		return fmt.Errorf("record the worktree record of run %s: %w", runID, err)
	}
	return nil
}

// RunMachine returns the machine a run's worktree came from (empty for a
// clone) and the name of its worktree record there (empty when unknown: a
// create that died before recording it, or an older xmode).
func (s *Store) RunMachine(ctx context.Context, runID string) (project, record string, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT machine, machine_record FROM runs WHERE id = ?`, runID).Scan(&project, &record)
	if err == sql.ErrNoRows {
		return "", "", nil
	}
	return project, record, err
}

// MachineSessions returns the active sessions whose worktree is branched
// from the machine of project, oldest first.
func (s *Store) MachineSessions(ctx context.Context, project string) ([]*Session, error) {
	return s.query(ctx, `SELECT `+sessionCols+` FROM sessions WHERE status IN (`+activeStatuses+`)
		AND run_id IN (SELECT id FROM runs WHERE machine = ?) ORDER BY created_at, id`, project)
}

// ProjectUsers are the users who made a session of the project since
// then, by name: those whose pools the upkeep fills (package pool).
func (s *Store) ProjectUsers(ctx context.Context, project string, since time.Time) ([]string, error) {
	users, err := strings1(ctx, s.db, `SELECT DISTINCT user FROM sessions WHERE project = ? AND project != '' AND created_at >= ? ORDER BY user`,
		project, millis(since))
	if err != nil {
		return nil, fmt.Errorf("list the users of project %s: %w", project, err)
	}
	return users, nil
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
