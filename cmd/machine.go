package cmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/machines"
)

func (a *App) newMachine() *cobra.Command {
	m := parent(&cobra.Command{
		Use:     "machine",
		Aliases: []string{"machines"},
		Short:   "Warm, inspect and remove project machines (a warm checkout per project)",
		Long: `A project machine is a warm checkout of a project's repository under
<root>/project_machines/<project>/repo. With XMODE_PROJECT_MACHINES=1,
` + "`xmode sandbox create --project P`" + ` gives each run a detached git worktree of it
instead of a clone of its own. See docs/project-machines.md.`,
		Example: `  xmode machine warm prom --repo https://github.com/prometheus/prometheus.git
  xmode machine list`,
	})
	m.AddCommand(a.newMachineWarm(), a.newMachineList(), a.newMachineShow(), a.newMachineRm())
	return m
}

// machineWarmOptions are `machine warm`'s project and flags.
type machineWarmOptions struct {
	project, repo, ref string
	pool               int
	poolSet            bool // --pool was given
}

func (a *App) newMachineWarm() *cobra.Command {
	var o machineWarmOptions
	cmd := &cobra.Command{
		Use:   "warm PROJECT --repo URL [--ref REF] [--pool N]",
		Short: "Create a project machine (clone) or refresh it (fetch)",
		Long: `Clone the project's repository into its machine the first time (with
progress on a terminal), fetch every branch and tag on later calls. --ref sets
the machine's default ref (what sandboxes of the project check out without
--ref); the first warm otherwise takes the remote's HEAD. --pool N keeps N
sandboxes of the project ready for ` + "`sandbox create --project`" + ` to claim; every warm
then fills the pool and retires the entries the fetch left behind.
Prints the project.` + exitStatusHelp,
		Example: `  xmode machine warm prom --repo https://github.com/prometheus/prometheus.git
  xmode machine warm prom          # fetch`,
		Args:              exactArgs(1, "one project"),
		ValidArgsFunction: a.completeProjects,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.project, o.poolSet = args[0], cmd.Flags().Changed("pool")
			return a.runMachineWarm(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.repo, "repo", "", "repository: URL, file:// URL or local path (required the first time)")
	cmd.Flags().StringVar(&o.ref, "ref", "", "default branch, tag or commit of the machine (default: the remote's HEAD)")
	poolFlag(cmd, &o.pool)
	return a.setTraits(cmd, traits{interrupted: "a first warm leaves nothing behind; a fetch leaves the machine as it was"})
}

func (a *App) runMachineWarm(ctx context.Context, o machineWarmOptions) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	if err := checkPoolFlag(svc.Cfg, o.pool, o.poolSet); err != nil {
		return err
	}
	start := time.Now()
	if o.repo != "" && !a.json && !a.quiet {
		if norm, dirty, err := machines.ResolveRepo(ctx, svc.Guard, o.repo); err == nil && dirty {
			a.info("xmode: note: %s has uncommitted changes; the machine gets what is committed, not them", norm)
		}
	}
	mach, cloned, err := svc.Machines().Warm(ctx, o.project, o.repo, o.ref)
	if err != nil {
		return err
	}
	verb := "fetched"
	if cloned {
		verb = "cloned"
	}
	a.info("%s %s from %s: %s at %s, in %s", verb, mach.Project, clean(mach.Repo), clean(mach.DefaultRef),
		shortSHA(mach.HeadCommit), humanize.Duration(time.Since(start)))
	if err := a.warmPool(ctx, svc, mach.Project, o.pool, o.poolSet); err != nil {
		return err
	}
	if !a.json {
		fmt.Fprintln(a.Out, mach.Project)
		return nil
	}
	views, err := svc.Pools().Views(ctx, mach.Project)
	if err != nil {
		return err
	}
	return a.printJSON(views[0])
}

func (a *App) newMachineList() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List project machines",
		Long:    "List project machines (--json: with their pools)." + exitStatusHelp,
		Example: "  xmode machine list\n  xmode machine list --json",
		Args:    exactArgs(0, "no arguments"),
		RunE:    func(cmd *cobra.Command, _ []string) error { return a.runMachineList(cmd.Context()) },
	}
}

// runMachineList is `machine list`, which has no options of its own.
func (a *App) runMachineList(ctx context.Context) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	views, err := svc.Pools().Views(ctx, "")
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(views)
	}
	if a.quiet {
		for _, v := range views {
			fmt.Fprintln(a.Out, v.Project)
		}
		return nil
	}
	now := clock()
	t := newTable(a.Out, "PROJECT", "REF", "COMMIT", "FETCHED", "SESSIONS", "REPO")
	for _, v := range views {
		t.row(v.Project, clean(v.DefaultRef), shortSHA(v.HeadCommit), humanize.Ago(v.LastFetchAt, now), fmt.Sprint(v.OpenSessions), clean(v.Repo))
	}
	return t.flush()
}

// machineShowOptions are `machine show`'s project.
type machineShowOptions struct {
	project string
}

func (a *App) newMachineShow() *cobra.Command {
	return &cobra.Command{
		Use:               "show PROJECT",
		Short:             "Show one project machine",
		Long:              "Show one project machine (--json: with its pool)." + exitStatusHelp,
		Example:           "  xmode machine show prom\n  xmode machine show prom --json",
		Args:              exactArgs(1, "one project"),
		ValidArgsFunction: a.completeProjects,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runMachineShow(cmd.Context(), machineShowOptions{project: args[0]})
		},
	}
}

func (a *App) runMachineShow(ctx context.Context, o machineShowOptions) error {
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	views, err := svc.Pools().Views(ctx, o.project)
	if err != nil {
		return err
	}
	v := views[0]
	if a.json {
		return a.printJSON(v)
	}
	now := clock()
	kv := newTable(a.Out)
	kv.row("Project:", v.Project)
	kv.row("Repo:", clean(v.Repo))
	kv.row("Default ref:", clean(v.DefaultRef)+" "+shortSHA(v.HeadCommit))
	kv.row("Checkout:", v.Path)
	kv.row("Cache volumes:", v.Volume+".u<user> (one per user; docker engine)")
	kv.row("Created:", v.CreatedAt.Local().Format(time.DateTime)+" ("+humanize.Ago(v.CreatedAt, now)+")")
	kv.row("Last fetch:", v.LastFetchAt.Local().Format(time.DateTime)+" ("+humanize.Ago(v.LastFetchAt, now)+")")
	kv.row("Open sessions:", fmt.Sprint(v.OpenSessions))
	kv.row("Pool:", poolSummary(v))
	if err := kv.flush(); err != nil {
		return err
	}
	return a.printPool(a.Out, v)
}

// machineRmOptions are `machine rm`'s project and flags.
type machineRmOptions struct {
	project string
	force   bool
}

func (a *App) newMachineRm() *cobra.Command {
	var o machineRmOptions
	cmd := &cobra.Command{
		Use:     "rm PROJECT [--force]",
		Aliases: []string{"remove"},
		Short:   "Remove a project machine: its checkout, its cache volume and its record",
		Long: `Remove a project machine. Refused (exit 4) while open sessions use it;
--force stops them first, as ` + "`xmode sandbox stop`" + ` would (their evidence stays).
With the docker engine configured, the project's cache volume goes too.` + exitStatusHelp,
		Example: `  xmode machine rm prom
  xmode machine rm prom --force     # stop its sessions first`,
		Args:              exactArgs(1, "one project"),
		ValidArgsFunction: a.completeProjects,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.project = args[0]
			return a.runMachineRm(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.force, "force", false, "stop the sessions that use the machine first")
	return cmd
}

func (a *App) runMachineRm(ctx context.Context, o machineRmOptions) error {
	project := o.project
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	var stopped []string
	if o.force {
		users, err := svc.Store.MachineSessions(ctx, project)
		if err != nil {
			return err
		}
		for _, s := range users {
			if _, err := svc.Stop(ctx, s, true); err != nil {
				return fmt.Errorf("stop %s: %w", s.ID, err)
			}
			stopped = append(stopped, s.ID)
			a.info("stopped %s", s.ID)
		}
	}
	// The pool is the machine's, not anyone's: it goes first — once
	// no open session keeps the machine (Remove refuses then).
	users, err := svc.Store.MachineSessions(ctx, project)
	if err != nil {
		return err
	}
	drained := 0
	if len(users) == 0 {
		if drained, err = svc.Pools().Drain(ctx, project, nil); err != nil {
			return err
		}
	}
	if drained > 0 {
		a.info("retired %d pool entries", drained)
	}
	res, err := svc.Machines().Remove(ctx, project)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(struct {
			machines.Removed
			Stopped     []string `json:"sessions_stopped"`
			PoolRetired int      `json:"pool_retired"`
		}{res, append([]string{}, stopped...), drained})
	}
	fmt.Fprintln(a.Out, project)
	var what []string
	if res.Checkout {
		what = append(what, "checkout")
	}
	if res.Record {
		what = append(what, "record")
	}
	a.info("removed project machine %s (%s)", project, strings.Join(what, " and "))
	if res.VolumeRemoved {
		for _, v := range res.Volumes {
			a.info("removed cache volume %s", v)
		}
	} else if res.VolumeKept {
		a.info("kept the cache volumes %s.u*: %s", res.Volume, res.VolumeNote)
	}
	return nil
}
