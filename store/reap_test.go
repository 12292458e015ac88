package store

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/proc"
)

func never(string, time.Time) bool  { return false }
func always(string, time.Time) bool { return true }

// openSess inserts a session and opens it.
func openSess(t *testing.T, s *Store, n NewSession) NewSession {
	t.Helper()
	ctx := context.Background()
	if err := s.CreateSession(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := s.Provisioned(ctx, n.ID, "abc", "", "", "", nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestExpiredOpenAndStaleProvisioning(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	live := openSess(t, s, newSess("u", now))
	gone := openSess(t, s, newSess("u", now))
	if err := s.Extend(ctx, gone.ID, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	ended := openSess(t, s, newSess("u", now))
	s.Extend(ctx, ended.ID, now.Add(-time.Minute))
	s.End(ctx, ended.ID, StatusDestroyed, ReasonStopped, "", now)
	oldProv := newSess("u", now.Add(-time.Hour))
	oldProv.ExpiresAt = now.Add(time.Hour)
	if err := s.CreateSession(ctx, oldProv); err != nil {
		t.Fatal(err)
	}
	newProv := newSess("u", now)
	if err := s.CreateSession(ctx, newProv); err != nil {
		t.Fatal(err)
	}

	exp, err := s.ExpiredOpen(ctx, now)
	if err != nil || len(exp) != 1 || exp[0].ID != gone.ID {
		t.Fatalf("ExpiredOpen = %v, %v; want only %s (not %s, not the ended one)", ids(exp), err, gone.ID, live.ID)
	}
	stuck, err := s.StaleProvisioning(ctx, now.Add(-15*time.Minute))
	if err != nil || len(stuck) != 1 || stuck[0].ID != oldProv.ID {
		t.Fatalf("StaleProvisioning = %v, %v; want only %s", ids(stuck), err, oldProv.ID)
	}
	active, runs, err := s.ActiveSessions(ctx)
	if err != nil || len(active) != 4 || active[ended.ID] || !runs[live.RunID] || runs[ended.RunID] {
		t.Fatalf("ActiveSessions = %v %v %v", active, runs, err)
	}
}

func ids(ss []*Session) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}

// A claim excludes every other holder until released, unless its holder is
// dead; the holder itself may take it again.
func TestClaimIsExclusiveAndTakenOverFromTheDead(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	n := openSess(t, s, newSess("u", now))
	s.Extend(ctx, n.ID, now.Add(-time.Second))

	c, err := s.ClaimExpired(ctx, n.ID, "a", now, now.Add(-time.Minute), never)
	if err != nil || c.Result != Claimed {
		t.Fatalf("first claim: %+v %v", c, err)
	}
	if c, _ := s.ClaimExpired(ctx, n.ID, "b", now, now.Add(-time.Minute), never); c.Result != Busy || c.Holder != "a" {
		t.Fatalf("second holder: %+v, want busy (held by a)", c)
	}
	if c, _ := s.ClaimExpired(ctx, n.ID, "a", now, now.Add(-time.Minute), never); c.Result != Claimed {
		t.Fatalf("same holder again: %+v", c)
	}
	if err := s.Release(ctx, n.ID, "b"); err != nil {
		t.Fatal(err)
	}
	if cl, _ := s.Claims(ctx); cl[n.ID] != "a" {
		t.Fatalf("b released a's claim: %v", cl)
	}
	if c, _ := s.ClaimExpired(ctx, n.ID, "b", now, now.Add(-time.Minute), always); c.Result != Claimed {
		t.Fatalf("taking over a dead holder's claim: %+v", c)
	}
	s.Release(ctx, n.ID, "b")
	if cl, _ := s.Claims(ctx); len(cl) != 0 {
		t.Fatalf("claims left after release: %v", cl)
	}
}

// The claim re-checks, in its transaction, why the reaper wanted the
// session: extended, ended or with a live step, it is not claimed.
func TestClaimExpiredRechecks(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	fresh := now.Add(-30 * time.Second)

	n := openSess(t, s, newSess("u", now))
	if c, _ := s.ClaimExpired(ctx, n.ID, "a", now, fresh, never); c.Result != Gone {
		t.Fatalf("unexpired session: %+v", c)
	}
	seq, _, err := s.BeginStep(ctx, NewStep{SessionID: n.ID, RunID: n.RunID, Name: "x", Argv: []string{"sleep"}, Started: now, DirFor: func(int) string { return "d" }})
	if err != nil {
		t.Fatal(err)
	}
	s.Extend(ctx, n.ID, now.Add(-time.Second))
	c, _ := s.ClaimExpired(ctx, n.ID, "a", now, fresh, never)
	if c.Result != StepRunning || c.Step != seq {
		t.Fatalf("expired with a fresh step: %+v", c)
	}
	if seq2, err := s.LiveStep(ctx, n.ID, fresh); err != nil || seq2 != seq {
		t.Fatalf("LiveStep = %d, %v", seq2, err)
	}
	// The heartbeat goes stale while its xmode (this process) lives: a
	// heartbeat a full disk refused is no death, the step keeps the session.
	if err := s.Heartbeat(ctx, n.RunID, seq, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.ClaimExpired(ctx, n.ID, "a", now, fresh, never); c.Result != StepRunning {
		t.Fatalf("stale heartbeat, live owner: %+v", c)
	}
	// Its owner seen to have ended: gone, whatever the heartbeat says.
	setOwner(t, s, n.RunID, seq, endedOwner())
	s.Heartbeat(ctx, n.RunID, seq, now)
	if c, _ := s.ClaimExpired(ctx, n.ID, "a", now, fresh, never); c.Result != Claimed {
		t.Fatalf("fresh heartbeat, ended owner: %+v", c)
	}
	s.Release(ctx, n.ID, "a")
	// An owner this process cannot see (another PID namespace): the
	// heartbeat decides.
	setOwner(t, s, n.RunID, seq, foreignOwner())
	s.Heartbeat(ctx, n.RunID, seq, now.Add(-time.Minute))
	if c, _ := s.ClaimExpired(ctx, n.ID, "a", now, fresh, never); c.Result != Claimed {
		t.Fatalf("stale heartbeat, unseen owner: %+v", c)
	}
	s.Release(ctx, n.ID, "a")
	// A finished step holds nothing, and a heartbeat cannot revive it.
	s.Heartbeat(ctx, n.RunID, seq, now)
	if c, _ := s.ClaimExpired(ctx, n.ID, "a", now, fresh, never); c.Result != StepRunning {
		t.Fatalf("renewed step: %+v", c)
	}
	if _, err := s.FinishStep(ctx, StepEnd{RunID: n.RunID, Seq: seq, Finished: now}); err != nil {
		t.Fatal(err)
	}
	s.Heartbeat(ctx, n.RunID, seq, now)
	if c, _ := s.ClaimExpired(ctx, n.ID, "a", now, fresh, never); c.Result != Claimed {
		t.Fatalf("finished step: %+v", c)
	}
	s.End(ctx, n.ID, StatusDestroyed, ReasonExpired, "", now)
	s.Release(ctx, n.ID, "a")
	if c, _ := s.ClaimExpired(ctx, n.ID, "b", now, fresh, never); c.Result != Gone {
		t.Fatalf("ended session: %+v", c)
	}
}

// While a reaper holds a session, no step starts in it, it is not extended
// and (when it was provisioning) not opened.
func TestClaimedSessionTakesNoStepNoExtensionNoOpening(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	n := openSess(t, s, newSess("u", now))
	s.Extend(ctx, n.ID, now.Add(-time.Second))
	if _, _, err := s.BeginStep(ctx, NewStep{SessionID: n.ID, RunID: n.RunID, Name: "x", Argv: []string{"true"}, Started: now, DirFor: func(int) string { return "d" }}); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("step in an expired session: %v", err)
	}
	if c, _ := s.ClaimExpired(ctx, n.ID, "a", now, now, never); c.Result != Claimed {
		t.Fatal(c)
	}
	// Even a step whose clock says the session has not expired yet.
	if _, _, err := s.BeginStep(ctx, NewStep{SessionID: n.ID, RunID: n.RunID, Name: "x", Argv: []string{"true"}, Started: now.Add(-time.Hour), DirFor: func(int) string { return "d" }}); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "being reaped") {
		t.Fatalf("step under a claim: %v", err)
	}
	if err := s.Extend(ctx, n.ID, now.Add(time.Hour)); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "being reaped") {
		t.Fatalf("extend under a claim: %v", err)
	}

	p := newSess("u", now.Add(-time.Hour))
	if err := s.CreateSession(ctx, p); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.ClaimProvisioning(ctx, p.ID, "a", now.Add(-2*time.Hour), now, never); c.Result != Gone {
		t.Fatalf("provisioning within grace: %+v", c)
	}
	if c, _ := s.ClaimProvisioning(ctx, p.ID, "a", now.Add(-15*time.Minute), now, never); c.Result != Claimed {
		t.Fatalf("provisioning past grace: %+v", c)
	}
	if err := s.Provisioned(ctx, p.ID, "abc", "", "", "", nil, time.Time{}); fail.KindOf(err) != fail.Refused {
		t.Fatalf("opened under a claim: %v", err)
	}
}

// ClaimRun refuses a run with an open session and closes the run to new
// sessions; runs without a row can be claimed.
func TestClaimRun(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	a := openSess(t, s, newSess("u", now))
	if c, _ := s.ClaimRun(ctx, a.RunID, "r", true, now, never); c.Result != Gone {
		t.Fatalf("run with an open session: %+v", c)
	}
	// End without reclaiming, as a crash between the two would.
	if _, err := s.db.Exec(`UPDATE sessions SET status = 'destroyed', end_reason = 'stopped' WHERE id = ?`, a.ID); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.ClaimRun(ctx, a.RunID, "r", true, now, never); c.Result != Claimed {
		t.Fatalf("run without open sessions: %+v", c)
	}
	if c, _ := s.ClaimRun(ctx, a.RunID, "q", false, now, never); c.Result != Busy {
		t.Fatalf("second claimer: %+v", c)
	}
	b := a
	b.ID, b.NewRun = NewSessionID(), false
	if err := s.CreateSession(ctx, b); fail.KindOf(err) != fail.Refused {
		t.Fatalf("joined a run being reclaimed: %v", err)
	}
	if c, _ := s.ClaimRun(ctx, NewRunID(), "r", true, now, never); c.Result != Claimed {
		t.Fatalf("run without a row: %+v", c)
	}

	// A reaper that holds a session of the run reclaims the worktree
	// itself: the orphan sweep of another one leaves the run alone.
	d := openSess(t, s, newSess("u", now))
	s.Extend(ctx, d.ID, now.Add(-time.Second))
	if c, _ := s.ClaimExpired(ctx, d.ID, "ender", now, now, never); c.Result != Claimed {
		t.Fatal(c)
	}
	s.End(ctx, d.ID, StatusDestroyed, ReasonExpired, "", now)
	if c, _ := s.ClaimRun(ctx, d.RunID, "sweeper", true, now, never); c.Result != Busy || c.Holder != "ender" {
		t.Fatalf("sweeping a run whose session is being torn down: %+v", c)
	}
	if c, _ := s.ClaimRun(ctx, d.RunID, "sweeper", true, now, always); c.Result != Claimed {
		t.Fatalf("the ender died: %+v", c)
	}
	s.Release(ctx, d.RunID, "sweeper")
	// the one who ended the last session is not kept out by other
	// sessions' claims, only by another remover's claim on the run
	if c, _ := s.ClaimRun(ctx, d.RunID, "other-ender", false, now, never); c.Result != Claimed {
		t.Fatalf("the ender of the last session: %+v", c)
	}
}

func TestDropStaleClaims(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	for _, h := range []string{"live", "dead"} {
		if c, err := s.ClaimRun(ctx, NewRunID(), h, true, now, never); err != nil || c.Result != Claimed {
			t.Fatal(c, err)
		}
	}
	n, err := s.DropStaleClaims(ctx, func(h string, at time.Time) bool {
		if at.Sub(now).Abs() > time.Second {
			t.Errorf("claim time %v, want about %v", at, now)
		}
		return h == "dead"
	})
	if err != nil || n != 1 {
		t.Fatalf("dropped %d, %v", n, err)
	}
	cl, _ := s.Claims(ctx)
	if len(cl) != 1 {
		t.Fatalf("claims left: %v", cl)
	}
	for _, h := range cl {
		if h != "live" {
			t.Fatalf("claims left: %v", cl)
		}
	}
	// the instance id is no claim
	if id, err := s.InstanceID(ctx); err != nil || id == "" {
		t.Fatal(id, err)
	}
}

// Reapers racing on one session from separate connections: exactly one
// claim wins.
func TestClaimRaceAcrossConnections(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	s := open(t, root)
	now := time.Now()
	n := openSess(t, s, newSess("u", now))
	s.Extend(ctx, n.ID, now.Add(-time.Second))
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			o, err := Open(ctx, root)
			if err != nil {
				t.Error(err)
				return
			}
			defer o.Close()
			c, err := o.ClaimExpired(ctx, n.ID, "h"+string(rune('a'+i)), time.Now(), now.Add(-time.Minute), never)
			if err != nil {
				t.Error(err)
				return
			}
			if c.Result == Claimed {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d claims won, want 1", won)
	}
}

// A background step runs until it is ended, so it does not keep an expired
// session alive as a foreground step does: the session is claimed (its
// teardown ends the step). `sandbox stop` marks background steps stopped
// without --force (StopSteps, all false), every running step with it, and
// StopStep marks one step only while it runs.
func TestBackgroundSteps(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	fresh := now.Add(-30 * time.Second)
	n := openSess(t, s, newSess("u", now))
	begin := func(name string, detached bool) int {
		seq, _, err := s.BeginStep(ctx, NewStep{SessionID: n.ID, RunID: n.RunID, Name: name, Argv: []string{"sleep"}, Detached: detached,
			Started: now, DirFor: func(int) string { return "d" }})
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	bg := begin("server", true)
	s.Extend(ctx, n.ID, now.Add(-time.Second))
	if seq, err := s.LiveStep(ctx, n.ID, fresh); err != nil || seq != 0 {
		t.Fatalf("LiveStep = %d, %v; a background step is not one that holds its session", seq, err)
	}
	c, err := s.ClaimExpired(ctx, n.ID, "a", now, fresh, never)
	if err != nil || c.Result != Claimed {
		t.Fatalf("an expired session with only a background step running: %+v, %v; want claimed", c, err)
	}
	s.Release(ctx, n.ID, "a")
	s.Extend(ctx, n.ID, now.Add(time.Hour))

	fg := begin("test", false)
	if err := s.StopSteps(ctx, n.ID, StoppedBySandboxStop, false); err != nil {
		t.Fatal(err)
	}
	stoppedBy := func(seq int) (string, bool) {
		r, err := s.Step(ctx, n.RunID, seq)
		if err != nil {
			t.Fatal(err)
		}
		return r.StoppedBy, r.Detached
	}
	if by, d := stoppedBy(bg); by != StoppedBySandboxStop || !d {
		t.Errorf("the background step after StopSteps(all=false): stopped_by %q, detached %v", by, d)
	}
	if by, d := stoppedBy(fg); by != "" || d {
		t.Errorf("the foreground step after StopSteps(all=false): stopped_by %q, detached %v; want untouched", by, d)
	}
	if err := s.StopSteps(ctx, n.ID, StoppedBySandboxStop, true); err != nil {
		t.Fatal(err)
	}
	if by, _ := stoppedBy(fg); by != StoppedBySandboxStop {
		t.Errorf("the foreground step after StopSteps(all=true): stopped_by %q", by)
	}
	if _, err := s.FinishStep(ctx, StepEnd{RunID: n.RunID, Seq: fg, Finished: now, ExitCode: 143}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.StopStep(ctx, n.RunID, fg, StoppedByKill); err != nil || ok {
		t.Errorf("StopStep of a finished step: %v, %v; want false", ok, err)
	}
	if ok, err := s.StopStep(ctx, n.RunID, bg, StoppedByKill); err != nil || !ok {
		t.Errorf("StopStep of a running step: %v, %v; want true", ok, err)
	}
	if by, _ := stoppedBy(bg); by != StoppedByKill {
		t.Errorf("after StopStep: stopped_by %q", by)
	}
}

// endedOwner names a process that has ended: this pid with another start
// time (what a recycled pid looks like).
func endedOwner() string {
	pid, rest, _ := strings.Cut(proc.Self(), ":")
	return pid + ":1" + rest
}

// foreignOwner names a process in another PID namespace.
func foreignOwner() string {
	name, _, _ := strings.Cut(proc.Self(), "@")
	return name + "@0"
}

func setOwner(t *testing.T, s *Store, runID string, seq int, owner string) {
	t.Helper()
	if _, err := s.db.Exec(`UPDATE steps SET owner = ? WHERE run_id = ? AND seq = ?`, owner, runID, seq); err != nil {
		t.Fatal(err)
	}
}
