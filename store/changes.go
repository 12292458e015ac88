package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/xmode/xmode/fail"
)

// Change-request statuses (docs/reference.md, "Change request status"): open
// until reviewed, then the latest decision.
const (
	ChangeOpen     = "open"
	ChangeApproved = "approved"
	ChangeRejected = "rejected"
)

// Change is a change request as the store keeps it; the package on disk
// (runs/<run>/change_requests/<number>/) holds the rest.
type Change struct {
	ID             string    `json:"id"`
	RunID          string    `json:"run_id"`
	SessionID      string    `json:"session_id"`
	Number         int       `json:"number"`
	Title          string    `json:"title"`
	Author         string    `json:"author"`
	BaseCommit     string    `json:"base_commit"`
	Tree           string    `json:"tree"`
	ManifestSHA256 string    `json:"manifest_sha256"`
	Files          int       `json:"files"`
	Insertions     int       `json:"insertions"`
	Deletions      int       `json:"deletions"`
	Status         string    `json:"status"`
	CreatedAt      time.Time `json:"created_at"`
	Reviews        []Review  `json:"reviews"`
}

// Review is one decision on a change request.
type Review struct {
	Decision  string    `json:"decision"` // approved or rejected
	Reviewer  string    `json:"reviewer"`
	Note      string    `json:"note"`
	DecidedAt time.Time `json:"decided_at"`
}

// NewChangeID returns a fresh cr_ id.
func NewChangeID() string { return newID("cr_") }

const changeCols = `id, run_id, session_id, number, title, author, base_commit, tree, manifest_sha256,
	files, insertions, deletions, status, created_at`

func scanChange(row scanner) (*Change, error) {
	var c Change
	var created int64
	if err := row.Scan(&c.ID, &c.RunID, &c.SessionID, &c.Number, &c.Title, &c.Author, &c.BaseCommit, &c.Tree,
		&c.ManifestSHA256, &c.Files, &c.Insertions, &c.Deletions, &c.Status, &created); err != nil {
		return nil, err
	}
	c.CreatedAt = fromMillis(created)
	c.Reviews = []Review{}
	return &c, nil
}

// CreateChange numbers a new change request in its run (max+1, in an
// immediate transaction, so concurrent creates get distinct numbers),
// calls place with the number — which moves the finished package into its
// directory — and inserts the row. When place fails nothing is recorded.
func (s *Store) CreateChange(ctx context.Context, c *Change, place func(number int) error) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(number), 0) + 1 FROM change_requests WHERE run_id = ?`, c.RunID).Scan(&c.Number); err != nil {
			return fmt.Errorf("number the change request: %w", err)
		}
		if err := place(c.Number); err != nil {
			return err
		}
		c.Status = ChangeOpen
		_, err := tx.ExecContext(ctx, `INSERT INTO change_requests (`+changeCols+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.RunID, c.SessionID, c.Number, c.Title, c.Author, c.BaseCommit, c.Tree, c.ManifestSHA256,
			c.Files, c.Insertions, c.Deletions, c.Status, millis(c.CreatedAt))
		if err != nil {
			return fmt.Errorf("insert change request: %w", err)
		}
		return nil
	})
}

// GetChange returns the change request with exactly this ID, with its reviews.
func (s *Store) GetChange(ctx context.Context, id string) (*Change, error) {
	c, err := scanChange(s.db.QueryRowContext(ctx, `SELECT `+changeCols+` FROM change_requests WHERE id = ?`, id))
	if err != nil {
		return nil, errNoRows(err, "no change request %s", id)
	}
	return c, s.loadReviews(ctx, c)
}

// ParseChangeRef normalises what a user typed for a change request: the
// full ID or any prefix of it, with or without "cr_", at least 4 characters.
func ParseChangeRef(ref string) (string, error) {
	rest := strings.TrimPrefix(ref, "cr_")
	if len(ref) < 4 || rest == "" {
		return "", fail.Usagef("change request %q is too short: give at least 4 characters of its ID", ref)
	}
	if len(rest) > 32 || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return "", fail.NotFoundf("no change request %s: IDs look like cr_7k2m9q4x", ref)
	}
	return "cr_" + rest, nil
}

// ResolveChange finds the one change request whose ID starts with ref.
func (s *Store) ResolveChange(ctx context.Context, ref string) (*Change, error) {
	prefix, err := ParseChangeRef(ref)
	if err != nil {
		return nil, err
	}
	found, err := s.changes(ctx, `SELECT `+changeCols+` FROM change_requests WHERE id >= ? AND id < ? ORDER BY id LIMIT 11`, prefix, prefix+"~")
	if err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, fail.NotFoundf("no change request %s: `xmode cr list` shows them", ref)
	case 1:
		return found[0], s.loadReviews(ctx, found[0])
	}
	ids := make([]string, len(found))
	for i, c := range found {
		ids[i] = c.ID
	}
	return nil, fail.Usagef("change request %q is ambiguous: it matches %s; give more characters", ref, strings.Join(ids, ", "))
}

// ChangeFilter selects change requests for ListChanges.
type ChangeFilter struct {
	RunID  string
	Status string
}

// ListChanges returns change requests, newest first (without reviews).
func (s *Store) ListChanges(ctx context.Context, f ChangeFilter) ([]*Change, error) {
	q := `SELECT ` + changeCols + ` FROM change_requests WHERE 1=1`
	var args []any
	if f.RunID != "" {
		q += ` AND run_id = ?`
		args = append(args, f.RunID)
	}
	if f.Status != "" {
		q += ` AND status = ?`
		args = append(args, f.Status)
	}
	return s.changes(ctx, q+` ORDER BY created_at DESC, id`, args...)
}

func (s *Store) changes(ctx context.Context, q string, args ...any) ([]*Change, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list change requests: %w", err)
	}
	defer rows.Close()
	out := []*Change{}
	for rows.Next() {
		c, err := scanChange(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func (s *Store) loadReviews(ctx context.Context, c *Change) error {
	rows, err := s.db.QueryContext(ctx, `SELECT decision, reviewer, note, decided_at FROM change_request_reviews
		WHERE cr_id = ? ORDER BY seq`, c.ID)
	if err != nil {
		return fmt.Errorf("reviews of %s: %w", c.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r Review
		var at int64
		if err := rows.Scan(&r.Decision, &r.Reviewer, &r.Note, &at); err != nil {
			return err
		}
		r.DecidedAt = fromMillis(at)
		c.Reviews = append(c.Reviews, r)
	}
	return rows.Err()
}

// ReviewChange appends a decision and makes it the change request's status.
func (s *Store) ReviewChange(ctx context.Context, id string, r Review) error {
	if r.Decision != ChangeApproved && r.Decision != ChangeRejected {
		return fail.Usagef("decision %q: use approved or rejected", r.Decision)
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE change_requests SET status = ? WHERE id = ?`, r.Decision, id)
		if err != nil {
			return fmt.Errorf("review %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fail.NotFoundf("no change request %s", id)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO change_request_reviews (cr_id, seq, decision, reviewer, note, decided_at)
			VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM change_request_reviews WHERE cr_id = ?), ?, ?, ?, ?)`,
			id, id, r.Decision, r.Reviewer, r.Note, millis(r.DecidedAt))
		if err != nil {
			return fmt.Errorf("record review of %s: %w", id, err)
		}
		return nil
	})
}
