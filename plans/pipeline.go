package plans

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// Outcome statuses of a plan step.
const (
	Passed         = "passed"
	Failed         = "failed"
	AllowedFailure = "failed (allowed)"
	Skipped        = "skipped" // before --from
	NotRun         = "not run" // after a failure, or an interruption
)

// Outcome is how one step of a plan went.
type Outcome struct {
	Step       string `json:"step"`
	Status     string `json:"status"`
	ExitCode   *int   `json:"exit_code"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Seq        int    `json:"seq,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Dir        string `json:"dir,omitempty"`
	// Error is why a failed step failed, in a line, when that is known (an
	// agent not signed in, its CLI missing).
	Error string `json:"error,omitempty"`
}

// Report is a pipeline's outcome. ExitCode is its exit status: the status
// of the first failing required step (0 when none failed), but 1 when that
// is one of xmode's own codes, 2 to 5 (a dash script that is not there
// exits 2, so does a failing make), which a script would read as a mistake
// of its command line — that step's Outcome keeps its own status; the
// kind of xmode's failure when a step could not start. Failed names it.
type Report struct {
	Steps       []Outcome `json:"steps"`
	ExitCode    int       `json:"exit_code"`
	Failed      string    `json:"failed_step,omitempty"`
	Interrupted bool      `json:"interrupted,omitempty"`
}

// Options are a pipeline's inputs besides the plan.
type Options struct {
	From      string // start at this step
	KeepGoing bool   // run the remaining steps after a required step failed
	// Objective fills "{objective}" in agent prompts.
	Objective string
	// Agent, when set, replaces the kind of every agent step (xmode run
	// --agent).
	Agent string
	// EnvPass names more host variables for agent steps (--env-pass).
	EnvPass []string
	// AgentEnv is more KEY=VALUE for every agent step, after the step's
	// own (the loop's XMODE_ATTEMPT, XMODE_VERSION…).
	AgentEnv []string
	// Followup follows every agent step's prompt, after a blank line: the
	// review a run continues from (docs/agents.md, "Continuing a run").
	Followup               string
	LiveStdout, LiveStderr io.Writer
	// Progress gets a line as each step starts; nil for none.
	Progress io.Writer
}

// Runner runs plans in sessions.
type Runner struct {
	Svc    *sandbox.Service
	Agents *agents.Runner
}

// Check refuses options that do not fit the plan, before anything runs.
func Check(p *Plan, o Options) error {
	if o.From != "" {
		found := false
		for _, s := range p.Steps {
			found = found || strings.EqualFold(s.Name, o.From)
		}
		if !found {
			names := make([]string, len(p.Steps))
			for i, s := range p.Steps {
				names[i] = s.Name
			}
			return fail.Usagef("%s %q: the plan has no such step (its steps: %s)", fail.From, o.From, strings.Join(names, ", "))
		}
	}
	if o.Agent != "" {
		if err := agents.CheckKind(o.Agent); err != nil {
			return err
		}
	}
	for _, s := range p.Steps {
		if s.IsAgent() && strings.Contains(s.Prompt, "{objective}") && o.Objective == "" {
			return fail.Usagef("step %q's prompt uses {objective}, and this run has none: run the plan with `xmode run --objective TEXT`", s.Name)
		}
	}
	return nil
}

// Run runs the plan's steps in order, each as a named step of the session,
// and stops at the first required step that fails (unless KeepGoing). An
// error means xmode could not go on (a step it could not start, the
// session gone, Ctrl-C); the report then says how far it got.
func (r *Runner) Run(ctx context.Context, sess *store.Session, p *Plan, o Options) (*Report, error) {
	if err := Check(p, o); err != nil {
		return nil, err
	}
	rep := &Report{}
	if err := r.planNetwork(ctx, sess, p, o); err != nil {
		return nil, err
	}
	started := o.From == ""
	stop := false
	var stopErr error
	for _, s := range p.Steps {
		started = started || strings.EqualFold(s.Name, o.From)
		out := Outcome{Step: s.Name}
		switch {
		case !started:
			out.Status = Skipped
		case stop:
			out.Status = NotRun
		default:
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "==> %s\n", s.Name)
			}
			t0 := time.Now()
			res, err := r.step(ctx, sess, s, o)
			out.DurationMS = time.Since(t0).Milliseconds()
			if res == nil {
				out.Status = Failed
				code := 125
				out.ExitCode = &code
				if rep.ExitCode == 0 {
					rep.ExitCode, rep.Failed = fail.ExitCode(err), s.Name
				}
				stop, stopErr = true, fmt.Errorf("step %s: %w", s.Name, err)
				break
			}
			out.ExitCode, out.TimedOut, out.Seq, out.Dir = &res.ExitCode, res.TimedOut, res.Seq, res.Dir
			out.Status = Passed
			if res.ExitCode != 0 {
				out.Status, out.Error = Failed, res.Why
				if out.Error == "" && res.Agent != nil {
					out.Error = res.Agent.Error
				}
				if s.AllowFailure {
					out.Status = AllowedFailure
				} else {
					if rep.ExitCode == 0 {
						rep.ExitCode, rep.Failed = res.ExitCode, s.Name
						if fail.OwnExitCode(res.ExitCode) {
							rep.ExitCode = fail.Failed.ExitCode()
						}
					}
					stop = !o.KeepGoing
				}
			}
			if ctx.Err() != nil {
				// Ctrl-C: the step was ended and recorded; nothing more runs,
				// and the plan's status is the interrupt's (128+N: 130 for
				// Ctrl-C, 143 for SIGTERM), unless an earlier step had
				// already failed it.
				stop, rep.Interrupted = true, true
				if rep.ExitCode == 0 || rep.Failed == s.Name {
					rep.ExitCode, rep.Failed = interruptStatus(ctx), s.Name
				}
			}
		}
		rep.Steps = append(rep.Steps, out)
	}
	return rep, stopErr
}

// interruptStatus is 128+N for the signal that cancelled ctx, 130 (Ctrl-C)
// when no signal is known.
func interruptStatus(ctx context.Context) int {
	var in *engine.Interrupt
	if errors.As(context.Cause(ctx), &in) {
		return 128 + int(in.Signal)
	}
	return 130
}

// planNetwork gives a proxied session what the plan's network: asks and
// its policy lacks, as a network step; a session whose network no proxy
// decides cannot hold the plan to its rules, which a note says.
func (r *Runner) planNetwork(ctx context.Context, sess *store.Session, p *Plan, o Options) error {
	if p.Network == nil {
		return nil
	}
	if sess.NetworkPolicy == nil {
		r.note(o, "the plan's network rules do not apply: session %s's network (%s) is not proxied (create it with --network allow for a policy)", sess.ID, cmp.Or(sess.Network, "the host's"))
		return nil
	}
	_, err := r.Svc.EnsureNetwork(ctx, sess, sandbox.NetworkWanted{
		Source: PlanSource, Allow: p.Network.Allow, Deny: p.Network.Deny, MayWiden: true, StepName: "plan-network",
	})
	if err != nil {
		return fmt.Errorf("the plan's network rules: %w", err)
	}
	return nil
}

// stepNetwork adds what a step's network: asks and the session's policy
// lacks, as a network step, and returns what takes it out again once the
// step has ended (nil when nothing was added): the step's rules hold while
// it runs.
func (r *Runner) stepNetwork(ctx context.Context, sess *store.Session, s Step, o Options) (func() error, error) {
	if s.Network == nil {
		return nil, nil
	}
	if sess.NetworkPolicy == nil {
		r.note(o, "step %s's network rules do not apply: session %s's network (%s) is not proxied", s.Name, sess.ID, cmp.Or(sess.Network, "the host's"))
		return nil, nil
	}
	src := StepSource(s.Name)
	name := s.Name + "-network"
	if len(name) > evidence.MaxNameLen {
		name = "network"
	}
	added, err := r.Svc.EnsureNetwork(ctx, sess, sandbox.NetworkWanted{
		Source: src, Allow: s.Network.Allow, Deny: s.Network.Deny, MayWiden: true, StepName: name,
	})
	if err != nil || added == nil || added.Step == nil {
		return nil, err
	}
	return func() error {
		_, err := r.Svc.ChangeNetwork(context.WithoutCancel(ctx), sess, sandbox.NetworkChange{RemoveSource: src, Source: src, MayWiden: true, Name: name})
		return err
	}, nil
}

func (r *Runner) note(o Options, format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "xmode: "+format+"\n", args...)
	}
}

func (r *Runner) step(ctx context.Context, sess *store.Session, s Step, o Options) (res *evidence.Result, err error) {
	restore, err := r.stepNetwork(ctx, sess, s, o)
	if err != nil {
		return nil, fmt.Errorf("its network rules: %w", err)
	}
	if restore != nil {
		defer func() {
			if rerr := restore(); rerr != nil && err == nil {
				err = fmt.Errorf("taking its network rules out again: %w", rerr)
				if res != nil {
					// The step ran; what failed is xmode's, after it.
					res = nil
				}
			}
		}()
	}
	return r.runStep(ctx, sess, s, o)
}

func (r *Runner) runStep(ctx context.Context, sess *store.Session, s Step, o Options) (*evidence.Result, error) {
	if s.IsAgent() {
		kind := s.Agent
		if o.Agent != "" {
			kind = o.Agent
		}
		prompt := strings.ReplaceAll(s.Prompt, "{objective}", o.Objective)
		if o.Followup != "" {
			prompt = strings.TrimRight(prompt, "\n") + "\n\n" + o.Followup
		}
		return r.Agents.Run(ctx, agents.Request{
			Session: sess, Kind: kind, Prompt: prompt,
			Model: s.Model, Timeout: s.Timeout, Env: append(slices.Clip(s.Env), o.AgentEnv...), EnvPass: o.EnvPass, Name: s.Name,
			LiveStdout: o.LiveStdout, LiveStderr: o.LiveStderr,
		})
	}
	return r.Svc.Exec(ctx, sess, sandbox.ExecOptions{
		Argv: s.Run, Env: s.Env, Name: s.Name, Workdir: s.Workdir, Timeout: s.Timeout,
		LiveStdout: o.LiveStdout, LiveStderr: o.LiveStderr,
	})
}
