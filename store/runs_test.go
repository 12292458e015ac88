package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// RunsPage: newest first, a page at a time from a cursor, filtered by the
// status users see (a review's decision applied; a running run whose xmode
// is gone failed) and by user, with each run's sessions and change request.
func TestRunsPage(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var ids []string // oldest first
	mk := func(i int, user string, loop bool) NewSession {
		n := newSess(user, base.Add(time.Duration(i)*time.Second))
		if loop {
			n.Loop = &NewLoop{Objective: "objective " + user}
		}
		if err := s.CreateSession(ctx, n); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, n.RunID)
		return n
	}
	for i := 0; i < 7; i++ {
		user := "alice"
		if i%2 == 1 {
			user = "bob"
		}
		mk(i, user, true)
	}
	plain := mk(7, "alice", false) // a plain sandbox's run
	// Run 0 ends in review and its change request is approved; run 1 in
	// review, still open; run 2 failed; run 3 is running under a process
	// that is gone; the rest run under this one.
	cr := changeOn(ids[0], base)
	if err := s.CreateChange(ctx, cr, func(int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishLoopRun(ctx, ids[0], LoopEnd{Status: RunReview, CR: cr.ID, Finished: base}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReviewChange(ctx, cr.ID, Review{Decision: ChangeApproved, Reviewer: "r", DecidedAt: base}, ReviewOptions{}); err != nil {
		t.Fatal(err)
	}
	cr1 := changeOn(ids[1], base)
	if err := s.CreateChange(ctx, cr1, func(int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishLoopRun(ctx, ids[1], LoopEnd{Status: RunReview, CR: cr1.ID, Finished: base}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishLoopRun(ctx, ids[2], LoopEnd{Status: RunFailed, ExitCode: 1, Finished: base}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE runs SET owner = '999999999:1' WHERE id = ?`, ids[3]); err != nil {
		t.Fatal(err)
	}
	// A plain sandbox's change request shows on its run too.
	crPlain := changeOn(plain.RunID, base)
	if err := s.CreateChange(ctx, crPlain, func(int) error { return nil }); err != nil {
		t.Fatal(err)
	}

	page := func(q RunQuery) ([]string, *RunCursor, []*RunSummary) {
		t.Helper()
		got, next, err := s.RunsPage(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range got {
			out = append(out, r.ID)
		}
		return out, next, got
	}
	eq := func(what string, got, want []string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: %v, want %v", what, got, want)
			}
		}
	}

	// A run no session made (a warm pool's entry): only with All.
	pooled := NewRunID()
	if _, err := s.db.Exec(`INSERT INTO runs (id, created_at, repo, ref, project) VALUES (?, ?, '', '', '')`, pooled, millis(base.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE sessions SET title = 'Fix the flaky test', origin = 'mcp' WHERE run_id = ?`, plain.RunID); err != nil {
		t.Fatal(err)
	}

	// Pages of 3, newest first: the loop's runs and the runs sessions made.
	p1, next, rows := page(RunQuery{Limit: 3})
	eq("page 1", p1, []string{plain.RunID, ids[6], ids[5]})
	if next == nil || rows[1].User != "alice" || len(rows[1].Sessions) != 1 || rows[1].Origin != OriginCLI || rows[1].SessionTitle != "" {
		t.Fatalf("page 1: next %v, a loop run %+v", next, rows[1])
	}
	if rows[0].CR != crPlain.ID || rows[0].Status != "" || rows[0].SessionTitle != "Fix the flaky test" || rows[0].Origin != OriginMCP || rows[0].User != "alice" {
		t.Fatalf("a session's run: %+v", rows[0])
	}
	p2, next, _ := page(RunQuery{Limit: 3, Before: next})
	eq("page 2", p2, []string{ids[4], ids[3], ids[2]})
	p3, next, _ := page(RunQuery{Limit: 3, Before: next})
	eq("page 3", p3, []string{ids[1], ids[0]})
	if next != nil {
		t.Fatalf("a cursor after the last page: %v", next)
	}

	// Status as users see it.
	got, _, rows := page(RunQuery{Status: RunApproved})
	eq("approved", got, []string{ids[0]})
	if rows[0].CR != cr.ID || rows[0].CRStatus != ChangeApproved {
		t.Fatalf("approved run's change request: %+v", rows[0])
	}
	got, _, _ = page(RunQuery{Status: RunReview})
	eq("review", got, []string{ids[1]})
	got, _, _ = page(RunQuery{Status: RunFailed})
	eq("failed (and the one whose xmode is gone)", got, []string{ids[3], ids[2]})
	got, _, _ = page(RunQuery{Status: RunRunning})
	eq("running", got, []string{ids[6], ids[5], ids[4]})
	// The Go-side rule across pages: running, one at a time.
	got, next, _ = page(RunQuery{Status: RunRunning, Limit: 2})
	eq("running page 1", got, []string{ids[6], ids[5]})
	got, next, _ = page(RunQuery{Status: RunRunning, Limit: 2, Before: next})
	eq("running page 2", got, []string{ids[4]})
	if next != nil {
		t.Fatalf("running: a cursor after the last page")
	}

	// By user, and with the runs no session made.
	got, _, _ = page(RunQuery{User: "bob"})
	eq("bob", got, []string{ids[5], ids[3], ids[1]})
	got, _, rows = page(RunQuery{All: true, Limit: 2})
	eq("all", got, []string{pooled, plain.RunID})
	if len(rows[0].Sessions) != 0 || rows[0].User != "" || rows[0].Origin != "" {
		t.Fatalf("a run no session made: %+v", rows[0])
	}
}

// CloudTasks and ThreadPage list what the cloud pages show.
func TestCloudTasksAndThreadPage(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	if got, err := s.CloudTasks(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("no tasks: %v %v", got, err)
	}
	var tasks []string
	for i := 0; i < 3; i++ {
		n := newSess("u", time.Now())
		if err := s.CreateSession(ctx, n); err != nil {
			t.Fatal(err)
		}
		task := "task_" + string(rune('a'+i))
		if _, err := s.db.Exec(`INSERT INTO cloud_tasks (task_id, session_id, env_id, submitted_at) VALUES (?, ?, 'env', ?)`,
			task, n.ID, int64(1000+i)); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
	got, err := s.CloudTasks(ctx, 2)
	if err != nil || len(got) != 2 || got[0].TaskID != tasks[2] || got[1].TaskID != tasks[1] {
		t.Fatalf("CloudTasks(2): %+v %v", got, err)
	}
	for i := 0; i < 5; i++ {
		if _, err := s.db.Exec(`INSERT INTO cloud_transcript (task_id, idx, line, arrived_at) VALUES (?, ?, ?, 0)`, tasks[0], i, "line"); err != nil {
			t.Fatal(err)
		}
	}
	lines, err := s.ThreadPage(ctx, tasks[0], 1, 3)
	if err != nil || len(lines) != 3 || lines[0].Index != 1 || lines[2].Index != 3 {
		t.Fatalf("ThreadPage(1, 3): %+v %v", lines, err)
	}
	if all, _ := s.Thread(ctx, tasks[0], 0); len(all) != 5 {
		t.Fatalf("Thread: %d lines", len(all))
	}
}

// A page of runs, of every run or of the runs sessions made, from the
// newest or after a cursor, is read off the index runs_by_creation in the
// page's order (0015): no sort of every run for each page.
func TestRunsPageReadsItsOrderOffAnIndex(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	cur := &RunCursor{CreatedAt: time.Now(), ID: "run_aaaaaaaa"}
	for _, c := range []struct {
		q   RunQuery
		cur *RunCursor
	}{{RunQuery{}, nil}, {RunQuery{All: true}, nil}, {RunQuery{}, cur}, {RunQuery{All: true}, cur}} {
		_, base, args := runsPageSQL(c.q)
		qs, qa := runsPageOf(base, args, c.cur, 51)
		rows, err := s.db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+qs, qa...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		all := strings.Join(plan, "\n")
		if !strings.Contains(all, "INDEX runs_by_creation") || strings.Contains(all, "TEMP B-TREE") {
			t.Errorf("runs page %+v (cursor %v) does not read its order off runs_by_creation:\n%s", c.q, c.cur != nil, all)
		}
	}
}
