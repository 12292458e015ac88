package pool

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// openPools opens a store at root and its pools.
func openPools(t *testing.T, root string) *Pools {
	t.Helper()
	s, err := store.Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &Pools{Store: s, Guard: fsguard.Guard{Root: root}}
}

func never(string, time.Time) bool  { return false }
func always(string, time.Time) bool { return true }

// reserve reserves entries for project p at commit, of shape, up to size,
// and makes them ready.
func reserve(t *testing.T, s *Pools, project, commit, shape string, size int) []*Entry {
	t.Helper()
	ctx := context.Background()
	es, err := s.reserve(ctx, newEntries{Project: project, Repo: "/src", Ref: "main", Commit: commit,
		Engine: "host", Shape: shape, Size: size, Owner: "me", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if err := s.markReady(ctx, e.SessionID, "me", commit, 10, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return es
}

func claimReq(user, project, shape, want string, now time.Time) pick {
	return pick{Project: project, Shape: shape, Want: want, Session: store.Session{
		User: user, RunnerMode: "local_worktree", Repo: "/src", Ref: "main", CreatedAt: now, ExpiresAt: now.Add(time.Hour),
	}}
}

// Racing fillers never overshoot a pool: the count and the reservation are
// one transaction, and only entries at the machine's commit count.
func TestReservePoolNeverOvershoots(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	openPools(t, root)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 6 {
		wg.Go(func() {
			st, err := store.Open(ctx, root)
			if err != nil {
				t.Error(err)
				return
			}
			defer st.Close()
			s := &Pools{Store: st, Guard: fsguard.Guard{Root: root}}
			es, err := s.reserve(ctx, newEntries{Project: "p", Commit: "c1", Engine: "host", Shape: "h", Size: 4, Owner: "x", Now: time.Now()})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += len(es)
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != 4 {
		t.Fatalf("6 racing fillers reserved %d entries for a pool of 4", total)
	}
	s := openPools(t, root)
	// Another shape, or the machine at another commit, is another pool.
	if es, _ := s.reserve(ctx, newEntries{Project: "p", Commit: "c1", Engine: "docker", Shape: "d", Size: 4, Owner: "x", Now: time.Now()}); len(es) != 4 {
		t.Fatalf("another shape got %d entries, want 4", len(es))
	}
	if es, _ := s.reserve(ctx, newEntries{Project: "p", Commit: "c2", Engine: "host", Shape: "h", Size: 4, Owner: "x", Now: time.Now()}); len(es) != 4 {
		t.Fatalf("after a refresh (commit c2) the pool got %d entries, want 4", len(es))
	}
	es, err := s.Entries(ctx, "p")
	if err != nil || len(es) != 12 {
		t.Fatalf("%d entries (%v), want 12", len(es), err)
	}
	for _, e := range es {
		if e.State != Provisioning || !strings.HasSuffix(e.WorktreePath, "/runs/"+e.RunID+"/worktree") {
			t.Fatalf("a reserved entry: %+v", e)
		}
		if project, _, _ := s.Store.RunMachine(ctx, e.RunID); project != "p" {
			t.Fatalf("the run of a pool entry is not marked as the machine's: %q", project)
		}
	}
}

// A claim is one transaction: racing claims never share an entry, the
// quota is checked as for any create, an entry at the wanted commit comes
// first, and the session appears with the entry's IDs and objects.
func TestClaimPoolEntry(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	s := openPools(t, root)
	made := reserve(t, s, "p", "c1", "h", 5)
	ids := map[string]bool{}
	for _, e := range made {
		ids[e.SessionID] = true
	}
	s.recordEngine(ctx, made[0].SessionID, "cid0", "volume", "img", []string{"v0"})

	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []string
	for range 8 {
		wg.Go(func() {
			st, err := store.Open(ctx, root)
			if err != nil {
				t.Error(err)
				return
			}
			defer st.Close()
			s := &Pools{Store: st, Guard: fsguard.Guard{Root: root}}
			e, sess, err := s.takeEntry(ctx, claimReq("u", "p", "h", "c1", time.Now()))
			if err != nil {
				t.Error(err)
				return
			}
			if e != nil {
				if sess.ID != e.SessionID || sess.RunID != e.RunID || sess.Status != store.StatusOpen || sess.BaseCommit != "c1" {
					t.Errorf("claimed %+v as %+v", e, sess)
				}
				mu.Lock()
				got = append(got, e.SessionID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Strings(got)
	if len(got) != 5 {
		t.Fatalf("8 racing claims on a pool of 5 got %d entries", len(got))
	}
	for i, id := range got {
		if !ids[id] || (i > 0 && got[i-1] == id) {
			t.Fatalf("claims got %v, entries were %v", got, ids)
		}
	}
	sess, err := s.Store.Get(ctx, made[0].SessionID)
	if err != nil || sess.ContainerID != "cid0" || sess.MountMode != "volume" || sess.Image != "img" || len(sess.Volumes) != 1 || sess.User != "u" {
		t.Fatalf("the session of a claimed entry: %+v %v", sess, err)
	}
	if run, err := s.Store.GetRun(ctx, sess.RunID); err != nil || run.BaseCommit != "c1" || run.Ref != "main" {
		t.Fatalf("the run of a claimed entry: %+v %v", run, err)
	}
	if left, _ := s.Entries(ctx, "p"); len(left) != 0 {
		t.Fatalf("%d entries left after they were all claimed", len(left))
	}

	// Another shape or another project is never claimed; another commit
	// only when the caller says it can move it, and then after the wanted
	// commit's entries, as a provisioning session (its worktree moves).
	reserve(t, s, "p", "c1", "other-shape", 1)
	reserve(t, s, "q", "c1", "h", 1)
	old := reserve(t, s, "p", "c0", "h", 1)[0]
	for _, c := range []pick{claimReq("u", "p", "h", "c1", time.Now()), claimReq("u", "p", "h", "c9", time.Now())} {
		if e, _, err := s.takeEntry(ctx, c); e != nil || err != nil {
			t.Fatalf("claim %+v took %+v (%v)", c, e, err)
		}
	}
	reserve(t, s, "p", "c1", "h", 2)
	c := claimReq("u", "p", "h", "c1", time.Now())
	c.Also = "c0"
	if e, _, _ := s.takeEntry(ctx, c); e == nil || e.Commit != "c1" {
		t.Fatalf("with entries at the wanted commit, the claim took %+v", e)
	}
	c.Want = "c2"
	if e, sess, _ := s.takeEntry(ctx, c); e == nil || e.SessionID != old.SessionID || sess.Status != store.StatusProvisioning || sess.BaseCommit != "" {
		t.Fatalf("the claim to move took %+v as %+v, want %s provisioning", e, sess, old.SessionID)
	}

	// The quota counts the claimed session like any other; over it, no
	// entry is taken.
	c = claimReq("bob", "p", "h", "c1", time.Now())
	c.MaxOpen = 1
	if e, _, err := s.takeEntry(ctx, c); e == nil || err != nil {
		t.Fatalf("bob's first claim: %+v %v", e, err)
	}
	reserve(t, s, "p", "c1", "h", 3)
	before, _ := s.Entries(ctx, "p")
	if e, _, err := s.takeEntry(ctx, c); e != nil || fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "XMODE_SANDBOX_MAX_OPEN=1") {
		t.Fatalf("bob over quota: %+v %v", e, err)
	}
	if after, _ := s.Entries(ctx, "p"); len(after) != len(before) {
		t.Fatalf("a claim refused for the quota took an entry: %d entries before, %d after", len(before), len(after))
	}
}

// The reaper sees pool entries as active: their containers are not
// orphans, their runs' worktrees are not reclaimed, their runs cannot be
// joined; and an entry is taken for teardown only when ready, by its owner,
// or when its owner is gone.
func TestPoolEntriesAreActiveAndRetiredOnce(t *testing.T) {
	ctx := context.Background()
	s := openPools(t, t.TempDir())
	e := reserve(t, s, "p", "c1", "h", 1)[0]
	sessions, runs, err := s.Store.ActiveSessions(ctx)
	if err != nil || !sessions[e.SessionID] || !runs[e.RunID] {
		t.Fatalf("active sessions %v runs %v (%v) lack pool entry %s", sessions, runs, err, e.SessionID)
	}
	if c, err := s.Store.ClaimRun(ctx, e.RunID, "reaper", true, time.Now(), never); err != nil || c.Result != store.Gone {
		t.Fatalf("the run sweep could claim a pool entry's run: %v %v", c, err)
	}
	now := time.Now()
	join := store.NewSession{Session: store.Session{ID: store.NewSessionID(), RunID: e.RunID, User: "u", RunnerMode: "local_worktree",
		Engine: "host", CreatedAt: now, ExpiresAt: now.Add(time.Hour), WorktreePath: e.WorktreePath}}
	if err := s.Store.CreateSession(ctx, join); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("--run of a pool entry's run: %v, want not found", err)
	}

	// Being made by a live owner: nobody else takes it; its owner does.
	mk, _ := s.reserve(ctx, newEntries{Project: "p", Commit: "c2", Engine: "host", Shape: "h", Size: 1, Owner: "maker", Now: time.Now()})
	if took, err := s.take(ctx, mk[0].SessionID, "reaper", time.Now(), never); took || err != nil {
		t.Fatalf("a live maker's entry was taken: %v %v", took, err)
	}
	if took, _ := s.take(ctx, mk[0].SessionID, "reaper", time.Now(), always); !took {
		t.Fatalf("a dead maker's entry was not taken over")
	}
	if err := s.markReady(ctx, mk[0].SessionID, "maker", "c2", 1, time.Now()); fail.KindOf(err) != fail.Refused {
		t.Fatalf("a maker taken for dead made its entry ready: %v", err)
	}
	// A ready entry is taken once; then it can no longer be claimed.
	if took, _ := s.take(ctx, e.SessionID, "r1", time.Now(), never); !took {
		t.Fatal("a ready entry was not taken")
	}
	if took, _ := s.take(ctx, e.SessionID, "r2", time.Now(), never); took {
		t.Fatal("an entry being retired was taken twice")
	}
	if got, _, _ := s.takeEntry(ctx, claimReq("u", "p", "h", "c1", time.Now())); got != nil {
		t.Fatal("an entry being retired was claimed")
	}
	// Dropped: the run is reclaimed (for the sweep), then forgotten.
	if err := s.drop(ctx, e.SessionID, e.RunID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Store.RunsReclaimedSince(ctx, time.Now().Add(-time.Minute)); rec[e.RunID].IsZero() {
		t.Fatal("a dropped entry's run is not marked reclaimed: the sweep would miss its worktree")
	}
	if err := s.Store.ForgetRun(ctx, e.RunID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.GetRun(ctx, e.RunID); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("a retired entry's run is still recorded: %v", err)
	}
}
