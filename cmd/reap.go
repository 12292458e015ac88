package cmd

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/reaper"
)

// reapOptions are `reap`'s flags.
type reapOptions struct {
	dryRun, reclaimUnknown bool
	grace                  string
	graceSet               bool // --provision-grace was given
}

// newReap is `xmode sandbox reap` and its alias `xmode reap`.
func (a *App) newReap(use string) *cobra.Command {
	var o reapOptions
	cmd := &cobra.Command{
		Use:   use,
		Short: "One reaper pass: tear down expired sessions, remove orphans (what cron runs)",
		Long: `One reaper pass over the storage root:

  - expired open sessions are torn down like ` + "`sandbox stop`" + ` does (container and
    per-session volumes removed, worktree reclaimed unless another open session
    shares the run, evidence kept) and end destroyed (expired) — except while
    one of their steps is still running: those are reaped by a later pass,
    once the step ended or its heartbeat went stale;
  - sessions still provisioning after --provision-grace end failed
    (provision_failed) and are cleaned up;
  - orphans go: containers and per-session volumes (pods and their
    NetworkPolicies) labelled with this install's xmode.instance whose
    session is not open (with XMODE_SANDBOX_ENGINE=docker or kubernetes),
    and worktrees of runs without an open
    session. Objects of another install are never touched, nor worktrees
    of run directories the store has no record of, unless
    --reclaim-unknown asks for them;
  - the project machines' pools are kept (XMODE_PROJECT_MACHINES=1):
    entries older than XMODE_POOL_MAX_AGE, made for other settings, behind
    their machine or beyond its pool size are retired, and each pool is
    filled to its size (docs/project-machines.md, "The pool").

Silent on success, for cron (a bar on a terminal); -v prints one line per action, --json the
summary, --dry-run what it would do (changing nothing). Overlapping passes
each take a session at most once. A teardown that fails (the docker daemon is
down) leaves its session open for the next pass, and the pass exits 1 after
finishing everything else.

EXIT STATUS
  0 every teardown succeeded · 1 any failed (see stderr or --json errors) ·
  2 bad flag or value` + pipeExitHelp,
		Example: `  xmode reap                       # from cron: silent unless something failed
  xmode reap -v                    # one line per action
  xmode reap --dry-run             # what a pass would do
  xmode sandbox reap --json        # the summary as JSON`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.graceSet = cmd.Flags().Changed("provision-grace")
			return a.runReap(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.dryRun, "dry-run", false, "list what the pass would do; change nothing")
	f.StringVar(&o.grace, "provision-grace", "15m", "end sessions still provisioning after this long (e.g. 15m)")
	f.BoolVar(&o.reclaimUnknown, "reclaim-unknown", false, "also reclaim worktrees of run directories the store has no record of (after `xmode doctor --adopt`)")
	return cmd
}

func (a *App) runReap(ctx context.Context, o reapOptions) error {
	r := &reaper.Reaper{}
	if o.graceSet {
		d, err := config.ParseDuration(o.grace)
		if err != nil {
			return fail.Usagef("--provision-grace: %v", err)
		}
		r.ProvisionGrace = d
	}
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	r.Cfg, r.Store, r.Guard, r.Now = svc.Cfg, svc.Store, svc.Guard, svc.Clock
	// The action log is the output asked for: stdout, unless stdout
	// carries the JSON summary.
	var logTo io.Writer = a.Out
	if a.json {
		logTo = a.Err
	}
	if o.dryRun || a.verbose && !a.quiet {
		r.Log = termsafe.NewWriter(logTo)
	} else if !a.json && !a.quiet && isTerminal(a.Err) {
		// A long pass on a terminal shows a bar; cron sees nothing.
		r.Progress = a.Err
	}
	sum, err := r.Pass(ctx, reaper.PassOptions{DryRun: o.dryRun, ReclaimUnknown: o.reclaimUnknown})
	if err != nil {
		if sum == nil {
			return err
		}
		// Cancelled part-way: say what was done, then fail.
		a.reapFailures(sum)
		return fail.Failedf("reap interrupted after %s: %v; run it again to finish", humanize.Duration(time.Duration(sum.DurationMS)*time.Millisecond), err)
	}
	a.reapPools(ctx, svc, sum, o.dryRun, r.Log)
	if a.json {
		if err := a.printJSON(sum); err != nil {
			return err
		}
	}
	a.reapFailures(sum)
	if len(sum.Errors) > 0 {
		return exitStatus(1)
	}
	return nil
}

// reapFailures prints one line per failed teardown on stderr, so cron mails
// them even without -v or --json.
func (a *App) reapFailures(sum *reaper.Summary) {
	for _, e := range sum.Errors {
		who := e.SessionID
		if who == "" {
			who = "reap"
		}
		fmt.Fprintf(a.Err, "%s %s: %s\n", a.paint(color.FgRed, "xmode:"), who, clean(e.Error))
	}
}
