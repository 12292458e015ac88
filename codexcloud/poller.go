package codexcloud

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// Poller defaults.
const (
	// DefaultParallel status calls at once: codex calls wait on the network,
	// and the backend is not flooded.
	DefaultParallel = 16
	// DefaultStaleAfter is XMODE_CLOUD_STALE_AFTER's default.
	DefaultStaleAfter = 10 * time.Minute
	// Transient errors back off from backoffBase, doubling, to backoffMax.
	backoffBase = 30 * time.Second
	backoffMax  = 5 * time.Minute
	// recordWindow: the recorder gathers answers for this long into one
	// transaction (each commit rewrites the same pages, and a checkpoint
	// every ~100 pages syncs the disk).
	recordWindow = 50 * time.Millisecond
)

// Poller follows submitted tasks (the design's CodexCloud::Poller). It
// depends on the Client's Result contract only. Safe for concurrent use once
// set up; any number of pollers may run against one store.
type Poller struct {
	Store    *store.Store
	Client   Client
	Capturer DiffCapturer
	End      EndFunc
	// Parallel bounds the status calls in flight: DefaultParallel.
	Parallel int
	// StaleAfter: a sweep re-queues unfinished tasks whose last poll is
	// older (XMODE_CLOUD_STALE_AFTER): DefaultStaleAfter.
	StaleAfter time.Duration
	Log        io.Writer // one line per action; nil for silence
	Now        func() time.Time

	holderOnce sync.Once
	holderID   string
	logMu      sync.Mutex
}

// PassOptions tune one pass.
type PassOptions struct {
	// Sweep first re-queues the tasks whose last poll is older than
	// StaleAfter: parked ones, long backoffs, tasks a hung poller held.
	Sweep bool
}

// Summary is what one pass did (`cloud poll --json`).
type Summary struct {
	Polled          int       `json:"polled"`           // status calls that answered
	Running         int       `json:"running"`          // tasks still pending or running
	Ready           int       `json:"ready"`            // sessions this pass marked ready
	Failed          int       `json:"failed"`           // sessions this pass marked failed
	Abandoned       int       `json:"abandoned"`        // tasks whose session ended otherwise
	TranscriptLines int       `json:"transcript_lines"` // lines appended to threads
	Requeued        int       `json:"requeued"`         // by --sweep
	TransientErrors int       `json:"transient_errors"` // retried later with backoff
	Errors          []Failure `json:"errors"`           // every failed call, transient ones included
	DurationMS      int64     `json:"duration_ms"`
}

// Failure is one task the pass could not move on.
type Failure struct {
	SessionID string `json:"session_id"`
	TaskID    string `json:"task_id"`
	Class     string `json:"class"` // transient or permanent
	Error     string `json:"error"`
}

// Permanent lists the failures a person must act on.
func (s *Summary) Permanent() []Failure {
	var out []Failure
	for _, f := range s.Errors {
		if f.Class == store.ErrPermanent {
			out = append(out, f)
		}
	}
	return out
}

type summer struct {
	mu sync.Mutex
	s  Summary
}

func (m *summer) add(f func(*Summary)) {
	m.mu.Lock()
	f(&m.s)
	m.mu.Unlock()
}

func (p *Poller) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Poller) holder() string {
	p.holderOnce.Do(func() { p.holderID = reaper.NewHolder() })
	return p.holderID
}

func (p *Poller) logf(t *store.CloudTask, format string, args ...any) {
	if p.Log == nil {
		return
	}
	line := fmt.Sprintf("%s %s %s\n", t.SessionID, t.TaskID, fmt.Sprintf(format, args...))
	p.logMu.Lock()
	io.WriteString(p.Log, line)
	p.logMu.Unlock()
}

// Pass polls every due task once: leases are taken in batches, status calls
// run Parallel at once, and the answers are recorded in groups, each task's
// new transcript lines in the same transaction as its new state. The error
// return is for a pass that could not run, or was cancelled (with what it
// did so far).
func (p *Poller) Pass(ctx context.Context, o PassOptions) (*Summary, error) {
	start := time.Now()
	passStart := p.now()
	ps := &pass{p: p, holder: p.holder(), start: passStart, sum: &summer{s: Summary{Errors: []Failure{}}}, rec: make(chan record, 64)}
	if _, err := p.Store.DropStaleCloudClaims(ctx, reaper.StaleClaim); err != nil {
		return nil, err
	}
	if o.Sweep {
		n, err := p.Store.RequeueStaleCloudTasks(ctx, passStart.Add(-cmp.Or(p.StaleAfter, DefaultStaleAfter)), passStart)
		if err != nil {
			return nil, err
		}
		ps.sum.s.Requeued = n
		if n > 0 && p.Log != nil {
			fmt.Fprintf(p.Log, "sweep: re-queued %d stale task(s)\n", n)
		}
	}
	recorded := make(chan struct{})
	go func() {
		ps.recorder(ctx)
		close(recorded)
	}()
	parallel := cmp.Or(p.Parallel, DefaultParallel)
	work := make(chan *store.CloudTask, 4*parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for t := range work {
				ps.process(ctx, t)
			}
		})
	}
	err := ps.feed(ctx, 4*parallel, work)
	close(work)
	wg.Wait()
	close(ps.rec)
	<-recorded
	out := ps.sum.s
	out.DurationMS = time.Since(start).Milliseconds()
	if err == nil {
		err = ctx.Err()
	}
	return &out, err
}

// pass is one Pass at work.
type pass struct {
	p      *Poller
	holder string
	start  time.Time // tasks due at or before it are this pass's
	sum    *summer
	rec    chan record
}

// record is an update the recorder writes, and what to do once it is in.
type record struct {
	task *store.CloudTask
	r    store.PollRecord
	done func(added int)
}

// feed leases due tasks a batch at a time, as workers free up, so that
// another poller running at the same time shares the work.
func (ps *pass) feed(ctx context.Context, batch int, work chan<- *store.CloudTask) error {
	seen := map[string]bool{}
	for ctx.Err() == nil {
		ts, err := ps.p.Store.ClaimDueCloudTasks(ctx, ps.holder, ps.start, batch)
		if err != nil {
			return err
		}
		fresh := 0
		for i, t := range ts {
			if seen[t.TaskID] || ctx.Err() != nil {
				// Polled already in this pass (its next pass is due at this
				// one's start), or stopping: not this pass's to do.
				ps.p.Store.ReleaseCloudTask(context.WithoutCancel(ctx), t.TaskID, ps.holder)
				continue
			}
			seen[t.TaskID] = true
			fresh++
			select {
			case work <- t:
			case <-ctx.Done():
				for _, r := range ts[i:] {
					ps.p.Store.ReleaseCloudTask(context.WithoutCancel(ctx), r.TaskID, ps.holder)
				}
				return nil
			}
		}
		if fresh == 0 {
			return nil
		}
	}
	return nil
}

// recorder writes queued updates, as many as are waiting, in one
// transaction: one commit for a group of tasks instead of one each. What a
// pass learned is written even when it is being stopped.
func (ps *pass) recorder(ctx context.Context) {
	wctx := context.WithoutCancel(ctx)
	for first := range ps.rec {
		batch := []record{first}
		window := time.After(recordWindow)
	more:
		for len(batch) < 256 {
			select {
			case r, ok := <-ps.rec:
				if !ok {
					break more
				}
				batch = append(batch, r)
			case <-window:
				break more
			}
		}
		recs := make([]store.PollRecord, len(batch))
		for i, r := range batch {
			recs[i] = r.r
		}
		added, errs, err := ps.p.Store.RecordPolls(wctx, ps.holder, recs)
		for i, r := range batch {
			switch {
			case err != nil:
				ps.recordFailed(wctx, r.task, err)
			case errs[i] != nil:
				ps.recordFailed(wctx, r.task, errs[i])
			case r.done != nil:
				r.done(added[i])
			}
		}
	}
}

// process moves one leased task on; its lease is released when its last
// update is recorded.
func (ps *pass) process(ctx context.Context, t *store.CloudTask) {
	if t.SessionStatus != store.StatusSubmitted {
		ps.settle(ctx, t)
		return
	}
	res, err := ps.p.Client.Status(ctx, t.TaskID)
	if err != nil {
		ps.fail(ctx, t, err, true)
		return
	}
	now := ps.p.now()
	u := store.PollUpdate{Now: now, Polled: true, State: string(res.State), Title: res.Title, Summary: res.Summary, Transcript: res.Transcript}
	if !res.State.Terminal() {
		// Due at the next pass, whenever it starts (feed skips what this
		// one polled already).
		next := ps.start
		u.NextDue, u.Release = &next, true
		ps.rec <- record{task: t, r: store.PollRecord{TaskID: t.TaskID, Update: u}, done: func(added int) {
			ps.sum.add(func(s *Summary) { s.Polled++; s.Running++; s.TranscriptLines += added })
			ps.p.logf(t, "%s (+%d transcript lines)", res.State, added)
		}}
		return
	}
	// Due now until finished, so a crash before the end resumes it; the
	// transcript is in before the session ends.
	u.NextDue = &now
	added, err := ps.p.Store.RecordPoll(ctx, t.TaskID, ps.holder, u)
	if err != nil {
		ps.recordFailed(ctx, t, err)
		return
	}
	ps.sum.add(func(s *Summary) { s.Polled++; s.TranscriptLines += added })
	if res.State == Ready {
		ps.ready(ctx, t, res)
	} else {
		ps.failed(ctx, t, res)
	}
}

// ready captures the finished task's diff (once: a capture recorded by an
// earlier, interrupted pass is kept), marks the session ready and finishes
// the task.
func (ps *pass) ready(ctx context.Context, t *store.CloudTask, res Result) {
	p := ps.p
	sess, err := p.Store.Get(ctx, t.SessionID)
	if err != nil {
		ps.fail(ctx, t, err, false)
		return
	}
	capture := t.Capture
	if capture == "" {
		patch, err := p.Client.Diff(ctx, t.TaskID)
		if err != nil {
			ps.fail(ctx, t, err, false)
			return
		}
		title := cmp.Or(res.Title, t.Title)
		if capture, err = p.Capturer.Capture(ctx, sess, t.TaskID, patch, title); err != nil {
			ps.fail(ctx, t, fmt.Errorf("capture the diff of %s: %w", t.TaskID, err), false)
			return
		}
		now := p.now()
		if _, err := p.Store.RecordPoll(ctx, t.TaskID, ps.holder, store.PollUpdate{Now: now, Capture: capture, NextDue: &now}); err != nil {
			ps.recordFailed(ctx, t, err)
			return
		}
	}
	if !ps.end(ctx, t, sess, store.StatusReady, store.ReasonTaskReady, "") {
		return
	}
	ps.rec <- record{task: t, r: store.PollRecord{TaskID: t.TaskID, Update: store.PollUpdate{Now: p.now(), Finish: true, Release: true}},
		done: func(int) {
			ps.sum.add(func(s *Summary) { s.Ready++ })
			p.logf(t, "ready: diff captured as %s", capture)
		}}
}

// failed marks the session failed with the task's error.
func (ps *pass) failed(ctx context.Context, t *store.CloudTask, res Result) {
	sess, err := ps.p.Store.Get(ctx, t.SessionID)
	if err != nil {
		ps.fail(ctx, t, err, false)
		return
	}
	msg := cmp.Or(res.Error, "codex cloud reports the task failed")
	if !ps.end(ctx, t, sess, store.StatusFailed, store.ReasonTaskFailed, msg) {
		return
	}
	ps.rec <- record{task: t, r: store.PollRecord{TaskID: t.TaskID, Update: store.PollUpdate{Now: ps.p.now(), Err: msg, Finish: true, Release: true}},
		done: func(int) {
			ps.sum.add(func(s *Summary) { s.Failed++ })
			ps.p.logf(t, "failed: %s", msg)
		}}
}

// end ends the session; it reports whether the session did end as asked
// (a teardown whose worktree removal failed still ended the row: the reaper
// removes the worktree later).
func (ps *pass) end(ctx context.Context, t *store.CloudTask, sess *store.Session, status, reason, msg string) bool {
	err := ps.p.End(ctx, sess, status, reason, msg)
	if err == nil {
		return true
	}
	cur, gerr := ps.p.Store.Get(ctx, sess.ID)
	if gerr == nil && cur.Status == status {
		ps.p.logf(t, "%s, but: %v", status, err)
		return true
	}
	ps.fail(ctx, t, fmt.Errorf("end session %s as %s: %w", sess.ID, status, err), false)
	return false
}

// settle finishes a task whose session is no longer submitted: it ended as
// the task said (a pass died between the two), or some other way
// (`sandbox stop`), and the task is abandoned.
func (ps *pass) settle(ctx context.Context, t *store.CloudTask) {
	state := store.TaskAbandoned
	if (t.SessionStatus == store.StatusReady && t.State == store.TaskReady) ||
		(t.SessionStatus == store.StatusFailed && t.State == store.TaskFailed) {
		state = t.State
	}
	ps.rec <- record{task: t, r: store.PollRecord{TaskID: t.TaskID, Update: store.PollUpdate{Now: ps.p.now(), State: state, Finish: true, Release: true}},
		done: func(int) {
			if state == store.TaskAbandoned {
				ps.sum.add(func(s *Summary) { s.Abandoned++ })
			}
			ps.p.logf(t, "finished (%s): the session is %s", state, t.SessionStatus)
		}}
}

// fail records a failed call: a transient one backs off, a permanent one
// parks the task until a sweep re-queues it. polled: it was a status call.
func (ps *pass) fail(ctx context.Context, t *store.CloudTask, err error, polled bool) {
	if ctx.Err() != nil {
		// Stopping (SIGINT, SIGTERM): the call was cut short, not failed.
		ps.p.Store.ReleaseCloudTask(context.WithoutCancel(ctx), t.TaskID, ps.holder)
		return
	}
	class := ClassOf(err)
	now := ps.p.now()
	u := store.PollUpdate{Now: now, Polled: polled, Err: err.Error(), ErrClass: class.String(), Release: true}
	if class == Transient {
		next := now.Add(backoff(t.Failures + 1))
		u.NextDue = &next
	}
	ps.rec <- record{task: t, r: store.PollRecord{TaskID: t.TaskID, Update: u}, done: func(int) {
		ps.sum.add(func(s *Summary) {
			s.Errors = append(s.Errors, Failure{SessionID: t.SessionID, TaskID: t.TaskID, Class: class.String(), Error: err.Error()})
			if class == Transient {
				s.TransientErrors++
			}
		})
		if class == Transient {
			ps.p.logf(t, "transient error, retrying at %s: %v", u.NextDue.Local().Format(time.TimeOnly), err)
		} else {
			ps.p.logf(t, "parked until a person acts and `cloud poll --sweep` re-queues it: %v", err)
		}
	}}
}

// recordFailed handles a store write that failed: a lease taken over means
// another poller has the task; anything else is reported, and the lease
// released for the next pass.
func (ps *pass) recordFailed(ctx context.Context, t *store.CloudTask, err error) {
	if errors.Is(err, store.ErrLeaseLost) {
		ps.p.logf(t, "left to the poller that took its lease over")
		return
	}
	ps.p.Store.ReleaseCloudTask(context.WithoutCancel(ctx), t.TaskID, ps.holder)
	if ctx.Err() != nil {
		return
	}
	ps.sum.add(func(s *Summary) {
		s.Errors = append(s.Errors, Failure{SessionID: t.SessionID, TaskID: t.TaskID, Class: store.ErrPermanent, Error: err.Error()})
	})
}

// backoff is the wait after the nth transient failure in a row.
func backoff(n int) time.Duration {
	d := backoffBase
	for i := 1; i < n && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
}

// Watch runs a pass every interval until ctx ends (SIGINT, SIGTERM), and
// hands each summary, or the error of a pass that could not run, to report.
// A stop between or during passes is a clean end: nil.
func (p *Poller) Watch(ctx context.Context, interval time.Duration, o PassOptions, report func(*Summary, error)) error {
	for {
		sum, err := p.Pass(ctx, o)
		if ctx.Err() != nil {
			if sum != nil {
				report(sum, nil)
			}
			return nil
		}
		report(sum, err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}
