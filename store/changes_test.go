package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

func changeOn(run string, at time.Time) *Change {
	return &Change{ID: NewChangeID(), RunID: run, SessionID: "sbx_aaaaaaaa", Title: "t", Author: "a",
		BaseCommit: strings.Repeat("b", 40), Tree: strings.Repeat("c", 40), ManifestSHA256: strings.Repeat("d", 64), CreatedAt: at}
}

// Concurrent creates on one run get distinct, gapless numbers; a failed
// placement records nothing.
func TestCreateChangeNumbers(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	n := newSess("u", time.Now())
	if err := s.CreateSession(ctx, n); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := changeOn(n.RunID, time.Now())
			if err := s.CreateChange(ctx, c, func(num int) error { return nil }); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seen[c.Number] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i := 1; i <= 8; i++ {
		if !seen[i] {
			t.Fatalf("numbers %v, want 1..8", seen)
		}
	}
	boom := errors.New("no room")
	c := changeOn(n.RunID, time.Now())
	if err := s.CreateChange(ctx, c, func(int) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed placement: %v", err)
	}
	if _, err := s.GetChange(ctx, c.ID); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("a change request whose package was not placed was recorded: %v", err)
	}
}

// Prefixes resolve like sessions'; reviews are kept in order and the
// status is the latest; list filters by run and status.
func TestResolveReviewListChanges(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	n := newSess("u", time.Now())
	if err := s.CreateSession(ctx, n); err != nil {
		t.Fatal(err)
	}
	a, b := changeOn(n.RunID, time.Now()), changeOn(n.RunID, time.Now().Add(time.Second))
	a.ID, b.ID = "cr_abcdaaaa", "cr_abcdbbbb"
	for _, c := range []*Change{a, b} {
		if err := s.CreateChange(ctx, c, func(int) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := s.ResolveChange(ctx, "abcdb"); err != nil || c.ID != b.ID {
		t.Fatalf("prefix: %v %v", c, err)
	}
	if _, err := s.ResolveChange(ctx, "cr_abcd"); fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("ambiguous: %v", err)
	}
	for ref, kind := range map[string]fail.Kind{"cr": fail.Usage, "cr_zzzzzzzz": fail.NotFound, "cr_ABC!": fail.NotFound} {
		if _, err := s.ResolveChange(ctx, ref); fail.KindOf(err) != kind {
			t.Errorf("%q: %v", ref, err)
		}
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	for _, r := range []Review{{Decision: ChangeRejected, Reviewer: "ann", Note: "no", DecidedAt: at}, {Decision: ChangeApproved, Reviewer: "bob", Note: "yes", DecidedAt: at.Add(time.Second)}} {
		if _, err := s.ReviewChange(ctx, a.ID, r, ReviewOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ReviewChange(ctx, a.ID, Review{Decision: "merged"}, ReviewOptions{}); fail.KindOf(err) != fail.Usage {
		t.Fatalf("bad decision: %v", err)
	}
	if _, err := s.ReviewChange(ctx, "cr_zzzzzzzz", Review{Decision: ChangeApproved}, ReviewOptions{}); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("unknown change request: %v", err)
	}
	got, err := s.GetChange(ctx, a.ID)
	if err != nil || got.Status != ChangeApproved || len(got.Reviews) != 2 || got.Reviews[0].Reviewer != "ann" ||
		got.Reviews[1].Note != "yes" || !got.Reviews[1].DecidedAt.Equal(at.Add(time.Second)) {
		t.Fatalf("after two reviews: %+v %v", got, err)
	}
	for f, want := range map[ChangeFilter]int{{}: 2, {RunID: n.RunID}: 2, {RunID: "run_nonenone"}: 0, {Status: ChangeApproved}: 1, {Status: ChangeOpen}: 1} {
		if list, err := s.ListChanges(ctx, f); err != nil || len(list) != want {
			t.Errorf("list %+v: %d, %v; want %d", f, len(list), err, want)
		}
	}
	if list, _ := s.ListChanges(ctx, ChangeFilter{}); list[0].ID != b.ID {
		t.Errorf("list is not newest first: %s first", list[0].ID)
	}
}
