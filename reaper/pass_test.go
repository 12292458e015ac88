package reaper_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// One pass: expired sessions end destroyed/expired, their worktrees go
// unless another open session shares the run, their evidence stays;
// sessions that have not expired are untouched; a second pass has nothing
// to do.
func TestPassReapsExpiredKeepsEvidenceAndSharedWorktrees(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.create("")        // expires
	b := e.create("")        // lives on
	c := e.create(b.RunID)   // expires, but shares b's run
	d1 := e.create("")       // expires with d2, one run
	d2 := e.create(d1.RunID) //
	e.exec(a, "sh", "-c", "echo evidence; echo scratch > scratch.txt")
	e.expire(a.ID, c.ID, d1.ID, d2.ID)

	sum := e.pass(nil, false)
	want(t, sum, reaper.Summary{Expired: 4, Destroyed: 4, WorktreesReclaimed: 2, WorktreesKeptShared: 2})
	for _, s := range []*store.Session{a, c, d1, d2} {
		got := e.get(s.ID)
		if got.Status != store.StatusDestroyed || got.EndReason != store.ReasonExpired || got.EndedAt == nil {
			t.Errorf("%s: %s/%s, want destroyed/expired", s.ID, got.Status, got.EndReason)
		}
	}
	if got := e.get(b.ID); got.Status != store.StatusOpen {
		t.Fatalf("unexpired session %s is %s", b.ID, got.Status)
	}
	if exists(e.worktree(a)) || exists(e.worktree(d1)) {
		t.Fatal("an expired run's worktree is still there")
	}
	if !exists(filepath.Join(e.worktree(b), "README")) {
		t.Fatal("the worktree shared with an open session was removed")
	}
	out, err := os.ReadFile(filepath.Join(e.root, "runs", a.RunID, "steps", "0001-sh-c-echo-evidence-echo-scratch", "stdout.log"))
	if err != nil || string(out) != "evidence\n" {
		t.Fatalf("evidence lost: %q %v", out, err)
	}
	for _, id := range []string{a.ID, d1.ID, d2.ID} {
		if !strings.Contains(e.log.String(), id+" destroyed (expired)") {
			t.Errorf("no log line for %s:\n%s", id, e.log)
		}
	}
	want(t, e.pass(nil, false), reaper.Summary{})

	// the last one out reclaims the shared worktree
	e.expire(b.ID)
	want(t, e.pass(nil, false), reaper.Summary{Expired: 1, Destroyed: 1, WorktreesReclaimed: 1})
	if exists(e.worktree(b)) {
		t.Fatal("the last session of a run left its worktree")
	}
}

// --dry-run says what a pass would do, counts it the same way, and changes
// nothing.
func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.create("")
	b := e.create("")
	c := e.create(b.RunID)
	e.expire(a.ID, c.ID)
	orphan := e.create("")
	e.sql(`UPDATE sessions SET status = 'destroyed', end_reason = 'stopped' WHERE id = ?`, orphan.ID) // ended, worktree left

	before := snapshot(t, e)
	dry := e.pass(nil, true)
	if !dry.DryRun {
		t.Fatal("dry_run not set")
	}
	if after := snapshot(t, e); after != before {
		t.Fatalf("dry run changed things:\nbefore %s\nafter  %s", before, after)
	}
	for _, line := range []string{a.ID + " would end destroyed (expired)", a.ID + " would reclaim worktree of " + a.RunID,
		c.ID + " would keep worktree of " + c.RunID, orphan.RunID + " would reclaim orphan worktree"} {
		if !strings.Contains(e.log.String(), line) {
			t.Errorf("dry run did not say %q:\n%s", line, e.log)
		}
	}
	real := e.pass(nil, false)
	dry.DryRun = false
	want(t, dry, *real)
	want(t, real, reaper.Summary{Expired: 2, Destroyed: 2, WorktreesReclaimed: 1, WorktreesKeptShared: 1, OrphansRemoved: 1})
}

// snapshot is the sessions' statuses and the files under runs/.
func snapshot(t *testing.T, e *env) string {
	t.Helper()
	ss, err := e.st.List(context.Background(), store.Filter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "%s=%s/%s,%d ", s.ID, s.Status, s.EndReason, s.ExpiresAt.UnixMilli())
	}
	filepath.Walk(filepath.Join(e.root, "runs"), func(p string, _ os.FileInfo, _ error) error {
		b.WriteString(strings.TrimPrefix(p, e.root) + " ")
		return nil
	})
	cl, _ := e.st.Claims(context.Background())
	fmt.Fprintf(&b, "claims=%v", cl)
	return b.String()
}

// An exec in flight holds its session: the pass keeps an expired session
// whose step still runs (its heartbeat is fresh), and reaps it once the step
// finished — the command ran to its end in its worktree.
func TestRunningStepHoldsItsSession(t *testing.T) {
	old := sandbox.HeartbeatInterval
	sandbox.HeartbeatInterval = 50 * time.Millisecond
	t.Cleanup(func() { sandbox.HeartbeatInterval = old })
	e := newEnv(t, nil)
	clock := newTestClock()
	e.svc.Clock = clock.Now
	s := e.create("")
	r := e.reaper()
	r.Now = clock.Now
	r.StaleAfter = 300 * time.Millisecond

	// The step runs until the test opens its gate.
	gate := filepath.Join(e.worktree(s), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	// A test that failed still lets it end.
	t.Cleanup(func() {
		if f, err := os.OpenFile(gate, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	done := make(chan error, 1)
	go func() {
		res, err := e.svc.Exec(context.Background(), s, sandbox.ExecOptions{
			Name: "long", Argv: []string{"sh", "-c", "read x < gate; echo survived > out.txt; cat out.txt"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		done <- err
	}()
	waitFor(t, func() bool {
		n, _ := e.st.LiveStep(context.Background(), s.ID, clock.Now().Add(-time.Minute))
		return n == 1
	})
	e.expire(s.ID)

	// Passes over longer than StaleAfter: the heartbeat keeps it alive.
	for i := 0; i < 3; i++ {
		want(t, e.pass(r, false), reaper.Summary{})
		if got := e.get(s.ID); got.Status != store.StatusOpen || !exists(e.worktree(s)) {
			t.Fatalf("pass %d reaped a session under a running step", i)
		}
		clock.Advance(200 * time.Millisecond)
		// the step renews its lease at the new time
		waitFor(t, func() bool {
			n, _ := e.st.LiveStep(context.Background(), s.ID, clock.Now().Add(-time.Millisecond))
			return n == 1
		})
	}
	go func() { // once the step reads its gate: it ends
		if f, err := os.OpenFile(gate, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
	}()
	if !strings.Contains(e.log.String(), s.ID+" kept: expired, but step 1 is still running") {
		t.Fatalf("no log line for the kept session:\n%s", e.log)
	}
	if err := <-done; err != nil {
		t.Fatalf("the step did not run to its end: %v", err)
	}
	want(t, e.pass(r, false), reaper.Summary{Expired: 1, Destroyed: 1, WorktreesReclaimed: 1})
	out, _ := os.ReadFile(filepath.Join(e.root, "runs", s.RunID, "steps", "0001-long", "stdout.log"))
	if string(out) != "survived\n" {
		t.Fatalf("step output %q", out)
	}
	steps, _ := e.st.Steps(context.Background(), s.RunID)
	if len(steps) != 1 || steps[0].State != "finished" {
		t.Fatalf("step not marked finished: %+v", steps)
	}
}

// A step whose exec process died (kill -9: never finished) holds its
// session no longer; one whose xmode this reaper cannot see (another PID
// namespace) holds it until its heartbeat is stale.
func TestStaleHeartbeatReleasesTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	s := e.create("")
	ctx := context.Background()
	seq, _, err := e.st.BeginStep(ctx, store.NewStep{SessionID: s.ID, RunID: s.RunID, Name: "killed", Argv: []string{"sleep", "1000"}, Started: time.Now(), DirFor: func(int) string { return "d" }})
	if err != nil {
		t.Fatal(err)
	}
	e.expire(s.ID)
	e.sql(`UPDATE steps SET owner = ? WHERE run_id = ?`, foreignOwner(), s.RunID)
	want(t, e.pass(nil, false), reaper.Summary{}) // heartbeat fresh
	if err := e.st.Heartbeat(ctx, s.RunID, seq, time.Now().Add(-reaper.DefaultStaleAfter-time.Second)); err != nil {
		t.Fatal(err)
	}
	want(t, e.pass(nil, false), reaper.Summary{Expired: 1, Destroyed: 1, WorktreesReclaimed: 1, StepsLost: 1})
	steps, _ := e.st.Steps(ctx, s.RunID)
	if len(steps) != 1 || steps[0].State != "lost" || !strings.Contains(steps[0].LostReason, "xmode was gone") {
		t.Fatalf("the stale step is not recorded as lost: %+v", steps)
	}
}

// A create that died (or hangs) leaves a provisioning session: after the
// grace period it ends failed/provision_failed and its half-made worktree
// goes; one within the grace period is left alone.
func TestStuckProvisioningIsCleaned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	mk := func(age time.Duration) store.NewSession {
		now := time.Now().Add(-age)
		n := store.NewSession{NewRun: true, Session: store.Session{
			ID: store.NewSessionID(), RunID: store.NewRunID(), User: "tester", RunnerMode: "local_worktree", Engine: "host",
			CreatedAt: now, ExpiresAt: now.Add(2 * time.Hour),
		}}
		n.WorktreePath, _ = e.svc.Guard.Worktree(n.RunID)
		if err := e.st.CreateSession(ctx, n); err != nil {
			t.Fatal(err)
		}
		// what a clone killed half-way leaves
		os.MkdirAll(filepath.Join(n.WorktreePath, ".git"), 0o755)
		os.WriteFile(filepath.Join(n.WorktreePath, "half"), []byte("x"), 0o644)
		return n
	}
	stuck, fresh := mk(time.Hour), mk(time.Minute)
	r := e.reaper()
	r.ProvisionGrace = 10 * time.Minute
	want(t, e.pass(r, false), reaper.Summary{Destroyed: 1, WorktreesReclaimed: 1})
	got := e.get(stuck.ID)
	if got.Status != store.StatusFailed || got.EndReason != store.ReasonProvisionFailed || !strings.Contains(got.Error, "provisioning") {
		t.Fatalf("stuck session: %s/%s %q", got.Status, got.EndReason, got.Error)
	}
	if exists(stuck.WorktreePath) {
		t.Fatal("the stuck session's worktree is still there")
	}
	if got := e.get(fresh.ID); got.Status != store.StatusProvisioning || !exists(fresh.WorktreePath) {
		t.Fatalf("a create within its grace period was reaped: %s", got.Status)
	}
	// the create that was still running cannot open its session any more
	if err := e.st.Provisioned(ctx, stuck.ID, "abc", "", "", "", nil, time.Time{}); err == nil {
		t.Fatal("a reaped session was opened")
	}
}

// Reapers that overlap (cron runs piling up) take each session once: the
// counts add up to the number of sessions, no errors, no claims left.
func TestOverlappingReapersDoEachSessionOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var ids []string
	shared := e.create("")
	ids = append(ids, shared.ID)
	for i := 0; i < 15; i++ {
		run := ""
		if i%5 == 0 {
			run = shared.RunID
		}
		ids = append(ids, e.create(run).ID)
	}
	e.expire(ids...)
	var mu sync.Mutex
	var total reaper.Summary
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Go(func() {
			st, err := store.Open(context.Background(), e.root) // a process of its own, as far as SQLite can tell
			if err != nil {
				t.Error(err)
				return
			}
			defer st.Close()
			r := e.reaper()
			r.Store = st
			sum, err := r.Pass(context.Background(), reaper.PassOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			total.Expired += sum.Expired
			total.Destroyed += sum.Destroyed
			total.WorktreesReclaimed += sum.WorktreesReclaimed
			total.WorktreesKeptShared += sum.WorktreesKeptShared
			total.OrphansRemoved += sum.OrphansRemoved
			total.Errors = append(total.Errors, sum.Errors...)
		})
	}
	wg.Wait()
	if len(total.Errors) != 0 {
		t.Fatalf("errors: %+v", total.Errors)
	}
	// 16 sessions on 13 runs: 3 of the 4 sessions on the shared run keep it.
	if total.Expired != 16 || total.Destroyed != 16 || total.WorktreesReclaimed != 13 || total.OrphansRemoved != 0 || total.WorktreesKeptShared != 3 {
		t.Fatalf("overlapping passes counted %+v", total)
	}
	for _, id := range ids {
		if got := e.get(id); got.Status != store.StatusDestroyed {
			t.Errorf("%s is %s", id, got.Status)
		}
		if n := strings.Count(e.log.String(), id+" destroyed (expired)"); n != 1 {
			t.Errorf("%s destroyed %d times", id, n)
		}
	}
	if cl, _ := e.st.Claims(context.Background()); len(cl) != 0 {
		t.Fatalf("claims left: %v", cl)
	}
	if m, _ := filepath.Glob(filepath.Join(e.root, "runs", "*", "worktree")); len(m) != 0 {
		t.Fatalf("worktrees left: %v", m)
	}
}

// A reaper killed mid-teardown leaves its claim and maybe an ended session
// whose worktree is still there; the next pass takes the claim over (its
// holder is dead) and converges.
func TestPassConvergesAfterACrashedReaper(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a, b := e.create(""), e.create("")
	e.expire(a.ID, b.ID)
	// a: claimed by a reaper process that no longer exists
	e.sql(`INSERT INTO meta (key, value) VALUES (?, ?)`, store.ClaimPrefix+a.ID, fmt.Sprintf("%d 999999999:1/dead", time.Now().UnixMilli()))
	// b: ended by it, worktree not yet removed, run claimed
	e.sql(`UPDATE sessions SET status = 'destroyed', end_reason = 'expired', ended_at = 1 WHERE id = ?`, b.ID)
	e.sql(`INSERT INTO meta (key, value) VALUES (?, ?)`, store.ClaimPrefix+b.RunID, fmt.Sprintf("%d 999999999:1/dead", time.Now().UnixMilli()))

	want(t, e.pass(nil, false), reaper.Summary{Expired: 1, Destroyed: 1, WorktreesReclaimed: 1, OrphansRemoved: 1})
	if exists(e.worktree(a)) || exists(e.worktree(b)) {
		t.Fatal("worktrees left")
	}
	if cl, _ := e.st.Claims(context.Background()); len(cl) != 0 {
		t.Fatalf("claims left: %v", cl)
	}
	// A live holder's claim is respected.
	c := e.create("")
	e.expire(c.ID)
	e.sql(`INSERT INTO meta (key, value) VALUES (?, ?)`, store.ClaimPrefix+c.ID, fmt.Sprintf("%d %d:%s/live", time.Now().UnixMilli(), os.Getppid(), procStartOf(t, os.Getppid())))
	want(t, e.pass(nil, false), reaper.Summary{})
	if !strings.Contains(e.log.String(), c.ID+" skipped: another reaper") {
		t.Fatalf("no skip line:\n%s", e.log)
	}
}

func procStartOf(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skip("no /proc")
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[19]
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A step whose xmode was killed leaves its processes running in a session
// that lives on: a pass ends them by their tag and records the step lost.
func TestLostStepProcessesAreEnded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	s := e.create("")
	ctx := context.Background()
	tag := "losttest" + strings.ToLower(store.NewRunID()[4:])
	_, _, err := e.st.BeginStep(ctx, store.NewStep{SessionID: s.ID, RunID: s.RunID, Name: "orphan", Argv: []string{"sleep"}, Tag: tag, Started: time.Now(), DirFor: func(int) string { return "d" }})
	if err != nil {
		t.Fatal(err)
	}
	// What the step left: a process carrying its tag, in a group of its own.
	c := exec.Command("sleep", "300")
	c.Env = append(os.Environ(), "XMODE_EXEC_TAG="+tag)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	e.sql(`UPDATE steps SET owner = ? WHERE run_id = ?`, endedOwner(), s.RunID) // its xmode was killed
	want(t, e.pass(nil, false), reaper.Summary{StepsLost: 1})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.Process.Kill()
		t.Fatal("the lost step's process is still running")
	}
	if got := e.get(s.ID); got.Status != store.StatusOpen {
		t.Fatalf("the session was ended: %s", got.Status)
	}
}
