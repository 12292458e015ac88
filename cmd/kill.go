package cmd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// killOptions are `sandbox kill`'s session, step and flags.
type killOptions struct {
	session, step, signal string
}

func (a *App) newKill() *cobra.Command {
	var o killOptions
	cmd := &cobra.Command{
		Use:   "kill SESSION STEP [--signal SIG]",
		Short: "End a running step: a background one, or another terminal's",
		Long: `End one running step of a session — a background step (` + "`exec --detach`" + `) or
another terminal's — as ` + "`--timeout`" + ` or Ctrl-C end one: the signal (TERM unless
--signal says otherwise) and CONT to the step's processes, KILL to whatever
is left 5 seconds later. Like ` + "`docker stop`" + `, it ends the step whatever the
signal; --signal KILL ends it at once, as ` + "`docker kill`" + ` does.

STEP is its number, or its name (see ` + "`sandbox logs`" + `). The step is recorded
"stopped_by": "sandbox kill", and its result says how it ended, as for any
signal (143 for TERM, 130 for INT, 137 when it had to be KILLed); another
terminal's ` + "`sandbox exec`" + ` says it was stopped and exits with that status.
kill returns once the step's end is recorded, and prints the step's number
(with --json, the step: docs/reference.md, "Step").

EXIT STATUS
  0 the signal was delivered and the step ended; 2 a bad signal; 3 no such
  session or step; 4 the step is not running (finished or lost); 5 the
  engine is unavailable.` + pipeExitHelp,
		Example: `  xmode sandbox kill sbx_7k2m9q4x 3
  xmode sandbox kill 7k2m web --signal INT   # as Ctrl-C would
  xmode sandbox kill 7k2m 3 -s KILL          # at once`,
		Args:              exactArgs(2, "a session and a step: xmode sandbox kill SESSION STEP"),
		ValidArgsFunction: a.completeSteps,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session, o.step = args[0], args[1]
			return a.runKill(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVarP(&o.signal, "signal", "s", "TERM", "the first signal: a name (TERM, SIGINT, hup) or a number")
	return cmd
}

func (a *App) runKill(ctx context.Context, o killOptions) error {
	sig, err := parseSignal(o.signal)
	if err != nil {
		return err
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	steps, err := sessionSteps(ctx, svc.Store, sess)
	if err != nil {
		return err
	}
	st, err := pickStep(sess, steps, o.step)
	if err != nil {
		return err
	}
	if err := svc.KillStep(ctx, sess, st.Seq, sig); err != nil {
		return err
	}
	row, err := svc.Step(ctx, sess, st.Seq)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(svc.ViewStep(row))
	}
	fmt.Fprintln(a.Out, row.Seq)
	if row.State == store.StateRunning {
		a.info("xmode: sent %s to step %d (%s); its xmode has not recorded its end yet", unix.SignalName(sig), row.Seq, row.Name)
	} else {
		a.info("xmode: step %d (%s) ended: %s", row.Seq, row.Name, stepExit(row))
	}
	return nil
}

// parseSignal reads --signal as kill(1) and docker do: a name with or
// without SIG, in any case, or a number.
func parseSignal(s string) (syscall.Signal, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if n, err := strconv.Atoi(name); err == nil {
		if n < 1 || n > 64 {
			return 0, fail.Usagef("--signal %s: a signal's number is 1 to 64", s)
		}
		return syscall.Signal(n), nil
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fail.Usagef("--signal %q is not a signal: give a name (TERM, INT, HUP, KILL, …) or a number", s)
}

// newSupervise is the hidden command a background step's supervisor runs
// as (sandbox.SupervisorCommand): started by sandbox.ExecDetached, never by
// a person, with the step on fd 3 and its report on fd 4.
func (a *App) newSupervise() *cobra.Command {
	return &cobra.Command{
		Use:    sandbox.SupervisorCommand + " SESSION",
		Short:  "Supervise a background step (internal: started by `sandbox exec --detach`)",
		Hidden: true,
		Args:   exactArgs(1, "a session"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			handover, report := sandbox.SupervisorFiles()
			stepRunning.Store(true)
			return sandbox.Supervise(cmd.Context(), handover, report, clock)
		},
	}
}
