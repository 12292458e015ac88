package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/sandbox"
)

// maxPromptBytes bounds a prompt read from a file or standard input: 4 MiB,
// more than any agent's context holds, so that a file given by mistake (a
// log, /dev/zero) is refused instead of read for ever (docs/agents.md).
const maxPromptBytes = 4 << 20

const stepExitHelp = `

EXIT STATUS
  the step's own status (124 when --timeout fired, 127 when the agent's CLI
  is missing where the session runs, 128+N when killed by signal N); 2 bad
  flag or plan, 3 no such session, 4 refused (session not open, an agent
  that needs the network on a session without one), 5 engine unavailable.` + stepPipeExitHelp

const pipelineExitHelp = `

EXIT STATUS
  the first failing required step's status (0 when every one passed; 124
  when its timeout fired, 127 when an agent's CLI is missing where the
  session runs, 128+N when killed by signal N: 130 after Ctrl-C), or 1 when
  that status is 2-5, which are xmode's own (the step keeps its status in
  the report); 2 bad flag or plan, 3 no such session, 4 refused (session
  not open, an agent that needs the network on a session without one), 5
  engine unavailable.` + stepPipeExitHelp

func (a *App) newAgent() *cobra.Command {
	c := parent(&cobra.Command{Use: "agent", Short: "Run coding agents bound to a sandbox's worktree",
		Example: `  xmode agent run $id --agent codex --prompt "fix the failing test"`})
	c.AddCommand(a.newAgentRun())
	return c
}

// agentRunOptions are `agent run`'s session and flags.
type agentRunOptions struct {
	session                         string
	kind, prompt, promptFile, model string
	stdin                           bool // - : the prompt is on standard input
	timeout                         time.Duration
	envPass                         []string
}

func (a *App) newAgentRun() *cobra.Command {
	var o agentRunOptions
	cmd := &cobra.Command{
		Use:   "run SESSION --agent codex|claude|command (--prompt TEXT | --prompt-file FILE | -)",
		Short: "Run an agent in a session's worktree as one step",
		Long: `Run a coding agent as one step of the session, in its worktree as the engine
sees it: codex exec -C DIR --json; claude -p --output-format stream-json
--verbose, started in DIR; or the command of XMODE_AGENT_COMMAND_TEMPLATE,
its {worktree}, {prompt_file}, {session} and {run} filled into single
arguments, never through a shell. The prompt reaches codex and claude on
standard input and the command agent as a file; it is kept as prompt.txt
beside the step's logs, with the agent's events (events.jsonl) and a summary
in result.json ("agent").

Credentials pass by name: the variables of XMODE_AGENT_ENV that are set, and
each --env-pass NAME. Their values are never recorded or shown: the step's
logs and the terminal get *** instead. codex without an API key is checked
with ` + "`codex login status`" + ` first (a step of its own), as codex exec
would otherwise wait for ever.` + stepExitHelp,
		Example: `  xmode agent run sbx_7k2m --agent codex --prompt "make the tests pass"
  xmode agent run sbx_7k2m --agent claude --prompt-file task.md --timeout 30m
  echo "add a CHANGELOG entry" | xmode agent run sbx_7k2m --agent command -`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 || len(args) > 2 || len(args) == 2 && args[1] != "-" {
				return fail.Usagef("give a session, and - to read the prompt from standard input: xmode agent run SESSION --agent KIND (--prompt TEXT | --prompt-file FILE | -)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session, o.stdin = args[0], len(args) == 2
			return a.runAgentRun(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kind, "agent", "", "codex, claude or command")
	f.StringVar(&o.prompt, "prompt", "", "the prompt")
	f.StringVar(&o.promptFile, "prompt-file", "", "read the prompt from this file, at most 4 MiB (- for standard input; a FIFO such as <(cmd) works)")
	f.StringVar(&o.model, "model", "", "model (codex -m, claude --model)")
	f.DurationVar(&o.timeout, "timeout", agents.DefaultTimeout, "end the agent's whole process tree after this long")
	f.StringArrayVar(&o.envPass, "env-pass", nil, "pass this host variable to the agent by name, its value masked everywhere (repeatable)")
	return a.setTraits(cmd, traits{exit: exitStep})
}

func (a *App) runAgentRun(ctx context.Context, o agentRunOptions) error {
	if o.kind == "" {
		return fail.Usagef("--agent is required: codex, claude or command")
	}
	if err := agents.CheckKind(o.kind); err != nil {
		return err
	}
	prompt, err := a.readPrompt(ctx, o.prompt, o.promptFile, o.stdin)
	if err != nil {
		return err
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	req := agents.Request{Session: sess, Kind: o.kind, Prompt: prompt, Model: o.model, Timeout: o.timeout, EnvPass: o.envPass}
	if !a.json {
		req.LiveStdout, req.LiveStderr = a.Out, a.Err
	}
	res, err := a.agents(svc).Run(ctx, req)
	return a.stepDone(svc.Cfg, res, err, o.timeout)
}

func (a *App) agents(svc *sandbox.Service) *agents.Runner {
	return &agents.Runner{Svc: svc, Notes: termsafe.NewWriter(a.Err)} // notes quote the agent's own errors
}

// readPrompt takes the prompt from exactly one of --prompt, --prompt-file
// and standard input.
func (a *App) readPrompt(ctx context.Context, text, file string, stdin bool) (string, error) {
	n := 0
	for _, given := range []bool{text != "", file != "", stdin} {
		if given {
			n++
		}
	}
	if n != 1 {
		return "", fail.Usagef("give the prompt once: --prompt TEXT, --prompt-file FILE or - (standard input)")
	}
	if text != "" {
		return text, nil
	}
	fromFile := file != "" && file != "-"
	name := "standard input"
	if fromFile {
		name = file
	}
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	// Opening a FIFO (`--prompt-file <(cmd)`) waits for its writer and
	// reading it, a terminal or standard input waits for its end: both
	// happen here, and a signal abandons them (a goroutine still in open(2)
	// ends with the process). An open file is closed on cancel, which ends
	// a read through Go's poller.
	go func() {
		var r io.Reader = a.In
		if fromFile {
			f, err := os.Open(file)
			if err != nil {
				done <- read{err: fail.Usagef("--prompt-file: %v", err)}
				return
			}
			defer f.Close()
			defer context.AfterFunc(ctx, func() { f.Close() })()
			r = f
		}
		b, err := io.ReadAll(io.LimitReader(r, maxPromptBytes+1))
		if err != nil {
			err = fail.Usagef("read the prompt from %s: %v", name, err)
		}
		done <- read{b, err}
	}()
	var got read
	select {
	case got = <-done:
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("read the prompt from %s: %w", name, context.Cause(ctx))
	}
	if got.err != nil {
		return "", got.err
	}
	if len(got.b) > maxPromptBytes {
		return "", fail.Usagef("the prompt in %s is larger than 4 MiB, the most an agent step takes: shorten it", name)
	}
	return string(got.b), nil
}

func (a *App) newPipeline() *cobra.Command {
	c := parent(&cobra.Command{Use: "pipeline", Short: "Run a plan's steps in a sandbox",
		Example: `  xmode pipeline run $id -f xmode.yaml`})
	c.AddCommand(a.newPipelineRun())
	return c
}

// pipelineRunOptions are `pipeline run`'s session and flags.
type pipelineRunOptions struct {
	plans.Options
	session string
	file    string // the plan; "" for the worktree's xmode.yaml
}

func (a *App) newPipelineRun() *cobra.Command {
	var o pipelineRunOptions
	cmd := &cobra.Command{
		Use: "run SESSION [-f FILE] [--from STEP] [--keep-going]",
		Example: `  xmode pipeline run $id                       # the worktree's xmode.yaml
  xmode pipeline run $id -f plan.yaml --from test --keep-going`,
		Short: "Run a plan's steps in order, each as a named step",
		Long: `Run the steps of a plan (-f FILE, else xmode.yaml at the root of the session's
worktree) in order, each as a step named after it with its own evidence;
agent steps run as ` + "`xmode agent run`" + ` does. The first required step that
fails stops the plan (--keep-going runs the rest anyway); steps with
allow_failure: true never stop it. The steps' output streams to stderr; a
table of the steps (step, status, exit, duration) goes to stdout.

A plan (docs/agents.md, "Plans"):

  steps:
    - name: implement
      agent: codex            # codex | claude | command
      prompt: "{objective}"   # the run's objective (xmode run)
    - name: test
      run: [go, test, ./...]  # an argv list; a string runs under sh -c
      timeout: 10m
      env: {GOFLAGS: -mod=mod}
      workdir: .
      allow_failure: false

An error in the plan names its line and field (exit 2).` + pipelineExitHelp,
		Args: exactArgs(1, "one session"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			return a.runPipelineRun(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "the plan (default: xmode.yaml in the worktree)")
	f.StringVar(&o.From, "from", "", "start at this step (the ones before it are skipped)")
	f.BoolVar(&o.KeepGoing, "keep-going", false, "run every step even after a required one failed")
	f.StringArrayVar(&o.EnvPass, "env-pass", nil, "pass this host variable to agent steps by name (repeatable)")
	return a.setTraits(cmd, traits{exit: exitStep})
}

func (a *App) runPipelineRun(ctx context.Context, o pipelineRunOptions) error {
	var plan *plans.Plan
	var err error
	if o.file != "" {
		if plan, err = plans.Load(o.file); err != nil {
			return err
		}
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	if plan == nil {
		wt, err := svc.Guard.CheckWorktree(sess.RunID, sess.WorktreePath)
		if err != nil {
			return err
		}
		if plan, err = plans.LoadWorktree(wt); err != nil {
			return err
		}
		if plan == nil {
			return fail.Usagef("no plan: give -f FILE, or add %s at the root of the repository", plans.FileName)
		}
	}
	if run, err := svc.Store.ResolveRun(ctx, sess.RunID); err == nil {
		o.Objective = run.Objective
	}
	if !a.json && !a.quiet {
		o.LiveStdout, o.LiveStderr, o.Progress = a.Err, a.Err, termsafe.NewWriter(a.Err) // step names are the plan's
	}
	runner := &plans.Runner{Svc: svc, Agents: a.agents(svc)}
	rep, err := runner.Run(ctx, sess, plan, o.Options)
	if rep == nil {
		return err
	}
	if a.json {
		_ = a.printJSON(rep)
	} else if !a.quiet {
		a.outcomeTable(rep.Steps)
	}
	if err != nil {
		return err
	}
	if rep.ExitCode != 0 {
		return exitStatus(rep.ExitCode)
	}
	return nil
}

func (a *App) outcomeTable(steps []plans.Outcome) {
	t := newTable(a.Out, "STEP", "STATUS", "EXIT", "DURATION")
	for _, s := range steps {
		exit, dur := "-", "-"
		if s.ExitCode != nil {
			exit = fmt.Sprint(*s.ExitCode)
			if s.TimedOut {
				exit += " (timeout)"
			}
			dur = humanize.Duration(time.Duration(s.DurationMS) * time.Millisecond)
		}
		status := s.Status
		switch s.Status {
		case plans.Passed:
			status = a.paint(color.FgGreen, status)
		case plans.Failed:
			status = a.paint(color.FgRed, status)
		case plans.AllowedFailure:
			status = a.paint(color.FgYellow, status)
		}
		t.row(clean(s.Step), status, exit, dur)
	}
	_ = t.flush()
}
