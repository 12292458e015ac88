package cmd

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// shellOptions are `sandbox shell`'s session, command and flags.
type shellOptions struct {
	sandbox.ExecOptions
	session string
}

func (a *App) newShell() *cobra.Command {
	var o shellOptions
	cmd := &cobra.Command{
		Use:   "shell SESSION [-- CMD [ARG...]]",
		Short: "An interactive terminal in a sandbox's worktree, recorded as a step",
		Long: `Open a terminal in the session's worktree: a shell (or CMD) on a pty on the
host engine, in an exec with a TTY in the session's container on docker, under
the session's limits, like ` + "`docker exec -it`" + `. Your terminal is in raw mode
while it runs: Ctrl-C, Ctrl-Z and window resizes go to the process inside.

It is a step like any other (named "shell" unless --name says otherwise): its
argv, exit status and timing are recorded, and the transcript (everything the
terminal showed) is its stdout.log (` + "`xmode sandbox logs SESSION shell`" + `).
The shell is $SHELL (else /bin/sh) on the host engine and /bin/sh in docker.

It needs a terminal: from a script, use ` + "`xmode sandbox exec`" + `.

EXIT STATUS
  the shell's (or CMD's) own status; 2 without a terminal; otherwise xmode's
  usual codes (3 no such session, 4 session not open, 5 engine unavailable).` + stepPipeExitHelp,
		Example: `  xmode sandbox shell sbx_7k2m9q4x
  xmode sandbox shell 7k2m -- python3          # any unique prefix of the ID
  xmode sandbox shell 7k2m --workdir src -- bash -l`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fail.Usagef("give a session: xmode sandbox shell SESSION [-- CMD [ARG...]]")
			}
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return fail.Usagef("unexpected %q before --: xmode sandbox shell SESSION [-- CMD [ARG...]]", args[1])
			}
			return nil
		},
		ValidArgsFunction: a.completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session, o.Argv = args[0], args[1:]
			return a.runShell(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", "", `step name (default "shell")`)
	f.StringVar(&o.Workdir, "workdir", "", "directory relative to the worktree")
	f.StringArrayVarP(&o.Env, "env", "e", nil, "KEY=VALUE for the shell, or NAME to pass this machine's value (repeatable)")
	return a.setTraits(cmd, traits{exit: exitStep, interrupted: "the shell's step was ended"})
}

func (a *App) runShell(ctx context.Context, o shellOptions) error {
	tty, err := a.openTTY("`xmode sandbox shell`")
	if err != nil {
		return err
	}
	// Checked before the terminal is made raw: a session that cannot run
	// the shell is refused with the terminal as it was.
	svc, sess, err := a.session(ctx, o.session, openSession)
	if err != nil {
		return err
	}
	if len(o.Argv) == 0 {
		o.Argv = a.defaultShell(svc.OnHost(sess))
	}
	if o.Name == "" {
		o.Name = "shell"
	}
	res, err := a.execOnTTY(ctx, svc, sess, o.ExecOptions, tty)
	return a.stepDone(svc.Cfg, res, err, o.Timeout)
}

// defaultShell is the user's $SHELL for steps that run on this host (they
// have the user's environment anyway: engine.OnHost), /bin/sh in a
// container.
func (a *App) defaultShell(onHost bool) []string {
	if onHost {
		if sh := a.Env("SHELL"); sh != "" {
			return []string{sh}
		}
	}
	return []string{"/bin/sh"}
}

// userTTY is the user's terminal while a step runs on one of its own: its
// input raw, so that every key reaches the step, and its window size
// followed.
type userTTY struct {
	in, out *os.File
	sizes   chan engine.WinSize
	state   *term.State
	stop    func()
}

// openTTY checks that xmode's standard input and output are a terminal;
// what names the command in the error.
func (a *App) openTTY(what string) (*userTTY, error) {
	in, ok := a.In.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return nil, fail.Usagef("%s needs a terminal, and standard input is not one: from a script, use `xmode sandbox exec SESSION -- CMD` (with -i to pass input)", what)
	}
	out, ok := osFile(a.Out)
	if !ok || !term.IsTerminal(int(out.Fd())) {
		return nil, fail.Usagef("%s needs a terminal, and standard output is not one: from a script, use `xmode sandbox exec SESSION -- CMD`", what)
	}
	return &userTTY{in: in, out: out, sizes: make(chan engine.WinSize, 1)}, nil
}

// start makes the terminal raw and follows its size until restore.
func (t *userTTY) start() error {
	st, err := term.MakeRaw(int(t.in.Fd()))
	if err != nil {
		return fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	t.state = st
	send := func() {
		w, h, err := term.GetSize(int(t.out.Fd()))
		if err != nil {
			return
		}
		select { // only the latest size matters
		case <-t.sizes:
		default:
		}
		t.sizes <- engine.WinSize{Rows: uint16(h), Cols: uint16(w)}
	}
	send()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-winch:
				send()
			case <-done:
				return
			}
		}
	})
	t.stop = func() {
		signal.Stop(winch)
		close(done)
		wg.Wait()
		close(t.sizes)
	}
	return nil
}

// restore gives the terminal back as it was.
func (t *userTTY) restore() {
	if t.stop != nil {
		t.stop()
		t.stop = nil
	}
	if t.state != nil {
		_ = term.Restore(int(t.in.Fd()), t.state)
		t.state = nil
	}
}

// execOnTTY runs o as a step on a terminal of its own, wired to the user's.
func (a *App) execOnTTY(ctx context.Context, svc *sandbox.Service, sess *store.Session, o sandbox.ExecOptions, tty *userTTY) (*evidence.Result, error) {
	o.TTY, o.Stdin, o.LiveStdout, o.LiveStderr, o.Resize = true, tty.in, tty.out, nil, tty.sizes
	o.LookupEnv = a.lookupEnv
	if !hasEnv(o.Env, "TERM") {
		o.Env = append(o.Env, "TERM") // this terminal's type, from here
	}
	if err := tty.start(); err != nil {
		return nil, err
	}
	stepRunning.Store(true)
	defer stepRunning.Store(false)
	defer tty.restore()
	return svc.Exec(ctx, sess, o)
}

// stepDone reports the end of a step run by exec or shell: lost evidence,
// a timeout and an OOM kill on stderr, the step as JSON with --json, and
// the step's status as xmode's.
func (a *App) stepDone(cfg *config.Config, res *evidence.Result, err error, timeout time.Duration) error {
	if res == nil {
		return err
	}
	if err != nil {
		// The command ran: its status stands, and stderr says what of its
		// evidence was lost.
		fmt.Fprintf(a.Err, "%s %s\n", a.paint(color.FgYellow, "xmode: warning:"), clean(err.Error()))
	}
	if a.json {
		// A reader that closed stdout does not change the status.
		_ = a.printJSON(res)
	}
	switch {
	case res.StoppedBy != "":
		fmt.Fprintf(a.Err, "xmode: step %d (%s) was stopped by `%s` (exit %d)\n", res.Seq, res.Name, res.StoppedBy, res.ExitCode)
	case res.TimedOut:
		fmt.Fprintf(a.Err, "xmode: step %d (%s) timed out after %s\n", res.Seq, clean(res.Name), humanize.Duration(timeout))
	case res.OOMKilled:
		fmt.Fprintf(a.Err, "xmode: step %d was OOM-killed at the %s memory limit (XMODE_SANDBOX_MEMORY)\n", res.Seq, dockerSize(cfg.Memory))
	}
	if res.ExitCode != 0 {
		return exitStatus(res.ExitCode)
	}
	return nil
}

// lookupEnv is the environment of this xmode, for --env NAME.
func (a *App) lookupEnv(name string) (string, bool) {
	v := a.Env(name)
	return v, v != ""
}

func hasEnv(env []string, name string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			return true
		}
	}
	return false
}
