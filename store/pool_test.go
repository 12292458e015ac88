package store

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

// reserve reserves entries for project p at commit, of shape, up to size,
// and makes them ready.
func reserve(t *testing.T, s *Store, project, commit, shape string, size int) []*PoolEntry {
	t.Helper()
	ctx := context.Background()
	es, err := s.ReservePool(ctx, NewPoolEntry{Project: project, Repo: "/src", Ref: "main", Commit: commit,
		Engine: "host", Shape: shape, Size: size, Owner: "me", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if err := s.PoolEntryReady(ctx, e.SessionID, "me", commit, 10, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return es
}

func claimReq(user, project, shape, want string, now time.Time) PoolClaim {
	return PoolClaim{Project: project, Shape: shape, Want: want, Session: Session{
		User: user, RunnerMode: "local_worktree", Repo: "/src", Ref: "main", CreatedAt: now, ExpiresAt: now.Add(time.Hour),
	}}
}

// Racing fillers never overshoot a pool: the count and the reservation are
// one transaction, and only entries at the machine's commit count.
func TestReservePoolNeverOvershoots(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	open(t, root)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 6 {
		wg.Go(func() {
			s, err := Open(ctx, root)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			es, err := s.ReservePool(ctx, NewPoolEntry{Project: "p", Commit: "c1", Engine: "host", Shape: "h", Size: 4, Owner: "x", Now: time.Now()})
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
	s := open(t, root)
	// Another shape, or the machine at another commit, is another pool.
	if es, _ := s.ReservePool(ctx, NewPoolEntry{Project: "p", Commit: "c1", Engine: "docker", Shape: "d", Size: 4, Owner: "x", Now: time.Now()}); len(es) != 4 {
		t.Fatalf("another shape got %d entries, want 4", len(es))
	}
	if es, _ := s.ReservePool(ctx, NewPoolEntry{Project: "p", Commit: "c2", Engine: "host", Shape: "h", Size: 4, Owner: "x", Now: time.Now()}); len(es) != 4 {
		t.Fatalf("after a refresh (commit c2) the pool got %d entries, want 4", len(es))
	}
	es, err := s.PoolEntries(ctx, "p")
	if err != nil || len(es) != 12 {
		t.Fatalf("%d entries (%v), want 12", len(es), err)
	}
	for _, e := range es {
		if e.State != PoolProvisioning || !strings.HasSuffix(e.WorktreePath, "/runs/"+e.RunID+"/worktree") {
			t.Fatalf("a reserved entry: %+v", e)
		}
		if project, _, _ := s.RunMachine(ctx, e.RunID); project != "p" {
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
	s := open(t, root)
	made := reserve(t, s, "p", "c1", "h", 5)
	ids := map[string]bool{}
	for _, e := range made {
		ids[e.SessionID] = true
	}
	s.RecordPoolEngine(ctx, made[0].SessionID, "cid0", "volume", "img", []string{"v0"})

	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []string
	for range 8 {
		wg.Go(func() {
			s, err := Open(ctx, root)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			e, sess, err := s.ClaimPoolEntry(ctx, claimReq("u", "p", "h", "c1", time.Now()))
			if err != nil {
				t.Error(err)
				return
			}
			if e != nil {
				if sess.ID != e.SessionID || sess.RunID != e.RunID || sess.Status != StatusOpen || sess.BaseCommit != "c1" {
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
	sess, err := s.Get(ctx, made[0].SessionID)
	if err != nil || sess.ContainerID != "cid0" || sess.MountMode != "volume" || sess.Image != "img" || len(sess.Volumes) != 1 || sess.User != "u" {
		t.Fatalf("the session of a claimed entry: %+v %v", sess, err)
	}
	if run, err := s.GetRun(ctx, sess.RunID); err != nil || run.BaseCommit != "c1" || run.Ref != "main" {
		t.Fatalf("the run of a claimed entry: %+v %v", run, err)
	}
	if left, _ := s.PoolEntries(ctx, "p"); len(left) != 0 {
		t.Fatalf("%d entries left after they were all claimed", len(left))
	}

	// Another shape or another project is never claimed; another commit
	// only when the caller says it can move it, and then after the wanted
	// commit's entries, as a provisioning session (its worktree moves).
	reserve(t, s, "p", "c1", "other-shape", 1)
	reserve(t, s, "q", "c1", "h", 1)
	old := reserve(t, s, "p", "c0", "h", 1)[0]
	for _, c := range []PoolClaim{claimReq("u", "p", "h", "c1", time.Now()), claimReq("u", "p", "h", "c9", time.Now())} {
		if e, _, err := s.ClaimPoolEntry(ctx, c); e != nil || err != nil {
			t.Fatalf("claim %+v took %+v (%v)", c, e, err)
		}
	}
	reserve(t, s, "p", "c1", "h", 2)
	c := claimReq("u", "p", "h", "c1", time.Now())
	c.Also = "c0"
	if e, _, _ := s.ClaimPoolEntry(ctx, c); e == nil || e.Commit != "c1" {
		t.Fatalf("with entries at the wanted commit, the claim took %+v", e)
	}
	c.Want = "c2"
	if e, sess, _ := s.ClaimPoolEntry(ctx, c); e == nil || e.SessionID != old.SessionID || sess.Status != StatusProvisioning || sess.BaseCommit != "" {
		t.Fatalf("the claim to move took %+v as %+v, want %s provisioning", e, sess, old.SessionID)
	}

	// The quota counts the claimed session like any other; over it, no
	// entry is taken.
	c = claimReq("bob", "p", "h", "c1", time.Now())
	c.MaxOpen = 1
	if e, _, err := s.ClaimPoolEntry(ctx, c); e == nil || err != nil {
		t.Fatalf("bob's first claim: %+v %v", e, err)
	}
	reserve(t, s, "p", "c1", "h", 3)
	before, _ := s.PoolEntries(ctx, "p")
	if e, _, err := s.ClaimPoolEntry(ctx, c); e != nil || fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "XMODE_SANDBOX_MAX_OPEN=1") {
		t.Fatalf("bob over quota: %+v %v", e, err)
	}
	if after, _ := s.PoolEntries(ctx, "p"); len(after) != len(before) {
		t.Fatalf("a claim refused for the quota took an entry: %d entries before, %d after", len(before), len(after))
	}
}

// The reaper sees pool entries as active: their containers are not
// orphans, their runs' worktrees are not reclaimed, their runs cannot be
// joined; and an entry is taken for teardown only when ready, by its owner,
// or when its owner is gone.
func TestPoolEntriesAreActiveAndRetiredOnce(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	e := reserve(t, s, "p", "c1", "h", 1)[0]
	sessions, runs, err := s.ActiveSessions(ctx)
	if err != nil || !sessions[e.SessionID] || !runs[e.RunID] {
		t.Fatalf("active sessions %v runs %v (%v) lack pool entry %s", sessions, runs, err, e.SessionID)
	}
	if c, err := s.ClaimRun(ctx, e.RunID, "reaper", true, time.Now(), never); err != nil || c.Result != Gone {
		t.Fatalf("the run sweep could claim a pool entry's run: %v %v", c, err)
	}
	join := newSess("u", time.Now())
	join.NewRun, join.RunID = false, e.RunID
	if err := s.CreateSession(ctx, join); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("--run of a pool entry's run: %v, want not found", err)
	}

	// Being made by a live owner: nobody else takes it; its owner does.
	mk, _ := s.ReservePool(ctx, NewPoolEntry{Project: "p", Commit: "c2", Engine: "host", Shape: "h", Size: 1, Owner: "maker", Now: time.Now()})
	if took, err := s.RetirePoolEntry(ctx, mk[0].SessionID, "reaper", time.Now(), never); took || err != nil {
		t.Fatalf("a live maker's entry was taken: %v %v", took, err)
	}
	if took, _ := s.RetirePoolEntry(ctx, mk[0].SessionID, "reaper", time.Now(), always); !took {
		t.Fatalf("a dead maker's entry was not taken over")
	}
	if err := s.PoolEntryReady(ctx, mk[0].SessionID, "maker", "c2", 1, time.Now()); fail.KindOf(err) != fail.Refused {
		t.Fatalf("a maker taken for dead made its entry ready: %v", err)
	}
	// A ready entry is taken once; then it can no longer be claimed.
	if took, _ := s.RetirePoolEntry(ctx, e.SessionID, "r1", time.Now(), never); !took {
		t.Fatal("a ready entry was not taken")
	}
	if took, _ := s.RetirePoolEntry(ctx, e.SessionID, "r2", time.Now(), never); took {
		t.Fatal("an entry being retired was taken twice")
	}
	if got, _, _ := s.ClaimPoolEntry(ctx, claimReq("u", "p", "h", "c1", time.Now())); got != nil {
		t.Fatal("an entry being retired was claimed")
	}
	// Dropped: the run is reclaimed (for the sweep), then forgotten.
	if err := s.DropPoolEntry(ctx, e.SessionID, e.RunID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.RunsReclaimedSince(ctx, time.Now().Add(-time.Minute)); rec[e.RunID].IsZero() {
		t.Fatal("a dropped entry's run is not marked reclaimed: the sweep would miss its worktree")
	}
	if err := s.ForgetRun(ctx, e.RunID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRun(ctx, e.RunID); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("a retired entry's run is still recorded: %v", err)
	}
}

// The pool size of a machine is recorded; nil follows XMODE_POOL_SIZE.
func TestPoolSize(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	now := time.Now()
	s.PutMachine(ctx, Machine{Project: "p", Repo: "/src", DefaultRef: "main", Volume: "v", CreatedAt: now, LastFetchAt: now})
	if m, _ := s.GetMachine(ctx, "p"); m.PoolSize != nil {
		t.Fatalf("a new machine's pool size is %d, want unset", *m.PoolSize)
	}
	if err := s.SetPoolSize(ctx, "p", 3); err != nil {
		t.Fatal(err)
	}
	s.PutMachine(ctx, Machine{Project: "p", Repo: "/src", DefaultRef: "main", Volume: "v", CreatedAt: now, LastFetchAt: now})
	if m, _ := s.GetMachine(ctx, "p"); m.PoolSize == nil || *m.PoolSize != 3 {
		t.Fatalf("the pool size did not survive a warm: %v", m.PoolSize)
	}
	if err := s.SetPoolSize(ctx, "nope", 3); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("pool size of no machine: %v", err)
	}
}
