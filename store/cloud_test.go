package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

// submitted makes an open cloud_subscription session and records a task
// for it, as `cloud submit` does.
func submitted(t *testing.T, s *Store, task string, now time.Time) NewSession {
	t.Helper()
	ctx := context.Background()
	n := newSess("u", now)
	n.RunnerMode, n.Engine = "cloud_subscription", "cloud"
	openSess(t, s, n)
	if c, err := s.ClaimSubmit(ctx, n.ID, "sub", now, never); err != nil || c.Result != Claimed {
		t.Fatal(c, err)
	}
	if err := s.RecordSubmitted(ctx, &CloudTask{TaskID: task, SessionID: n.ID, EnvID: "env", Attempts: 1, SubmittedAt: now}, "sub"); err != nil {
		t.Fatal(err)
	}
	return n
}

// A submit claims the session with the reaper's claim: a second submit (or
// a reaper) sees it busy; recording the task moves the session to
// submitted and releases the claim.
func TestSubmitClaimAndRecord(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	n := newSess("u", now)
	n.RunnerMode, n.Engine = "cloud_subscription", "cloud"
	openSess(t, s, n)
	if c, _ := s.ClaimSubmit(ctx, n.ID, "a", now, never); c.Result != Claimed {
		t.Fatalf("first submit: %v", c)
	}
	if c, _ := s.ClaimSubmit(ctx, n.ID, "b", now, never); c.Result != Busy || c.Holder != "a" {
		t.Fatalf("second submit: %+v", c)
	}
	if c, _ := s.ClaimExpired(ctx, n.ID, "reaper", now.Add(2*time.Hour), now, never); c.Result != Busy {
		t.Fatalf("a reaper during the submit: %+v", c)
	}
	if err := s.RecordSubmitted(ctx, &CloudTask{TaskID: "task_e_1", SessionID: n.ID, EnvID: "env", Attempts: 2, SubmittedAt: now}, "a"); err != nil {
		t.Fatal(err)
	}
	sess, _ := s.Get(ctx, n.ID)
	if sess.Status != StatusSubmitted || sess.Ended() {
		t.Fatalf("session %s after submit", sess.Status)
	}
	if cl, _ := s.Claims(ctx); len(cl) != 0 {
		t.Fatalf("claims left: %v", cl)
	}
	task, err := s.CloudTaskOf(ctx, n.ID)
	if err != nil || task.TaskID != "task_e_1" || task.State != TaskPending || task.NextDueAt == nil || task.Attempts != 2 {
		t.Fatalf("%+v %v", task, err)
	}
	// A submitted session takes no second submit, runs no step, is not
	// expired by the reaper, but still counts as active.
	if c, _ := s.ClaimSubmit(ctx, n.ID, "c", now, never); c.Result != Gone {
		t.Fatalf("submit of a submitted session: %v", c)
	}
	if _, _, err := s.BeginStep(ctx, NewStep{SessionID: n.ID, RunID: n.RunID, Name: "x", Argv: []string{"true"}, Started: now, DirFor: func(int) string { return "/d" }}); fail.KindOf(err) != fail.Refused {
		t.Fatalf("step in a submitted session: %v", err)
	}
	if ex, _ := s.ExpiredOpen(ctx, now.Add(2*time.Hour)); len(ex) != 0 {
		t.Fatalf("the reaper would expire a submitted session: %v", ids(ex))
	}
	if n, _ := s.OpenOnRun(ctx, n.RunID); n != 1 {
		t.Fatalf("active sessions on the run: %d", n)
	}
	if list, _ := s.List(ctx, Filter{}); len(list) != 1 {
		t.Fatalf("list shows %d sessions", len(list))
	}
	// It can still be stopped.
	if ended, last, err := s.End(ctx, n.ID, StatusDestroyed, ReasonStopped, "", now); err != nil || !ended || !last {
		t.Fatalf("end: %v %v %v", ended, last, err)
	}
}

// A session stopped while its submit ran keeps the task, abandoned.
func TestRecordSubmittedAfterStop(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	n := newSess("u", now)
	openSess(t, s, n)
	s.ClaimSubmit(ctx, n.ID, "a", now, never)
	s.End(ctx, n.ID, StatusDestroyed, ReasonStopped, "", now)
	err := s.RecordSubmitted(ctx, &CloudTask{TaskID: "task_e_2", SessionID: n.ID, EnvID: "env", SubmittedAt: now}, "a")
	if fail.KindOf(err) != fail.Refused {
		t.Fatalf("record after stop: %v", err)
	}
	task, _ := s.CloudTaskOf(ctx, n.ID)
	if task.State != TaskAbandoned || !task.Finished() {
		t.Fatalf("%+v", task)
	}
	if sess, _ := s.Get(ctx, n.ID); sess.Status != StatusDestroyed {
		t.Fatalf("session %s", sess.Status)
	}
}

// Leases: a due task is leased once; a leased one is not due to anyone
// else; a lease whose holder died is dropped and the task leased again.
func TestClaimDueCloudTasks(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	for i := range 5 {
		submitted(t, s, fmt.Sprintf("task_%d", i), now.Add(time.Duration(i)*time.Millisecond))
	}
	later := now.Add(time.Second)
	a, err := s.ClaimDueCloudTasks(ctx, "a", later, 3)
	if err != nil || len(a) != 3 || a[0].TaskID != "task_0" || a[0].SessionStatus != StatusSubmitted {
		t.Fatalf("a: %v %v", a, err)
	}
	b, _ := s.ClaimDueCloudTasks(ctx, "b", later, 10)
	if len(b) != 2 || b[0].TaskID != "task_3" {
		t.Fatalf("b got %d tasks, want the 2 a does not hold", len(b))
	}
	if c, _ := s.ClaimDueCloudTasks(ctx, "c", later, 10); len(c) != 0 {
		t.Fatalf("c got %d leased tasks", len(c))
	}
	// Not due yet: nothing.
	s.ReleaseCloudTask(ctx, "task_4", "b")
	if c, _ := s.ClaimDueCloudTasks(ctx, "c", now.Add(-time.Second), 10); len(c) != 0 {
		t.Fatalf("claimed %d tasks not yet due", len(c))
	}
	// a dies: its leases go, the tasks come back.
	n, err := s.DropStaleCloudClaims(ctx, func(h string, _ time.Time) bool { return h == "a" })
	if err != nil || n != 3 {
		t.Fatalf("dropped %d, %v", n, err)
	}
	if c, _ := s.ClaimDueCloudTasks(ctx, "c", later, 10); len(c) != 4 {
		t.Fatalf("after a died, c got %d tasks, want 4", len(c))
	}
	// Reap claims are untouched by the cloud sweep and the other way round.
	if cl, _ := s.Claims(ctx); len(cl) != 0 {
		t.Fatalf("reap claims: %v", cl)
	}
}

// RecordPoll appends only new transcript lines, under the holder's lease
// only, and a repeated poll adds nothing.
func TestRecordPollIdempotentAndFenced(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	submitted(t, s, "task_x", now)
	s.ClaimDueCloudTasks(ctx, "a", now, 10)
	u := PollUpdate{Now: now, Polled: true, State: TaskRunning, Title: "Fix", Transcript: []string{"one", "two"}, NextDue: &now}
	if n, err := s.RecordPoll(ctx, "task_x", "a", u); err != nil || n != 2 {
		t.Fatalf("first poll: %d %v", n, err)
	}
	u.Transcript = []string{"one", "two", "three"}
	if n, _ := s.RecordPoll(ctx, "task_x", "a", u); n != 1 {
		t.Fatalf("second poll appended %d, want 1", n)
	}
	if n, _ := s.RecordPoll(ctx, "task_x", "a", u); n != 0 {
		t.Fatalf("a repeated poll appended %d", n)
	}
	if _, err := s.RecordPoll(ctx, "task_x", "b", u); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a poll without the lease: %v", err)
	}
	lines, _ := s.Thread(ctx, "task_x", 0)
	if len(lines) != 3 || lines[2].Line != "three" || lines[0].Index != 0 {
		t.Fatalf("thread: %+v", lines)
	}
	// A transient error backs off; a success clears it.
	due := now.Add(time.Minute)
	s.RecordPoll(ctx, "task_x", "a", PollUpdate{Now: now, Polled: true, Err: "unreachable", ErrClass: ErrTransient, NextDue: &due})
	task, _ := s.CloudTask(ctx, "task_x")
	if task.Failures != 1 || task.ErrorClass != ErrTransient || !task.NextDueAt.Equal(due.Truncate(time.Millisecond)) || task.Polls != 4 {
		t.Fatalf("after a transient error: %+v", task)
	}
	// A permanent one parks it; the sweep re-queues it once it is stale.
	s.RecordPoll(ctx, "task_x", "a", PollUpdate{Now: now, Polled: true, Err: "not signed in", ErrClass: ErrPermanent, Release: true})
	task, _ = s.CloudTask(ctx, "task_x")
	if !task.Parked() || task.Failures != 2 {
		t.Fatalf("after a permanent error: %+v", task)
	}
	if c, _ := s.ClaimDueCloudTasks(ctx, "a", now.Add(time.Hour), 10); len(c) != 0 {
		t.Fatal("a parked task was due")
	}
	if n, _ := s.RequeueStaleCloudTasks(ctx, now, now); n != 0 {
		t.Fatalf("re-queued %d tasks polled just now", n)
	}
	if n, _ := s.RequeueStaleCloudTasks(ctx, now.Add(time.Second), now.Add(time.Second)); n != 1 {
		t.Fatalf("re-queued %d, want the parked task", n)
	}
	c, _ := s.ClaimDueCloudTasks(ctx, "a", now.Add(time.Second), 10)
	if len(c) != 1 {
		t.Fatal("the re-queued task is not due")
	}
	s.RecordPoll(ctx, "task_x", "a", PollUpdate{Now: now, Polled: true, State: TaskReady, Capture: "cap", Finish: true, Release: true})
	task, _ = s.CloudTask(ctx, "task_x")
	if !task.Finished() || task.LastError != "" || task.Failures != 0 || task.Capture != "cap" {
		t.Fatalf("finished: %+v", task)
	}
	if n, _ := s.RequeueStaleCloudTasks(ctx, now.Add(time.Hour), now.Add(time.Hour)); n != 0 {
		t.Fatal("the sweep re-queued a finished task")
	}
}

// Pollers racing from separate connections lease each task once.
func TestCloudLeaseRaceAcrossConnections(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	s := open(t, root)
	now := time.Now()
	for i := range 20 {
		submitted(t, s, fmt.Sprintf("task_%02d", i), now)
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			o, err := Open(ctx, root)
			if err != nil {
				t.Error(err)
				return
			}
			defer o.Close()
			for {
				ts, err := o.ClaimDueCloudTasks(ctx, fmt.Sprint("h", i), now, 3)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ts) == 0 {
					return
				}
				mu.Lock()
				for _, t := range ts {
					got[t.TaskID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(got) != 20 {
		t.Fatalf("%d tasks leased, want 20", len(got))
	}
	for id, n := range got {
		if n != 1 {
			t.Fatalf("%s leased %d times", id, n)
		}
	}
}
