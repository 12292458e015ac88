package cmd

import (
	"fmt"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

func (a *App) newCreate() *cobra.Command {
	var o sandbox.CreateOptions
	cmd := &cobra.Command{
		Use:   "create --repo URL|PATH [--ref REF]",
		Short: "Provision a sandbox: a run directory, a worktree, and (docker engine) a bounded container",
		Long: `Provision a sandbox session. Prints its ID on stdout (the session as JSON with --json).

The session is recorded before anything touches disk; a failed clone leaves no
worktree behind and the session ends as failed (provision_failed).` + exitStatusHelp,
		Example: `  xmode sandbox create --repo https://example.com/project.git --ref main
  id=$(xmode sandbox create --repo . -q)`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.NetworkSet = cmd.Flags().Changed("network")
			svc, err := a.service(cmd.Context(), createOverrides(cmd))
			if err != nil {
				return err
			}
			sess, err := svc.Create(cmd.Context(), o)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(sess)
			}
			fmt.Fprintln(a.Out, sess.ID)
			a.info("created %s: %s at %s (%s), worktree %s, %s",
				sess.ID, sess.Repo, sess.Ref, shortSHA(sess.BaseCommit), sess.WorktreePath, left(sess, time.Now()))
			return nil
		},
	}
	addCreateFlags(cmd, &o)
	cmd.Flags().StringVar(&o.RunID, "run", "", "share this run's worktree instead of cloning")
	return cmd
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
	f.String("network", "", "docker network of this session (volume mode; default $XMODE_SANDBOX_NETWORK, else none)")
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

func (a *App) newExec() *cobra.Command {
	var o sandbox.ExecOptions
	cmd := &cobra.Command{
		Use:   "exec SESSION [flags] -- CMD [ARG...]",
		Short: "Run one step in a sandbox, stream its output, keep its evidence, exit with its status",
		Long: `Run one command in the session's worktree through its engine. Output streams
live and into runs/<run>/steps/<seq>-<name>/{stdout,stderr}.log, with
command.json and result.json beside them. --timeout and Ctrl-C end the whole
process tree (TERM, then KILL after a grace period).

With --json the output goes only to the log files and the step is printed as
JSON when it ends.

EXIT STATUS
  the command's own status; 124 when --timeout fired; 128+N when killed by
  signal N (137 with oom_killed when the memory limit killed it); 126 not
  executable; 127 not found; 125 when xmode failed before the command could
  start (bad flag, unknown session, session not open, engine unreachable).`,
		Annotations: map[string]string{"exit": "docker"},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fail.Usagef("give a session and a command: xmode sandbox exec SESSION -- CMD [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ref := args[0]
			o.Argv = args[1:]
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return fail.Usagef("unexpected %q before --: xmode sandbox exec SESSION [flags] -- CMD [ARG...]", args[1])
			}
			svc, err := a.service(cmd.Context(), nil)
			if err != nil {
				return err
			}
			sess, err := svc.Store.Resolve(cmd.Context(), ref)
			if err != nil {
				return err
			}
			if !a.json {
				o.LiveStdout, o.LiveStderr = a.Out, a.Err
			}
			res, err := svc.Exec(cmd.Context(), sess, o)
			if res == nil {
				return err
			}
			if err != nil {
				// The command ran: its status stands, and stderr says what
				// of its evidence was lost.
				fmt.Fprintf(a.Err, "%s %v\n", a.paint(color.FgYellow, "xmode: warning:"), err)
			}
			if a.json {
				// A reader that closed stdout does not change the status.
				_ = a.printJSON(res)
			}
			if res.TimedOut {
				fmt.Fprintf(a.Err, "xmode: step %d timed out after %s\n", res.Seq, o.Timeout)
			}
			if res.ExitCode != 0 {
				return exitStatus(res.ExitCode)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Timeout, "timeout", 0, "kill the whole process tree after this long (e.g. 90s, 15m)")
	f.StringArrayVar(&o.Env, "env", nil, "KEY=VALUE for the command (repeatable)")
	f.StringVar(&o.Name, "name", "", "step name (default: the command's name)")
	f.StringVar(&o.Workdir, "workdir", "", "directory relative to the worktree")
	f.BoolP("interactive", "i", false, "pass standard input to the command")
	cmd.PreRun = func(cmd *cobra.Command, _ []string) {
		if in, _ := cmd.Flags().GetBool("interactive"); in {
			o.Stdin = a.In
		}
	}
	return cmd
}

func (a *App) newStop() *cobra.Command {
	return &cobra.Command{
		Use:   "stop SESSION",
		Short: "Reap one session now: remove its sandbox and worktree, keep its evidence",
		Long: `Stop a session: the engine's container goes, the worktree is reclaimed unless
another open session shares the run, the evidence (steps/) stays. Stopping an
ended session is not an error.` + exitStatusHelp,
		Args: exactArgs(1, "one session"),
		RunE: func(cmd *cobra.Command, args []string) error {
			svc, err := a.service(cmd.Context(), nil)
			if err != nil {
				return err
			}
			sess, err := svc.Store.Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			wasEnded := sess.Ended()
			out, err := svc.Stop(cmd.Context(), sess)
			if err != nil {
				return err
			}
			if sess, err = svc.Store.Get(cmd.Context(), sess.ID); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(sess)
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
			return nil
		},
	}
}

func (a *App) newList() *cobra.Command {
	var f store.Filter
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List open sessions (--all adds ended ones)",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			svc, err := a.service(cmd.Context(), nil)
			if err != nil {
				return err
			}
			sessions, err := svc.Store.List(cmd.Context(), f)
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
			now := time.Now()
			t := newTable(a.Out, "ID", "STATUS", "USER", "ENGINE", "REF", "SIZE", "CREATED", "EXPIRES")
			for _, s := range sessions {
				t.row(s.ID, a.status(s), clean(s.User), s.Engine, clean(s.Ref), size(s.WorktreeBytes), ago(s.CreatedAt, now), left(s, now))
			}
			return t.flush()
		},
	}
	cmd.Flags().BoolVarP(&f.All, "all", "a", false, "include ended sessions")
	cmd.Flags().StringVar(&f.User, "user", "", "only sessions of this user")
	return cmd
}

func (a *App) newShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show SESSION",
		Short: "Show one session and its steps",
		Args:  exactArgs(1, "one session"),
		RunE: func(cmd *cobra.Command, args []string) error {
			svc, err := a.service(cmd.Context(), nil)
			if err != nil {
				return err
			}
			s, err := svc.Store.Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			svc.MeasureWorktrees([]*store.Session{s})
			if a.json {
				return a.printJSON(s)
			}
			now := time.Now()
			kv := newTable(a.Out)
			kv.row("ID:", s.ID)
			kv.row("Status:", a.status(s))
			kv.row("Run:", s.RunID)
			kv.row("User:", clean(s.User))
			if s.Project != "" {
				kv.row("Project:", clean(s.Project))
			}
			kv.row("Runner mode:", s.RunnerMode)
			kv.row("Engine:", s.Engine)
			kv.row("Repo:", clean(s.Repo))
			kv.row("Ref:", clean(s.Ref)+" "+shortSHA(s.BaseCommit))
			kv.row("Created:", s.CreatedAt.Local().Format(time.DateTime)+" ("+ago(s.CreatedAt, now)+")")
			kv.row("Expires:", s.ExpiresAt.Local().Format(time.DateTime)+" ("+left(s, now)+")")
			if s.EndedAt != nil {
				kv.row("Ended:", s.EndedAt.Local().Format(time.DateTime))
			}
			kv.row("Worktree:", s.WorktreePath+" ("+size(s.WorktreeBytes)+")")
			kv.row("Evidence:", s.RunDir)
			if s.ContainerID != "" {
				kv.row("Container:", shortSHA(s.ContainerID)+" ("+s.MountMode+", "+s.Image+")")
			}
			if s.Network != "" {
				kv.row("Network:", s.Network)
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
			steps, err := svc.Store.Steps(cmd.Context(), s.RunID)
			if err != nil || len(steps) == 0 {
				return err
			}
			fmt.Fprintln(a.Out)
			return a.stepTable(steps)
		},
	}
}

func (a *App) newExtend() *cobra.Command {
	var ttl string
	cmd := &cobra.Command{
		Use:   "extend SESSION --ttl DUR",
		Short: "Push a session's expiry to now + DUR",
		Args:  exactArgs(1, "one session"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl == "" {
				return fail.Usagef("--ttl is required, e.g. --ttl 2h")
			}
			d, err := config.ParseDuration(ttl)
			if err != nil {
				return fail.Usagef("--ttl: %v", err)
			}
			svc, err := a.service(cmd.Context(), nil)
			if err != nil {
				return err
			}
			if err := svc.Cfg.CheckTTL(d); err != nil {
				return fail.Usagef("--ttl: %v", err)
			}
			s, err := svc.Store.Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if err := svc.Store.Extend(cmd.Context(), s.ID, time.Now().Add(d)); err != nil {
				return err
			}
			if s, err = svc.Store.Get(cmd.Context(), s.ID); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(s)
			}
			fmt.Fprintln(a.Out, s.ID)
			a.info("%s now expires at %s (in %s)", s.ID, s.ExpiresAt.Local().Format(time.DateTime), left(s, time.Now()))
			return nil
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "", "new lifetime from now (e.g. 30m, 2h)")
	return cmd
}

func (a *App) status(s *store.Session) string {
	label := s.Status
	if s.EndReason != "" {
		label += " (" + s.EndReason + ")"
	}
	switch s.Status {
	case store.StatusOpen:
		if s.Expired(time.Now()) {
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
