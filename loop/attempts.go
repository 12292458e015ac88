package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/runview"
	"github.com/xmode/xmode/store"
)

// DefaultParallel is how many of n attempts run at once when --parallel
// is not given: two per core — an attempt spends most of its time waiting
// (on an agent's model, on git, the engine and the disk), so two share a
// core well — and never more than n. The quota is checked for all n before
// any starts (runAttempts), so it bounds nothing further here.
func DefaultParallel(n int) int {
	return min(n, 2*runtime.NumCPU())
}

// runAttempts runs the plan in n sandboxes from one base, at most
// Parallel at a time, as a run of attempts: a run of its own whose
// attempts are runs of the loop naming it (docs/agents.md, "Attempts").
// The first attempt's sandbox is made first, so that the others start
// from its base commit; n sandboxes beyond the user's quota are refused
// before any starts (exit 4).
func (l *Loop) runAttempts(ctx context.Context, o Options, pr *prepared) (*Result, error) {
	n := pr.attempts
	if err := l.Svc.Store.CheckRoomFor(ctx, l.Svc.Cfg.User, l.Svc.Cfg.MaxOpen, n, l.Svc.Now()); err != nil {
		return nil, err
	}
	parallel := o.Parallel
	if parallel == 0 {
		parallel = DefaultParallel(n)
	}
	parallel = min(parallel, n)
	parent := store.NewRunID()
	if err := l.Svc.Store.NewAttempts(ctx, parent, o.Objective, n, l.Svc.Now().UTC()); err != nil {
		return nil, err
	}
	if pr.plan != nil {
		if err := l.Svc.Store.SetRunPlan(ctx, parent, pr.plan.JSON(), pr.source); err != nil {
			return nil, err
		}
	}
	note(l.Notes, "run %s: %d attempts, %d at a time", parent, n, parallel)
	res := &Result{RunID: parent, Steps: []plans.Outcome{}, Kept: o.Keep, PlanSource: pr.source}
	out := &lineWriter{w: l.Notes}

	results := make([]*Result, n)
	errs := make([]error, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	start := func(i int, o Options, at attempt) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i], errs[i] = l.runOne(ctx, o, pr, at, out.prefixed(fmt.Sprintf("[attempt %d] ", i+1)))
		}()
	}
	// The first attempt's sandbox fixes the base; the others are made once
	// it exists, from its repository and ref (each checks it got its base).
	created := make(chan *store.Session, 1)
	start(0, o, attempt{parent: parent, n: 1, of: n, created: created})
	first := <-created
	if first != nil {
		if err := l.Svc.Store.SetRunBase(ctx, parent, first.Repo, first.Ref, first.Project, first.BaseCommit); err != nil {
			errs[0] = errors.Join(errs[0], err)
		}
		rest := o
		rest.Create.Ref = first.Ref
		if rest.Create.Repo != "" {
			rest.Create.Repo = first.Repo
		}
		for i := 1; i < n && ctx.Err() == nil; i++ {
			start(i, rest, attempt{parent: parent, n: i + 1, of: n, base: first.BaseCommit})
		}
	}
	wg.Wait()

	end := context.WithoutCancel(ctx)
	ranked, err := runview.Rank(end, l.Svc.Store, parent)
	if err != nil {
		return res, err
	}
	res.Ranking = ranked
	res.Status, res.ExitCode, res.Error = attemptsOutcome(ctx, ranked, results, errs, first == nil)
	if err := l.Svc.Store.FinishLoopRun(end, parent, store.LoopEnd{
		Status: res.Status, ExitCode: res.ExitCode, Error: res.Error, Finished: l.Svc.Now(),
	}); err != nil {
		return res, err
	}
	if first == nil {
		return res, errs[0] // the first sandbox could not be made: nothing ran
	}
	return res, nil
}

// attemptsOutcome is how a run of attempts ends: in review when an
// attempt has a change request, no-change when every attempt ended so,
// failed otherwise; its exit status is its best attempt's (Rank), 130 when
// interrupted.
func attemptsOutcome(ctx context.Context, ranked []runview.Attempt, results []*Result, errs []error, none bool) (status string, code int, why string) {
	var reasons []string
	noChange := 0
	for i, r := range results {
		switch {
		case r == nil && errs[i] != nil:
			reasons = append(reasons, fmt.Sprintf("attempt %d: %v", i+1, errs[i]))
		case r == nil:
			reasons = append(reasons, fmt.Sprintf("attempt %d did not start", i+1))
		case r.Status == store.RunNoChange:
			noChange++
		case r.Status == store.RunFailed:
			reasons = append(reasons, fmt.Sprintf("attempt %d: %s", i+1, r.Error))
		}
	}
	if len(ranked) > 0 && ranked[0].ExitCode != nil {
		code = *ranked[0].ExitCode
	}
	switch {
	case ctx.Err() != nil:
		return store.RunFailed, 130, "interrupted: the running attempts' steps were ended and their evidence kept"
	case none:
		return store.RunFailed, fail.ExitCode(errs[0]), strings.Join(reasons, "; ")
	case slices.ContainsFunc(ranked, func(a runview.Attempt) bool { return a.CR != "" }):
		return store.RunReview, code, ""
	case noChange == len(results):
		return store.RunNoChange, code, ""
	}
	if code == 0 {
		code = fail.Failed.ExitCode()
	}
	return store.RunFailed, code, "every attempt failed: " + strings.Join(reasons, "; ")
}

// lineWriter writes whole lines to w, one writer's line at a time, so the
// notes of attempts running side by side do not cut into each other.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// prefixed is a writer whose lines go to w after prefix; nil when w is.
func (l *lineWriter) prefixed(prefix string) io.Writer {
	if l.w == nil {
		return nil
	}
	return &prefixWriter{l: l, prefix: prefix}
}

type prefixWriter struct {
	l      *lineWriter
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		p.l.mu.Lock()
		_, err := fmt.Fprintf(p.l.w, "%s%s\n", p.prefix, p.buf[:i])
		p.l.mu.Unlock()
		p.buf = p.buf[i+1:]
		if err != nil {
			return len(b), err
		}
	}
}
