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
// until reviewed (and again when a new version comes), then the latest
// decision: approved, rejected, changes_requested (it awaits a new
// version) or superseded (another attempt of its run was approved).
// Review decisions are the same words, but open.
const (
	ChangeOpen             = "open"
	ChangeApproved         = "approved"
	ChangeRejected         = "rejected"
	ChangeChangesRequested = "changes_requested"
	ChangeSuperseded       = "superseded"
)

// Comment sides: a line of the version's tree (new) or of the base (old).
const (
	SideNew = "new"
	SideOld = "old"
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
	// Version is its newest version's number; Tree, ManifestSHA256, Files,
	// Insertions and Deletions are that version's. RunID, SessionID and
	// Number are its first version's: the run it belongs to.
	Version int      `json:"version"`
	Reviews []Review `json:"reviews"`
}

// Review is one decision on a change request.
type Review struct {
	Seq       int       `json:"-"`
	Decision  string    `json:"decision"`
	Reviewer  string    `json:"reviewer"`
	Note      string    `json:"note"`
	DecidedAt time.Time `json:"decided_at"`
	// Version is the version the decision is about.
	Version  int       `json:"version"`
	Comments []Comment `json:"comments"`
}

// Comment is a reviewer's comment on a line of a version's diff.
type Comment struct {
	Version int    `json:"version"`
	Path    string `json:"path"`
	Side    string `json:"side"` // SideNew or SideOld
	Line    int    `json:"line"`
	Text    string `json:"text"`
	// Addressed: the next version changed the line; nil while there is no
	// next version (filled by the changes package, not stored).
	Addressed *bool `json:"addressed"`
}

// ChangeVersion is one version of a change request: a package of its own
// under runs/<RunID>/change_requests/<Number>/.
type ChangeVersion struct {
	Version        int       `json:"version"`
	RunID          string    `json:"run_id"`
	SessionID      string    `json:"session_id"`
	Number         int       `json:"number"`
	Tree           string    `json:"tree"`
	ManifestSHA256 string    `json:"manifest_sha256"`
	Files          int       `json:"files"`
	Insertions     int       `json:"insertions"`
	Deletions      int       `json:"deletions"`
	CreatedAt      time.Time `json:"created_at"`
}

// NewChangeID returns a fresh cr_ id.
func NewChangeID() string { return newID("cr_") }

const changeCols = `id, run_id, session_id, number, title, author, base_commit, tree, manifest_sha256,
	files, insertions, deletions, status, created_at, version`

func scanChange(row scanner) (*Change, error) {
	var c Change
	var created int64
	if err := row.Scan(&c.ID, &c.RunID, &c.SessionID, &c.Number, &c.Title, &c.Author, &c.BaseCommit, &c.Tree,
		&c.ManifestSHA256, &c.Files, &c.Insertions, &c.Deletions, &c.Status, &created, &c.Version); err != nil {
		return nil, err
	}
	c.CreatedAt = fromMillis(created)
	c.Reviews = []Review{}
	return &c, nil
}

// nextPackage is the number of the next package in a run: packages of
// first and later versions share the run's numbers.
func nextPackage(ctx context.Context, tx *sql.Tx, runID string) (int, error) {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(number), 0) + 1 FROM change_request_versions WHERE run_id = ?`, runID).Scan(&n); err != nil {
		return 0, fmt.Errorf("number the package: %w", err)
	}
	return n, nil
}

func insertVersion(ctx context.Context, tx *sql.Tx, crID string, v *ChangeVersion) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO change_request_versions (cr_id, version, run_id, session_id, number, tree,
		manifest_sha256, files, insertions, deletions, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		crID, v.Version, v.RunID, v.SessionID, v.Number, v.Tree, v.ManifestSHA256, v.Files, v.Insertions, v.Deletions, millis(v.CreatedAt))
	if err != nil {
		return fmt.Errorf("record version %d of %s: %w", v.Version, crID, err)
	}
	return nil
}

// CreateChange numbers a new change request in its run (max+1, in an
// immediate transaction, so concurrent creates get distinct numbers),
// calls place with the number — which moves the finished package into its
// directory — and inserts the row, as version 1. When place fails nothing
// is recorded.
func (s *Store) CreateChange(ctx context.Context, c *Change, place func(number int) error) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		if c.Number, err = nextPackage(ctx, tx, c.RunID); err != nil {
			return err
		}
		if err := place(c.Number); err != nil {
			return err
		}
		c.Status, c.Version = ChangeOpen, 1
		_, err = tx.ExecContext(ctx, `INSERT INTO change_requests (`+changeCols+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.RunID, c.SessionID, c.Number, c.Title, c.Author, c.BaseCommit, c.Tree, c.ManifestSHA256,
			c.Files, c.Insertions, c.Deletions, c.Status, millis(c.CreatedAt), c.Version)
		if err != nil {
			return fmt.Errorf("insert change request: %w", err)
		}
		return insertVersion(ctx, tx, c.ID, &ChangeVersion{Version: 1, RunID: c.RunID, SessionID: c.SessionID, Number: c.Number,
			Tree: c.Tree, ManifestSHA256: c.ManifestSHA256, Files: c.Files, Insertions: c.Insertions, Deletions: c.Deletions, CreatedAt: c.CreatedAt})
	})
}

// AddVersion records version v.Version of change request crID, which
// must follow its newest (so two xmodes continuing it cannot both make
// the same version): numbers its package in v.RunID, calls place with the
// number (which moves the finished package into its directory), inserts
// the version and makes it the change request's newest, open again for
// review. When place fails nothing is recorded.
func (s *Store) AddVersion(ctx context.Context, crID string, v *ChangeVersion, place func(number int) error) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var newest int
		if err := tx.QueryRowContext(ctx, `SELECT version FROM change_requests WHERE id = ?`, crID).Scan(&newest); err != nil {
			return errNoRows(err, "no change request %s", crID)
		}
		if v.Version != newest+1 {
			return fail.Refusedf("change request %s has version %d already: another xmode made it meanwhile", crID, newest+1)
		}
		var err error
		if v.Number, err = nextPackage(ctx, tx, v.RunID); err != nil {
			return err
		}
		if err := place(v.Number); err != nil {
			return err
		}
		if err := insertVersion(ctx, tx, crID, v); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE change_requests SET version = ?, tree = ?, manifest_sha256 = ?, files = ?,
			insertions = ?, deletions = ?, status = ? WHERE id = ?`,
			v.Version, v.Tree, v.ManifestSHA256, v.Files, v.Insertions, v.Deletions, ChangeOpen, crID)
		if err != nil {
			return fmt.Errorf("make version %d the newest of %s: %w", v.Version, crID, err)
		}
		return nil
	})
}

// Versions lists every version of a change request, oldest first.
func (s *Store) Versions(ctx context.Context, crID string) ([]ChangeVersion, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT version, run_id, session_id, number, tree, manifest_sha256, files,
		insertions, deletions, created_at FROM change_request_versions WHERE cr_id = ? ORDER BY version`, crID)
	if err != nil {
		return nil, fmt.Errorf("versions of %s: %w", crID, err)
	}
	defer rows.Close()
	out := []ChangeVersion{}
	for rows.Next() {
		var v ChangeVersion
		var at int64
		if err := rows.Scan(&v.Version, &v.RunID, &v.SessionID, &v.Number, &v.Tree, &v.ManifestSHA256, &v.Files,
			&v.Insertions, &v.Deletions, &at); err != nil {
			return nil, err
		}
		v.CreatedAt = fromMillis(at)
		out = append(out, v)
	}
	return out, rows.Err()
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
	rows, err := s.db.QueryContext(ctx, `SELECT seq, decision, reviewer, note, decided_at, version FROM change_request_reviews
		WHERE cr_id = ? ORDER BY seq`, c.ID)
	if err != nil {
		return fmt.Errorf("reviews of %s: %w", c.ID, err)
	}
	defer rows.Close()
	bySeq := map[int]int{}
	for rows.Next() {
		var r Review
		var at int64
		if err := rows.Scan(&r.Seq, &r.Decision, &r.Reviewer, &r.Note, &at, &r.Version); err != nil {
			return err
		}
		r.DecidedAt = fromMillis(at)
		r.Comments = []Comment{}
		bySeq[r.Seq] = len(c.Reviews)
		c.Reviews = append(c.Reviews, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	crows, err := s.db.QueryContext(ctx, `SELECT review_seq, version, path, side, line, text FROM change_request_comments
		WHERE cr_id = ? ORDER BY review_seq, seq`, c.ID)
	if err != nil {
		return fmt.Errorf("comments of %s: %w", c.ID, err)
	}
	defer crows.Close()
	for crows.Next() {
		var seq int
		var cm Comment
		if err := crows.Scan(&seq, &cm.Version, &cm.Path, &cm.Side, &cm.Line, &cm.Text); err != nil {
			return err
		}
		if i, ok := bySeq[seq]; ok {
			c.Reviews[i].Comments = append(c.Reviews[i].Comments, cm)
		}
	}
	return crows.Err()
}

// ReviewOptions are what a review records beside its decision.
type ReviewOptions struct {
	// Comments on lines of the version's diff, checked by the caller.
	Comments []Comment
	// CloseOthers, with an approval of an attempt, closes the other
	// attempts of its run still open or awaiting a new version as
	// superseded; it returns their IDs.
	CloseOthers bool
}

// ReviewChange appends a decision about version r.Version (with its
// comments) and makes it the change request's status. A decision about a
// version that is no longer the newest is refused: a reviewer decides on
// what the change request is now.
func (s *Store) ReviewChange(ctx context.Context, id string, r Review, o ReviewOptions) (closed []string, err error) {
	switch r.Decision {
	case ChangeApproved, ChangeRejected, ChangeChangesRequested, ChangeSuperseded:
	default:
		return nil, fail.Usagef("decision %q: use approved, rejected, changes_requested or superseded", r.Decision)
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var newest int
		if err := tx.QueryRowContext(ctx, `SELECT version FROM change_requests WHERE id = ?`, id).Scan(&newest); err != nil {
			return errNoRows(err, "no change request %s", id)
		}
		if r.Version == 0 {
			r.Version = newest
		}
		if r.Version != newest {
			return fail.Refusedf("change request %s is at version %d now, not %d: review the newest (`xmode cr show %s`)", id, newest, r.Version, id)
		}
		if err := insertReview(ctx, tx, id, r, o.Comments); err != nil {
			return err
		}
		if !o.CloseOthers {
			return nil
		}
		if r.Decision != ChangeApproved {
			return fail.Usagef("closing the other attempts goes with an approval")
		}
		rows, err := tx.QueryContext(ctx, `SELECT c.id, c.version FROM change_requests c JOIN runs a ON a.id = c.run_id
			WHERE a.attempt > 0 AND a.parent_run = (SELECT r.parent_run FROM runs r JOIN change_requests me ON me.run_id = r.id
				WHERE me.id = ? AND r.attempt > 0)
			AND c.id != ? AND c.status IN (?, ?) ORDER BY a.attempt`, id, id, ChangeOpen, ChangeChangesRequested)
		if err != nil {
			return fmt.Errorf("find the other attempts of %s: %w", id, err)
		}
		type other struct {
			id      string
			version int
		}
		var others []other
		for rows.Next() {
			var o other
			if err := rows.Scan(&o.id, &o.version); err != nil {
				rows.Close()
				return err
			}
			others = append(others, o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, o := range others {
			sup := Review{Decision: ChangeSuperseded, Reviewer: r.Reviewer, Note: "superseded by " + id, DecidedAt: r.DecidedAt, Version: o.version}
			if err := insertReview(ctx, tx, o.id, sup, nil); err != nil {
				return err
			}
			closed = append(closed, o.id)
		}
		return nil
	})
	return closed, err
}

// insertReview records a decision and its comments, and makes the
// decision the change request's status.
func insertReview(ctx context.Context, tx *sql.Tx, id string, r Review, comments []Comment) error {
	if _, err := tx.ExecContext(ctx, `UPDATE change_requests SET status = ? WHERE id = ?`, r.Decision, id); err != nil {
		return fmt.Errorf("review %s: %w", id, err)
	}
	var seq int
	err := tx.QueryRowContext(ctx, `INSERT INTO change_request_reviews (cr_id, seq, decision, reviewer, note, decided_at, version)
		VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM change_request_reviews WHERE cr_id = ?), ?, ?, ?, ?, ?) RETURNING seq`,
		id, id, r.Decision, r.Reviewer, r.Note, millis(r.DecidedAt), r.Version).Scan(&seq)
	if err != nil {
		return fmt.Errorf("record review of %s: %w", id, err)
	}
	for i, c := range comments {
		if c.Side != SideNew && c.Side != SideOld {
			return fail.Usagef("comment on %s:%d: side %q: use new or old", c.Path, c.Line, c.Side)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO change_request_comments (cr_id, review_seq, seq, version, path, side, line, text)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, id, seq, i+1, r.Version, c.Path, c.Side, c.Line, c.Text); err != nil {
			return fmt.Errorf("record a comment of the review of %s: %w", id, err)
		}
	}
	return nil
}
