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
// run Parallel at once, and each answer is recorded in one transaction with
// the new transcript lines. The error return is for a pass that could not
// run, or was cancelled (with what it did so far).
func (p *Poller) Pass(ctx context.Context, o PassOptions) (*Summary, error) {
	start := time.Now()
	passStart := p.now()
	sum := &summer{s: Summary{Errors: []Failure{}}}
	if _, err := p.Store.DropStaleCloudClaims(ctx, reaper.StaleClaim); err != nil {
		return nil, err
	}
	if o.Sweep {
		n, err := p.Store.RequeueStaleCloudTasks(ctx, passStart.Add(-cmp.Or(p.StaleAfter, DefaultStaleAfter)), passStart)
		if err != nil {
			return nil, err
		}
		sum.s.Requeued = n
		if n > 0 && p.Log != nil {
			fmt.Fprintf(p.Log, "sweep: re-queued %d stale task(s)\n", n)
		}
	}
	parallel := cmp.Or(p.Parallel, DefaultParallel)
	work := make(chan *store.CloudTask)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for t := range work {
				p.process(ctx, t, sum)
			}
		})
	}
	err := p.feed(ctx, passStart, parallel, work)
	close(work)
	wg.Wait()
	out := sum.s
	out.DurationMS = time.Since(start).Milliseconds()
	if err == nil {
		err = ctx.Err()
	}
	return &out, err
}

// feed leases due tasks a batch at a time, as workers free up, so that
// another poller running at the same time shares the work.
func (p *Poller) feed(ctx context.Context, passStart time.Time, batch int, work chan<- *store.CloudTask) error {
	seen := map[string]bool{}
	h := p.holder()
	for ctx.Err() == nil {
		ts, err := p.Store.ClaimDueCloudTasks(ctx, h, passStart, batch)
		if err != nil {
			return err
		}
		fresh := 0
		for i, t := range ts {
			if seen[t.TaskID] || ctx.Err() != nil {
				// Polled already in this pass (a clock that stood still), or
				// stopping: not this pass's to do.
				p.Store.ReleaseCloudTask(context.WithoutCancel(ctx), t.TaskID, h)
				continue
			}
			seen[t.TaskID] = true
			fresh++
			select {
			case work <- t:
			case <-ctx.Done():
				for _, r := range ts[i:] {
					p.Store.ReleaseCloudTask(context.WithoutCancel(ctx), r.TaskID, h)
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

// process moves one leased task on and releases its lease.
func (p *Poller) process(ctx context.Context, t *store.CloudTask, sum *summer) {
	if t.SessionStatus != store.StatusSubmitted {
		p.settle(ctx, t, sum)
		return
	}
	res, err := p.Client.Status(ctx, t.TaskID)
	if err != nil {
		p.fail(ctx, t, err, true, sum)
		return
	}
	now := p.now()
	u := store.PollUpdate{Now: now, Polled: true, State: string(res.State), Title: res.Title, Summary: res.Summary, Transcript: res.Transcript}
	if !res.State.Terminal() {
		// Due at the next pass (a millisecond on, so not again in this one).
		next := now.Add(time.Millisecond)
		u.NextDue, u.Release = &next, true
	} else {
		// Due now until finished: a crash before the end resumes it.
		u.NextDue = &now
	}
	added, err := p.Store.RecordPoll(ctx, t.TaskID, p.holder(), u)
	if err != nil {
		p.recordFailed(ctx, t, err, sum)
		return
	}
	sum.add(func(s *Summary) { s.Polled++; s.TranscriptLines += added })
	switch res.State {
	case Ready:
		p.ready(ctx, t, res, sum)
	case Failed:
		p.failed(ctx, t, res, sum)
	default:
		sum.add(func(s *Summary) { s.Running++ })
		p.logf(t, "%s (+%d transcript lines)", res.State, added)
	}
}

// ready captures the finished task's diff (once: a capture recorded by an
// earlier, interrupted pass is kept), marks the session ready and finishes
// the task.
func (p *Poller) ready(ctx context.Context, t *store.CloudTask, res Result, sum *summer) {
	sess, err := p.Store.Get(ctx, t.SessionID)
	if err != nil {
		p.fail(ctx, t, err, false, sum)
		return
	}
	capture := t.Capture
	if capture == "" {
		patch, err := p.Client.Diff(ctx, t.TaskID)
		if err != nil {
			p.fail(ctx, t, err, false, sum)
			return
		}
		title := cmp.Or(res.Title, t.Title)
		if capture, err = p.Capturer.Capture(ctx, sess, t.TaskID, patch, title); err != nil {
			p.fail(ctx, t, fmt.Errorf("capture the diff of %s: %w", t.TaskID, err), false, sum)
			return
		}
		now := p.now()
		if _, err := p.Store.RecordPoll(ctx, t.TaskID, p.holder(), store.PollUpdate{Now: now, Capture: capture, NextDue: &now}); err != nil {
			p.recordFailed(ctx, t, err, sum)
			return
		}
	}
	if !p.end(ctx, t, sess, store.StatusReady, store.ReasonTaskReady, "", sum) {
		return
	}
	if _, err := p.Store.RecordPoll(ctx, t.TaskID, p.holder(), store.PollUpdate{Now: p.now(), Finish: true, Release: true}); err != nil {
		p.recordFailed(ctx, t, err, sum)
		return
	}
	sum.add(func(s *Summary) { s.Ready++ })
	p.logf(t, "ready: diff captured as %s", capture)
}

// failed marks the session failed with the task's error.
func (p *Poller) failed(ctx context.Context, t *store.CloudTask, res Result, sum *summer) {
	sess, err := p.Store.Get(ctx, t.SessionID)
	if err != nil {
		p.fail(ctx, t, err, false, sum)
		return
	}
	msg := cmp.Or(res.Error, "codex cloud reports the task failed")
	if !p.end(ctx, t, sess, store.StatusFailed, store.ReasonTaskFailed, msg, sum) {
		return
	}
	if _, err := p.Store.RecordPoll(ctx, t.TaskID, p.holder(), store.PollUpdate{Now: p.now(), Err: msg, Finish: true, Release: true}); err != nil {
		p.recordFailed(ctx, t, err, sum)
		return
	}
	sum.add(func(s *Summary) { s.Failed++ })
	p.logf(t, "failed: %s", msg)
}

// end ends the session; it reports whether the session did end as asked
// (a teardown whose worktree removal failed still ended the row: the reaper
// removes the worktree later).
func (p *Poller) end(ctx context.Context, t *store.CloudTask, sess *store.Session, status, reason, msg string, sum *summer) bool {
	err := p.End(ctx, sess, status, reason, msg)
	if err == nil {
		return true
	}
	cur, gerr := p.Store.Get(ctx, sess.ID)
	if gerr == nil && cur.Status == status {
		p.logf(t, "%s, but: %v", status, err)
		return true
	}
	p.fail(ctx, t, fmt.Errorf("end session %s as %s: %w", sess.ID, status, err), false, sum)
	return false
}

// settle finishes a task whose session is no longer submitted: it ended as
// the task said (a pass died between the two), or some other way
// (`sandbox stop`), and the task is abandoned.
func (p *Poller) settle(ctx context.Context, t *store.CloudTask, sum *summer) {
	state := store.TaskAbandoned
	if (t.SessionStatus == store.StatusReady && t.State == store.TaskReady) ||
		(t.SessionStatus == store.StatusFailed && t.State == store.TaskFailed) {
		state = t.State
	}
	if _, err := p.Store.RecordPoll(ctx, t.TaskID, p.holder(), store.PollUpdate{Now: p.now(), State: state, Finish: true, Release: true}); err != nil {
		p.recordFailed(ctx, t, err, sum)
		return
	}
	if state == store.TaskAbandoned {
		sum.add(func(s *Summary) { s.Abandoned++ })
	}
	p.logf(t, "finished (%s): the session is %s", state, t.SessionStatus)
}

// fail records a failed call: a transient one backs off, a permanent one
// parks the task until a sweep re-queues it. polled: it was a status call.
func (p *Poller) fail(ctx context.Context, t *store.CloudTask, err error, polled bool, sum *summer) {
	if ctx.Err() != nil {
		// Stopping (SIGINT, SIGTERM): the call was cut short, not failed.
		p.Store.ReleaseCloudTask(context.WithoutCancel(ctx), t.TaskID, p.holder())
		return
	}
	class := ClassOf(err)
	now := p.now()
	u := store.PollUpdate{Now: now, Polled: polled, Err: err.Error(), ErrClass: class.String(), Release: true}
	if class == Transient {
		next := now.Add(backoff(t.Failures + 1))
		u.NextDue = &next
	}
	if _, rerr := p.Store.RecordPoll(ctx, t.TaskID, p.holder(), u); rerr != nil {
		p.recordFailed(ctx, t, rerr, sum)
		return
	}
	sum.add(func(s *Summary) {
		s.Errors = append(s.Errors, Failure{SessionID: t.SessionID, TaskID: t.TaskID, Class: class.String(), Error: err.Error()})
		if class == Transient {
			s.TransientErrors++
		}
	})
	if class == Transient {
		p.logf(t, "transient error, retrying at %s: %v", u.NextDue.Local().Format(time.TimeOnly), err)
	} else {
		p.logf(t, "parked until a person acts and `cloud poll --sweep` re-queues it: %v", err)
	}
}

// recordFailed handles a store write that failed: a lease taken over means
// another poller has the task; anything else is reported, and the lease
// released for the next pass.
func (p *Poller) recordFailed(ctx context.Context, t *store.CloudTask, err error, sum *summer) {
	if errors.Is(err, store.ErrLeaseLost) {
		p.logf(t, "left to the poller that took its lease over")
		return
	}
	p.Store.ReleaseCloudTask(context.WithoutCancel(ctx), t.TaskID, p.holder())
	if ctx.Err() != nil {
		return
	}
	sum.add(func(s *Summary) {
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
