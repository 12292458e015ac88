package cmd

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/pool"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/sandbox"
)

// The warm pools of project machines, as the commands see them:
// `machine warm --pool N` sets and fills one, `machine show` lists it,
// `machine rm` drains it, `reap` keeps them all (docs/project-machines.md,
// "The pool").

// poolFlag adds `machine warm`'s --pool.
func poolFlag(cmd *cobra.Command, n *int) {
	cmd.Flags().IntVar(n, "pool", 0, "keep N ready sandboxes of the project (XMODE_PROJECT_MACHINES=1; default XMODE_POOL_SIZE)")
}

// checkPoolFlag refuses a --pool that cannot be kept, before anything
// changes; set says whether --pool was given.
func checkPoolFlag(cfg *config.Config, n int, set bool) error {
	if !set {
		return nil
	}
	if n < 0 || n > config.MaxPoolSize {
		return fail.Usagef("--pool %d: use a whole number from 0 (no pool) to %d", n, config.MaxPoolSize)
	}
	if !cfg.ProjectMachines {
		return fail.Usagef("--pool: a pool serves `sandbox create --project` with project machines on: set XMODE_PROJECT_MACHINES=1")
	}
	return nil
}

// warmPool records --pool when given (set) and brings the machine's pool
// to its size (a warm may have moved the machine: entries behind it are
// retired).
func (a *App) warmPool(ctx context.Context, svc *sandbox.Service, project string, n int, set bool) error {
	if set {
		if err := svc.Store.SetPoolSize(ctx, project, n); err != nil {
			return err
		}
	}
	if !svc.Cfg.ProjectMachines {
		return nil
	}
	start := time.Now()
	rep, err := svc.Pools().Maintain(ctx, pool.Options{Project: project})
	if err != nil {
		return err
	}
	for _, e := range rep.Errors[min(1, len(rep.Errors)):] {
		fmt.Fprintf(a.Err, "xmode: %s %s\n", e.SessionID, clean(e.Error))
	}
	if rep.Err != nil {
		return fmt.Errorf("warmed %s, but its pool: %w", project, rep.Err)
	}
	if rep.Filled > 0 || rep.Retired > 0 {
		a.info("pool of %s: made %d, retired %d, in %s", project, rep.Filled, rep.Retired, humanize.Duration(time.Since(start)))
	}
	return nil
}

// reapPools keeps every pool after a reaper pass and adds what it did to
// the pass's summary.
func (a *App) reapPools(ctx context.Context, svc *sandbox.Service, sum *reaper.Summary, dry bool, log io.Writer) {
	start := time.Now()
	rep, err := svc.Pools().Maintain(ctx, pool.Options{DryRun: dry, Log: log})
	if err != nil {
		sum.Errors = append(sum.Errors, reaper.Failure{Error: "keep the pools: " + err.Error()})
	} else {
		sum.PoolFilled, sum.PoolRetired = rep.Filled, rep.Retired
		sum.Errors = append(sum.Errors, rep.Errors...)
	}
	sum.DurationMS += time.Since(start).Milliseconds()
}

// printPool is the pool part of `machine show`.
func (a *App) printPool(w io.Writer, v pool.MachineView) error {
	if v.Pool.Size == 0 && len(v.Pool.Entries) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	now := clock()
	// Whose each entry is, where entries are a user's (docker: each
	// user's cache).
	perUser := slices.ContainsFunc(v.Pool.Entries, func(e pool.EntryView) bool { return e.User != "" })
	cols := []string{"POOL", "STATE", "AGE", "COMMIT", "ENGINE"}
	if perUser {
		cols = append(cols, "USER")
	}
	t := newTable(w, cols...)
	for _, e := range v.Pool.Entries {
		state := e.State
		if e.Behind {
			state += " (behind)"
		}
		eng := e.Engine
		if e.MountMode != "" {
			eng += " (" + e.MountMode + ")"
		}
		if e.Image != "" {
			eng += " " + e.Image
		}
		row := []string{e.SessionID, state, humanize.Span(now.Sub(e.CreatedAt)), shortSHA(e.Commit), clean(eng)}
		if perUser {
			row = append(row, orDash(clean(e.User)))
		}
		t.row(row...)
	}
	return t.flush()
}

// poolSummary is the "Pool:" line of `machine show`.
func poolSummary(v pool.MachineView) string {
	s := fmt.Sprintf("%d ready of %d", v.Pool.Ready, v.Pool.Size)
	users := map[string]int{}
	for _, e := range v.Pool.Entries {
		if e.User != "" && e.State == pool.Ready {
			users[e.User]++
		}
	}
	if len(users) > 0 {
		// Each user's pool is of the size (docs/project-machines.md, "Whose pool").
		var each []string
		for _, u := range slices.Sorted(maps.Keys(users)) {
			each = append(each, fmt.Sprintf("%s %d", clean(u), users[u]))
		}
		s = fmt.Sprintf("%d ready, of %d for each user (%s)", v.Pool.Ready, v.Pool.Size, strings.Join(each, ", "))
	}
	if other := len(v.Pool.Entries) - v.Pool.Ready; other > 0 {
		s += fmt.Sprintf(" (%d more being made or retired)", other)
	}
	if v.Pool.Size == 0 {
		s += " — no pool (`xmode machine warm " + v.Project + " --pool N`, or XMODE_POOL_SIZE)"
	}
	return strings.TrimSpace(s)
}
