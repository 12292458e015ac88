package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/loop"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/runview"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// changeRequests builds a run's change request with the changes package
// and tells its review state from the store.
func changeRequests(svc *sandbox.Service) crs {
	return crs{changesOf(svc)}
}

type crs struct{ svc *changes.Service }

// Create freezes the session's worktree; a worktree the plan left as it
// found it has no change to review, which is no failure of the loop.
func (c crs) Create(ctx context.Context, sess *store.Session, title, message string) (string, error) {
	p, err := c.svc.Create(ctx, sess, changes.CreateOptions{Title: title, Message: message})
	if errors.Is(err, changes.ErrEmpty) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return p.ID, nil
}

// Decision is the change request's latest review: open, approved, rejected.
func (c crs) Decision(ctx context.Context, id string) (string, error) {
	ch, err := c.svc.Store.GetChange(ctx, id)
	if err != nil {
		return "", err
	}
	return ch.Status, nil
}

// runStatus is a run's status with its change request's review applied.
func runStatus(ctx context.Context, svc *sandbox.Service, r *store.LoopRun) string {
	st, _ := runview.Status(ctx, r, changeRequests(svc))
	return st
}

// runOptions are `xmode run`'s flags.
type runOptions struct {
	loop.Options
	net       networkFlags
	overrides map[string]config.Flag // the create flags that override variables
}

func (a *App) newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run --objective TEXT (--repo URL|PATH | --project P) [--ref REF] [--agent KIND] [-f PLAN] [--keep]",
		Short: "The governed loop in one command: objective → plan → sandbox → evidence → change request",
		Long: `Create a session, run the plan in it, build a change request from what the
sandbox ended with (whatever the checks said: the evidence shows it), and
stop the session unless --keep. The plan is -f PLAN; else the repository's
xmode.yaml if it has agent steps of its own; else an agent step (--agent,
default codex) with the objective as its prompt, followed by the steps of
the repository's xmode.yaml if it has one. "{objective}" in a prompt is the
objective.

Prints the run ID, the change request's ID and a table of the steps on
stdout; the steps' output streams to stderr. Ctrl-C ends the running step
(its evidence is kept) and the session, unless --keep. ` + "`xmode run list`" + ` and
` + "`xmode run show RUN`" + ` show runs: objective, plan, status, sessions, steps,
change requests.

STATUS
  running    the loop is at work
  review     a change request awaits a reviewer (whatever the checks said:
             its evidence shows them); approved or rejected once reviewed
  no-change  every step passed, and the worktree has nothing to review
  failed     the agent step failed, or a required step failed and nothing
             changed, or xmode failed; a line says why (what a failed agent
             changed is still kept as a change request)

EXIT STATUS
  the first failing required step's status (0 when every one passed; 130
  after Ctrl-C), or 1 when that status is 2-5, which are xmode's own (the
  step keeps its status in the run's steps); 1 the loop failed (the change
  request could not be built); 2 bad flag or plan, 3 not found, 4 refused,
  5 engine unavailable.` + stepPipeExitHelp,
		Example: `  xmode run --repo . --objective "fix the flaky test" --agent codex
  XMODE_AGENT_COMMAND_TEMPLATE="sh '$(xmode examples)/agent.sh' {prompt_file}" \
    xmode run --repo . --objective "add a NOTES.md" -f "$(xmode examples)/xmode.yaml"`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return nil
			case len(suggestions(cmd, args[0])) > 0:
				return unknownCommand(cmd, args[0]) // a typo of list or show
			}
			return fail.Usagef("unexpected argument %q: the objective is --objective TEXT (list and show are the subcommands of xmode run)", args[0])
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Create.NetworkSet = cmd.Flags().Changed("network")
			o.overrides = createOverrides(cmd)
			o.Create.Egress = o.net.sources()
			return a.runLoop(cmd.Context(), o)
		},
	}
	addCreateFlags(cmd, &o.Create)
	addNetworkFlags(cmd, &o.net)
	f := cmd.Flags()
	f.StringVar(&o.Objective, "objective", "", "what the agent is to do (the prompt of the default agent step)")
	f.StringVar(&o.Agent, "agent", "", "codex, claude or command (default codex; replaces the plan's agents when given)")
	f.StringVarP(&o.PlanFile, "file", "f", "", "the plan (default: the repository's xmode.yaml behind an agent step)")
	f.BoolVar(&o.Keep, "keep", false, "leave the session open when the run ends")
	f.StringArrayVar(&o.EnvPass, "env-pass", nil, "pass this host variable to agent steps by name (repeatable)")
	cmd.AddCommand(a.newRunList(), a.newRunShow())
	return a.setTraits(cmd, traits{exit: exitStep})
}

// runLoop is `xmode run`: the governed loop.
func (a *App) runLoop(ctx context.Context, o runOptions) error {
	svc, err := a.service(ctx, o.overrides)
	if err != nil {
		return err
	}
	l := &loop.Loop{Svc: svc, Plans: &plans.Runner{Svc: svc, Agents: a.agents(svc)}, CR: changeRequests(svc)}
	if !a.json && !a.quiet {
		l.Notes, l.LiveStdout, l.LiveStderr = termsafe.NewWriter(a.Err), a.Err, a.Err
	}
	res, err := l.Run(ctx, o.Options)
	if res == nil {
		return err
	}
	switch {
	case a.json:
		_ = a.printJSON(res)
	case a.quiet:
		fmt.Fprintln(a.Out, res.RunID)
	default:
		kv := newTable(a.Out)
		kv.row("run:", res.RunID)
		session := res.SessionID + " (stopped)"
		if res.Kept {
			session = res.SessionID + " (kept open: stop it with `xmode sandbox stop " + res.SessionID + "`)"
		}
		kv.row("session:", session)
		kv.row("cr:", orDash(res.CR))
		kv.row("status:", a.runStatusColor(res.Status))
		if why := runWhy(res.Status, res.Error); why != "" {
			kv.row("why:", clean(why))
		}
		kv.row("plan:", clean(res.PlanSource))
		_ = kv.flush()
		fmt.Fprintln(a.Out)
		a.outcomeTable(res.Steps)
	}
	// The run's exit status is decided by the loop (a failing
	// step's, or its own failure's); its error is only said.
	if err != nil && res.ExitCode != 0 {
		return &statusError{err: err, code: res.ExitCode}
	}
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return exitStatus(res.ExitCode)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *App) runStatusColor(s string) string {
	switch s {
	case store.RunReview, store.RunApproved:
		return a.paint(color.FgGreen, s)
	case store.RunNoChange:
		return a.paint(color.FgYellow, s)
	case store.RunFailed, store.RunRejected:
		return a.paint(color.FgRed, s)
	case store.RunRunning:
		return a.paint(color.FgCyan, s)
	}
	return orDash(s)
}

// runListOptions are `run list`'s flags.
type runListOptions struct {
	all bool
}

func (a *App) newRunList() *cobra.Command {
	var o runListOptions
	cmd := &cobra.Command{
		Use:     "list",
		Example: `  xmode run list --json`,
		Aliases: []string{"ls"},
		Short:   "List the runs of the loop, newest first (--all adds the runs of plain sandboxes)",
		Long:    "List the runs of the loop, newest first (--all adds the runs of plain sandboxes)." + exitStatusHelp,
		Args:    exactArgs(0, "no arguments"),
		RunE:    func(cmd *cobra.Command, _ []string) error { return a.runListRuns(cmd.Context(), o) },
	}
	cmd.Flags().BoolVarP(&o.all, "all", "a", false, "include runs without an objective (made by sandbox create)")
	return cmd
}

func (a *App) runListRuns(ctx context.Context, o runListOptions) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	runs, err := svc.Store.ListRuns(ctx, o.all)
	if err != nil {
		return err
	}
	for _, r := range runs {
		r.Status = runStatus(ctx, svc, r)
	}
	if a.json {
		if runs == nil {
			runs = []*store.LoopRun{}
		}
		return a.printJSON(runs)
	}
	if a.quiet {
		for _, r := range runs {
			fmt.Fprintln(a.Out, r.ID)
		}
		return nil
	}
	now := clock()
	t := newTable(a.Out, "RUN", "STATUS", "EXIT", "CR", "CREATED", "OBJECTIVE")
	for _, r := range runs {
		exit := "-"
		if r.ExitCode != nil {
			exit = fmt.Sprint(*r.ExitCode)
		}
		t.row(r.ID, a.runStatusColor(r.Status), exit, orDash(r.CR), humanize.Ago(r.CreatedAt, now), truncate(clean(firstLine(r.Objective)), 50))
	}
	return t.flush()
}

// runView is `run show --json`.
type runView struct {
	*store.LoopRun
	Plan           json.RawMessage  `json:"plan"`
	Sessions       []*store.Session `json:"sessions"`
	Steps          []stepView       `json:"steps"`
	ChangeRequests []string         `json:"change_requests"`
}

// runShowOptions are `run show`'s run.
type runShowOptions struct {
	run string
}

func (a *App) newRunShow() *cobra.Command {
	return &cobra.Command{
		Use:     "show RUN",
		Example: `  xmode run show run_7k2m9q4x`,
		Short:   "Show a run: objective, plan, status, sessions, steps and change requests",
		Long:    "Show a run: objective, plan, status, sessions, steps and change requests." + exitStatusHelp,
		Args:    exactArgs(1, "one run"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runShowRun(cmd.Context(), runShowOptions{run: args[0]})
		},
	}
}

func (a *App) runShowRun(ctx context.Context, o runShowOptions) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	r, err := svc.Store.ResolveRun(ctx, o.run)
	if err != nil {
		return err
	}
	r.Status = runStatus(ctx, svc, r)
	sessions, err := svc.Store.RunSessions(ctx, r.ID)
	if err != nil {
		return err
	}
	steps, err := svc.Store.Steps(ctx, r.ID)
	if err != nil {
		return err
	}
	var plan plans.Plan
	if r.Plan != "" {
		_ = json.Unmarshal([]byte(r.Plan), &plan)
	}
	if a.json {
		v := runView{LoopRun: r, Plan: json.RawMessage("null"), Sessions: sessions, Steps: []stepView{}, ChangeRequests: []string{}}
		if r.Plan != "" {
			v.Plan = json.RawMessage(r.Plan)
		}
		if v.Sessions == nil {
			v.Sessions = []*store.Session{}
		}
		for _, s := range steps {
			v.Steps = append(v.Steps, viewStep(svc, s))
		}
		if r.CR != "" {
			v.ChangeRequests = append(v.ChangeRequests, r.CR)
		}
		return a.printJSON(v)
	}
	kv := newTable(a.Out)
	kv.row("Run:", r.ID)
	// The whole objective: its first line beside the label, the
	// others under it.
	for i, line := range strings.Split(strings.TrimSpace(r.Objective), "\n") {
		line = strings.TrimRight(line, " \t\r")
		switch {
		case i == 0:
			kv.row("Objective:", clean(line))
		case line == "":
			kv.row("")
		default:
			kv.row("", clean(line))
		}
	}
	kv.row("Status:", a.runStatusColor(r.Status))
	if r.ExitCode != nil {
		kv.row("Exit:", fmt.Sprint(*r.ExitCode))
	}
	kv.row("Repo:", clean(r.Repo)+" "+clean(r.Ref)+" "+shortSHA(r.BaseCommit))
	if len(plan.Steps) > 0 {
		names := make([]string, len(plan.Steps))
		for i, s := range plan.Steps {
			names[i] = s.Name
			if s.Agent != "" {
				names[i] += " (" + s.Agent + ")"
			}
		}
		kv.row("Plan:", clean(r.PlanSource)+": "+clean(strings.Join(names, ", ")))
	}
	kv.row("Change request:", orDash(r.CR))
	kv.row("Created:", r.CreatedAt.Local().Format(time.DateTime))
	if r.FinishedAt != nil {
		kv.row("Finished:", r.FinishedAt.Local().Format(time.DateTime))
	}
	if why := runWhy(r.Status, r.Error); why != "" {
		kv.row("Why:", clean(why))
	}
	if err := kv.flush(); err != nil {
		return err
	}
	if len(sessions) > 0 {
		fmt.Fprintln(a.Out)
		t := newTable(a.Out, "SESSION", "STATUS", "ENGINE", "CREATED")
		for _, s := range sessions {
			t.row(s.ID, a.status(s), s.Engine, s.CreatedAt.Local().Format(time.DateTime))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(steps) > 0 {
		fmt.Fprintln(a.Out)
		return a.stepTable(steps)
	}
	return nil
}

// runWhy is the line that says why a run ended as it did: its error when
// it failed, the reason when there was nothing to review.
func runWhy(status, err string) string {
	if status == store.RunNoChange {
		return runview.NoChange
	}
	return err
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
