// Package cmd wires xmode's commands: cobra flags in, options structs to the
// packages that do the work, and the one place that turns errors into exit
// codes (docs/reference.md, "Exit codes").
package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/internal/termsafe"
	_ "github.com/xmode/xmode/providers/docker"     // the docker engine
	_ "github.com/xmode/xmode/providers/kubernetes" // the kubernetes engine
	_ "github.com/xmode/xmode/providers/local"      // the host engine
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// Version is set at build time with -ldflags "-X github.com/xmode/xmode/cmd.Version=…".
var Version = "dev"

// clock is where the commands, and the services they open, read the time
// of day: time.Now, except in tests (SetClock).
var clock = time.Now

// SetClock makes the commands and their services read the time from now.
// A hook for tests only (cmd/xmode's test binary moves time forward so that
// TTLs and expiry are tested without sleeping): no flag or variable of
// xmode's sets it. Call it before Main.
func SetClock(now func() time.Time) { clock = now }

// App carries the streams and global flags every command shares.
type App struct {
	In       io.Reader
	Out, Err io.Writer
	Env      config.Env

	storageRoot string
	json        bool
	noColor     bool
	quiet       bool
	verbose     bool

	st      *store.Store
	traits  map[*cobra.Command]traits
	started bool // a command's run function was reached
	// exitAfterRun is set by Main: the process ends when Run returns, so
	// the store is left to the exit instead of closed (see Run).
	exitAfterRun bool
}

// exitStatus is an exit code decided by the command itself (a step's
// status, a reap with failures); nothing more is printed for it, as with
// cli/cli's SilentError.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// statusError is a failure whose exit code the command decided, said as
// any other error (docker/cli's StatusError): `xmode run` fails with the
// status of the loop, not the kind of its error.
type statusError struct {
	err  error
	code int
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// exitXmodeFailed is `sandbox exec`'s status for every failure of xmode's
// own before the command starts, as `docker run` gives 125.
const exitXmodeFailed = 125

// exitRule says how App.Run turns a command's outcome into an exit code,
// beyond fail's kinds.
type exitRule int

const (
	exitByKind     exitRule = iota // fail.ExitCode of its error; 141 when the reader of its output went away
	exitStep                       // its step's status, which a reader that went away does not change
	exitStepDocker                 // exitStep, and 125 for every failure of xmode's own (sandbox exec)
)

// traits are what App.Run needs to know of a command, set where the
// command is built (setTraits).
type traits struct {
	exit exitRule
	// interrupted says what an interrupt leaves behind, after
	// "interrupted (SIGINT): ".
	interrupted string
}

// setTraits records cmd's traits and returns cmd.
func (a *App) setTraits(cmd *cobra.Command, t traits) *cobra.Command {
	if a.traits == nil {
		a.traits = map[*cobra.Command]traits{}
	}
	a.traits[cmd] = t
	return cmd
}

// traitsOf is cmd's traits; a command without any exits by kind.
func (a *App) traitsOf(cmd *cobra.Command) traits { return a.traits[cmd] }

// Main runs xmode with os.Args and returns the process exit code.
func Main() int {
	app := &App{In: os.Stdin, Out: newPipeWriter(os.Stdout), Err: newPipeWriter(os.Stderr), Env: os.Getenv, exitAfterRun: true}
	ctx, stop := app.interrupts(context.Background())
	defer stop()
	// A closed stdout or stderr (`xmode sandbox exec ID -- cmd | head -1`)
	// must fail the write, not kill xmode with SIGPIPE before it has kept
	// the step's evidence and its status. A handler, not SIG_IGN: children
	// get the default disposition back at exec.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return app.Run(ctx, os.Args[1:])
}

// Run executes one command line and returns its exit code.
func (a *App) Run(ctx context.Context, args []string) int {
	root := a.newRoot(args)
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		// Only cobra's completion request calls completion functions, and
		// registering them visits every flag of every command: ~0.4 ms that
		// every other command line would pay for nothing.
		a.completions(root)
	}
	root.SetArgs(args)
	root.SetIn(a.In)
	root.SetOut(a.Out)
	root.SetErr(a.Err)
	cmd, err := root.ExecuteContextC(ctx)
	if a.st != nil && !a.exitAfterRun {
		// Closing the last connection checkpoints the WAL into the database
		// and deletes it (three fsyncs and an unlink), and the next command
		// then re-creates it (two more): ~4 ms of every short command on
		// these disks. A process that exits leaves every transaction
		// committed in the WAL, which SQLite is built to survive: the next
		// opener rebuilds the WAL index, and the store's auto-checkpoint
		// (every 100 pages, see store.Open) keeps that rebuild cheap.
		a.st.Close()
	}
	if err != nil && !a.json && slices.Contains(args, "--json") {
		// A flag error can come before --json was parsed: still JSON.
		a.json = true
	}
	code, report := a.exitCode(ctx, cmd, err)
	if report != nil {
		a.printError(report, code)
	}
	return code
}

// exitCode is the one place that decides xmode's exit code (docs/conventions.md,
// "Exit codes"): from the command's outcome and its exit rule.
// report is what to say on stderr (and as JSON), nil for nothing.
func (a *App) exitCode(ctx context.Context, cmd *cobra.Command, err error) (code int, report error) {
	rule := a.traitsOf(cmd).exit
	if err == nil {
		if a.brokenPipe(nil) && rule == exitByKind {
			return exitBrokenPipe, nil // what it printed was cut off
		}
		return 0, nil
	}
	var es exitStatus
	if errors.As(err, &es) {
		return int(es), nil
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.code, se.err
	}
	if code, msg, ok := a.interrupted(ctx, cmd, err); ok {
		return code, fail.Failedf("%s", msg)
	}
	if a.brokenPipe(err) && rule == exitByKind {
		return exitBrokenPipe, nil // silently, as a writer killed by SIGPIPE
	}
	var fe *fail.Error
	if !errors.As(err, &fe) && !a.started {
		// cobra's own errors before any command ran: unknown command,
		// missing argument. Unclassified errors from a running command
		// stay plain failures (exit 1).
		err = fail.Usagef("%v", err)
	}
	if rule == exitStepDocker {
		// sandbox exec: every failure of xmode's own is 125 (docker's convention).
		return exitXmodeFailed, err
	}
	return fail.ExitCode(err), err
}

// printError says what went wrong on stderr and, with --json, also as one
// JSON object on stdout, so that a script never has to read stderr:
// {"error":{"code":N,"kind":"usage|not_found|refused|engine|failed","message":"…"}}.
func (a *App) printError(err error, code int) {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = clean(l)
	}
	fmt.Fprintf(a.Err, "%s %s\n", a.paint(color.FgRed, "xmode:"), strings.Join(lines, "\n"))
	if a.json {
		type jsonError struct {
			Code    int    `json:"code"`
			Kind    string `json:"kind"`
			Message string `json:"message"`
		}
		b, _ := json.Marshal(map[string]jsonError{"error": {Code: code, Kind: fail.KindOf(err).Name(), Message: err.Error()}})
		fmt.Fprintln(a.Out, string(b))
	}
}

// newRoot builds the command tree for the command line args (nil: all of
// it).
func (a *App) newRoot(args []string) *cobra.Command {
	var version bool
	root := &cobra.Command{
		Use:           "xmode",
		Short:         "Sandboxes for coding agents: create, exec, inspect, reap",
		SilenceErrors: true,
		SilenceUsage:  true,
		Long: `xmode runs sandboxes for coding agents and the developers who supervise them:
first-class, inspectable, resource-bounded and reapable run environments,
with evidence for every step that outlives the sandbox.` + exitStatusHelp,
		Example: `  xmode                                  # getting started
  id=$(xmode sandbox create --repo .)
  xmode sandbox exec "$id" -- make test
  xmode --version --json`,
		Args: cobra.ArbitraryArgs,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			a.started = true
			if a.noColor || a.Env("NO_COLOR") != "" {
				color.NoColor = true
			}
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 0:
				return unknownCommand(cmd, args[0])
			case version:
				return a.printVersion()
			}
			return a.gettingStarted()
		},
	}
	root.SetFlagErrorFunc(flagError)
	// --version is long only: -v is --verbose everywhere (`xmode -v reap`
	// reaps, verbosely; it does not print the version).
	root.Flags().BoolVar(&version, "version", false, "print the version (with --json: as JSON)")
	pf := root.PersistentFlags()
	pf.StringVar(&a.storageRoot, "storage-root", "", "storage root (default $XMODE_STORAGE_ROOT, else ~/.local/share/xmode)")
	pf.BoolVar(&a.json, "json", false, "machine-readable output on stdout")
	pf.BoolVar(&a.noColor, "no-color", false, "no colour (also: NO_COLOR)")
	pf.BoolVarP(&a.quiet, "quiet", "q", false, "print only what scripts need")
	pf.BoolVarP(&a.verbose, "verbose", "v", false, "say more: one line per action (reap), details (create)")

	reap := func() *cobra.Command { return a.newReap("reap") }
	sandboxGroup := func(words []string) *cobra.Command {
		sb := parent(&cobra.Command{Use: "sandbox", Short: "Create, run in, inspect and stop sandboxes", Aliases: []string{"sb"},
			Example: `  xmode sandbox create --repo .
  xmode sandbox list`})
		addCommands(sb, words, leaf("create", a.newCreate), leaf("exec", a.newExec), leaf("stop", a.newStop),
			leaf("list ls", a.newList), leaf("show", a.newShow), leaf("extend", a.newExtend), leaf("reap", reap),
			leaf("shell", a.newShell), leaf("logs", a.newLogs), leaf("cp", a.newCp), leaf("diff", a.newDiff), leaf("kill", a.newKill),
			leaf("network", a.newNetwork), leaf("port", a.newPort),
			leaf("fork", a.newFork), leaf("snapshot", a.newSnapshot), leaf("snapshots", a.newSnapshots))
		return sb
	}
	// Only what the command line needs is built (see lazy.go).
	if words := commandWords(args); words == nil || len(words) > 0 {
		addCommands(root, words, group("sandbox sb", sandboxGroup), leaf("machine machines", a.newMachine), leaf("config", a.newConfig),
			leaf("doctor", a.newDoctor), leaf("version", a.newVersion), leaf("reap", reap), leaf("completion", a.newCompletion), leaf(sandbox.SupervisorCommand, a.newSupervise), leaf(EgressCommand, a.newEgress), leaf(EgressCtlCommand, a.newEgressCtl), leaf(RelayCommand, a.newRelay), leaf(sandbox.ForwarderCommand, a.newForward),
			leaf("cr change-request", a.newCR), leaf("agent", a.newAgent), leaf("pipeline", a.newPipeline), leaf("run", a.newRunCmd),
			leaf("cloud", a.newCloud), leaf("examples", a.newExamples), leaf("ui", a.newUI), leaf("mcp", a.newMCP))
	}
	return root
}

// gettingStarted is what `xmode` alone prints: the three commands a
// newcomer needs, then where to go next.
func (a *App) gettingStarted() error {
	fmt.Fprintln(a.Out, `xmode runs sandboxes for coding agents: a checkout of your repository, an
engine that runs commands in it (host processes or a hardened container),
and evidence of every step that outlives the sandbox.

Get started:`)
	t := newTable(a.Out)
	for _, l := range [][2]string{
		{`id=$(xmode sandbox create --repo .)`, "a sandbox of this repository's last commit"},
		{`xmode sandbox exec "$id" -- make test`, "run a step in it: output, status and timing are kept"},
		{`xmode sandbox stop "$id"`, "done: the worktree goes, the evidence stays"},
	} {
		t.row("  "+a.paint(color.Bold, l[0]), a.paint(color.Faint, "# "+l[1]))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.Out, `
Then: xmode sandbox shell "$id" (a terminal in it), xmode sandbox logs "$id"
(what each step printed), xmode doctor (check this machine), xmode --help.`)
	return nil
}

// The EXIT STATUS section of --help: exitStatusHelp for a command with no
// codes of its own; a command that has some lists them and ends its section
// with pipeExitHelp, or stepPipeExitHelp when it exits with a step's
// status, so that every section says what a closed pipe gives (see
// exitBrokenPipe).
const exitStatusHelp = `

EXIT STATUS
  0 success · 1 failed · 2 bad flag or value · 3 not found ·
  4 refused (quota, session not open, outside the storage root) ·
  5 engine unavailable. sandbox exec exits with the command's status
  (124 timeout, 126 not executable, 127 not found, 128+N signal N) and 125
  when xmode itself failed before the command could start.` + pipeExitHelp

const pipeExitHelp = `
  141 the reader of the output went away (| head): xmode stops, silently.`

const stepPipeExitHelp = `
  A reader of the output that went away (| head) does not change the status.`

// config loads the configuration with this command's flag overrides.
func (a *App) config(overrides map[string]config.Flag) (*config.Config, error) {
	if overrides == nil {
		overrides = map[string]config.Flag{}
	}
	if a.storageRoot != "" {
		overrides["XMODE_STORAGE_ROOT"] = config.Flag{Name: "--storage-root", Value: a.storageRoot}
	}
	return config.Load(a.Env, overrides)
}

// service loads the configuration and opens the store.
func (a *App) service(ctx context.Context, overrides map[string]config.Flag) (*sandbox.Service, error) {
	cfg, err := a.config(overrides)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.StorageRoot)
	if err != nil {
		return nil, err
	}
	a.st = st
	svc := &sandbox.Service{Cfg: cfg, Store: st, Guard: fsguard.Guard{Root: cfg.StorageRoot}, Clock: clock, Getenv: a.Env}
	if !a.json && !a.quiet && isTerminal(a.Err) {
		svc.Progress = a.Err
	}
	return svc, nil
}

// sessionWant is the state a command needs its session in.
type sessionWant int

const (
	// anySession: any state; the service refuses what it cannot do with
	// an ended session, in its own words (stop, show, logs, cp, exec).
	anySession sessionWant = iota
	// openSession: open and not expired (store.CheckOpen), refused with
	// exit 4 before the command begins (shell: before the terminal is
	// made raw).
	openSession
)

// session is the preamble of every command that acts on one session:
// the configuration, the store, and SESSION (an ID or a unique prefix of
// one) resolved — exit 3 when it names none, 2 when it names several.
func (a *App) session(ctx context.Context, ref string, want sessionWant) (*sandbox.Service, *store.Session, error) {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	sess, err := findSession(ctx, svc.Store, ref, want)
	if err != nil {
		return nil, nil, err
	}
	return svc, sess, nil
}

// findSession resolves ref in st and checks that it is as wanted.
func findSession(ctx context.Context, st *store.Store, ref string, want sessionWant) (*store.Session, error) {
	sess, err := st.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	if want == openSession {
		if err := store.CheckOpen(sess, clock()); err != nil {
			return nil, err
		}
	}
	return sess, nil
}

// flagOverride records a flag the user set as the override of a variable.
func flagOverride(cmd *cobra.Command, m map[string]config.Flag, flag, variable string) {
	if f := cmd.Flags().Lookup(flag); f != nil && f.Changed {
		m[variable] = config.Flag{Name: "--" + flag, Value: f.Value.String()}
	}
}

func (a *App) printJSON(v any) error {
	enc := json.NewEncoder(a.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// info prints human text to stderr unless --quiet or --json, made inert
// for a terminal (its arguments may quote a repository's refs, a task's
// URL, a path).
func (a *App) info(format string, args ...any) {
	if a.quiet || a.json {
		return
	}
	fmt.Fprintln(a.Err, termsafe.EscapeText(fmt.Sprintf(format, args...)))
}

func (a *App) paint(c color.Attribute, s string) string {
	if a.noColor || a.Env("NO_COLOR") != "" {
		return s
	}
	return color.New(c).Sprint(s)
}

// isTerminal reports whether w is a terminal (xmode's stdout or stderr,
// through its pipeWriter, or a file).
func isTerminal(w io.Writer) bool {
	f, ok := osFile(w)
	return ok && term.IsTerminal(int(f.Fd()))
}

// parent makes a command that only groups subcommands refuse an unknown one
// (exit 2, as git and docker do) instead of printing its help with exit 0.
func parent(c *cobra.Command) *cobra.Command {
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownCommand(cmd, args[0])
	}
	return c
}

// unknownCommand is the usage error for a subcommand cmd does not have,
// with the one it may have meant, as cobra, kubectl and git suggest them
// ("sandbox creat": did you mean create?).
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := suggestions(cmd, name); len(s) > 0 {
		msg += ": did you mean " + strings.Join(s, " or ") + "?"
	}
	return fail.Usagef("%s (see `%s --help`)", msg, cmd.CommandPath())
}

// flagError is the usage error for a flag cmd cannot take; an unknown
// long flag comes with the flags it may have meant, as git suggests a
// command ("--reop": did you mean --repo?).
func flagError(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if errors.As(err, &ne) && ne.GetSpecifiedShortnames() == "" {
		var names []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				names = append(names, f.Name)
			}
		})
		if s := nearest(names, ne.GetSpecifiedName()); len(s) > 0 {
			for i := range s {
				s[i] = "--" + s[i]
			}
			return fail.Usagef("%v: did you mean %s? (see --help)", err, strings.Join(s, " or "))
		}
	}
	return fail.Usagef("%v (see --help)", err)
}

// suggestions are cmd's subcommands nearest to name: those it begins
// (creat → create), else those at the fewest edits, two at most, a swap of
// two letters counting as one (wram → warm).
func suggestions(cmd *cobra.Command, name string) []string {
	var names [][]string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, append([]string{c.Name()}, c.Aliases...))
		}
	}
	return nearestOf(names, name)
}

// nearest is nearestOf for names without aliases.
func nearest(names []string, name string) []string {
	var all [][]string
	for _, n := range names {
		all = append(all, []string{n})
	}
	return nearestOf(all, name)
}

// nearestOf is the first name of each entry of names nearest to name:
// those that one of its names begins with, else those at the fewest
// edits, two at most, a swap of two letters counting as one.
func nearestOf(names [][]string, name string) []string {
	name = strings.ToLower(name)
	best, out := 3, []string(nil)
	for _, ns := range names {
		d := 3
		for _, n := range ns {
			n = strings.ToLower(n)
			if strings.HasPrefix(n, name) {
				d = 0
			} else {
				d = min(d, editDistance(name, n))
			}
		}
		switch {
		case d < best:
			best, out = d, []string{ns[0]}
		case d == best && d < 3:
			out = append(out, ns[0])
		}
	}
	return out
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of neighbours, each one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return fail.Usagef("expected %s, got %d argument(s)", what, len(args))
		}
		return nil
	}
}
