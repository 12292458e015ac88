package codexcloud

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli/gittest"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// scripted is an in-process Client: the poller depends on the Result
// contract only, so a test can say exactly what each task reports. It also
// watches that no task is asked about twice at once, and how many calls run
// together.
type scripted struct {
	mu          sync.Mutex
	next        int
	results     map[string]Result
	errs        map[string]error
	diffs       map[string][]byte
	statusCalls map[string]int
	diffCalls   map[string]int
	delay       time.Duration
	inflight    map[string]bool
	overlaps    []string
	cur, peak   int
}

func newScripted() *scripted {
	return &scripted{results: map[string]Result{}, errs: map[string]error{}, diffs: map[string][]byte{},
		statusCalls: map[string]int{}, diffCalls: map[string]int{}, inflight: map[string]bool{}}
}

func (s *scripted) Submit(_ context.Context, r SubmitRequest) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.errs["submit"]; err != nil {
		return "", "", err
	}
	s.next++
	id := fmt.Sprintf("task_e_%04d", s.next)
	s.results[id] = Result{State: Pending, Title: r.Prompt}
	return id, "https://chatgpt.com/codex/tasks/" + id, nil
}

func (s *scripted) Status(ctx context.Context, id string) (Result, error) {
	s.mu.Lock()
	if s.inflight[id] {
		s.overlaps = append(s.overlaps, id)
	}
	s.inflight[id] = true
	s.cur++
	s.peak = max(s.peak, s.cur)
	s.statusCalls[id]++
	s.mu.Unlock()
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight[id] = false
	s.cur--
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	if err := s.errs[id]; err != nil {
		return Result{}, err
	}
	return s.results[id], nil
}

func (s *scripted) Diff(_ context.Context, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.diffCalls[id]++
	return s.diffs[id], nil
}

func (s *scripted) set(id string, f func(r *Result)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.results[id]
	f(&r)
	s.results[id] = r
}

func (s *scripted) fail(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs[id] = err
}

func (s *scripted) calls(id string) (status, diff int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statusCalls[id], s.diffCalls[id]
}

// loop is a storage root with the real store, reaper and patch capturer,
// and a repository to make cloud_subscription sessions of.
type loop struct {
	t      *testing.T
	root   string
	repo   string
	cfg    *config.Config
	st     *store.Store
	guard  fsguard.Guard
	client *scripted
	poller *Poller
	sub    *Submitter
}

func newLoop(t *testing.T) *loop {
	t.Helper()
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	gittest.Git(t, dir, "init", "-q", "-b", "main", repo)
	os.WriteFile(filepath.Join(repo, "README"), []byte("hello\n"), 0o644)
	gittest.Git(t, repo, "add", ".")
	gittest.Git(t, repo, "commit", "-qm", "one")
	root := filepath.Join(dir, "root")
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"XMODE_STORAGE_ROOT": root, "HOME": dir, "XMODE_USER": "u",
			"XMODE_RUNNER_MODE": "cloud_subscription", "XMODE_SANDBOX_MAX_OPEN": "0"}[k]
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l := &loop{t: t, root: root, repo: repo, cfg: cfg, st: st, guard: fsguard.Guard{Root: root}, client: newScripted()}
	l.poller = l.newPoller(st)
	l.sub = &Submitter{Store: st, Client: l.client, End: l.poller.End}
	return l
}

func (l *loop) newPoller(st *store.Store) *Poller {
	r := &reaper.Reaper{Cfg: l.cfg, Store: st, Guard: l.guard}
	return &Poller{Store: st, Client: l.client, Capturer: PatchFile{Guard: l.guard}, End: Teardown(r), Parallel: 4}
}

// session creates a cloud_subscription session as `sandbox create` does.
func (l *loop) session() *store.Session {
	l.t.Helper()
	svc := &sandbox.Service{Cfg: l.cfg, Store: l.st, Guard: l.guard}
	sess, err := svc.Create(context.Background(), sandbox.CreateOptions{Repo: l.repo})
	if err != nil {
		l.t.Fatal(err)
	}
	return sess
}

func (l *loop) submit(sess *store.Session) *store.CloudTask {
	l.t.Helper()
	task, err := l.sub.Submit(context.Background(), sess, SubmitOptions{Env: "env_1", Prompt: "do it"})
	if err != nil {
		l.t.Fatal(err)
	}
	return task
}

func (l *loop) pass(o PassOptions) *Summary {
	l.t.Helper()
	sum, err := l.poller.Pass(context.Background(), o)
	if err != nil {
		l.t.Fatal(err)
	}
	return sum
}

func (l *loop) task(id string) *store.CloudTask {
	l.t.Helper()
	t, err := l.st.CloudTask(context.Background(), id)
	if err != nil {
		l.t.Fatal(err)
	}
	return t
}

func (l *loop) sess(id string) *store.Session {
	l.t.Helper()
	s, err := l.st.Get(context.Background(), id)
	if err != nil {
		l.t.Fatal(err)
	}
	return s
}

func (l *loop) thread(id string) []string {
	l.t.Helper()
	lines, err := l.st.Thread(context.Background(), id, 0)
	if err != nil {
		l.t.Fatal(err)
	}
	var out []string
	for _, x := range lines {
		out = append(out, x.Line)
	}
	return out
}

// A task's life: pending, running with a growing transcript (each line
// appended once however often it is polled), then ready: the diff captured
// once, the session ready, its worktree reclaimed, the task finished.
func TestPollerLifecycle(t *testing.T) {
	l := newLoop(t)
	sess := l.session()
	if sess.Engine != "cloud" || sess.BaseCommit == "" || sess.Status != store.StatusOpen {
		t.Fatalf("created %+v", sess)
	}
	task := l.submit(sess)
	if s := l.sess(sess.ID); s.Status != store.StatusSubmitted {
		t.Fatalf("after submit: %s", s.Status)
	}
	if sum := l.pass(PassOptions{}); sum.Polled != 1 || sum.Running != 1 {
		t.Fatalf("first pass: %+v", sum)
	}
	l.client.set(task.TaskID, func(r *Result) { r.State, r.Transcript = Running, []string{"reading", "editing"} })
	if sum := l.pass(PassOptions{}); sum.TranscriptLines != 2 {
		t.Fatalf("second pass: %+v", sum)
	}
	if sum := l.pass(PassOptions{}); sum.TranscriptLines != 0 || sum.Polled != 1 {
		t.Fatalf("a pass with nothing new: %+v", sum)
	}
	l.client.set(task.TaskID, func(r *Result) { r.Transcript = append(r.Transcript, "testing") })
	l.pass(PassOptions{})
	if got := l.thread(task.TaskID); strings.Join(got, "|") != "reading|editing|testing" {
		t.Fatalf("thread %q", got)
	}
	patch := []byte("diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-hello\n+bye\n")
	l.client.diffs[task.TaskID] = patch
	l.client.set(task.TaskID, func(r *Result) { r.State, r.Title, r.Summary = Ready, "Say bye", "+1/-1 • 1 file" })
	if sum := l.pass(PassOptions{}); sum.Ready != 1 {
		t.Fatalf("ready pass: %+v", sum)
	}
	s := l.sess(sess.ID)
	if s.Status != store.StatusReady || s.EndReason != store.ReasonTaskReady || s.EndedAt == nil {
		t.Fatalf("session %s (%s)", s.Status, s.EndReason)
	}
	if _, err := os.Lstat(sess.WorktreePath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("worktree of a ready session still there: %v", err)
	}
	tk := l.task(task.TaskID)
	if !tk.Finished() || tk.State != store.TaskReady || tk.Title != "Say bye" || tk.Capture == "" {
		t.Fatalf("task %+v", tk)
	}
	got, err := os.ReadFile(filepath.Join(l.root, tk.Capture))
	if err != nil || string(got) != string(patch) {
		t.Fatalf("captured %q, %v", got, err)
	}
	if sum := l.pass(PassOptions{Sweep: true}); sum.Polled != 0 {
		t.Fatalf("a finished task was polled again: %+v", sum)
	}
	if status, diff := l.client.calls(task.TaskID); status != 5 || diff != 1 {
		t.Fatalf("%d status calls, %d diff calls", status, diff)
	}
}

// A task the cloud reports failed ends its session failed, with the error.
func TestPollerFailedTask(t *testing.T) {
	l := newLoop(t)
	sess := l.session()
	task := l.submit(sess)
	l.client.set(task.TaskID, func(r *Result) { r.State, r.Error = Failed, "the tests failed" })
	if sum := l.pass(PassOptions{}); sum.Failed != 1 {
		t.Fatalf("%+v", sum)
	}
	s := l.sess(sess.ID)
	if s.Status != store.StatusFailed || s.EndReason != store.ReasonTaskFailed || s.Error != "the tests failed" {
		t.Fatalf("session %s (%s) %q", s.Status, s.EndReason, s.Error)
	}
	if tk := l.task(task.TaskID); tk.State != store.TaskFailed || !tk.Finished() || tk.LastError != "the tests failed" {
		t.Fatalf("task %+v", tk)
	}
	if _, diff := l.client.calls(task.TaskID); diff != 0 {
		t.Fatal("the diff of a failed task was asked for")
	}
}

// A transient error backs off (the task is not due until its next-due
// time); a permanent one parks the task until a sweep re-queues it once its
// last poll is older than StaleAfter; a success clears the error.
func TestPollerBackoffParkAndSweep(t *testing.T) {
	l := newLoop(t)
	task := l.submit(l.session())
	now := time.Now()
	l.poller.Now = func() time.Time { return now }
	l.client.fail(task.TaskID, &Error{Class: Transient, Op: "status", Msg: "the backend is unreachable"})
	sum := l.pass(PassOptions{})
	if sum.TransientErrors != 1 || len(sum.Permanent()) != 0 {
		t.Fatalf("transient: %+v", sum)
	}
	tk := l.task(task.TaskID)
	if tk.ErrorClass != store.ErrTransient || tk.NextDueAt == nil || tk.NextDueAt.Sub(now) < 29*time.Second || tk.Failures != 1 {
		t.Fatalf("after a transient error: %+v", tk)
	}
	if sum := l.pass(PassOptions{}); sum.Polled+len(sum.Errors) != 0 {
		t.Fatalf("polled while backing off: %+v", sum)
	}
	now = now.Add(31 * time.Second)
	l.pass(PassOptions{})
	if tk := l.task(task.TaskID); tk.Failures != 2 || tk.NextDueAt.Sub(now) < 59*time.Second {
		t.Fatalf("second backoff: %+v", tk)
	}

	now = now.Add(2 * time.Minute)
	l.client.fail(task.TaskID, &Error{Class: Permanent, Op: "status", Msg: "codex is not signed in", Fix: fixLogin})
	sum = l.pass(PassOptions{})
	if p := sum.Permanent(); len(p) != 1 || !strings.Contains(p[0].Error, "codex login") {
		t.Fatalf("permanent: %+v", sum)
	}
	if tk := l.task(task.TaskID); !tk.Parked() || l.sess(tk.SessionID).Status != store.StatusSubmitted {
		t.Fatalf("a permanent error must park the task and keep the session: %+v", tk)
	}
	now = now.Add(time.Hour)
	if sum := l.pass(PassOptions{}); sum.Polled+len(sum.Errors) != 0 {
		t.Fatalf("a parked task was polled without a sweep: %+v", sum)
	}
	l.client.fail(task.TaskID, nil) // a person ran `codex login`
	l.poller.StaleAfter = 2 * time.Hour
	if sum := l.pass(PassOptions{Sweep: true}); sum.Requeued != 0 || sum.Polled != 0 {
		t.Fatalf("re-queued before it was stale: %+v", sum)
	}
	l.poller.StaleAfter = 10 * time.Minute
	if sum := l.pass(PassOptions{Sweep: true}); sum.Requeued != 1 || sum.Polled != 1 {
		t.Fatalf("sweep: %+v", sum)
	}
	if tk := l.task(task.TaskID); tk.LastError != "" || tk.ErrorClass != "" || tk.Failures != 0 || tk.Parked() {
		t.Fatalf("after a success: %+v", tk)
	}
}

// A pass that dies after capturing the diff but before the session ended
// (here: the end fails) is finished by a later pass without capturing again.
func TestPollerResumesWithoutCapturingTwice(t *testing.T) {
	l := newLoop(t)
	sess := l.session()
	task := l.submit(sess)
	end := l.poller.End
	var ends atomic.Int32
	l.poller.End = func(ctx context.Context, s *store.Session, status, reason, msg string) error {
		if ends.Add(1) == 1 {
			return errors.New("disk trouble")
		}
		return end(ctx, s, status, reason, msg)
	}
	l.client.diffs[task.TaskID] = []byte("diff\n")
	l.client.set(task.TaskID, func(r *Result) { r.State = Ready })
	if sum := l.pass(PassOptions{}); len(sum.Permanent()) != 1 || sum.Ready != 0 {
		t.Fatalf("first pass: %+v", sum)
	}
	if s := l.sess(sess.ID); s.Status != store.StatusSubmitted {
		t.Fatalf("session %s after a failed end", s.Status)
	}
	now := time.Now().Add(time.Hour)
	l.poller.Now = func() time.Time { return now }
	if sum := l.pass(PassOptions{Sweep: true}); sum.Ready != 1 {
		t.Fatalf("second pass: %+v", sum)
	}
	if _, diff := l.client.calls(task.TaskID); diff != 1 {
		t.Fatalf("diff asked %d times", diff)
	}
	if s := l.sess(sess.ID); s.Status != store.StatusReady {
		t.Fatalf("session %s", s.Status)
	}
}

// A session stopped while its task runs: the task is abandoned, unpolled.
func TestPollerAbandonsStoppedSession(t *testing.T) {
	l := newLoop(t)
	sess := l.session()
	task := l.submit(sess)
	r := &reaper.Reaper{Cfg: l.cfg, Store: l.st, Guard: l.guard}
	if _, err := r.Stop(context.Background(), l.sess(sess.ID), false); err != nil {
		t.Fatal(err)
	}
	if sum := l.pass(PassOptions{}); sum.Abandoned != 1 || sum.Polled != 0 {
		t.Fatalf("%+v", sum)
	}
	if tk := l.task(task.TaskID); tk.State != store.TaskAbandoned || !tk.Finished() {
		t.Fatalf("%+v", tk)
	}
	if s := l.sess(sess.ID); s.Status != store.StatusDestroyed {
		t.Fatalf("session %s", s.Status)
	}
}

// seedSubmitted inserts n submitted cloud sessions through the store (a
// `sandbox create` each would take most of the test).
func seedSubmitted(t testing.TB, st *store.Store, n int) []string {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	var ids []string
	for i := range n {
		s := store.NewSession{NewRun: true, Session: store.Session{ID: store.NewSessionID(), RunID: store.NewRunID(), User: "u",
			RunnerMode: config.ModeCloudSubscription, Engine: "cloud", CreatedAt: now, ExpiresAt: now.Add(time.Hour), WorktreePath: "/x"}}
		if err := st.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := st.Provisioned(ctx, s.ID, "abc", "", "", "", nil, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ClaimSubmit(ctx, s.ID, "seed", now, nil); err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("task_e_%04d", i)
		if err := st.RecordSubmitted(ctx, &store.CloudTask{TaskID: id, SessionID: s.ID, EnvID: "e", SubmittedAt: now}, "seed"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// Pollers on separate connections at once never ask about one task at the
// same time, poll every task, and keep at most Parallel calls in flight.
func TestPollersExclude(t *testing.T) {
	l := newLoop(t)
	ids := seedSubmitted(t, l.st, 24)
	for _, id := range ids {
		l.client.results[id] = Result{State: Running, Transcript: []string{"a", "b"}}
	}
	l.client.delay = 5 * time.Millisecond
	var wg sync.WaitGroup
	var lines atomic.Int64
	for range 3 {
		wg.Go(func() {
			st, err := store.Open(context.Background(), l.root)
			if err != nil {
				t.Error(err)
				return
			}
			defer st.Close()
			p := l.newPoller(st)
			for range 2 {
				sum, err := p.Pass(context.Background(), PassOptions{Sweep: true})
				if err != nil || len(sum.Errors) != 0 {
					t.Error(sum, err)
					return
				}
				lines.Add(int64(sum.TranscriptLines))
			}
		})
	}
	wg.Wait()
	if len(l.client.overlaps) != 0 {
		t.Fatalf("tasks asked about by two pollers at once: %v", l.client.overlaps)
	}
	for _, id := range ids {
		if n, _ := l.client.calls(id); n == 0 {
			t.Fatalf("%s never polled", id)
		}
		if got := l.thread(id); len(got) != 2 {
			t.Fatalf("%s thread %q", id, got)
		}
	}
	if lines.Load() != 48 {
		t.Fatalf("%d lines appended, want 48 (2 per task, once)", lines.Load())
	}
	if l.client.peak > 3*4 {
		t.Fatalf("%d calls at once, more than 3 pollers × Parallel 4", l.client.peak)
	}
	if cl, _ := l.st.CloudClaims(context.Background()); len(cl) != 0 {
		t.Fatalf("leases left: %v", cl)
	}
}

// Watch polls every interval and ends cleanly when its context does.
func TestWatchStops(t *testing.T) {
	l := newLoop(t)
	l.submit(l.session())
	ctx, cancel := context.WithCancel(context.Background())
	passes := 0
	done := make(chan error)
	go func() {
		done <- l.poller.Watch(ctx, 10*time.Millisecond, PassOptions{}, func(*Summary, error) {
			passes++
			if passes == 3 {
				cancel()
			}
		})
	}()
	select {
	case err := <-done:
		if err != nil || passes < 3 {
			t.Fatalf("watch: %v after %d passes", err, passes)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop")
	}
}

// Submitting: only an open cloud_subscription session, once; a failed
// submit ends the session failed, never ready.
func TestSubmitter(t *testing.T) {
	l := newLoop(t)
	ctx := context.Background()
	local := *l.session()
	local.RunnerMode = config.ModeLocalWorktree
	if _, err := l.sub.Submit(ctx, &local, SubmitOptions{Env: "env_1", Prompt: "p"}); fail.KindOf(err) != fail.Refused {
		t.Fatalf("a local session: %v", err)
	}
	sess := l.session()
	for _, o := range []SubmitOptions{{Prompt: "p"}, {Env: "-x", Prompt: "p"}, {Env: "e", Prompt: "  "}, {Env: "e", Prompt: "p", Attempts: 5},
		{Env: "e", Prompt: "p", Branch: "a b"}} {
		if _, err := l.sub.Submit(ctx, sess, o); fail.KindOf(err) != fail.Usage {
			t.Errorf("%+v: %v", o, err)
		}
	}
	task := l.submit(sess)
	if task.Branch != "main" || task.Title != "do it" || task.Attempts != 1 {
		t.Fatalf("task %+v", task)
	}
	if _, err := l.sub.Submit(ctx, l.sess(sess.ID), SubmitOptions{Env: "env_1", Prompt: "again"}); fail.KindOf(err) != fail.Refused ||
		!strings.Contains(err.Error(), "already submitted") {
		t.Fatalf("second submit: %v", err)
	}

	bad := l.session()
	l.client.fail("submit", &Error{Class: Permanent, Op: "codex cloud exec", Msg: "codex is not signed in", Fix: fixLogin})
	_, err := l.sub.Submit(ctx, bad, SubmitOptions{Env: "env_1", Prompt: "p"})
	if fail.KindOf(err) != fail.Failed || !strings.Contains(err.Error(), "codex login") || !strings.Contains(err.Error(), "permanent") {
		t.Fatalf("failed submit: %v", err)
	}
	s := l.sess(bad.ID)
	if s.Status != store.StatusFailed || s.EndReason != store.ReasonSubmitFailed || !strings.Contains(s.Error, "codex login") {
		t.Fatalf("after a failed submit: %s (%s) %q", s.Status, s.EndReason, s.Error)
	}
	if _, err := l.st.CloudTaskOf(ctx, bad.ID); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("a failed submit left a task: %v", err)
	}
	if cl, _ := l.st.Claims(ctx); len(cl) != 0 {
		t.Fatalf("claims left: %v", cl)
	}
}
