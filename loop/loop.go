// Package loop is the governed loop in one command (`xmode run`,
// docs/agents.md, "The loop"): objective → plan → sandbox → evidence → change
// request, recorded as a run. It only strings the other packages together:
// sandbox creates and stops the session, plans runs the steps (agents among
// them), and changes freezes what the sandbox ended with.
package loop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/runview"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// Loop runs the loop against one storage root.
type Loop struct {
	Svc     *sandbox.Service
	Plans   *plans.Runner
	Changes *changes.Service
	// Notes gets xmode's own lines (each step as it starts, the session
	// stop); nil for none. The steps' output goes to Live*.
	Notes                  io.Writer
	LiveStdout, LiveStderr io.Writer
}

// Options are `xmode run`'s inputs.
type Options struct {
	Create    sandbox.CreateOptions
	Objective string
	// Agent is the kind of the default agent step, and replaces the kind
	// of the plan's agent steps when set.
	Agent    string
	PlanFile string // -f; "" is the worktree's xmode.yaml behind the default agent step
	Keep     bool   // leave the session open
	EnvPass  []string
	// Attempts runs the plan in that many sandboxes from one base (0: the
	// plan's attempts:, else 1), Parallel at a time (0: DefaultParallel).
	Attempts, Parallel int
	// Iterate continues the change request up to that many times while
	// Reviewer (a command) asks for changes; IterateSet: --iterate was
	// given (else the plan's iterate: applies, with a reviewer).
	Iterate    int
	IterateSet bool
	Reviewer   string
}

// Result is what `xmode run` reports. The run's ID is "id", as in `run
// list --json` and `run show --json`.
type Result struct {
	RunID      string          `json:"id"`
	SessionID  string          `json:"session_id"`
	CR         string          `json:"cr_id"`
	Status     string          `json:"status"`
	ExitCode   int             `json:"exit_code"`
	PlanSource string          `json:"plan_source"`
	Steps      []plans.Outcome `json:"steps"`
	Kept       bool            `json:"session_kept"`
	// Version is the change request's newest version (0 without one).
	Version int `json:"version"`
	// Ranking is a run of attempts' attempts, best first (Rank).
	Ranking []runview.Attempt `json:"ranking,omitempty"`
	// Reviews are what a reviewer command decided, a version at a time.
	Reviews []store.Review `json:"reviews,omitempty"`
	// Error says why the run failed (a step, or xmode itself).
	Error string `json:"error,omitempty"`
}

// DefaultAgent is the kind of the default agent step when --agent is not
// given.
const DefaultAgent = agents.Codex

// prepared is what Run knows before any sandbox exists.
type prepared struct {
	plan     *plans.Plan // nil: the worktree's, read once the sandbox exists
	source   string
	attempts int
	iterate  int
}

// prepare checks what can be checked before anything is made: the
// objective, the agent, the plan given with -f, the attempts and
// iterations, the agents' preflight.
func (l *Loop) prepare(o Options) (*prepared, error) {
	if strings.TrimSpace(o.Objective) == "" {
		return nil, fail.Usagef("%s is required: say what the agent is to do", fail.Objective)
	}
	if o.Agent != "" {
		if err := agents.CheckKind(o.Agent); err != nil {
			return nil, err
		}
	}
	if o.Parallel < 0 {
		return nil, fail.Usagef("%s %d: at least 1", fail.Parallel, o.Parallel)
	}
	pr := &prepared{attempts: o.Attempts, iterate: o.Iterate}
	if o.PlanFile != "" {
		var err error
		if pr.plan, err = plans.Load(o.PlanFile); err != nil {
			return nil, err
		}
		pr.source = o.PlanFile
		if err := plans.Check(pr.plan, l.planOptions(o)); err != nil {
			return nil, err
		}
		if pr.attempts == 0 {
			pr.attempts = pr.plan.Attempts
		}
		if !o.IterateSet && o.Reviewer != "" {
			pr.iterate = pr.plan.Iterate
		}
	}
	pr.attempts = max(pr.attempts, 1)
	if err := plans.CheckAttempts(pr.attempts, pr.iterate); err != nil {
		return nil, err
	}
	if o.IterateSet && o.Iterate > 0 && strings.TrimSpace(o.Reviewer) == "" {
		return nil, fail.Usagef("%s needs %s CMD: the command that reviews each version (a person reviews with `xmode cr review` and continues with `xmode run continue`)", fail.Iterate, fail.Reviewer)
	}
	// What can be known to fail is refused before a session exists.
	for _, s := range l.knownAgents(pr.plan, o.Agent) {
		if err := agents.Preflight(l.Svc.Cfg, s.Agent, s.Model); err != nil {
			return nil, err
		}
	}
	return pr, nil
}

// Run runs the loop: once, or as a run of several attempts (runAttempts).
// The returned error is xmode's own failure; when the run got as far as
// having an ID, the Result says what it left. The exit status is
// Result.ExitCode: the plan's (plans.Report.ExitCode).
func (l *Loop) Run(ctx context.Context, o Options) (*Result, error) {
	pr, err := l.prepare(o)
	if err != nil {
		return nil, err
	}
	if pr.attempts > 1 {
		return l.runAttempts(ctx, o, pr)
	}
	return l.runOne(ctx, o, pr, attempt{}, l.Notes)
}

// attempt says which attempt of which run of attempts a run is; zero for
// a run of its own.
type attempt struct {
	parent  string
	n, of   int
	base    string // the commit every attempt must start from ("" for the first)
	created chan<- *store.Session
}

// env is what the agent sees of the loop in its environment.
func (a attempt) env(version int) []string {
	env := []string{"XMODE_VERSION=" + strconv.Itoa(version)}
	if a.n > 0 {
		env = append(env, "XMODE_ATTEMPT="+strconv.Itoa(a.n), "XMODE_ATTEMPTS="+strconv.Itoa(a.of))
	}
	return env
}

// runOne runs the loop once: a session, the plan, a change request, and
// (with a reviewer command) its next versions.
func (l *Loop) runOne(ctx context.Context, o Options, pr *prepared, at attempt, notes io.Writer) (*Result, error) {
	plan, source := pr.plan, pr.source
	create := o.Create
	create.Loop = &store.NewLoop{Objective: o.Objective, Parent: at.parent, Attempt: at.n}
	// A proxied sandbox reaches its agents' API hosts (and gets their keys
	// at the edge) and what a -f plan's network: asks, from the start.
	var kinds []string
	for _, s := range l.knownAgents(plan, o.Agent) {
		kinds = append(kinds, s.Agent)
	}
	create.EgressIfProxied = append(append(slices.Clone(create.EgressIfProxied), plan.Source()...), agents.NetworkSources(kinds, l.getenv())...)
	sess, err := l.Svc.Create(ctx, create)
	if at.created != nil {
		at.created <- sess
	}
	if err != nil {
		return nil, err
	}
	res := &Result{RunID: sess.RunID, SessionID: sess.ID, Kept: o.Keep, Steps: []plans.Outcome{}}
	ran := false // the plan ran (some of) its steps
	failedStep := ""
	note(notes, "run %s: session %s (%s engine), %s at %s", sess.RunID, sess.ID, sess.Engine, sess.Repo, shortSHA(sess.BaseCommit))
	popts := l.planOptions(o)
	popts.Progress, popts.AgentEnv = notes, at.env(1)
	if at.n > 0 {
		popts.LiveStdout, popts.LiveStderr = nil, nil // attempts run side by side: their output is in their evidence
	}

	loopErr := func() error {
		if at.base != "" && sess.BaseCommit != at.base {
			return fail.Failedf("attempt %d checked out %s, and the first attempt %s: the ref moved while the attempts started; every attempt must start from one base", at.n, shortSHA(sess.BaseCommit), shortSHA(at.base))
		}
		if plan == nil {
			if plan, source, err = l.defaultPlan(sess, o.Agent, notes); err != nil {
				return err
			}
		}
		res.PlanSource = source
		if err := l.Svc.Store.SetRunPlan(ctx, sess.RunID, plan.JSON(), source); err != nil {
			return err
		}
		rep, err := l.Plans.Run(ctx, sess, plan, popts)
		if rep != nil {
			res.Steps, res.ExitCode, failedStep, ran = rep.Steps, rep.ExitCode, rep.Failed, true
		}
		if err != nil {
			return err
		}
		if rep.Interrupted {
			return errInterrupted
		}
		return nil
	}()

	// The change request is built whatever the checks said; not when the
	// plan never ran, nor after Ctrl-C, which asks xmode to stop.
	end := context.WithoutCancel(ctx)
	if ran && !errors.Is(loopErr, errInterrupted) && ctx.Err() == nil {
		p, err := l.Changes.Create(ctx, sess, changes.CreateOptions{Title: title(o.Objective), Message: message(o.Objective, sess.RunID, res.Steps)})
		switch {
		case errors.Is(err, changes.ErrEmpty):
		case err != nil:
			loopErr = errors.Join(loopErr, fmt.Errorf("build the change request: %w", err))
		default:
			res.CR, res.Version = p.ID, 1
		}
	}
	res.Status, res.Error = outcome(plan, failedStep, res)
	// With a reviewer command, the change request goes back to the agent
	// while the reviewer asks for changes, in the same session.
	iterate := pr.iterate
	if !o.IterateSet && o.Reviewer != "" && plan != nil && pr.plan == nil {
		iterate = plan.Iterate // the repository's plan, read from the worktree
	}
	if loopErr == nil && res.CR != "" && o.Reviewer != "" && res.Status == store.RunReview {
		loopErr = l.iterate(ctx, sess, plan, o, at, iterate, res, notes)
	}
	res, err = l.finish(ctx, sess, sess.RunID, o.Keep, res, loopErr, notes)
	if len(res.Reviews) > 0 && err == nil && res.Error == "" {
		// the reviewer's last decision shows through, as run show says it
		if r, rerr := l.Svc.Store.ResolveRun(end, sess.RunID); rerr == nil {
			res.Status = r.Status
		}
	}
	return res, err
}

// finish ends a round of the loop in sess for run runID: it stops the
// session unless keep, makes xmode's own failure (loopErr) the run's, and
// records the run's end; the error returned is xmode's own failure, Ctrl-C
// aside (the result's exit status says it).
func (l *Loop) finish(ctx context.Context, sess *store.Session, runID string, keep bool, res *Result, loopErr error, notes io.Writer) (*Result, error) {
	end := context.WithoutCancel(ctx)
	if !keep {
		if _, err := l.Svc.Stop(end, sess, true); err != nil {
			loopErr = errors.Join(loopErr, fmt.Errorf("stop session %s: %w", sess.ID, err))
		} else {
			note(notes, "stopped %s; evidence kept in %s", sess.ID, sess.RunDir)
		}
	}
	if loopErr != nil {
		res.Status, res.Error = store.RunFailed, loopErr.Error()
		if res.ExitCode == 0 {
			res.ExitCode = fail.ExitCode(loopErr)
			if errors.Is(loopErr, errInterrupted) {
				res.ExitCode = 130
			}
		}
	}
	if err := l.Svc.Store.FinishLoopRun(end, runID, store.LoopEnd{
		Status: res.Status, ExitCode: res.ExitCode, CR: res.CR, Error: res.Error, Finished: l.Svc.Now(),
	}); err != nil {
		return res, err
	}
	if loopErr != nil && !errors.Is(loopErr, errInterrupted) {
		return res, loopErr
	}
	return res, nil
}

// outcome is how a run whose plan ran ends, and why (docs/agents.md, "The
// loop"). A change request goes to review whatever the checks said — the
// evidence shows them — unless the agent step itself failed: its partial
// work is kept as the change request, but the run failed. Without a change
// request there is nothing to review: no-change when every step passed,
// failed otherwise.
func outcome(plan *plans.Plan, failedStep string, res *Result) (status, reason string) {
	var failed *plans.Outcome
	for i := range res.Steps {
		if res.Steps[i].Step == failedStep && failedStep != "" {
			failed = &res.Steps[i]
		}
	}
	agent := false
	if plan != nil && failed != nil {
		for _, s := range plan.Steps {
			agent = agent || s.Name == failedStep && s.IsAgent()
		}
	}
	switch {
	case res.CR != "" && !agent:
		return store.RunReview, ""
	case failed == nil && res.ExitCode == 0:
		return store.RunNoChange, ""
	}
	why := fmt.Sprintf("step %s failed", failedStep)
	if failed == nil {
		why = "a required step failed"
	}
	if failed != nil && failed.ExitCode != nil {
		why += fmt.Sprintf(" (exit %d)", *failed.ExitCode)
	}
	if failed != nil && failed.Error != "" {
		why += ": " + failed.Error
	}
	if res.CR != "" {
		return store.RunFailed, why + "; what it changed is kept as " + res.CR
	}
	return store.RunFailed, why + "; the worktree has no change to review"
}

// knownAgents are the agent steps known before the session exists: the
// plan's, or the default step's when the plan is the repository's.
// getenv is where agents' keys are read: the service's (xmode's
// environment).
func (l *Loop) getenv() func(string) string {
	if l.Svc.Getenv != nil {
		return l.Svc.Getenv
	}
	return os.Getenv
}

func (l *Loop) knownAgents(plan *plans.Plan, kind string) []plans.Step {
	if plan == nil {
		return []plans.Step{{Agent: cmp.Or(kind, DefaultAgent)}}
	}
	var out []plans.Step
	for _, s := range plan.Steps {
		if s.IsAgent() {
			s.Agent = cmp.Or(kind, s.Agent)
			out = append(out, s)
		}
	}
	return out
}

var errInterrupted = fail.Failedf("interrupted: the running step was ended and its evidence kept")

func (l *Loop) planOptions(o Options) plans.Options {
	return plans.Options{
		Objective: o.Objective, Agent: o.Agent, EnvPass: o.EnvPass, Progress: l.Notes,
		LiveStdout: l.LiveStdout, LiveStderr: l.LiveStderr,
	}
}

// defaultPlan is the plan of a run without -f: the worktree's xmode.yaml
// when it has agent steps of its own; otherwise an agent step with the
// objective as its prompt, followed by the xmode.yaml's steps (its checks)
// if there is one. Its attempts: cannot apply (the plan is read inside
// the first sandbox): notes says so.
func (l *Loop) defaultPlan(sess *store.Session, kind string, notes io.Writer) (*plans.Plan, string, error) {
	worktree, err := l.Svc.Guard.CheckWorktree(sess.RunID, sess.WorktreePath)
	if err != nil {
		return nil, "", err
	}
	repo, err := plans.LoadWorktree(worktree)
	if err != nil {
		return nil, "", err
	}
	if repo != nil && repo.Attempts > 1 {
		note(notes, "note: %s asks for %d attempts; xmode run reads a plan's attempts before it makes a sandbox, from -f PLAN only: give %s %d", plans.FileName, repo.Attempts, fail.Attempts, repo.Attempts)
	}
	if repo != nil && repo.HasAgent() {
		return repo, plans.FileName, nil
	}
	if kind == "" {
		kind = DefaultAgent
	}
	p := &plans.Plan{Steps: []plans.Step{{Name: "agent-" + kind, Agent: kind, Prompt: "{objective}"}}}
	if repo == nil {
		return p, "default", nil
	}
	p.Attempts, p.Iterate = repo.Attempts, repo.Iterate
	p.Steps = append(p.Steps, repo.Steps...)
	return p, "default + " + plans.FileName, nil
}

// note writes one of xmode's own lines to w (nil: nowhere).
func note(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// title is the first line of the objective, at most 72 characters.
func title(objective string) string {
	t, _, _ := strings.Cut(strings.TrimSpace(objective), "\n")
	if r := []rune(t); len(r) > 72 {
		t = string(r[:71]) + "…"
	}
	return t
}

func message(objective, runID string, steps []plans.Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nxmode run %s:\n", strings.TrimSpace(objective), runID)
	for _, s := range steps {
		code := "-"
		if s.ExitCode != nil {
			code = fmt.Sprint(*s.ExitCode)
		}
		fmt.Fprintf(&b, "  %s: %s (exit %s)\n", s.Step, s.Status, code)
	}
	return b.String()
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
