package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

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

// runOptions are `xmode run`'s flags.
type runOptions struct {
	loop.Options
	net       networkFlags
	overrides map[string]config.Flag // the create flags that override variables
}

func (a *App) newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run --objective TEXT (--repo URL|PATH | --project P) [--ref REF] [--agent KIND] [-f PLAN] [--keep] [--attempts N [--parallel P]] [--iterate N --reviewer CMD]",
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

--attempts N runs the plan in N sandboxes from one base (claimed from the
project's pool where it has one), --parallel at a time (default: two per
core), and ends with up to N change requests, ranked: required
checks passed, then checks passed, then the smaller change. N sandboxes
beyond XMODE_SANDBOX_MAX_OPEN are refused before any starts (exit 4). Each
attempt's agent sees XMODE_ATTEMPT (1..N) and XMODE_ATTEMPTS in its
environment.

--reviewer CMD runs CMD (sh -c, on this host) on the change request: it
answers approve, request-changes or reject on its first line, then note:
and comment: PATH:LINE: TEXT lines. While it asks for changes, the agent
runs again in the same session with its review, up to --iterate N new
versions (default: the plan's iterate:, else 0). ` + "`xmode run continue RUN`" + ` does
one such round by hand, after ` + "`xmode cr review --request-changes`" + `.

STATUS
  running      the loop is at work (attempting: the attempts are)
  review       a change request awaits a reviewer (whatever the checks
               said: its evidence shows them); approved, rejected,
               changes_requested (it awaits a new version: run continue)
               or superseded once reviewed
  no-change    every step passed, and the worktree has nothing to review
  failed       the agent step failed, or a required step failed and nothing
               changed, or xmode failed; a line says why (what a failed
               agent changed is still kept as a change request)

EXIT STATUS
  the first failing required step's status (0 when every one passed; 130
  after Ctrl-C), or 1 when that status is 2-5, which are xmode's own (the
  step keeps its status in the run's steps); with --attempts, the best
  attempt's; 1 the loop failed (the change request could not be built, the
  reviewer command failed); 2 bad flag or plan, 3 not found, 4 refused
  (attempts beyond the quota), 5 engine unavailable.` + stepPipeExitHelp,
		Example: `  xmode run --repo . --objective "fix the flaky test" --agent codex
  XMODE_AGENT_COMMAND_TEMPLATE="sh '$(xmode examples)/agent.sh' {prompt_file}" \
    xmode run --repo . --objective "add a NOTES.md" -f "$(xmode examples)/xmode.yaml"
  xmode run --project web --objective "speed up the build" --attempts 4
  xmode run --repo . --objective "fix the bug" --iterate 2 --reviewer ./ci/review.sh`,
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
			o.IterateSet = cmd.Flags().Changed("iterate")
			if cmd.Flags().Changed("attempts") && o.Attempts < 1 {
				return fail.Usagef("%s %d: at least 1", fail.Attempts, o.Attempts)
			}
			if cmd.Flags().Changed("parallel") && o.Parallel < 1 {
				return fail.Usagef("%s %d: at least 1", fail.Parallel, o.Parallel)
			}
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
	f.IntVar(&o.Attempts, "attempts", 0, "run the plan in N sandboxes from one base (default: the plan's attempts:, else 1)")
	f.IntVar(&o.Parallel, "parallel", 0, "with --attempts: at most this many at a time (default: two per core)")
	f.IntVar(&o.Iterate, "iterate", 0, "with --reviewer: up to N new versions while it asks for changes (default: the plan's iterate:)")
	f.StringVar(&o.Reviewer, "reviewer", "", "a command (sh -c) that reviews each version: approve, request-changes or reject on stdout")
	cmd.AddCommand(a.newRunList(), a.newRunShow(), a.newRunContinue())
	return a.setTraits(cmd, traits{exit: exitStep})
}

// runLoop is `xmode run`: the governed loop.
func (a *App) runLoop(ctx context.Context, o runOptions) error {
	svc, err := a.service(ctx, o.overrides)
	if err != nil {
		return err
	}
	l := a.loop(svc)
	res, err := l.Run(ctx, o.Options)
	if res == nil {
		return err
	}
	a.printRunResult(res)
	return runExit(res, err)
}

// loop is the governed loop of a storage root, its notes and the steps'
// output on stderr unless --json or -q.
func (a *App) loop(svc *sandbox.Service) *loop.Loop {
	l := &loop.Loop{Svc: svc, Plans: &plans.Runner{Svc: svc, Agents: a.agents(svc)}, Changes: changesOf(svc)}
	if !a.json && !a.quiet {
		l.Notes, l.LiveStdout, l.LiveStderr = termsafe.NewWriter(a.Err), a.Err, a.Err
		if a.verbose {
			svc.Verbose = l.Notes // what each sandbox's making took
		}
	}
	return l
}

// printRunResult prints what `xmode run` and `run continue` report.
func (a *App) printRunResult(res *loop.Result) {
	switch {
	case a.json:
		_ = a.printJSON(res)
	case a.quiet:
		fmt.Fprintln(a.Out, res.RunID)
	default:
		kv := newTable(a.Out)
		kv.row("run:", res.RunID)
		if res.SessionID != "" {
			session := res.SessionID + " (stopped)"
			if res.Kept {
				session = res.SessionID + " (kept open: stop it with `xmode sandbox stop " + res.SessionID + "`)"
			}
			kv.row("session:", session)
		}
		if res.Ranking == nil {
			cr := orDash(res.CR)
			if res.Version > 1 {
				cr += fmt.Sprintf(" (version %d)", res.Version)
			}
			kv.row("cr:", cr)
		}
		kv.row("status:", a.runStatusColor(res.Status))
		if why := runWhy(res.Status, res.Error); why != "" {
			kv.row("why:", clean(why))
		}
		kv.row("plan:", clean(orDash(res.PlanSource)))
		for _, r := range res.Reviews {
			line := fmt.Sprintf("version %d: %s", r.Version, r.Decision)
			if n := len(r.Comments); n > 0 {
				line += fmt.Sprintf(" (%d comment(s))", n)
			}
			kv.row("reviewer:", line)
		}
		_ = kv.flush()
		fmt.Fprintln(a.Out)
		if res.Ranking != nil {
			_ = a.attemptsTable(res.Ranking)
			return
		}
		a.outcomeTable(res.Steps)
	}
}

// attemptsTable lists a run's attempts, best first.
func (a *App) attemptsTable(atts []runview.Attempt) error {
	t := newTable(a.Out, "RANK", "ATTEMPT", "RUN", "STATUS", "EXIT", "CR", "REQUIRED", "CHECKS", "CHANGE")
	for _, at := range atts {
		exit := "-"
		if at.ExitCode != nil {
			exit = fmt.Sprint(*at.ExitCode)
		}
		change := "-"
		if at.CR != "" {
			change = fmt.Sprintf("%d file(s) +%d -%d", at.Files, at.Insertions, at.Deletions)
		}
		t.row(fmt.Sprint(at.Rank), fmt.Sprint(at.Attempt), at.RunID, a.runStatusColor(at.Status), exit, orDash(at.CR),
			fmt.Sprintf("%d/%d", at.RequiredPassed, at.Required), fmt.Sprintf("%d/%d", at.ChecksPassed, at.Checks), change)
	}
	return t.flush()
}

// runExit is the exit of `xmode run` and `run continue`: the loop decides
// the status (a failing step's, or its own failure's); its error is only
// said.
func runExit(res *loop.Result, err error) error {
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
	case store.RunNoChange, store.RunChangesRequested, store.RunSuperseded:
		return a.paint(color.FgYellow, s)
	case store.RunFailed, store.RunRejected:
		return a.paint(color.FgRed, s)
	case store.RunRunning, store.RunAttempting:
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
	// Ranking: a run of attempts', best first; Versions: its change
	// request's (a run's that has one).
	Ranking  []runview.Attempt     `json:"ranking"`
	Versions []store.ChangeVersion `json:"versions"`
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
	// A run's sessions and steps are its own and its continuations' (the
	// forks of its change request's tree that made later versions).
	sessions, steps, err := runview.Members(ctx, svc.Store, r.ID)
	if err != nil {
		return err
	}
	var attempts []runview.Attempt
	if r.Attempts > 0 {
		if attempts, err = runview.Rank(ctx, svc.Store, r.ID); err != nil {
			return err
		}
	}
	versions := []store.ChangeVersion{}
	if r.CR != "" {
		if versions, err = svc.Store.Versions(ctx, r.CR); err != nil {
			return err
		}
	}
	var plan plans.Plan
	if r.Plan != "" {
		_ = json.Unmarshal([]byte(r.Plan), &plan)
	}
	if a.json {
		v := runView{LoopRun: r, Plan: json.RawMessage("null"), Sessions: sessions, Steps: []stepView{}, ChangeRequests: []string{},
			Ranking: nonNilSlice(attempts), Versions: versions}
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
		for _, at := range attempts {
			if at.CR != "" {
				v.ChangeRequests = append(v.ChangeRequests, at.CR)
			}
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
	if r.Parent != "" && r.Attempt > 0 {
		kv.row("Attempt:", fmt.Sprintf("%d of run %s", r.Attempt, r.Parent))
	}
	if r.Attempts == 0 {
		cr := orDash(r.CR)
		if len(versions) > 1 {
			cr += fmt.Sprintf(" (version %d)", len(versions))
		}
		kv.row("Change request:", cr)
	}
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
	if len(attempts) > 0 {
		fmt.Fprintf(a.Out, "\nAttempts (%d), best first:\n", r.Attempts)
		if err := a.attemptsTable(attempts); err != nil {
			return err
		}
	}
	if len(versions) > 1 {
		fmt.Fprintln(a.Out)
		t := newTable(a.Out, "VERSION", "SESSION", "RUN", "CHANGE", "CREATED")
		for _, v := range versions {
			t.row(fmt.Sprint(v.Version), v.SessionID, v.RunID, fmt.Sprintf("%d file(s) +%d -%d", v.Files, v.Insertions, v.Deletions), v.CreatedAt.Local().Format(time.DateTime))
		}
		if err := t.flush(); err != nil {
			return err
		}
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

// runContinueOptions are `run continue`'s flags.
type runContinueOptions struct {
	loop.ContinueOptions
}

func (a *App) newRunContinue() *cobra.Command {
	var o runContinueOptions
	cmd := &cobra.Command{
		Use: "continue RUN [--agent KIND] [--keep]",
		Example: `  xmode cr review cr_7k2m --request-changes -m "handle the empty case" --comment "src/a.go:12: return an error here"
  xmode run continue run_7k2m9q4x`,
		Short: "Run the agent again on a change request a reviewer asked to change: its next version",
		Long: `Run the run's plan again for its change request, whose latest review asked for
changes: in the sandbox of its newest version while that is open (xmode run
--keep), else in a fork of that version's tree. Each agent step's prompt is
followed by the review — the reviewer's note, and each comment on a line of
the diff with a few lines of the diff around it — and the agent sees
XMODE_VERSION (the version it makes) and XMODE_CHANGE_REQUEST in its
environment. What the sandbox ends with is the change request's next
version (` + "`xmode cr show CR`" + ` shows the newest, ` + "`xmode cr diff CR`" + ` what changed since the
one before). A run of attempts continues the attempt that awaits a new
version. The session is stopped at the end unless --keep.

EXIT STATUS
  as xmode run: the first failing required step's status (0 when every one
  passed); 1 no new version (the agent changed nothing) or the loop failed;
  2 bad argument; 3 no such run; 4 nothing awaits a new version, or another
  xmode works on the run; 5 engine unavailable.` + stepPipeExitHelp,
		Args: exactArgs(1, "one run"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Run = args[0]
			return a.runContinue(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Agent, "agent", "", "codex, claude or command (replaces the plan's agents when given)")
	f.BoolVar(&o.Keep, "keep", false, "leave the session open when the run ends")
	f.StringArrayVar(&o.EnvPass, "env-pass", nil, "pass this host variable to agent steps by name (repeatable)")
	return a.setTraits(cmd, traits{exit: exitStep})
}

// runContinue is `xmode run continue`.
func (a *App) runContinue(ctx context.Context, o runContinueOptions) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	res, err := a.loop(svc).Continue(ctx, o.ContinueOptions)
	if res == nil {
		return err
	}
	a.printRunResult(res)
	return runExit(res, err)
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
