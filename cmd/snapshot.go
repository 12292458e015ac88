package cmd

import (
	"context"
	"fmt"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// snapshotOptions are `sandbox snapshot`'s session and flags.
type snapshotOptions struct {
	sandbox.SnapshotOptions
	session, ttl string
}

func (a *App) newSnapshot() *cobra.Command {
	var o snapshotOptions
	cmd := &cobra.Command{
		Use:   "snapshot SESSION [--name NAME] [--ttl DUR] [--with-ignored]",
		Short: "Keep a session's worktree (and, in docker, filesystem) without a running sandbox",
		Long: `Keep what SESSION holds now — its worktree as ` + "`sandbox fork`" + ` takes it (its
commits, uncommitted and untracked files; ignored ones with --with-ignored)
and, on docker, its container's filesystem as an image — so that the session
can end and ` + "`sandbox create --from-snapshot NAME`" + ` start from it later. Prints
the snapshot's name (the snapshot as JSON with --json).

The worktree is kept in a store of its own, <root>/snapshots/<id>/objects.git:
the commits and files that differ from the session's base commit, which a new
session checks out of the session's repository (or project machine) as
` + "`sandbox create`" + ` does, so that repository must still have it.

A name is 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or
digit, not a number, and one of yours (default: the snapshot's ID). A snapshot
lives for --ttl (default $XMODE_SNAPSHOT_TTL, else 168h); ` + "`xmode reap`" + ` removes it
then, with its image once no sandbox runs it. Each user keeps at most
XMODE_SNAPSHOT_MAX live snapshots (default 10): one more is refused (exit 4)
before anything is made. A session with a step running in the foreground is
refused (exit 4), as for ` + "`sandbox fork`" + `.` + exitStatusHelp,
		Example: `  xmode sandbox snapshot sbx_7k2m9q4x --name before-upgrade
  xmode sandbox stop sbx_7k2m9q4x
  xmode sandbox create --from-snapshot before-upgrade
  xmode sandbox snapshots`,
		Args:              exactArgs(1, "one session"),
		ValidArgsFunction: a.completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			return a.runSnapshot(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", "", "name it (default: its ID)")
	f.StringVar(&o.ttl, "ttl", "", "lifetime (default $XMODE_SNAPSHOT_TTL, else 168h)")
	f.BoolVar(&o.WithIgnored, "with-ignored", false, "keep the files the repository's ignore rules leave out too")
	return a.setTraits(cmd, traits{interrupted: "the snapshot was not taken; what it had begun was removed"})
}

func (a *App) runSnapshot(ctx context.Context, o snapshotOptions) error {
	if o.ttl != "" {
		d, err := config.ParseDuration(o.ttl)
		if err != nil {
			return fail.Usagef("--ttl: %v", err)
		}
		o.TTL = d
	}
	if o.Name != "" {
		if err := sandbox.CheckSnapshotName(o.Name); err != nil {
			return err
		}
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	if !a.json && !a.quiet {
		svc.Notices = termsafe.NewWriter(a.Err)
	}
	sn, err := svc.Snapshot(ctx, sess, o.SnapshotOptions)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(sn)
	}
	fmt.Fprintln(a.Out, sn.Name)
	what := "its worktree"
	if sn.Image != "" {
		what += " and image " + sn.Image
	}
	a.info("snapshot %s of %s after step %d: %s, until %s; `xmode sandbox create --from-snapshot %s` starts from it",
		sn.Name, sess.ID, sn.Seq, what, sn.ExpiresAt.Local().Format(time.DateTime), sn.Name)
	return nil
}

// snapshotsOptions are `sandbox snapshots`' flags.
type snapshotsOptions struct {
	all bool
}

func (a *App) newSnapshots() *cobra.Command {
	var o snapshotsOptions
	cmd := &cobra.Command{
		Use:   "snapshots",
		Short: "List your snapshots (rm removes them)",
		Long: `List your snapshots, newest first (--all: every user's; -q: their names only; --json:
the snapshots as a JSON array). An expired snapshot is listed until ` + "`xmode reap`" + `
removes it; ` + "`sandbox create --from-snapshot`" + ` refuses it.` + exitStatusHelp,
		Example: `  xmode sandbox snapshots
  xmode sandbox snapshots --json | jq -r '.[] | select(.status == "ready") | .name'
  xmode sandbox snapshots rm before-upgrade`,
		Args: exactArgs(0, "no arguments (`xmode sandbox snapshots rm NAME` removes one)"),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runSnapshots(cmd.Context(), o) },
	}
	cmd.Flags().BoolVarP(&o.all, "all", "a", false, "every user's snapshots")
	cmd.AddCommand(a.newSnapshotsRm())
	return cmd
}

func (a *App) runSnapshots(ctx context.Context, o snapshotsOptions) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	user := svc.Cfg.User
	if o.all {
		user = ""
	}
	sns, err := svc.Store.ListSnapshots(ctx, user)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(sns)
	}
	if a.quiet {
		for _, sn := range sns {
			fmt.Fprintln(a.Out, sn.Name)
		}
		return nil
	}
	now := clock()
	t := newTable(a.Out, "NAME", "STATUS", "USER", "SESSION", "STEP", "ENGINE", "REPO", "SIZE", "CREATED", "EXPIRES")
	for _, sn := range sns {
		n := sn.Bytes
		t.row(clean(sn.Name), a.snapshotStatus(sn, now), clean(sn.User), sn.SessionID, fmt.Sprint(sn.Seq), sn.Engine,
			clean(repoLabel(&store.Session{Repo: sn.Repo, Project: sn.Project})), size(&n), humanize.Ago(sn.CreatedAt, now), snapshotLeft(sn, now))
	}
	return t.flush()
}

func (a *App) snapshotStatus(sn *store.Snapshot, now time.Time) string {
	switch {
	case sn.Status == store.SnapshotMaking:
		return a.paint(color.FgCyan, sn.Status)
	case sn.Expired(now):
		return a.paint(color.FgYellow, "ready (expired)")
	}
	return a.paint(color.FgGreen, sn.Status)
}

// snapshotLeft says how long a snapshot has.
func snapshotLeft(sn *store.Snapshot, now time.Time) string {
	if d := sn.ExpiresAt.Sub(now); d > 0 {
		return humanize.Span(d) + " left"
	}
	return "expired " + humanize.Span(now.Sub(sn.ExpiresAt)) + " ago"
}

func (a *App) newSnapshotsRm() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove snapshots: their store, and their image once no sandbox runs it",
		Long: `Remove snapshots (by name, or ID): each one's store goes, its image too unless a
sandbox made from it still runs (then it goes with the last one), and it no
longer counts against XMODE_SNAPSHOT_MAX. Sessions made from it are not
touched. Prints each name removed (--json: the snapshots removed, as an
array).` + exitStatusHelp,
		Example: `  xmode sandbox snapshots rm before-upgrade
  xmode sandbox snapshots -q | xargs xmode sandbox snapshots rm`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fail.Usagef("give one or more snapshots: xmode sandbox snapshots rm NAME...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return a.runSnapshotsRm(cmd.Context(), args) },
	}
}

func (a *App) runSnapshotsRm(ctx context.Context, names []string) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	removed := []*store.Snapshot{}
	var first error
	for _, name := range names {
		sn, err := svc.Store.ResolveSnapshot(ctx, svc.Cfg.User, name)
		if err == nil {
			err = svc.RemoveSnapshot(ctx, sn)
		}
		if err != nil {
			if len(names) > 1 {
				fmt.Fprintf(a.Err, "%s %s: %v\n", a.paint(color.FgRed, "xmode:"), clean(name), err)
			}
			if first == nil {
				first = err
			}
			continue
		}
		removed = append(removed, sn)
		if !a.json {
			fmt.Fprintln(a.Out, sn.Name)
		}
	}
	if a.json {
		if err := a.printJSON(removed); err != nil {
			return err
		}
	}
	if first != nil && len(names) > 1 {
		return exitStatus(fail.ExitCode(first))
	}
	return first
}
