package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

func open(t *testing.T, root string) *Store {
	t.Helper()
	s, err := Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newSess(user string, now time.Time) NewSession {
	id, run := NewSessionID(), NewRunID()
	return NewSession{NewRun: true, Session: Session{
		ID: id, RunID: run, User: user, RunnerMode: "local_worktree", Engine: "host",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), WorktreePath: "/r/runs/" + run + "/worktree",
	}}
}

func TestMigrateOnceAndRefuseNewerSchema(t *testing.T) {
	root := t.TempDir()
	s := open(t, root)
	var v int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion() {
		t.Fatalf("user_version %d, %v", v, err)
	}
	id1, _ := s.InstanceID(context.Background())
	s.Close()
	s = open(t, root) // reopening applies nothing and keeps the instance
	if id2, _ := s.InstanceID(context.Background()); id2 != id1 || id1 == "" {
		t.Fatalf("instance id changed: %q → %q", id1, id2)
	}
	if _, err := s.db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(context.Background(), root)
	if err == nil || !strings.Contains(err.Error(), "newer than this xmode") {
		t.Fatalf("opening a newer schema: %v", err)
	}
}

// Opening a database at the current schema reads its version and nothing
// else: the migrations' SQL is read only when one is to be applied (every
// command read and copied all of it before).
func TestOpenCurrentStoreReadsNoMigration(t *testing.T) {
	root := t.TempDir()
	s := open(t, root)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	var sqlBytes uint64
	for _, m := range ms {
		sqlBytes += uint64(len(m.sql))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := s.migrate(context.Background(), identity{root: root}, ""); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got >= sqlBytes {
		t.Fatalf("opening a current store allocated %d bytes, as much as the migrations' SQL (%d): it read them", got, sqlBytes)
	}
}

func TestWALAndPragmasOnEveryConnection(t *testing.T) {
	s := open(t, t.TempDir())
	var mode string
	var timeout, fk, ckpt int
	s.db.QueryRow("PRAGMA journal_mode").Scan(&mode)
	s.db.QueryRow("PRAGMA busy_timeout").Scan(&timeout)
	s.db.QueryRow("PRAGMA foreign_keys").Scan(&fk)
	s.db.QueryRow("PRAGMA wal_autocheckpoint").Scan(&ckpt)
	// A small auto-checkpoint keeps the WAL-index rebuild of each CLI
	// process cheap (store.Open).
	if mode != "wal" || timeout < 10000 || fk != 1 || ckpt != 100 {
		t.Fatalf("journal_mode=%s busy_timeout=%d foreign_keys=%d wal_autocheckpoint=%d", mode, timeout, fk, ckpt)
	}
}

func TestResolvePrefixes(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	a, b := newSess("u", now), newSess("u", now)
	a.ID, b.ID = "sbx_abcdefgh", "sbx_abcdxxxx"
	for _, n := range []NewSession{a, b} {
		if err := s.CreateSession(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for ref, want := range map[string]string{"sbx_abcdefgh": a.ID, "abcde": a.ID, "sbx_abcdx": b.ID, "abcdxxxx": b.ID} {
		got, err := s.Resolve(ctx, ref)
		if err != nil || got.ID != want {
			t.Errorf("Resolve(%q) = %v, %v; want %s", ref, got, err, want)
		}
	}
	_, err := s.Resolve(ctx, "abcd")
	if fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "sbx_abcdefgh, sbx_abcdxxxx") {
		t.Errorf("ambiguous prefix: %v", err)
	}
	if _, err := s.Resolve(ctx, "zzzz"); fail.KindOf(err) != fail.NotFound {
		t.Errorf("unknown: %v", err)
	}
	// LIKE wildcards and range tricks find nothing
	for _, ref := range []string{"sbx_%%%%", "sbx_____", "abc%"} {
		if _, err := s.Resolve(ctx, ref); err == nil {
			t.Errorf("Resolve(%q) found something", ref)
		}
	}
}

// The quota check and the insert are one transaction: racing creates from
// several connections never overshoot.
func TestQuotaIsAtomic(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	open(t, root)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(ctx, root)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			n := newSess("alice", time.Now())
			n.MaxOpen = 2
			errs <- s.CreateSession(ctx, n)
		}()
	}
	wg.Wait()
	close(errs)
	ok, refused := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case fail.KindOf(err) == fail.Refused && strings.Contains(err.Error(), "XMODE_SANDBOX_MAX_OPEN=2"):
			refused++
		default:
			t.Errorf("unexpected: %v", err)
		}
	}
	if ok != 2 || refused != 6 {
		t.Fatalf("%d created, %d refused; want 2 and 6", ok, refused)
	}
}

func TestExpiredSessionsHoldNoQuota(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	old := newSess("bob", time.Now().Add(-3*time.Hour)) // expired two hours ago, never reaped
	if err := s.CreateSession(ctx, old); err != nil {
		t.Fatal(err)
	}
	n := newSess("bob", time.Now())
	n.MaxOpen = 1
	if err := s.CreateSession(ctx, n); err != nil {
		t.Fatalf("an expired session held quota: %v", err)
	}
}

func TestStepNumbersUniqueAcrossConnections(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	s := open(t, root)
	n := newSess("u", time.Now())
	if err := s.CreateSession(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := s.Provisioned(ctx, n.ID, "abc", "", "", "", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := Open(ctx, root)
			if err != nil {
				t.Error(err)
				return
			}
			defer o.Close()
			seq, _, err := o.BeginStep(ctx, NewStep{SessionID: n.ID, RunID: n.RunID, Name: "x", Argv: []string{"true"}, Started: time.Now(), DirFor: func(int) string { return "d" }})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seen[seq] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i := 1; i <= 16; i++ {
		if !seen[i] {
			t.Fatalf("step numbers %v: missing %d", seen, i)
		}
	}
}

func TestEndReportsLastOfRunAndClosesTheRun(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	a := newSess("u", time.Now())
	if err := s.CreateSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := a
	b.ID, b.NewRun = NewSessionID(), false
	if err := s.CreateSession(ctx, b); err != nil {
		t.Fatal(err)
	}
	ended, last, err := s.End(ctx, a.ID, StatusDestroyed, ReasonStopped, "", time.Now())
	if err != nil || !ended || last {
		t.Fatalf("first end: ended=%v last=%v err=%v", ended, last, err)
	}
	ended, last, err = s.End(ctx, b.ID, StatusDestroyed, ReasonStopped, "", time.Now())
	if err != nil || !ended || !last {
		t.Fatalf("second end: ended=%v last=%v err=%v", ended, last, err)
	}
	if ended, _, _ := s.End(ctx, b.ID, StatusDestroyed, ReasonStopped, "", time.Now()); ended {
		t.Fatal("ending twice ended it twice")
	}
	c := a
	c.ID, c.NewRun = NewSessionID(), false
	if err := s.CreateSession(ctx, c); fail.KindOf(err) != fail.Refused {
		t.Fatalf("joining a reclaimed run: %v", err)
	}
}

func TestParseSessionRef(t *testing.T) {
	for in, want := range map[string]string{"sbx_abcd2345": "sbx_abcd2345", "abcd": "sbx_abcd", "sbx_a": "sbx_a"} {
		if got, err := ParseSessionRef(in); err != nil || got != want {
			t.Errorf("%q → %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "abc", "sbx_", "ABCD", "ab/cd", "../..", "abc1"} {
		if _, err := ParseSessionRef(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func FuzzParseSessionRef(f *testing.F) {
	for _, s := range []string{"sbx_abcd2345", "abcd", "sbx_", "../..", "sbx_%", "ßßßß"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseSessionRef(in)
		if err != nil {
			return
		}
		rest := strings.TrimPrefix(got, "sbx_")
		if len(in) < 4 || rest == "" || strings.ContainsAny(rest, "/.%_\\ ") || !strings.HasPrefix(got, "sbx_") {
			t.Fatalf("%q accepted as %q", in, got)
		}
	})
}

func TestOpenRefusesUnwritableRoot(t *testing.T) {
	_, err := Open(context.Background(), filepath.Join("/proc", "xmode-cannot-exist"))
	if err == nil {
		t.Fatal("opened a store under /proc")
	}
	if errors.Is(err, sql.ErrNoRows) {
		t.Fatal("wrong error")
	}
}

// Many processes opening a brand-new database at once all succeed: the
// first open's WAL switch can report SQLITE_BUSY without waiting, and Open
// retries it.
func TestConcurrentFirstOpen(t *testing.T) {
	for round := 0; round < 5; round++ {
		root := t.TempDir()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := Open(context.Background(), root)
				if err == nil {
					_, err = s.InstanceID(context.Background())
					s.Close()
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
