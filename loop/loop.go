// Package loop is the governed loop in one command (`xmode run`,
// docs/agents.md, "The loop"): objective → plan → sandbox → evidence → change
// request, recorded as a run. It only strings the other packages together:
// sandbox creates and stops the session, plans runs the steps (agents among
// them), and a ChangeRequester freezes what the sandbox ended with.
package loop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// ChangeRequester builds a change request from what a session's worktree
// holds against its base commit (docs/change-requests.md) and returns its ID.
// Issue 12's changes package is the one xmode uses (cmd); tests bring their
// own.
type ChangeRequester interface {
	Create(ctx context.Context, sess *store.Session, title, message string) (crID string, err error)
}

// Loop runs the loop against one storage root.
type Loop struct {
	Svc   *sandbox.Service
	Plans *plans.Runner
	CR    ChangeRequester
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
	// Error says why the run failed (a step, or xmode itself).
	Error string `json:"error,omitempty"`
}

// DefaultAgent is the kind of the default agent step when --agent is not
// given.
const DefaultAgent = agents.Codex

// Run runs the loop once. The returned error is xmode's own failure; when
// the run got as far as having an ID, the Result says what it left. The
// exit status is Result.ExitCode: the first failing required step's (see
// runStatus).
func (l *Loop) Run(ctx context.Context, o Options) (*Result, error) {
	if strings.TrimSpace(o.Objective) == "" {
		return nil, fail.Usagef("%s is required: say what the agent is to do", fail.Objective)
	}
	if o.Agent != "" {
		if err := agents.CheckKind(o.Agent); err != nil {
			return nil, err
		}
	}
	var plan *plans.Plan
	source := ""
	if o.PlanFile != "" {
		var err error
		if plan, err = plans.Load(o.PlanFile); err != nil {
			return nil, err
		}
		source = o.PlanFile
		if err := plans.Check(plan, l.planOptions(o)); err != nil {
			return nil, err
		}
	}
	// What can be known to fail is refused before a session exists.
	for _, s := range l.knownAgents(plan, o.Agent) {
		if err := agents.Preflight(l.Svc.Cfg, s.Agent, s.Model); err != nil {
			return nil, err
		}
	}
	o.Create.Loop = &store.NewLoop{Objective: o.Objective}
	// A proxied sandbox reaches its agents' API hosts (and gets their keys
	// at the edge) and what a -f plan's network: asks, from the start.
	var kinds []string
	for _, s := range l.knownAgents(plan, o.Agent) {
		kinds = append(kinds, s.Agent)
	}
	o.Create.EgressIfProxied = append(append(o.Create.EgressIfProxied, plan.Source()...), agents.NetworkSources(kinds, l.getenv())...)
	sess, err := l.Svc.Create(ctx, o.Create)
	if err != nil {
		return nil, err
	}
	res := &Result{RunID: sess.RunID, SessionID: sess.ID, Kept: o.Keep, Steps: []plans.Outcome{}}
	ran := false // the plan ran (some of) its steps
	failedStep := ""
	l.note("run %s: session %s (%s engine), %s at %s", sess.RunID, sess.ID, sess.Engine, sess.Repo, shortSHA(sess.BaseCommit))

	loopErr := func() error {
		if plan == nil {
			if plan, source, err = l.defaultPlan(sess, o.Agent); err != nil {
				return err
			}
		}
		res.PlanSource = source
		if err := l.Svc.Store.SetRunPlan(ctx, sess.RunID, plan.JSON(), source); err != nil {
			return err
		}
		rep, err := l.Plans.Run(ctx, sess, plan, l.planOptions(o))
		if rep != nil {
			res.Steps, res.ExitCode, failedStep, ran = rep.Steps, runStatus(rep), rep.Failed, true
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
		cr, err := l.CR.Create(ctx, sess, title(o.Objective), message(o.Objective, sess.RunID, res.Steps))
		if err != nil {
			loopErr = errors.Join(loopErr, fmt.Errorf("build the change request: %w", err))
		}
		res.CR = cr
	}
	if !o.Keep {
		if _, err := l.Svc.Stop(end, sess, true); err != nil {
			loopErr = errors.Join(loopErr, fmt.Errorf("stop session %s: %w", sess.ID, err))
		} else {
			l.note("stopped %s; evidence kept in %s", sess.ID, sess.RunDir)
		}
	}
	res.Status, res.Error = outcome(plan, failedStep, res)
	if loopErr != nil {
		res.Status, res.Error = store.RunFailed, loopErr.Error()
		if res.ExitCode == 0 {
			res.ExitCode = fail.ExitCode(loopErr)
			if errors.Is(loopErr, errInterrupted) {
				res.ExitCode = 130
			}
		}
	}
	if err := l.Svc.Store.FinishLoopRun(end, sess.RunID, store.LoopEnd{
		Status: res.Status, ExitCode: res.ExitCode, CR: res.CR, Error: res.Error, Finished: l.Svc.Now(),
	}); err != nil {
		return res, err
	}
	if loopErr != nil && !errors.Is(loopErr, errInterrupted) {
		return res, loopErr
	}
	return res, nil
}

// runStatus is the run's exit status for its plan's report: the first
// failing required step's status, but 1 when the step's own status is one
// of xmode's (2 usage … 5 engine unavailable) — a dash script that is not
// there exits 2, a failing make 2 — which a script would read as a mistake
// of its command line; that step's outcome keeps its own status. A step
// xmode could not start keeps the kind of xmode's failure.
func runStatus(rep *plans.Report) int {
	for _, s := range rep.Steps {
		if s.Step != rep.Failed || s.ExitCode == nil || *s.ExitCode != rep.ExitCode {
			continue
		}
		for _, k := range fail.Kinds() {
			if k != fail.Failed && k.ExitCode() == rep.ExitCode {
				return fail.Failed.ExitCode()
			}
		}
	}
	return rep.ExitCode
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
// if there is one.
func (l *Loop) defaultPlan(sess *store.Session, kind string) (*plans.Plan, string, error) {
	worktree, err := l.Svc.Guard.CheckWorktree(sess.RunID, sess.WorktreePath)
	if err != nil {
		return nil, "", err
	}
	repo, err := plans.LoadWorktree(worktree)
	if err != nil {
		return nil, "", err
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
	p.Steps = append(p.Steps, repo.Steps...)
	return p, "default + " + plans.FileName, nil
}

func (l *Loop) note(format string, args ...any) {
	if l.Notes != nil {
		fmt.Fprintf(l.Notes, format+"\n", args...)
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
