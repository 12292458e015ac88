package cmd

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// createOptions are `sandbox create`'s flags.
type createOptions struct {
	sandbox.CreateOptions
	net       networkFlags
	agent     string                 // the agent the sandbox is for: its hosts and key in a proxied network's policy
	overrides map[string]config.Flag // the flags that override variables
	imageSet  bool                   // --image was given
}

func (a *App) newCreate() *cobra.Command {
	var o createOptions
	cmd := &cobra.Command{
		Use:   "create [--repo URL|PATH] [--ref REF]",
		Short: "Provision a sandbox: a run directory, a worktree, and (docker engine) a bounded container",
		Long: `Provision a sandbox session. Prints its ID on stdout (the session as JSON with --json).

The session is recorded before anything touches disk; a failed clone leaves no
worktree behind and the session ends as failed (provision_failed). A mistake
found before that (a missing path, no repository, an unknown branch, tag or
commit of a local repository) leaves nothing at all; exit 2 either way.

--repo . is the repository this directory is in (any subdirectory of it); the
sandbox gets what is committed there, and a note says when there is more.
Without --repo (nor --run or --project) it is --repo .

Where it runs: on the host (runner mode local_worktree, the default), or in a
hardened docker container with XMODE_SANDBOX_ENGINE=docker (a pod of a
Kubernetes cluster with XMODE_SANDBOX_ENGINE=kubernetes) and runner mode
cloud_worker (both: ` + "`export XMODE_SANDBOX_ENGINE=docker XMODE_RUNNER_MODE=cloud_worker`" + `).

Its network (docker, kubernetes): --network none (the default, unless
XMODE_SANDBOX_NETWORK says otherwise), or allow or open, through xmode's
egress proxy, which decides and records every connection (docs/network.md):
allow lets through only what --allow names (host, *.host, host:port,
CIDR), --deny wins over it, open lets through every host but the block list.
--credential HOST=HEADER:VARIABLE has the proxy add VARIABLE's value (from
this environment) as HEADER on requests to HOST, the sandbox holding a
placeholder instead. --agent codex|claude adds the agent's API host and,
when its key is set here, the key as such a credential. The policy is
recorded with the session; ` + "`xmode sandbox network ID`" + ` shows and changes it.` + exitStatusHelp,
		Example: `  xmode sandbox create --repo https://example.com/project.git --ref main
  id=$(xmode sandbox create -q)    # this directory's repository
  XMODE_SANDBOX_ENGINE=docker xmode sandbox create --repo . --runner-mode cloud_worker --image golang:1.26
  XMODE_PROJECT_MACHINES=1 xmode sandbox create --project prom --ref v3.0.0
  xmode sandbox create --network allow --allow pypi.org --allow '*.pythonhosted.org' --agent claude`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.NetworkSet = cmd.Flags().Changed("network")
			o.imageSet = cmd.Flags().Changed("image")
			o.overrides = createOverrides(cmd)
			o.Egress = o.net.sources()
			if o.agent != "" {
				if err := agents.CheckKind(o.agent); err != nil {
					return err
				}
				o.EgressIfProxied = agents.NetworkSources([]string{o.agent}, a.Env)
			}
			return a.runCreate(cmd.Context(), o)
		},
	}
	addCreateFlags(cmd, &o.CreateOptions)
	addNetworkFlags(cmd, &o.net)
	cmd.Flags().StringVar(&o.agent, "agent", "", "codex or claude: the agent this sandbox is for; with --network allow its policy lets it reach its model's API and adds its key (when set here) at the edge")
	cmd.Flags().Lookup("repo").Usage += " (default: the repository of this directory)"
	cmd.Flags().StringVar(&o.RunID, "run", "", "share this run's worktree instead of cloning")
	cmd.Flags().StringVar(&o.FromSnapshot, "from-snapshot", "", "start from a snapshot (its name or ID): its worktree, and in docker its filesystem (`sandbox snapshot`)")
	return a.setTraits(cmd, traits{interrupted: "the sandbox was not created; what it had begun was cleaned up (`xmode sandbox list --all` shows the session as failed if it was recorded)"})
}

func (a *App) runCreate(ctx context.Context, o createOptions) error {
	svc, err := a.service(ctx, o.overrides)
	if err != nil {
		return err
	}
	if err := a.checkEngine(svc.Cfg, o.imageSet); err != nil {
		return err
	}
	if !a.json && !a.quiet {
		svc.Notices = termsafe.NewWriter(a.Err)
		if a.verbose {
			svc.Verbose = svc.Notices
			a.info("xmode: %s", whichEngine(svc.Cfg))
		}
	}
	// No --repo (nor --run, --project) is --repo .: the repository this
	// directory is in, as git commands take it.
	here := o.Repo == "" && o.RunID == "" && o.Project == "" && o.FromSnapshot == ""
	if here {
		o.Repo = "."
	}
	start := time.Now()
	sess, err := svc.Create(ctx, o.CreateOptions)
	if here && fail.KindOf(err) == fail.Usage && fail.InputOf(err) == fail.Repo {
		return fail.Usagef("this directory is not in a git repository, and no %s was given: give %s URL|PATH (a URL, a file:// URL or a local path)", fail.Repo, fail.Repo)
	}
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(sess)
	}
	fmt.Fprintln(a.Out, sess.ID)
	a.info("created %s: %s at %s (%s), worktree %s, %s",
		sess.ID, sess.Repo, sess.Ref, shortSHA(sess.BaseCommit), sess.WorktreePath, left(sess, clock()))
	if a.verbose {
		a.info("xmode: created in %s", humanize.Duration(time.Since(start)))
	}
	return nil
}

// addCreateFlags adds the flags that say what session to create (sandbox
// create, run).
func addCreateFlags(cmd *cobra.Command, o *sandbox.CreateOptions) {
	f := cmd.Flags()
	f.StringVar(&o.Repo, "repo", "", "repository to check out: URL, file:// URL or local path")
	f.StringVar(&o.Ref, "ref", "", "branch, tag or commit (default: the remote's HEAD)")
	f.StringVar(&o.Project, "project", "", "project ID")
	f.BoolVar(&o.Refresh, "refresh", false, "fetch the project machine before branching the worktree (XMODE_PROJECT_MACHINES=1)")
	f.String("user", "", "owner (default $XMODE_USER, else the OS user)")
	f.String("ttl", "", "lifetime (default $XMODE_SANDBOX_TTL, else 2h)")
	f.String("runner-mode", "", "local_worktree, cloud_worker or cloud_subscription")
	f.String("image", "", "sandbox image (docker engine)")
	f.String("network", "", "the sandbox's network: none; allow (only what --allow names) or open (every host but the block list), both through xmode's egress proxy, which records every connection; or a docker network (default $XMODE_SANDBOX_NETWORK, else none)")
}

// createOverrides are addCreateFlags' flags that override variables.
func createOverrides(cmd *cobra.Command) map[string]config.Flag {
	ov := map[string]config.Flag{}
	flagOverride(cmd, ov, "user", "XMODE_USER")
	flagOverride(cmd, ov, "ttl", "XMODE_SANDBOX_TTL")
	flagOverride(cmd, ov, "runner-mode", "XMODE_RUNNER_MODE")
	flagOverride(cmd, ov, "image", "XMODE_SANDBOX_IMAGE")
	flagOverride(cmd, ov, "network", "XMODE_SANDBOX_NETWORK")
	return ov
}

// whichEngine says, for -v, which engine a new session gets and why: the
// runner mode and XMODE_SANDBOX_ENGINE, each with where its value came from.
func whichEngine(cfg *config.Config) string {
	name, err := engine.Choose(cfg.RunnerMode, cfg.Engine)
	if err != nil {
		return err.Error()
	}
	mode := "runner mode " + cfg.RunnerMode + " (" + sourceOf(cfg, "XMODE_RUNNER_MODE") + ")"
	switch {
	case name == engine.Cloud:
		return "engine cloud: " + mode + " sends the work to the Codex cloud; nothing runs here"
	case cfg.RunnerMode == config.ModeLocalWorktree:
		return "engine " + name + ": " + mode + " always runs on the host"
	case cfg.Engine == "":
		return "engine " + name + ": " + mode + " with XMODE_SANDBOX_ENGINE unset"
	}
	return "engine " + name + ": " + mode + " with XMODE_SANDBOX_ENGINE=" + cfg.Engine + " (" + sourceOf(cfg, "XMODE_SANDBOX_ENGINE") + ")"
}

// checkEngine says where a new sandbox will run when that is not what its
// configuration suggests: --image for an engine that runs no image is
// refused (it would be ignored), and XMODE_SANDBOX_ENGINE naming an engine
// the default runner mode does not run (local_worktree always runs on the
// host) gets a warning naming the missing step.
func (a *App) checkEngine(cfg *config.Config, imageSet bool) error {
	name, err := engine.Choose(cfg.RunnerMode, cfg.Engine)
	if err != nil {
		return nil // Create says why
	}
	if imageSet {
		runsImage, err := sandbox.RunsImage(cfg)
		if err != nil {
			return nil // the engine cannot be opened: Create says why
		}
		switch {
		case runsImage:
		case cfg.Engine != "":
			return fail.Usagef("--image is for %s sandboxes, and runner mode %s runs on the host: add --runner-mode cloud_worker (XMODE_RUNNER_MODE=cloud_worker) for a %[1]s sandbox", cfg.Engine, cfg.RunnerMode)
		default:
			return fail.Usagef("--image is for docker sandboxes, and this one runs on the host: set XMODE_SANDBOX_ENGINE=docker and XMODE_RUNNER_MODE=cloud_worker (or --runner-mode cloud_worker) for a docker sandbox")
		}
	}
	if cfg.Engine != "" && name != cfg.Engine && !cfg.Explicit("XMODE_RUNNER_MODE") {
		fmt.Fprintf(a.Err, "%s XMODE_SANDBOX_ENGINE=%s, but this sandbox runs on the host: runner mode local_worktree (the default) always does. For a %[2]s sandbox set XMODE_RUNNER_MODE=cloud_worker too (or --runner-mode cloud_worker)\n", a.paint(color.FgYellow, "xmode: warning:"), cfg.Engine)
	}
	return nil
}

// execOptions are `sandbox exec`'s session, command and flags.
type execOptions struct {
	sandbox.ExecOptions
	session          string
	interactive, tty bool
	detach           bool
}

func (a *App) newExec() *cobra.Command {
	var o execOptions
	cmd := &cobra.Command{
		Use:   "exec SESSION [flags] -- CMD [ARG...]",
		Short: "Run one step in a sandbox, stream its output, keep its evidence, exit with its status",
		Long: `Run one command in the session's worktree through its engine. Output streams
live and into runs/<run>/steps/<seq>-<name>/{stdout,stderr}.log, with
command.json and result.json beside them. --timeout ends the whole process
tree (TERM, then KILL after a grace period); Ctrl-C sends it SIGINT (as a
terminal would: the step exits 130), and a second Ctrl-C KILLs it at once.

-i passes standard input through a pipe; -t gives the command a terminal of
its own (a pty; in docker an exec with a TTY), as ` + "`docker exec -it`" + ` does: use
both for an interactive program (` + "`sh -i`" + `, a REPL), or ` + "`xmode sandbox shell`" + `.

--env NAME without a value passes this machine's value of NAME (as docker
does); the evidence records the name only.

The step is named after the command's words (make test: make-test) unless
--name names it; a name is kept as given (letters, digits, '.', '_', '-').
` + "`xmode sandbox logs ID test`" + ` finds it by a word of its name, or by number.

With --json the output goes only to the log files and the step is printed as
JSON when it ends.

--detach (-d) runs the step in the background, as ` + "`docker run -d`" + ` does: it
prints the step's number and returns at once (with --json, the step as far as
it is known: state running, detached true). A supervisor xmode of its own
runs it, its output goes only to its logs, and its evidence and its
processes are kept as any step's; a later step does not end them. Follow it
with ` + "`sandbox logs ID STEP --follow`" + `, end it with ` + "`sandbox kill ID STEP`" + `;
` + "`sandbox stop`" + ` ends it with the session, and so does the session's expiry
(a background step does not keep an expired session alive).

EXIT STATUS
  the command's own status; 124 when --timeout fired; 128+N when killed by
  signal N (130 for Ctrl-C; 137 with oom_killed when the memory limit killed
  it); 126 not executable; 127 not found; 125 when xmode failed before the
  command could start (bad flag, unknown session, session not open, engine
  unreachable); 2 when no command was given. With --detach: 0 once the step runs, or has ended (a
  command not found: its result says 127), 125 when xmode could not start
  it.` + stepPipeExitHelp,
		Example: `  xmode sandbox exec sbx_7k2m9q4x -- make test
  xmode sandbox exec 7k2m --timeout 10m --name unit -- go test ./...
  xmode sandbox exec 7k2m --env GOFLAGS=-mod=mod --env HOME -- go build ./...
  xmode sandbox exec 7k2m -it -- python3
  xmode sandbox exec 7k2m --json -- make lint | jq .exit_code
  xmode sandbox exec 7k2m --detach --name web -- busybox httpd -f -p 8080`,
		// No command at all is a usage error (2), whatever the session:
		// nothing was asked to run, so no status of docker's applies.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return noCommand("give a session and a command: xmode sandbox exec SESSION -- CMD [ARG...]")
			}
			return nil
		},
		ValidArgsFunction: a.completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return fail.Usagef("unexpected %q before --: xmode sandbox exec SESSION [flags] -- CMD [ARG...]", args[1])
			}
			if len(args) == 1 {
				return noCommand(fmt.Sprintf("no command: give one after --, e.g. xmode sandbox exec %s -- make test", args[0]))
			}
			o.session, o.Argv = args[0], args[1:]
			return a.runExec(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Timeout, "timeout", 0, "kill the whole process tree after this long (e.g. 90s, 15m)")
	f.StringArrayVarP(&o.Env, "env", "e", nil, "KEY=VALUE for the command, or NAME to pass this machine's value (repeatable)")
	f.StringVar(&o.Name, "name", "", "step name (default: the command's words, e.g. make-test)")
	f.StringVar(&o.Workdir, "workdir", "", "directory relative to the worktree")
	f.BoolVarP(&o.interactive, "interactive", "i", false, "pass standard input to the command")
	f.BoolVarP(&o.tty, "tty", "t", false, "give the command a terminal (needs one here); its transcript is stdout.log")
	f.BoolVarP(&o.detach, "detach", "d", false, "run the step in the background: print its number and return")
	return a.setTraits(cmd, traits{exit: exitStepDocker, interrupted: "the step never started"})
}

// noCommand is `sandbox exec` without a command: a usage error that exits
// 2, not the 125 of xmode's other failures before the command starts.
func noCommand(msg string) error {
	return &statusError{err: fail.Usagef("%s", msg), code: fail.Usage.ExitCode()}
}

func (a *App) runExec(ctx context.Context, o execOptions) error {
	if o.detach {
		return a.execDetached(ctx, o)
	}
	var t *userTTY
	if o.tty {
		var err error
		if t, err = a.openTTY("-t"); err != nil {
			return err
		}
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	o.LookupEnv = a.lookupEnv
	if t != nil {
		res, err := a.execOnTTY(ctx, svc, sess, o.ExecOptions, t)
		return a.stepDone(svc.Cfg, res, err, o.Timeout)
	}
	if o.interactive {
		o.Stdin = a.In
		if f, ok := a.In.(*os.File); ok && term.IsTerminal(int(f.Fd())) && !a.quiet && !a.json {
			a.info("xmode: the command reads your input through a pipe, not a terminal (no prompt editing, no job control); add -t to give it one")
		}
	}
	if !a.json {
		o.LiveStdout, o.LiveStderr = a.Out, a.Err
	}
	stepRunning.Store(true)
	res, err := svc.Exec(ctx, sess, o.ExecOptions)
	stepRunning.Store(false)
	return a.stepDone(svc.Cfg, res, err, o.Timeout)
}

// execDetached is `exec --detach`: the step's number on stdout (its JSON
// with --json) once its supervisor has recorded it.
func (a *App) execDetached(ctx context.Context, o execOptions) error {
	switch {
	case o.tty:
		return fail.Usagef("--detach and -t do not go together: a background step has no terminal")
	case o.interactive:
		return fail.Usagef("--detach and -i do not go together: a background step reads no input")
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	o.LookupEnv = a.lookupEnv
	seq, err := svc.ExecDetached(ctx, sess, o.ExecOptions)
	if err != nil {
		return err
	}
	row, err := svc.Step(ctx, sess, seq)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(svc.ViewStep(row))
	}
	fmt.Fprintln(a.Out, seq)
	if row.State != store.StateRunning {
		// It could not start (127, 126), or it was that quick.
		a.info("xmode: step %d (%s) has ended already: %s; `xmode sandbox logs %s %d --all` shows what it printed", seq, row.Name, stepExit(row), sess.ID, seq)
		return nil
	}
	a.info("xmode: step %d runs in the background: `xmode sandbox logs %s %d --follow` follows it, `xmode sandbox kill %s %d` ends it", seq, sess.ID, seq, sess.ID, seq)
	return nil
}

// stopOptions are `sandbox stop`'s sessions and flags.
type stopOptions struct {
	sessions []string
	force    bool
}

func (a *App) newStop() *cobra.Command {
	var o stopOptions
	cmd := &cobra.Command{
		Use:   "stop SESSION...",
		Short: "Reap sessions now: remove their sandbox and worktree, keep their evidence",
		Long: `Stop one or more sessions: the engine's container goes, the worktree is
reclaimed unless another open session shares the run, the evidence (steps/)
stays. Stopping an ended session is not an error. Each session stopped is
printed on stdout (with --json, the sessions as a JSON array); when some
cannot be stopped the others still are, and the exit status is the first
failure's.

Background steps (` + "`exec --detach`" + `) are the session's own, as a container's
processes are: they are ended (TERM, KILL after 5s) and recorded
"stopped_by": "sandbox stop", as ` + "`docker stop`" + ` ends a container's processes.

A session with a step running in the foreground of another xmode (another
terminal's ` + "`sandbox exec`" + `) is refused with exit 4, naming the step, and left
as it is. --force stops it anyway, as ` + "`docker rm -f`" + ` does: the step gets TERM
(KILL after 5s), its ` + "`sandbox exec`" + ` says it was stopped by ` + "`sandbox stop`" + ` and
exits with the status the signal gave (143, or 137 when it had to be
KILLed), and its result.json and row record "stopped_by": "sandbox stop".` + exitStatusHelp,
		Example: `  xmode sandbox stop sbx_7k2m9q4x
  xmode sandbox stop 7k2m q4x8 rt5a             # several, by unique prefix
  xmode sandbox stop --force 7k2m               # even while a step runs in it
  xmode sandbox list -q | xargs xmode sandbox stop`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fail.Usagef("give one or more sessions: xmode sandbox stop SESSION...")
			}
			return nil
		},
		ValidArgsFunction: a.completeOpenSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.sessions = args
			return a.runStop(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVarP(&o.force, "force", "f", false, "stop a session even while another terminal's step runs in it (the step is ended)")
	return cmd
}

func (a *App) runStop(ctx context.Context, o stopOptions) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	var stopped []*store.Session
	var first error
	for _, ref := range o.sessions {
		sess, err := a.stopOne(ctx, svc, ref, o.force)
		if err != nil {
			if len(o.sessions) > 1 {
				fmt.Fprintf(a.Err, "%s %s: %v\n", a.paint(color.FgRed, "xmode:"), clean(ref), err)
			}
			if first == nil {
				first = err
			}
			continue
		}
		stopped = append(stopped, sess)
	}
	if a.json {
		var v any = stopped
		if len(o.sessions) == 1 && len(stopped) == 1 {
			v = stopped[0] // one session: its object, as before
		} else if stopped == nil {
			v = []*store.Session{}
		}
		if err := a.printJSON(v); err != nil {
			return err
		}
	}
	if first != nil && len(o.sessions) > 1 {
		return exitStatus(fail.ExitCode(first))
	}
	return first
}

// stopOne stops one session and says what happened to it.
func (a *App) stopOne(ctx context.Context, svc *sandbox.Service, ref string, force bool) (*store.Session, error) {
	sess, err := findSession(ctx, svc.Store, ref, anySession)
	if err != nil {
		return nil, err
	}
	wasEnded := sess.Ended()
	out, err := svc.Stop(ctx, sess, force)
	if err != nil {
		return nil, err
	}
	if sess, err = svc.Store.Get(ctx, sess.ID); err != nil {
		return nil, err
	}
	if a.json {
		return sess, nil
	}
	fmt.Fprintln(a.Out, sess.ID)
	switch {
	case wasEnded:
		a.info("%s had already ended (%s)", sess.ID, sess.Status)
	case out.WorktreeKeptShared:
		a.info("stopped %s; its worktree stays for the other open session of %s", sess.ID, sess.RunID)
	default:
		a.info("stopped %s; evidence kept in %s", sess.ID, sess.RunDir)
	}
	return sess, nil
}

// listOptions are `sandbox list`'s flags.
type listOptions struct {
	store.Filter
}

func (a *App) newList() *cobra.Command {
	var o listOptions
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List open sessions (--all adds ended ones)",
		Long: `List open sessions (--all adds ended ones; -q: their IDs only). SIZE is what
an open session's worktree holds on disk now; an ended session's is gone
("-": sandbox show and --json give what it held at teardown).` + exitStatusHelp,
		Example: `  xmode sandbox list
  xmode sandbox list --all --user alice
  xmode sandbox list -q              # IDs only, for scripts`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runList(cmd.Context(), o) },
	}
	cmd.Flags().BoolVarP(&o.All, "all", "a", false, "include ended sessions")
	cmd.Flags().StringVar(&o.User, "user", "", "only sessions of this user")
	return cmd
}

func (a *App) runList(ctx context.Context, o listOptions) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	sessions, err := svc.Store.List(ctx, o.Filter)
	if err != nil {
		return err
	}
	if !a.quiet {
		svc.MeasureWorktrees(sessions)
	}
	if a.json {
		if sessions == nil {
			sessions = []*store.Session{}
		}
		return a.printJSON(sessions)
	}
	if a.quiet {
		for _, s := range sessions {
			fmt.Fprintln(a.Out, s.ID)
		}
		return nil
	}
	now := clock()
	t := newTable(a.Out, "ID", "STATUS", "USER", "ENGINE", "REPO", "REF", "SIZE", "CREATED", "EXPIRES")
	for _, s := range sessions {
		t.row(s.ID, a.status(s), clean(s.User), s.Engine, clean(repoLabel(s)), clean(truncate(s.Ref, 24)), listedSize(s), humanize.Ago(s.CreatedAt, now), left(s, now))
	}
	return t.flush()
}

// listedSize is list's SIZE: what an open session's worktree holds now;
// nothing once the session ended, its worktree gone (show says what it
// held at teardown).
func listedSize(s *store.Session) string {
	if s.Ended() {
		return "-"
	}
	return size(s.WorktreeBytes)
}

// worktreeLine is show's Worktree: its path and size while the session is
// open; for an ended one, whether it is still there, and what it held at
// teardown.
func worktreeLine(s *store.Session) string {
	if !s.Ended() {
		return s.WorktreePath + " (" + size(s.WorktreeBytes) + ")"
	}
	if _, err := os.Lstat(s.WorktreePath); err == nil {
		return s.WorktreePath + " (still on disk: another session of its run shares it, or `xmode reap` has yet to remove it)"
	}
	if s.WorktreeBytes == nil {
		return s.WorktreePath + " (removed)"
	}
	return s.WorktreePath + " (removed; it held " + size(s.WorktreeBytes) + " at teardown)"
}

// showOptions are `sandbox show`'s session.
type showOptions struct {
	session string
}

func (a *App) newShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show SESSION",
		Short: "Show one session and its steps",
		Long: `Show a session: who, what, where, how long it has, and the steps of its run.
With --json, the session (docs/reference.md, "Session with steps") with its
steps under "steps".` + exitStatusHelp,
		Example: `  xmode sandbox show sbx_7k2m9q4x
  xmode sandbox show 7k2m --json | jq '.steps[] | {seq, name, exit_code}'`,
		Args:              exactArgs(1, "one session"),
		ValidArgsFunction: a.completeAnySession,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runShow(cmd.Context(), showOptions{session: args[0]})
		},
	}
}

func (a *App) runShow(ctx context.Context, o showOptions) error {
	svc, s, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	svc.MeasureWorktrees([]*store.Session{s})
	steps, err := svc.Store.Steps(ctx, s.RunID)
	if err != nil {
		return err
	}
	ports, err := svc.Ports(ctx, s, false)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(struct {
			*store.Session
			Ports []store.Port `json:"ports"`
			Steps []stepView   `json:"steps"`
		}{s, ports, viewSteps(svc, steps)})
	}
	now := clock()
	kv := newTable(a.Out)
	kv.row("ID:", s.ID)
	kv.row("Status:", a.status(s))
	kv.row("Run:", s.RunID)
	kv.row("User:", clean(s.User))
	if s.Project != "" {
		kv.row("Project:", clean(s.Project))
	}
	if s.Title != "" {
		kv.row("Title:", clean(s.Title))
	}
	if s.ForkedFrom != "" {
		kv.row("Forked from:", fmt.Sprintf("%s after step %d", s.ForkedFrom, s.ForkedAtSeq))
	}
	if s.FromSnapshot != "" {
		kv.row("From snapshot:", s.FromSnapshot)
	}
	if s.Origin == store.OriginMCP {
		kv.row("Origin:", "mcp ("+clean(cmp.Or(s.OriginClient, "a client that gave no name"))+"): made through `xmode mcp`")
	}
	kv.row("Runner mode:", s.RunnerMode)
	kv.row("Engine:", s.Engine)
	kv.row("Repo:", clean(s.Repo))
	kv.row("Ref:", clean(s.Ref)+" "+shortSHA(s.BaseCommit))
	kv.row("Created:", s.CreatedAt.Local().Format(time.DateTime)+" ("+humanize.Ago(s.CreatedAt, now)+")")
	kv.row("Expires:", s.ExpiresAt.Local().Format(time.DateTime)+" ("+left(s, now)+")")
	if s.EndedAt != nil {
		kv.row("Ended:", s.EndedAt.Local().Format(time.DateTime))
	}
	kv.row("Worktree:", worktreeLine(s))
	kv.row("Evidence:", s.RunDir)
	if s.ContainerID != "" {
		kv.row("Container:", shortSHA(s.ContainerID)+" ("+s.MountMode+", "+s.Image+")")
	}
	if s.Network != "" || s.NetworkPolicy != nil {
		kv.row("Network:", clean(networkLine(ctx, svc, s)))
	}
	for i, p := range ports {
		label := ""
		if i == 0 {
			label = "Ports:"
		}
		kv.row(label, fmt.Sprintf("%d → %s", p.Port, sandbox.PortURL(p)))
	}
	if s.HostEnv != "" {
		kv.row("Host env:", s.HostEnv+" (what its steps inherit of xmode's environment)")
	}
	if s.Error != "" {
		kv.row("Error:", clean(s.Error))
	}
	if hint := cloudStatusHint(s); hint != "" {
		kv.row("Codex cloud:", hint)
	}
	if err := kv.flush(); err != nil {
		return err
	}
	if len(steps) == 0 {
		return nil
	}
	fmt.Fprintln(a.Out)
	return a.stepTable(steps)
}

// extendOptions are `sandbox extend`'s session and flags.
type extendOptions struct {
	session, ttl string
}

func (a *App) newExtend() *cobra.Command {
	var o extendOptions
	cmd := &cobra.Command{
		Use:   "extend SESSION --ttl DUR",
		Short: "Push a session's expiry to now + DUR",
		Long:  "Push a session's expiry to now + DUR." + exitStatusHelp,
		Example: `  xmode sandbox extend sbx_7k2m9q4x --ttl 2h
  xmode sandbox extend 7k2m --ttl 30m`,
		Args:              exactArgs(1, "one session"),
		ValidArgsFunction: a.completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			return a.runExtend(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.ttl, "ttl", "", "new lifetime from now (e.g. 30m, 2h)")
	return cmd
}

func (a *App) runExtend(ctx context.Context, o extendOptions) error {
	if o.ttl == "" {
		return fail.Usagef("--ttl is required, e.g. --ttl 2h")
	}
	d, err := config.ParseDuration(o.ttl)
	if err != nil {
		return fail.Usagef("--ttl: %v", err)
	}
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	if err := svc.Cfg.CheckTTL(d); err != nil {
		return fail.Usagef("--ttl: %v", err) // before the lookup, as always
	}
	s, err := findSession(ctx, svc.Store, o.session, anySession)
	if err != nil {
		return err
	}
	if s, err = svc.Extend(ctx, s, d); err != nil {
		return err
	}
	if a.json {
		return a.printJSON(s)
	}
	fmt.Fprintln(a.Out, s.ID)
	a.info("%s now expires at %s (in %s)", s.ID, s.ExpiresAt.Local().Format(time.DateTime), humanize.Span(s.ExpiresAt.Sub(clock()).Round(time.Minute)))
	return nil
}

// repoLabel is a session's project, or the last part of its repository.
func repoLabel(s *store.Session) string {
	if s.Project != "" {
		return s.Project
	}
	r := strings.TrimSuffix(strings.TrimRight(s.Repo, "/"), ".git")
	if i := strings.LastIndexAny(r, "/:"); i >= 0 {
		r = r[i+1:]
	}
	return truncate(r, 24)
}

func (a *App) status(s *store.Session) string {
	label := s.Status
	if s.EndReason != "" {
		label += " (" + s.EndReason + ")"
	}
	switch s.Status {
	case store.StatusOpen:
		if s.Expired(clock()) {
			return a.paint(color.FgYellow, "open (expired)")
		}
		return a.paint(color.FgGreen, label)
	case store.StatusFailed:
		return a.paint(color.FgRed, label)
	case store.StatusProvisioning, store.StatusSubmitted:
		return a.paint(color.FgCyan, label)
	case store.StatusReady:
		return a.paint(color.FgGreen, label)
	}
	return a.paint(color.Faint, label)
}
