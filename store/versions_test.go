package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

// A version follows the newest (a second xmode making the same version is
// refused), takes the next package number of the run it was made in, is
// the change request's newest (tree, manifest, stat) and opens it for
// review again; a failed placement records nothing.
func TestAddVersion(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	n := newSess("u", time.Now())
	other := newSess("u", time.Now())
	for _, ns := range []NewSession{n, other} {
		if err := s.CreateSession(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	c := changeOn(n.RunID, time.Now())
	if err := s.CreateChange(ctx, c, func(int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReviewChange(ctx, c.ID, Review{Decision: ChangeChangesRequested, Reviewer: "r", Note: "more"}, ReviewOptions{}); err != nil {
		t.Fatal(err)
	}
	// version 2 in the same run: package 2 there
	v2 := &ChangeVersion{Version: 2, RunID: n.RunID, SessionID: n.ID, Tree: strings.Repeat("e", 40), ManifestSHA256: strings.Repeat("f", 64), Files: 3, Insertions: 4, Deletions: 5, CreatedAt: time.Now()}
	if err := s.AddVersion(ctx, c.ID, v2, func(num int) error { return nil }); err != nil || v2.Number != 2 {
		t.Fatalf("v2: number %d, %v", v2.Number, err)
	}
	dup := *v2
	if err := s.AddVersion(ctx, c.ID, &dup, func(int) error { return nil }); fail.KindOf(err) != fail.Refused {
		t.Fatalf("a second version 2: %v", err)
	}
	// version 3 in another run (a fork of its tree): package 1 there
	boom := errors.New("no room")
	v3 := &ChangeVersion{Version: 3, RunID: other.RunID, SessionID: other.ID, Tree: strings.Repeat("1", 40), ManifestSHA256: strings.Repeat("2", 64), CreatedAt: time.Now()}
	if err := s.AddVersion(ctx, c.ID, v3, func(int) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed placement: %v", err)
	}
	if err := s.AddVersion(ctx, c.ID, v3, func(int) error { return nil }); err != nil || v3.Number != 1 {
		t.Fatalf("v3: number %d, %v", v3.Number, err)
	}
	got, err := s.GetChange(ctx, c.ID)
	if err != nil || got.Version != 3 || got.Tree != v3.Tree || got.ManifestSHA256 != v3.ManifestSHA256 || got.Status != ChangeOpen ||
		got.RunID != n.RunID || got.Number != 1 {
		t.Fatalf("after v3: %+v, %v", got, err)
	}
	vs, err := s.Versions(ctx, c.ID)
	if err != nil || len(vs) != 3 || vs[0].Tree != c.Tree || vs[1].Files != 3 || vs[2].RunID != other.RunID {
		t.Fatalf("versions %+v, %v", vs, err)
	}
	// a first version in the other run takes the next number there
	c2 := changeOn(other.RunID, time.Now())
	if err := s.CreateChange(ctx, c2, func(int) error { return nil }); err != nil || c2.Number != 2 {
		t.Fatalf("a change request after a version in its run: number %d, %v", c2.Number, err)
	}
}

// A review carries its comments (kept in order with it) and is about the
// newest version; a review of an older one is refused.
func TestReviewComments(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	n := newSess("u", time.Now())
	if err := s.CreateSession(ctx, n); err != nil {
		t.Fatal(err)
	}
	c := changeOn(n.RunID, time.Now())
	if err := s.CreateChange(ctx, c, func(int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	cms := []Comment{{Path: "a.go", Side: SideNew, Line: 3, Text: "<b>bold</b>"}, {Path: "b.go", Side: SideOld, Line: 1, Text: "why?\x1b[31m"}}
	if _, err := s.ReviewChange(ctx, c.ID, Review{Decision: ChangeChangesRequested, Reviewer: "r", Note: "n"}, ReviewOptions{Comments: cms}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReviewChange(ctx, c.ID, Review{Decision: ChangeRejected, Version: 2}, ReviewOptions{}); fail.KindOf(err) != fail.Refused {
		t.Fatalf("a review of version 2 of a change request at 1: %v", err)
	}
	if _, err := s.ReviewChange(ctx, c.ID, Review{Decision: ChangeChangesRequested}, ReviewOptions{Comments: []Comment{{Path: "x", Side: "left", Line: 1}}}); fail.KindOf(err) != fail.Usage {
		t.Fatalf("a comment on side left: %v", err)
	}
	got, err := s.GetChange(ctx, c.ID)
	if err != nil || got.Status != ChangeChangesRequested || len(got.Reviews) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	r := got.Reviews[0]
	if r.Version != 1 || len(r.Comments) != 2 || r.Comments[0] != (Comment{Version: 1, Path: "a.go", Side: SideNew, Line: 3, Text: "<b>bold</b>"}) ||
		r.Comments[1].Text != "why?\x1b[31m" || r.Comments[1].Side != SideOld {
		t.Fatalf("review %+v", r)
	}
}

// attemptsOf records a run of n attempts, each with a change request.
func attemptsOf(t *testing.T, s *Store, n int) (string, []*Change) {
	t.Helper()
	ctx := context.Background()
	parent := NewRunID()
	if err := s.NewAttempts(ctx, parent, "do it", n, time.Now()); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ResolveRun(ctx, parent); err != nil || r.Status != RunAttempting || r.Attempts != n {
		t.Fatalf("a run of attempts at work: %+v, %v", r, err)
	}
	var crs []*Change
	for i := 1; i <= n; i++ {
		ns := newSess("u", time.Now())
		ns.Loop = &NewLoop{Objective: "do it", Parent: parent, Attempt: i}
		if err := s.CreateSession(ctx, ns); err != nil {
			t.Fatal(err)
		}
		c := changeOn(ns.RunID, time.Now())
		if err := s.CreateChange(ctx, c, func(int) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishLoopRun(ctx, ns.RunID, LoopEnd{Status: RunReview, CR: c.ID, Finished: time.Now()}); err != nil {
			t.Fatal(err)
		}
		crs = append(crs, c)
	}
	if err := s.FinishLoopRun(ctx, parent, LoopEnd{Status: RunReview, Finished: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return parent, crs
}

// Approving one attempt with CloseOthers closes the others still open or
// awaiting a new version as superseded, in the same transaction; not a
// rejected one, not another run's; a change request that is no attempt
// closes nothing.
func TestCloseOthers(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	_, crs := attemptsOf(t, s, 4)
	_, elsewhere := attemptsOf(t, s, 1)
	if _, err := s.ReviewChange(ctx, crs[1].ID, Review{Decision: ChangeRejected, Reviewer: "r"}, ReviewOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReviewChange(ctx, crs[2].ID, Review{Decision: ChangeChangesRequested, Reviewer: "r", Note: "x"}, ReviewOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReviewChange(ctx, crs[0].ID, Review{Decision: ChangeRejected}, ReviewOptions{CloseOthers: true}); fail.KindOf(err) != fail.Usage {
		t.Fatalf("closing others with a rejection: %v", err)
	}
	closed, err := s.ReviewChange(ctx, crs[0].ID, Review{Decision: ChangeApproved, Reviewer: "r", DecidedAt: time.Now()}, ReviewOptions{CloseOthers: true})
	if err != nil || strings.Join(closed, " ") != crs[2].ID+" "+crs[3].ID {
		t.Fatalf("closed %v, %v; want attempts 3 and 4", closed, err)
	}
	for i, want := range []string{ChangeApproved, ChangeRejected, ChangeSuperseded, ChangeSuperseded} {
		c, _ := s.GetChange(ctx, crs[i].ID)
		if c.Status != want {
			t.Errorf("attempt %d: %s, want %s", i+1, c.Status, want)
		}
		if want == ChangeSuperseded && c.Reviews[len(c.Reviews)-1].Note != "superseded by "+crs[0].ID {
			t.Errorf("attempt %d: %+v", i+1, c.Reviews)
		}
	}
	if c, _ := s.GetChange(ctx, elsewhere[0].ID); c.Status != ChangeOpen {
		t.Errorf("another run's attempt: %s", c.Status)
	}
}

// The status users see of a run of attempts is the best of its attempts':
// one approved, else one open, else one awaiting a new version, else
// rejected; an attempt shows its change request's review, superseded
// too. ResolveRun and RunsPage (its filter) agree; attempts are listed
// under their run, not beside it.
func TestAttemptsStatus(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	parent, crs := attemptsOf(t, s, 3)
	shown := func() string {
		r, err := s.ResolveRun(ctx, parent)
		if err != nil {
			t.Fatal(err)
		}
		page, _, err := s.RunsPage(ctx, RunQuery{Status: r.Status})
		found := false
		for _, p := range page {
			found = found || p.ID == parent
		}
		if err != nil || !found {
			t.Errorf("RunsPage with status %s does not list %s: %v", r.Status, parent, err)
		}
		return r.Status
	}
	review := func(i int, d string) {
		t.Helper()
		if _, err := s.ReviewChange(ctx, crs[i].ID, Review{Decision: d, Reviewer: "r", Note: "n"}, ReviewOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := shown(); got != RunReview {
		t.Fatalf("three open attempts: %s", got)
	}
	review(0, ChangeChangesRequested)
	review(1, ChangeRejected)
	if got := shown(); got != RunReview {
		t.Fatalf("one still open: %s", got)
	}
	review(2, ChangeSuperseded)
	if got := shown(); got != RunChangesRequested {
		t.Fatalf("one awaiting a new version: %s", got)
	}
	review(0, ChangeRejected)
	if got := shown(); got != RunRejected {
		t.Fatalf("every attempt rejected or superseded: %s", got)
	}
	review(0, ChangeApproved)
	if got := shown(); got != RunApproved {
		t.Fatalf("one approved: %s", got)
	}
	atts, err := s.Attempts(ctx, parent)
	if err != nil || len(atts) != 3 || atts[2].Attempt != 3 || atts[2].Parent != parent || atts[2].Status != RunSuperseded || atts[1].Status != RunRejected {
		t.Fatalf("attempts %+v, %v", atts, err)
	}
	listed, err := s.ListRuns(ctx, false)
	if err != nil || len(listed) != 1 || listed[0].ID != parent || listed[0].Attempts != 3 {
		t.Fatalf("run list: %+v, %v; want the run of attempts alone", listed, err)
	}
	if all, _ := s.ListRuns(ctx, true); len(all) != 4 {
		t.Fatalf("run list --all: %d runs, want 4", len(all))
	}
}

// run continue takes a run that is not at work, and refuses one another
// live xmode works on.
func TestBeginContinue(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	n := newSess("u", time.Now())
	n.Loop = &NewLoop{Objective: "x"}
	if err := s.CreateSession(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginContinue(ctx, n.RunID); fail.KindOf(err) != fail.Refused {
		t.Fatalf("a running run: %v", err)
	}
	if err := s.FinishLoopRun(ctx, n.RunID, LoopEnd{Status: RunReview, ExitCode: 3, Error: "e", Finished: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginContinue(ctx, n.RunID); err != nil {
		t.Fatal(err)
	}
	r, _ := s.ResolveRun(ctx, n.RunID)
	if r.Status != RunRunning || r.ExitCode != nil || r.Error != "" || r.FinishedAt != nil {
		t.Fatalf("continued: %+v", r)
	}
	// a continuation's run names the run it works for
	fork := newSess("u", time.Now())
	if err := s.CreateSession(ctx, fork); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkContinuation(ctx, fork.RunID, n.RunID); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Continuations(ctx, n.RunID)
	if err != nil || len(cs) != 1 || cs[0].ID != fork.RunID {
		t.Fatalf("continuations %+v, %v", cs, err)
	}
}
