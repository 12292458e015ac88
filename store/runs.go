package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/proc"
)

// Statuses of a run of the governed loop (docs/agents.md, "The loop"):
// running (attempting for a run of several attempts); then review (a
// change request awaits a reviewer), no-change (every step passed and the
// worktree had nothing to review) or failed (a required step, or xmode,
// failed without a change to review, or the agent step failed). A review
// shows through as approved, rejected, changes_requested (the change
// request awaits a new version: `run continue`) or superseded (another
// attempt was approved); the run row itself is not rewritten (shownStatus).
const (
	RunRunning          = "running"
	RunAttempting       = "attempting"
	RunReview           = "review"
	RunNoChange         = "no-change"
	RunFailed           = "failed"
	RunApproved         = "approved"
	RunRejected         = "rejected"
	RunChangesRequested = "changes_requested"
	RunSuperseded       = "superseded"
)

// NewLoop is what `xmode run` records with the run it creates.
type NewLoop struct {
	Objective string
	// Parent and Attempt make the run attempt number Attempt of the run
	// of attempts Parent.
	Parent  string
	Attempt int
}

func startLoop(ctx context.Context, tx *sql.Tx, runID string, l NewLoop) error {
	if strings.TrimSpace(l.Objective) == "" {
		return fail.Usagef("%s is required: say what the agent is to do", fail.Objective)
	}
	_, err := tx.ExecContext(ctx, `UPDATE runs SET objective = ?, status = ?, owner = ?, parent_run = ?, attempt = ? WHERE id = ?`,
		l.Objective, RunRunning, proc.Self(), l.Parent, l.Attempt, runID)
	if err != nil {
		return fmt.Errorf("record the objective of %s: %w", runID, err)
	}
	return nil
}

// NewAttempts records a run of n attempts: a run of the loop with no
// session of its own, status attempting, owned by this process. Its
// repository and base are its first attempt's (SetRunBase).
func (s *Store) NewAttempts(ctx context.Context, runID, objective string, n int, now time.Time) error {
	if strings.TrimSpace(objective) == "" {
		return fail.Usagef("%s is required: say what the agent is to do", fail.Objective)
	}
	_, err := s.exec(ctx, `INSERT INTO runs (id, created_at, objective, status, owner, attempts) VALUES (?, ?, ?, ?, ?, ?)`,
		runID, millis(now), objective, RunAttempting, proc.Self(), n)
	if err != nil {
		return fmt.Errorf("record the run of attempts %s: %w", runID, err)
	}
	return nil
}

// SetRunBase records where a run of attempts starts from: its first
// attempt's repository, ref, project and base commit.
func (s *Store) SetRunBase(ctx context.Context, runID, repo, ref, project, base string) error {
	if _, err := s.exec(ctx, `UPDATE runs SET repo = ?, ref = ?, project = ?, base_commit = ? WHERE id = ?`,
		repo, ref, project, base, runID); err != nil {
		return fmt.Errorf("record the base of %s: %w", runID, err)
	}
	return nil
}

// MarkContinuation records that the run of a fork of a change request's tree
// made to continue run parent (its sandbox had ended): a plain run, whose
// parent_run names the run it works for.
func (s *Store) MarkContinuation(ctx context.Context, runID, parent string) error {
	if _, err := s.exec(ctx, `UPDATE runs SET parent_run = ? WHERE id = ? AND attempt = 0`, parent, runID); err != nil {
		return fmt.Errorf("record that %s continues %s: %w", runID, parent, err)
	}
	return nil
}

// Attempts lists the attempts of a run of attempts, by number.
func (s *Store) Attempts(ctx context.Context, runID string) ([]*LoopRun, error) {
	return s.runs(ctx, `SELECT `+runCols+` FROM runs r WHERE r.parent_run = ? AND r.attempt > 0 ORDER BY r.attempt, r.id`, runID)
}

// Continuations lists the runs made to continue run runID in forks of its
// change request's tree, oldest first.
func (s *Store) Continuations(ctx context.Context, runID string) ([]*LoopRun, error) {
	return s.runs(ctx, `SELECT `+runCols+` FROM runs r WHERE r.parent_run = ? AND r.attempt = 0 ORDER BY r.created_at, r.id`, runID)
}

// BeginContinue marks a run of the loop running again, owned by this
// process, for `run continue`; refused while another xmode works on it.
func (s *Store) BeginContinue(ctx context.Context, runID string) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var status, owner string
		if err := tx.QueryRowContext(ctx, `SELECT status, owner FROM runs WHERE id = ?`, runID).Scan(&status, &owner); err != nil {
			return errNoRows(err, "no run %s", runID)
		}
		if (status == RunRunning || status == RunAttempting) && owner != "" && !proc.Gone(owner) {
			pid, _, _ := strings.Cut(owner, ":")
			return fail.Refusedf("run %s is %s in another xmode (pid %s): wait for it to end", runID, status, pid)
		}
		_, err := tx.ExecContext(ctx, `UPDATE runs SET status = ?, owner = ?, exit_code = NULL, error = '', finished_at = NULL WHERE id = ?`,
			RunRunning, proc.Self(), runID)
		return err
	})
}

// LoopRun is a run as `xmode run list/show` shows it.
type LoopRun struct {
	ID        string `json:"id"`
	Objective string `json:"objective"`
	// Status is as users see it (shownStatus): its change request's
	// review shows through.
	Status     string     `json:"status"`
	ExitCode   *int       `json:"exit_code"`
	CR         string     `json:"cr_id"`
	Error      string     `json:"error,omitempty"`
	Repo       string     `json:"repo"`
	Ref        string     `json:"ref"`
	Project    string     `json:"project"`
	BaseCommit string     `json:"base_commit"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// Plan is the plan the run ran (JSON, as package plans encodes it) and
	// PlanSource where it came from.
	Plan       string `json:"-"`
	PlanSource string `json:"plan_source"`
	// Parent is the run of attempts an attempt belongs to, or the run a
	// continuation continues; "" otherwise. Attempt is an attempt's number
	// (0 otherwise), Attempts a run of attempts' N (0 otherwise).
	Parent   string `json:"parent_run"`
	Attempt  int    `json:"attempt"`
	Attempts int    `json:"attempts"`
	// Stored is the status the run row records, before a review shows
	// through it.
	Stored string `json:"-"`
	owner  string
}

// shownStatus is, in SQL, the status users see of the run r: the stored
// one, except that a run in review shows its change request's review
// (approved, rejected, changes_requested, superseded; open stays review),
// and a run of attempts in review shows the best of its attempts': one
// approved, else one awaiting review, else one awaiting a new version,
// else rejected (every attempt rejected or superseded). RunsPage filters
// on it; scanRun then applies the one rule SQL cannot know (a running run
// whose xmode is gone has failed).
const shownStatus = `CASE
	WHEN r.status = 'review' AND r.attempts > 0 THEN coalesce((SELECT CASE
			WHEN sum(ac.status = 'approved') > 0 THEN 'approved'
			WHEN sum(ac.status = 'open') > 0 THEN 'review'
			WHEN sum(ac.status = 'changes_requested') > 0 THEN 'changes_requested'
			WHEN count(*) > 0 THEN 'rejected' END
		FROM runs a JOIN change_requests ac ON ac.id = a.cr_id WHERE a.parent_run = r.id AND a.attempt > 0), 'review')
	WHEN r.status = 'review' AND r.cr_id != '' THEN coalesce((SELECT CASE rc.status WHEN 'open' THEN 'review' ELSE rc.status END
		FROM change_requests rc WHERE rc.id = r.cr_id), 'review')
	ELSE r.status END`

const runCols = `r.id, r.objective, r.status, ` + shownStatus + `, r.exit_code, r.cr_id, r.error, r.repo, r.ref, r.project, r.base_commit,
	r.created_at, r.finished_at, r.plan, r.plan_source, r.owner, r.parent_run, r.attempt, r.attempts`

func scanRun(row scanner) (*LoopRun, error) {
	var r LoopRun
	var created int64
	var code, finished sql.NullInt64
	if err := row.Scan(&r.ID, &r.Objective, &r.Stored, &r.Status, &code, &r.CR, &r.Error, &r.Repo, &r.Ref, &r.Project,
		&r.BaseCommit, &created, &finished, &r.Plan, &r.PlanSource, &r.owner, &r.Parent, &r.Attempt, &r.Attempts); err != nil {
		return nil, err
	}
	r.CreatedAt = fromMillis(created)
	if code.Valid {
		c := int(code.Int64)
		r.ExitCode = &c
	}
	if finished.Valid {
		t := fromMillis(finished.Int64)
		r.FinishedAt = &t
	}
	// A run whose xmode died mid-loop (SIGKILL, a crash) is over.
	if (r.Status == RunRunning || r.Status == RunAttempting) && r.owner != "" && proc.Gone(r.owner) {
		r.Status = RunFailed
		if r.Error == "" {
			r.Error = "the xmode running this run ended before it finished"
		}
	}
	return &r, nil
}

// SetRunPlan records the plan a loop run is about to run.
func (s *Store) SetRunPlan(ctx context.Context, runID, plan, source string) error {
	if _, err := s.exec(ctx, `UPDATE runs SET plan = ?, plan_source = ? WHERE id = ?`, plan, source, runID); err != nil {
		return fmt.Errorf("record the plan of %s: %w", runID, err)
	}
	return nil
}

// LoopEnd is how a loop run ended.
type LoopEnd struct {
	Status   string // RunReview, RunNoChange or RunFailed
	ExitCode int
	CR       string
	Error    string // why a failed run failed
	Finished time.Time
}

// FinishLoopRun records the end of a loop run.
func (s *Store) FinishLoopRun(ctx context.Context, runID string, e LoopEnd) error {
	_, err := s.exec(ctx, `UPDATE runs SET status = ?, exit_code = ?, cr_id = ?, error = ?, finished_at = ? WHERE id = ?`,
		e.Status, e.ExitCode, e.CR, e.Error, millis(e.Finished), runID)
	if err != nil {
		return fmt.Errorf("record the end of %s: %w", runID, err)
	}
	return nil
}

// ListRuns lists the runs of the loop, newest first; all adds the runs of
// plain sandboxes (no objective).
func (s *Store) ListRuns(ctx context.Context, all bool) ([]*LoopRun, error) {
	q := `SELECT ` + runCols + ` FROM runs r`
	if !all {
		// an attempt is listed under its run (run show)
		q += ` WHERE r.status != '' AND r.parent_run = ''`
	}
	return s.runs(ctx, q+` ORDER BY r.created_at DESC, r.id`)
}

func (s *Store) runs(ctx context.Context, q string, args ...any) ([]*LoopRun, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	var out []*LoopRun
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ResolveRun finds the run whose ID starts with what the user typed (at
// least 4 characters, with or without run_).
func (s *Store) ResolveRun(ctx context.Context, ref string) (*LoopRun, error) {
	rest := strings.TrimPrefix(ref, "run_")
	if len(ref) < 4 || rest == "" {
		return nil, fail.Usagef("run %q is too short: give at least 4 characters of its ID", ref)
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') || len(rest) > 32 {
			return nil, fail.NotFoundf("no run %s: IDs look like run_7k2m9q4x", ref)
		}
	}
	prefix := "run_" + rest
	rows, err := s.db.QueryContext(ctx, `SELECT `+runCols+` FROM runs r WHERE r.id >= ? AND r.id < ? ORDER BY r.id LIMIT 11`, prefix, prefix+"~")
	if err != nil {
		return nil, fmt.Errorf("look up run %s: %w", ref, err)
	}
	defer rows.Close()
	var found []*LoopRun
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		found = append(found, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, fail.NotFoundf("no run %s: `xmode run list --all` shows them", ref)
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, f := range found {
		ids[i] = f.ID
	}
	return nil, fail.Usagef("run %q is ambiguous: it matches %s; give more characters", ref, strings.Join(ids, ", "))
}

// RunSessions lists the sessions of a run, oldest first.
func (s *Store) RunSessions(ctx context.Context, runID string) ([]*Session, error) {
	return s.query(ctx, `SELECT `+sessionCols+` FROM sessions WHERE run_id = ? ORDER BY created_at, id`, runID)
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

// RunQuery selects one page of runs for RunsPage: newest first, from
// after the run Before names (its creation time and ID: keyset paging, so
// a page costs the same wherever it is).
type RunQuery struct {
	Status string // the status as users see it (RunSummary.Status); "" any
	User   string // only runs with a session of this user
	All    bool   // also the runs no session made (a warm pool's entries)
	Before *RunCursor
	Limit  int
}

// RunCursor is where a page of runs ends: the last run's creation time and ID.
type RunCursor struct {
	CreatedAt time.Time
	ID        string
}

// RunSummary is a run as a list of runs shows it: the run, the status
// users see (its change request's review applied, and a running run whose
// xmode is gone failed: runview.Status, scanRun), its sessions, its latest
// change request and who ran it.
type RunSummary struct {
	*LoopRun
	Sessions []string
	User     string
	// SessionTitle and Origin are its first session's: what it was made
	// for and what made it (OriginCLI, OriginMCP).
	SessionTitle, Origin string
	// CRStatus is the change request's status ("" without one).
	CRStatus string
}

// RunsPage returns up to q.Limit runs and, when more follow, the cursor of
// the next page. One query per page: the page's runs are chosen first (the
// filters, the order, the limit: read off runs_by_creation, the page's
// order), and only then are their sessions, user, title and change
// request read, from subqueries on their indexes, for the page's runs
// alone.
func (s *Store) RunsPage(ctx context.Context, q RunQuery) ([]*RunSummary, *RunCursor, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	outer, base, args := runsPageSQL(q)
	var out []*RunSummary
	cur := q.Before
	for {
		// Fetch a little more than asked: rows the Go-side rule drops
		// are replaced without another round trip, most of the time.
		batch := q.Limit + 1 - len(out)
		qs, qa := runsPageOf(base, args, cur, batch)
		got, last, err := s.runSummaries(ctx, fmt.Sprintf(outer, qs), qa...)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range got {
			if q.Status == "" || r.Status == q.Status {
				out = append(out, r)
			}
		}
		if len(out) > q.Limit {
			out = out[:q.Limit]
			last := out[len(out)-1]
			return out, &RunCursor{CreatedAt: last.CreatedAt, ID: last.ID}, nil
		}
		if len(got) < batch || last == nil {
			return out, nil, nil
		}
		cur = last
	}
}

// runsPageSQL is RunsPage's query for q: outer reads the page's runs,
// whose IDs the query base (with args) chooses, in outer's %s.
func runsPageSQL(q RunQuery) (outer, base string, args []any) {
	const crOf = `LEFT JOIN change_requests c ON c.id = coalesce(nullif(r.cr_id, ''),
			(SELECT id FROM change_requests WHERE run_id = r.id ORDER BY number DESC LIMIT 1))`
	const firstSession = `FROM sessions WHERE run_id = r.id ORDER BY created_at, id LIMIT 1`
	outer = `SELECT ` + runCols + `,
		coalesce((SELECT group_concat(id, ' ') FROM (SELECT id FROM sessions WHERE run_id = r.id ORDER BY created_at, id)), ''),
		coalesce((SELECT json_array(user, title, origin) ` + firstSession + `), '[]'),
		coalesce(c.id, ''), coalesce(c.status, '')
		FROM (%s) page JOIN runs r ON r.id = page.id ` + crOf + `
		ORDER BY r.created_at DESC, r.id`
	// The status users see is shownStatus, in SQL, for the filter; scanRun
	// then applies the one rule SQL cannot know (a running run whose xmode
	// is gone).
	base = `SELECT r.id FROM runs r WHERE 1=1`
	if !q.All {
		// Runs of the loop, and the runs sessions made (the CLI's, an MCP
		// client's); not a warm pool's, which are nobody's yet; not an
		// attempt's or a continuation's, listed under their run.
		base += ` AND (r.status != '' OR r.id IN (SELECT run_id FROM sessions)) AND r.parent_run = ''`
	}
	switch q.Status {
	case "":
	case RunFailed:
		// A running run whose xmode died is failed: fetch the running too.
		base += ` AND (` + shownStatus + `) IN ('failed', 'running', 'attempting')`
	default:
		base += ` AND (` + shownStatus + `) = ?`
		args = append(args, q.Status)
	}
	if q.User != "" {
		// Not a correlated EXISTS: SQLite would search sessions_by_user
		// for every run (O(runs × the user's sessions)); this is one pass.
		base += ` AND r.id IN (SELECT run_id FROM sessions WHERE user = ?)`
		args = append(args, q.User)
	}
	return outer, base, args
}

// runsPageOf is base choosing up to batch runs after the cursor (nil: from
// the newest), newest first.
func runsPageOf(base string, args []any, cur *RunCursor, batch int) (string, []any) {
	qa := append([]any(nil), args...)
	qs := base
	if cur != nil {
		qs += ` AND (r.created_at < ? OR (r.created_at = ? AND r.id > ?))`
		qa = append(qa, millis(cur.CreatedAt), millis(cur.CreatedAt), cur.ID)
	}
	return qs + ` ORDER BY r.created_at DESC, r.id LIMIT ?`, append(qa, batch)
}

// runSummaries runs a RunsPage query; last is the cursor of its last row.
func (s *Store) runSummaries(ctx context.Context, q string, args ...any) ([]*RunSummary, *RunCursor, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	var out []*RunSummary
	var last *RunCursor
	for rows.Next() {
		var rs RunSummary
		var sessions, first, crID string
		r, err := scanRun(rowWith{rows, []any{&sessions, &first, &crID, &rs.CRStatus}})
		if err != nil {
			return nil, nil, err
		}
		// The first session's user, title and origin, in one subquery.
		var f []string
		if json.Unmarshal([]byte(first), &f) == nil && len(f) == 3 {
			rs.User, rs.SessionTitle, rs.Origin = f[0], f[1], f[2]
		}
		rs.LoopRun = r
		last = &RunCursor{CreatedAt: r.CreatedAt, ID: r.ID}
		if r.CR == "" {
			r.CR = crID
		}
		if sessions != "" {
			rs.Sessions = strings.Split(sessions, " ")
		}
		out = append(out, &rs)
	}
	return out, last, rows.Err()
}

// rowWith scans a row's leading columns into what scanRun asks for and
// its trailing ones into extra.
type rowWith struct {
	row   scanner
	extra []any
}

func (r rowWith) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }
