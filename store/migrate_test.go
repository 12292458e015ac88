package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

// openAt builds a database at the schema just before the migration whose
// name ends in suffix, as the xmode of that schema left it.
func openAt(t *testing.T, root, suffix string) *sql.DB {
	t.Helper()
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	upto := -1
	for i, m := range ms {
		if strings.HasSuffix(m.name, suffix) {
			upto = i
		}
	}
	if upto < 0 {
		t.Fatalf("no migration *%s", suffix)
	}
	path := filepath.Join(root, FileName)
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	for _, m := range ms[:upto] {
		if _, err := db.Exec(m.sql); err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
	}
	if _, err := db.Exec(fmt.Sprintf("INSERT INTO meta (key, value) VALUES ('instance', 'inst1'); PRAGMA user_version = %d", upto)); err != nil {
		t.Fatal(err)
	}
	return db
}

type schemaInfo struct {
	columns []string
	indexes []string
	fks     []string
}

func schemaOf(t *testing.T, db *sql.DB, table string) schemaInfo {
	t.Helper()
	var si schemaInfo
	read := func(q string, f func(*sql.Rows) string) []string {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			out = append(out, f(rows))
		}
		return out
	}
	si.columns = read(`SELECT name || ' ' || type || ' ' || "notnull" || ' ' || coalesce(dflt_value, '') FROM pragma_table_info('`+table+`') ORDER BY cid`,
		func(r *sql.Rows) (s string) { r.Scan(&s); return })
	si.indexes = read(`SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = '`+table+`' AND sql IS NOT NULL ORDER BY name`,
		func(r *sql.Rows) (s string) { r.Scan(&s); return })
	si.fks = read(`SELECT m.name || '.' || f."from" || '->' || f."table" || '.' || f."to" FROM sqlite_master m, pragma_foreign_key_list(m.name) f
		WHERE m.type = 'table' ORDER BY 1`, func(r *sql.Rows) (s string) { r.Scan(&s); return })
	return si
}

// The codex-cloud migration rebuilds sessions to widen its CHECKs: on a
// database of the previous schema with rows in it, every row, column, index
// and foreign key survives, the new states are accepted and the old checks
// still hold.
func TestCodexCloudMigrationKeepsSessions(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	db := openAt(t, root, "_codex_cloud.sql")
	before := schemaOf(t, db, "sessions")
	now := time.Now().UnixMilli()
	seed := []string{
		fmt.Sprintf(`INSERT INTO runs (id, created_at, repo) VALUES ('run_aaaaaaaa', %d, 'r'), ('run_bbbbbbbb', %d, 'r')`, now, now),
		fmt.Sprintf(`INSERT INTO sessions (id, run_id, user, runner_mode, engine, status, end_reason, error, created_at, expires_at, ended_at, worktree_path, base_commit, volumes)
			VALUES ('sbx_aaaaaaaa', 'run_aaaaaaaa', 'alice', 'local_worktree', 'host', 'open', '', '', %d, %d, NULL, '/w/a', 'abc', '[]'),
			       ('sbx_bbbbbbbb', 'run_bbbbbbbb', 'bob', 'cloud_worker', 'docker', 'destroyed', 'expired', 'x', %d, %d, %d, '/w/b', '', '["v1"]')`,
			now, now+3600e3, now, now, now),
		fmt.Sprintf(`INSERT INTO steps (run_id, seq, session_id, name, argv, dir, state, started_at, heartbeat_at, exit_code)
			VALUES ('run_aaaaaaaa', 1, 'sbx_aaaaaaaa', 'test', '["true"]', '/d', 'finished', %d, %d, 0)`, now, now),
	}
	for _, q := range seed {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dump := func(q func(string) (*sql.Rows, error)) []string {
		rows, err := q(`SELECT id, run_id, user, project, runner_mode, engine, status, end_reason, error, created_at, expires_at,
			coalesce(ended_at, -1), worktree_path, repo, ref, base_commit, container_id, mount_mode, image, volumes FROM sessions ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			vals := make([]any, 20)
			ptrs := make([]any, 20)
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			rows.Scan(ptrs...)
			out = append(out, fmt.Sprint(vals...))
		}
		return out
	}
	rowsBefore := dump(func(q string) (*sql.Rows, error) { return db.Query(q) })
	db.Close()

	s := open(t, root)
	after := schemaOf(t, s.db, "sessions")
	// Later migrations add columns (at the end) and indexes: every one
	// there was before must still be there, as it was.
	if len(after.columns) < len(before.columns) || !reflect.DeepEqual(before.columns, after.columns[:len(before.columns)]) {
		t.Fatalf("sessions columns changed:\nbefore %q\nafter  %q", before.columns, after.columns)
	}
	for _, ix := range before.indexes {
		if !contains(after.indexes, ix) {
			t.Fatalf("sessions index %s lost: %q", ix, after.indexes)
		}
	}
	for _, fk := range before.fks {
		if !contains(after.fks, fk) {
			t.Fatalf("foreign key %s lost: %q", fk, after.fks)
		}
	}
	if got := dump(func(q string) (*sql.Rows, error) { return s.db.Query(q) }); !reflect.DeepEqual(rowsBefore, got) {
		t.Fatalf("rows changed:\nbefore %q\nafter  %q", rowsBefore, got)
	}
	if id, _ := s.InstanceID(ctx); id != "inst1" {
		t.Fatalf("instance %q", id)
	}
	var fk, integrity string
	s.db.QueryRow("PRAGMA foreign_keys").Scan(&fk)
	s.db.QueryRow("PRAGMA integrity_check").Scan(&integrity)
	if fk != "1" || integrity != "ok" {
		t.Fatalf("foreign_keys=%s integrity=%s", fk, integrity)
	}
	// The steps still refer to the (rebuilt) sessions table.
	if _, err := s.db.Exec(`INSERT INTO steps (run_id, seq, session_id, name, argv, dir, started_at, heartbeat_at)
		VALUES ('run_aaaaaaaa', 2, 'sbx_nosuchxx', 'x', '[]', '/d', 0, 0)`); err == nil {
		t.Fatal("a step of a missing session was accepted: the foreign key is gone")
	}
	// New states are accepted, unknown ones still refused.
	if _, err := s.db.Exec(`UPDATE sessions SET status = 'ready', end_reason = 'task_ready' WHERE id = 'sbx_aaaaaaaa'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE sessions SET status = 'bogus' WHERE id = 'sbx_aaaaaaaa'`); err == nil {
		t.Fatal("status 'bogus' accepted")
	}
	if _, err := s.db.Exec(`UPDATE sessions SET end_reason = 'bogus' WHERE id = 'sbx_aaaaaaaa'`); err == nil {
		t.Fatal("end_reason 'bogus' accepted")
	}
	// The store works on it.
	if sess, err := s.Get(ctx, "sbx_bbbbbbbb"); err != nil || sess.Status != StatusDestroyed || len(sess.Volumes) != 1 {
		t.Fatalf("%+v %v", sess, err)
	}
}

// A migration that leaves a dangling reference fails and changes nothing.
func TestMigrationForeignKeyCheck(t *testing.T) {
	root := t.TempDir()
	db := openAt(t, root, "_codex_cloud.sql")
	// A step whose session does not exist, written with foreign keys off
	// (as a buggy older xmode might have).
	if _, err := db.Exec(`PRAGMA foreign_keys = OFF; INSERT INTO steps (run_id, seq, session_id, name, argv, dir, started_at, heartbeat_at)
		VALUES ('run_zzzzzzzz', 1, 'sbx_zzzzzzzz', 'x', '[]', '/d', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	var v int
	db.QueryRow("PRAGMA user_version").Scan(&v)
	db.Close()
	_, err := Open(context.Background(), root)
	if err == nil || !strings.Contains(err.Error(), "refers to a missing row") || fail.KindOf(err) == fail.Usage {
		t.Fatalf("Open: %v", err)
	}
	db2, _ := sql.Open("sqlite", filepath.Join(root, FileName))
	defer db2.Close()
	var after int
	db2.QueryRow("PRAGMA user_version").Scan(&after)
	if after != v {
		t.Fatalf("user_version %d → %d: a failed migration committed", v, after)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The run-outcomes migration rebuilds runs to widen its status CHECK: every
// column, index and foreign key survives, the rows too — except that a run
// an older xmode ended in review without a change request gets the status
// it should have had (no-change, or failed with a reason).
func TestRunOutcomesMigration(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	db := openAt(t, root, "_run_outcomes.sql")
	before := schemaOf(t, db, "runs")
	now := time.Now().UnixMilli()
	seed := []string{
		fmt.Sprintf(`INSERT INTO runs (id, created_at, repo, objective, status, exit_code, cr_id, error, plan, plan_source, machine, reclaimed_at, finished_at) VALUES
			('run_aaaaaaaa', %d, 'r', 'with a change', 'review', 7, 'cr_aaaaaaaa', '', '{}', 'default', 'm', %d, %d),
			('run_bbbbbbbb', %d, 'r', 'nothing changed', 'review', 0, '', '', '', '', '', NULL, %d),
			('run_cccccccc', %d, 'r', 'agent failed', 'review', 1, '', '', '', '', '', NULL, %d),
			('run_dddddddd', %d, 'r', 'xmode failed', 'failed', 2, '', 'bad plan', '', '', '', NULL, %d),
			('run_eeeeeeee', %d, 'r', '', '', NULL, '', '', '', '', '', NULL, NULL)`,
			now, now, now, now+1, now, now+2, now, now+3, now, now+4),
		fmt.Sprintf(`INSERT INTO sessions (id, run_id, user, runner_mode, engine, status, end_reason, error, created_at, expires_at, worktree_path)
			VALUES ('sbx_aaaaaaaa', 'run_aaaaaaaa', 'alice', 'local_worktree', 'host', 'destroyed', 'stopped', '', %d, %d, '/w/a')`, now, now),
	}
	for _, q := range seed {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s := open(t, root)
	after := schemaOf(t, s.db, "runs")
	// Later migrations may add columns and indexes (0018: attempts), never
	// drop one.
	if len(after.columns) < len(before.columns) || !reflect.DeepEqual(before.columns, after.columns[:len(before.columns)]) {
		t.Fatalf("runs columns changed:\nbefore %q\nafter  %q", before.columns, after.columns)
	}
	// Every index survives (later migrations may add some).
	for _, idx := range before.indexes {
		if !contains(after.indexes, idx) {
			t.Fatalf("runs index lost:\nbefore %q\nafter  %q", before.indexes, after.indexes)
		}
	}
	for _, fk := range before.fks {
		if !contains(after.fks, fk) {
			t.Fatalf("foreign key %s lost: %q", fk, after.fks)
		}
	}
	want := map[string][2]string{
		"run_aaaaaaaa": {RunReview, ""},
		"run_bbbbbbbb": {RunNoChange, ""},
		"run_cccccccc": {RunFailed, "a required step failed (exit 1) and the worktree had no change to review"},
		"run_dddddddd": {RunFailed, "bad plan"},
	}
	runs, err := s.ListRuns(ctx, true)
	if err != nil || len(runs) != 5 {
		t.Fatalf("%d runs, %v", len(runs), err)
	}
	for _, r := range runs {
		if w, ok := want[r.ID]; ok && (r.Status != w[0] || r.Error != w[1]) {
			t.Errorf("%s: %q %q, want %q", r.ID, r.Status, r.Error, w)
		}
	}
	a, err := s.ResolveRun(ctx, "run_aaaaaaaa")
	if err != nil || a.CR != "cr_aaaaaaaa" || a.ExitCode == nil || *a.ExitCode != 7 || a.PlanSource != "default" || a.FinishedAt == nil {
		t.Fatalf("%+v %v", a, err)
	}
	var machine string
	var reclaimed sql.NullInt64
	s.db.QueryRow(`SELECT machine, reclaimed_at FROM runs WHERE id = 'run_aaaaaaaa'`).Scan(&machine, &reclaimed)
	if machine != "m" || reclaimed.Int64 != now {
		t.Fatalf("machine %q reclaimed_at %v", machine, reclaimed)
	}
	if _, err := s.db.Exec(`UPDATE runs SET status = 'no-change' WHERE id = 'run_eeeeeeee'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE runs SET status = 'bogus' WHERE id = 'run_eeeeeeee'`); err == nil {
		t.Fatal("status 'bogus' accepted")
	}
	// The sessions still refer to the (rebuilt) runs table.
	if _, err := s.db.Exec(`INSERT INTO sessions (id, run_id, user, runner_mode, engine, status, created_at, expires_at, worktree_path)
		VALUES ('sbx_bbbbbbbb', 'run_nosuchxx', 'bob', 'local_worktree', 'host', 'open', 0, 0, '/w/b')`); err == nil {
		t.Fatal("a session of a missing run was accepted: the foreign key is gone")
	}
	var integrity string
	s.db.QueryRow("PRAGMA integrity_check").Scan(&integrity)
	if integrity != "ok" {
		t.Fatalf("integrity %s", integrity)
	}
}

// Sessions from before origins were recorded are the command line's; an
// origin other than cli or mcp is refused.
func TestSessionOriginMigration(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	db := openAt(t, root, "_session_origin.sql")
	now := time.Now().UnixMilli()
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO runs (id, created_at, repo) VALUES ('run_aaaaaaaa', %d, 'r')`, now),
		fmt.Sprintf(`INSERT INTO sessions (id, run_id, user, runner_mode, engine, status, created_at, expires_at, worktree_path)
			VALUES ('sbx_aaaaaaaa', 'run_aaaaaaaa', 'alice', 'local_worktree', 'host', 'open', %d, %d, '/w/a')`, now, now+3600e3),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s := open(t, root)
	sess, err := s.Get(ctx, "sbx_aaaaaaaa")
	if err != nil || sess.Origin != OriginCLI || sess.OriginClient != "" || sess.Title != "" {
		t.Fatalf("an older session: %+v, %v; want origin cli", sess, err)
	}
	if _, err := s.db.Exec(`UPDATE sessions SET origin = 'bogus' WHERE id = 'sbx_aaaaaaaa'`); err == nil {
		t.Fatal("origin 'bogus' accepted")
	}
	if _, err := s.db.Exec(`UPDATE sessions SET origin = 'mcp', origin_client = 'c 1' WHERE id = 'sbx_aaaaaaaa'`); err != nil {
		t.Fatal(err)
	}
	mine, err := s.List(ctx, Filter{User: "alice", Origin: OriginMCP})
	if err != nil || len(mine) != 1 || mine[0].OriginClient != "c 1" {
		t.Fatalf("List by origin: %v, %v", mine, err)
	}
	if others, _ := s.List(ctx, Filter{User: "bob", Origin: OriginMCP}); len(others) != 0 {
		t.Fatalf("another user's sessions listed: %v", others)
	}
}

// Change requests from before versions get their one package as version
// 1; a rejection that asked for changes becomes a changes_requested
// decision (and status, when it was the latest), its note without the
// old prefix; every row and index of change_requests, its reviews and
// runs is kept.
func TestVersionsMigration(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	db := openAt(t, root, "_cr_versions.sql")
	crBefore, revBefore := schemaOf(t, db, "change_requests"), schemaOf(t, db, "change_request_reviews")
	runsBefore := schemaOf(t, db, "runs")
	now := time.Now().UnixMilli()
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO runs (id, created_at, repo, objective, status, cr_id) VALUES ('run_aaaaaaaa', %d, 'r', 'x', 'review', 'cr_aaaaaaaa')`, now),
		fmt.Sprintf(`INSERT INTO change_requests (id, run_id, session_id, number, title, author, base_commit, tree, manifest_sha256, files, insertions, deletions, status, created_at) VALUES
			('cr_aaaaaaaa', 'run_aaaaaaaa', 'sbx_aaaaaaaa', 1, 'asked', 'ann', 'b1', 't1', 'm1', 1, 2, 3, 'rejected', %d),
			('cr_bbbbbbbb', 'run_aaaaaaaa', 'sbx_aaaaaaaa', 2, 'rejected', 'ann', 'b1', 't2', 'm2', 1, 0, 0, 'rejected', %d),
			('cr_cccccccc', 'run_aaaaaaaa', 'sbx_aaaaaaaa', 3, 'asked, then approved', 'ann', 'b1', 't3', 'm3', 0, 0, 0, 'approved', %d)`, now, now+1, now+2),
		fmt.Sprintf(`INSERT INTO change_request_reviews (cr_id, seq, decision, reviewer, note, decided_at) VALUES
			('cr_aaaaaaaa', 1, 'rejected', 'bob', 'changes requested: add a test', %d),
			('cr_bbbbbbbb', 1, 'rejected', 'bob', 'no', %d),
			('cr_cccccccc', 1, 'rejected', 'bob', 'changes requested: x', %d),
			('cr_cccccccc', 2, 'approved', 'bob', '', %d)`, now, now, now, now+1),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s := open(t, root)
	for table, before := range map[string]schemaInfo{"change_requests": crBefore, "change_request_reviews": revBefore, "runs": runsBefore} {
		after := schemaOf(t, s.db, table)
		if len(after.columns) < len(before.columns) || !reflect.DeepEqual(before.columns, after.columns[:len(before.columns)]) {
			t.Errorf("%s columns changed:\nbefore %q\nafter  %q", table, before.columns, after.columns)
		}
		for _, ix := range before.indexes {
			if !contains(after.indexes, ix) {
				t.Errorf("%s index lost: %s", table, ix)
			}
		}
		for _, fk := range before.fks {
			if !contains(after.fks, fk) {
				t.Errorf("foreign key %s lost: %q", fk, after.fks)
			}
		}
	}
	want := map[string]struct {
		status, decision, note string
	}{
		"cr_aaaaaaaa": {ChangeChangesRequested, ChangeChangesRequested, "add a test"},
		"cr_bbbbbbbb": {ChangeRejected, ChangeRejected, "no"},
		"cr_cccccccc": {ChangeApproved, ChangeChangesRequested, "x"},
	}
	for id, w := range want {
		c, err := s.GetChange(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != w.status || c.Version != 1 || c.Reviews[0].Decision != w.decision || c.Reviews[0].Note != w.note || c.Reviews[0].Version != 1 {
			t.Errorf("%s: %+v; want %+v", id, c, w)
		}
		vs, err := s.Versions(ctx, id)
		if err != nil || len(vs) != 1 || vs[0].Version != 1 || vs[0].RunID != c.RunID || vs[0].Number != c.Number ||
			vs[0].Tree != c.Tree || vs[0].ManifestSHA256 != c.ManifestSHA256 || !vs[0].CreatedAt.Equal(c.CreatedAt) {
			t.Errorf("%s: versions %+v, %v", id, vs, err)
		}
	}
	r, err := s.ResolveRun(ctx, "run_aaaaaaaa")
	if err != nil || r.Status != RunChangesRequested || r.Stored != RunReview || r.Parent != "" || r.Attempt != 0 || r.Attempts != 0 {
		t.Fatalf("run: %+v, %v", r, err)
	}
	if _, err := s.db.Exec(`UPDATE runs SET status = 'attempting' WHERE id = 'run_aaaaaaaa'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE change_requests SET status = 'merged' WHERE id = 'cr_aaaaaaaa'`); err == nil {
		t.Fatal("status 'merged' accepted")
	}
	var integrity string
	s.db.QueryRow("PRAGMA integrity_check").Scan(&integrity)
	if integrity != "ok" {
		t.Fatalf("integrity %s", integrity)
	}
}
