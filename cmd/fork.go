package cmd

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/sandbox"
)

// forkOptions are `sandbox fork`'s session and flags.
type forkOptions struct {
	sandbox.ForkOptions
	session   string
	overrides map[string]config.Flag
}

func (a *App) newFork() *cobra.Command {
	var o forkOptions
	cmd := &cobra.Command{
		Use:   "fork SESSION [--title T] [--with-ignored]",
		Short: "Make a new sandbox whose worktree (and, in docker, filesystem) is a session's as it is now",
		Long: `Make a new session whose worktree is SESSION's as it is now: its commits (git log
shows them), what it had not committed (git diff), its untracked files (git
status), and its ignored files only with --with-ignored. What was staged is
not: the fork's index is its HEAD's. Prints the new session's ID (the
session as JSON with --json); it records the session it was forked from and
the last step that session's run had begun (forked_from, forked_at_seq).

SESSION's worktree is read as a change request reads it — as data: no
program of it is run, no link is followed (a symlink is copied as a link),
FIFOs, sockets and nested repositories are left out, and what it may copy is
bounded by XMODE_CR_MAX_BYTES — and the fork's worktree is checked out from
the session's repository (or project machine) and what differs, as
` + "`sandbox create`" + ` makes one. On docker, the fork's container starts from an image
committed of SESSION's container (its filesystem outside the worktree, not its
mounts or /tmp), removed when the fork ends.

A fork runs on SESSION's engine with today's configuration otherwise
(--ttl, limits), and counts against XMODE_SANDBOX_MAX_OPEN like any session.
A session with a step running in the foreground is refused (exit 4, naming
the step): wait for it, or end it with ` + "`sandbox kill`" + `. Background steps
(` + "`exec --detach`" + `) do not stop a fork: their files are taken as they are, and
their processes are not copied.` + exitStatusHelp,
		Example: `  xmode sandbox fork sbx_7k2m9q4x
  id=$(xmode sandbox fork 7k2m --title "try the other approach" -q)
  xmode sandbox fork 7k2m --with-ignored        # node_modules, build output too`,
		Args:              exactArgs(1, "one session"),
		ValidArgsFunction: a.completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			o.overrides = map[string]config.Flag{}
			flagOverride(cmd, o.overrides, "ttl", "XMODE_SANDBOX_TTL")
			return a.runFork(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Title, "title", "", "what the fork is for")
	f.BoolVar(&o.WithIgnored, "with-ignored", false, "take the files the repository's ignore rules leave out too")
	f.String("ttl", "", "lifetime of the fork (default $XMODE_SANDBOX_TTL, else 2h)")
	return a.setTraits(cmd, traits{interrupted: "the fork was not made; what it had begun was cleaned up (`xmode sandbox list --all` shows it as failed if it was recorded)"})
}

func (a *App) runFork(ctx context.Context, o forkOptions) error {
	svc, err := a.service(ctx, o.overrides)
	if err != nil {
		return err
	}
	parent, err := findSession(ctx, svc.Store, o.session, anySession)
	if err != nil {
		return err
	}
	if !a.json && !a.quiet {
		svc.Notices = termsafe.NewWriter(a.Err)
		if a.verbose {
			svc.Verbose = svc.Notices
		}
	}
	start := time.Now()
	sess, err := svc.Fork(ctx, parent, o.ForkOptions)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(sess)
	}
	fmt.Fprintln(a.Out, sess.ID)
	a.info("forked %s from %s after step %d: worktree %s, %s", sess.ID, parent.ID, sess.ForkedAtSeq, sess.WorktreePath, left(sess, clock()))
	if a.verbose {
		a.info("xmode: forked in %s", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
