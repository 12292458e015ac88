package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// ContinueOptions are `xmode run continue`'s inputs.
type ContinueOptions struct {
	Run     string // the run, any unique prefix of its ID
	Agent   string // replaces the plan's agents' kind when set
	Keep    bool   // leave the session open
	EnvPass []string
}

// Continue is `xmode run continue RUN`: it runs the run's plan again for
// its change request, which a reviewer asked to change — in the session
// of the change request's newest version while it is open, else in a fork
// of that version's tree — with the review as the agent's follow-up
// (Followup), and packages what the sandbox ends with as the change
// request's next version (docs/agents.md, "Continuing a run"). A run of
// attempts continues the one attempt that awaits a new version.
func (l *Loop) Continue(ctx context.Context, o ContinueOptions) (*Result, error) {
	if o.Agent != "" {
		if err := plans.Check(&plans.Plan{}, plans.Options{Agent: o.Agent}); err != nil {
			return nil, err
		}
	}
	r, err := l.Svc.Store.ResolveRun(ctx, o.Run)
	if err != nil {
		return nil, err
	}
	if r.Attempts > 0 {
		if r, err = l.awaitingAttempt(ctx, r); err != nil {
			return nil, err
		}
	}
	if r.Objective == "" {
		return nil, fail.Usagef("run %s is not a run of the loop (xmode run): it has no objective to continue", r.ID)
	}
	if r.CR == "" {
		return nil, fail.Refusedf("run %s has no change request to continue (status %s): start a new run", r.ID, r.Status)
	}
	newest, err := l.Changes.Open(ctx, r.CR)
	if err != nil {
		return nil, err
	}
	review, ok := awaitedReview(newest.Change)
	if !ok {
		return nil, fail.Refusedf("%s is %s: nothing asks for a new version; a reviewer asks for one with `xmode cr review %s --request-changes -m TEXT [%s PATH:LINE: TEXT]`",
			r.CR, newest.Status, r.CR, fail.Comment)
	}
	var plan plans.Plan
	if err := json.Unmarshal([]byte(r.Plan), &plan); err != nil || len(plan.Steps) == 0 {
		return nil, fail.Failedf("run %s recorded no plan to run again", r.ID)
	}
	if err := plans.Check(&plan, plans.Options{Objective: r.Objective, Agent: o.Agent}); err != nil {
		return nil, err
	}
	for _, s := range l.knownAgents(&plan, o.Agent) {
		if err := agents.Preflight(l.Svc.Cfg, s.Agent, s.Model); err != nil {
			return nil, err
		}
	}
	if err := l.Svc.Store.BeginContinue(ctx, r.ID); err != nil {
		return nil, err
	}
	end := context.WithoutCancel(ctx)
	res := &Result{RunID: r.ID, CR: r.CR, Kept: o.Keep, Steps: []plans.Outcome{}, PlanSource: r.PlanSource, Version: newest.At().Version}
	sess, forked, err := l.continueSession(ctx, r, newest)
	if err != nil {
		// Nothing ran: the run is as it was.
		was := store.LoopEnd{Status: r.Stored, CR: r.CR, Error: r.Error, Finished: l.Svc.Now()}
		if r.ExitCode != nil {
			was.ExitCode = *r.ExitCode
		}
		if r.FinishedAt != nil {
			was.Finished = *r.FinishedAt
		}
		if ferr := l.Svc.Store.FinishLoopRun(end, r.ID, was); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return nil, err
	}
	res.SessionID = sess.ID
	if forked {
		note(l.Notes, "run %s: the sandbox of version %d has ended: continuing in %s, a fork of its tree (run %s)", r.ID, newest.At().Version, sess.ID, sess.RunID)
	} else {
		note(l.Notes, "run %s: continuing in %s, the sandbox of version %d", r.ID, sess.ID, newest.At().Version)
	}
	at := attempt{n: r.Attempt}
	if r.Parent != "" && r.Attempt > 0 {
		if p, err := l.Svc.Store.ResolveRun(ctx, r.Parent); err == nil {
			at.of = p.Attempts
		}
	}
	popts := l.planOptions(Options{Objective: r.Objective, Agent: o.Agent, EnvPass: o.EnvPass})
	loopErr := l.revise(ctx, sess, &plan, popts, at, newest, review, res, l.Notes)
	// The run stays the change request's: a failed continue leaves it
	// awaiting a new version, with the reason said.
	return l.finish(ctx, sess, r.ID, o.Keep, res, loopErr, l.Notes)
}

// awaitingAttempt is the attempt of a run of attempts whose change
// request awaits a new version: there must be exactly one.
func (l *Loop) awaitingAttempt(ctx context.Context, r *store.LoopRun) (*store.LoopRun, error) {
	atts, err := l.Svc.Store.Attempts(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	var awaiting []*store.LoopRun
	var all []string
	for _, a := range atts {
		all = append(all, fmt.Sprintf("%s (attempt %d, %s)", a.ID, a.Attempt, a.Status))
		if a.Status == store.RunChangesRequested {
			awaiting = append(awaiting, a)
		}
	}
	switch len(awaiting) {
	case 1:
		return awaiting[0], nil
	case 0:
		return nil, fail.Refusedf("no attempt of run %s awaits a new version (its attempts: %s): request changes to one first (`xmode cr review CR --request-changes`)", r.ID, strings.Join(all, ", "))
	}
	var ids []string
	for _, a := range awaiting {
		ids = append(ids, fmt.Sprintf("%s (attempt %d)", a.ID, a.Attempt))
	}
	return nil, fail.Usagef("%d attempts of run %s await a new version: %s; continue one of them by its run", len(awaiting), r.ID, strings.Join(ids, ", "))
}

// awaitedReview is the review a change request's next version answers:
// its latest, when it asked for changes.
func awaitedReview(c *store.Change) (store.Review, bool) {
	if c.Status != store.ChangeChangesRequested || len(c.Reviews) == 0 {
		return store.Review{}, false
	}
	r := c.Reviews[len(c.Reviews)-1]
	return r, r.Decision == store.ChangeChangesRequested
}

// continueSession is where a continue runs: the session of the newest
// version while it is open, else a fork of that version's tree (checked
// first: a version that fails verification is not continued), whose run
// is recorded as the run's continuation.
func (l *Loop) continueSession(ctx context.Context, r *store.LoopRun, newest *changes.Package) (*store.Session, bool, error) {
	of, err := l.Svc.Store.Get(ctx, newest.At().SessionID)
	if err != nil {
		return nil, false, err
	}
	if store.CheckOpen(of, l.Svc.Now()) == nil {
		return of, false, nil
	}
	rep, err := l.Changes.Verify(ctx, newest)
	if err != nil {
		return nil, false, err
	}
	if !rep.Intact {
		pr := rep.Problems[0]
		return nil, false, fail.Failedf("%s fails verification (version %d, %s: %s): not continuing it; `xmode cr verify %s` lists every problem", newest.ID, pr.Version, pr.File, pr.Problem, newest.ID)
	}
	src, err := l.Changes.VersionSource(newest)
	if err != nil {
		return nil, false, err
	}
	sess, err := l.Svc.FromVersion(ctx, sandbox.FromVersionOptions{Of: of, Source: src,
		Title: fmt.Sprintf("version %d of %s", newest.At().Version+1, newest.ID)})
	if err != nil {
		return nil, false, fmt.Errorf("fork the tree of version %d of %s: %w", newest.At().Version, newest.ID, err)
	}
	if err := l.Svc.Store.MarkContinuation(ctx, sess.RunID, r.ID); err != nil {
		return sess, true, err
	}
	return sess, true, nil
}

// revise runs the plan in sess with review (of newest, the change
// request's newest version) as the agents' follow-up, and packages the
// next version. res gets the steps, the exit status, the status, and the
// new version; the returned error is xmode's own failure.
func (l *Loop) revise(ctx context.Context, sess *store.Session, plan *plans.Plan, popts plans.Options, at attempt, newest *changes.Package, review store.Review, res *Result, notes io.Writer) error {
	followup, err := l.Followup(newest, review)
	if err != nil {
		return err
	}
	next := newest.At().Version + 1
	popts.Followup, popts.AgentEnv, popts.Progress = followup, append(at.env(next), "XMODE_CHANGE_REQUEST="+newest.ID), notes
	res.ExitCode = 0
	rep, err := l.Plans.Run(ctx, sess, plan, popts)
	failedStep := ""
	if rep != nil {
		res.Steps, res.ExitCode, failedStep = append(res.Steps, rep.Steps...), rep.ExitCode, rep.Failed
	}
	if err != nil {
		return err
	}
	if rep.Interrupted {
		return errInterrupted
	}
	p, err := l.Changes.NewVersion(ctx, sess, newest, changes.CreateOptions{Message: message(popts.Objective, sess.RunID, res.Steps)})
	switch {
	case errors.Is(err, changes.ErrUnchanged) || errors.Is(err, changes.ErrEmpty):
		res.Status = store.RunFailed
		res.Error = fmt.Sprintf("no version %d: the worktree holds exactly version %d (the agent changed nothing); %s still awaits a new version", next, newest.At().Version, newest.ID)
		if res.ExitCode == 0 {
			res.ExitCode = fail.Failed.ExitCode()
		}
		return nil
	case err != nil:
		return fmt.Errorf("build version %d of %s: %w", next, newest.ID, err)
	}
	res.Version = p.At().Version
	note(notes, "%s: version %d (%s)", p.ID, p.At().Version, changesSummary(p))
	res.Status, res.Error = outcome(plan, failedStep, res)
	return nil
}

func changesSummary(p *changes.Package) string {
	return fmt.Sprintf("%d file(s), +%d -%d", p.At().Files, p.At().Insertions, p.At().Deletions)
}

// Followup is what an agent is told, after its prompt, when a run
// continues: the review it answers — the reviewer's note, and every
// comment on a line with that line's context in the diff — and where it
// stands (docs/agents.md, "What the agent sees").
func (l *Loop) Followup(p *changes.Package, r store.Review) (string, error) {
	ctxs, err := l.Changes.CommentContext(p, r.Comments)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Review of version %d of change request %s\n\n", p.At().Version, p.ID)
	fmt.Fprintf(&b, "%s asked for changes. The worktree holds version %d as the reviewer saw it; make the changes the review asks for, and nothing else.\n", r.Reviewer, p.At().Version)
	if note := strings.TrimSpace(r.Note); note != "" {
		fmt.Fprintf(&b, "\nThe reviewer's note:\n\n%s\n", note)
	}
	if len(r.Comments) > 0 {
		fmt.Fprintf(&b, "\nComments on lines of the diff (PATH:LINE is a line of the file as version %d has it; PATH:-LINE, a line of the base the change removed):\n", p.At().Version)
	}
	for i, c := range r.Comments {
		text := strings.TrimSpace(c.Text)
		first, rest, _ := strings.Cut(text, "\n")
		fmt.Fprintf(&b, "\nComment on %s: %s\n", changes.Where(c), first)
		if rest != "" {
			for _, l := range strings.Split(rest, "\n") {
				fmt.Fprintf(&b, "    %s\n", l)
			}
		}
		if len(ctxs[i]) > 0 {
			b.WriteString("```diff\n")
			for _, l := range ctxs[i] {
				b.WriteString(strings.ReplaceAll(l, "```", "` ` `") + "\n")
			}
			b.WriteString("```\n")
		}
	}
	return b.String(), nil
}
