package reaper

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/store"
)

// OrphanSource lists and removes the engine objects of one install: the
// configured engine's engine.OrphanLister, or another one a test plugs in
// (Reaper.Orphans).
type OrphanSource = engine.OrphanLister

// orphanSource is r.Orphans, else the configured engine's orphan lister,
// else nil (an engine whose objects cannot outlive a session: nothing to
// sweep). The provider is the pass's, closed with the others.
func (r *Reaper) orphanSource() (OrphanSource, error) {
	if r.Orphans != nil {
		return r.Orphans, nil
	}
	if r.Cfg == nil || r.Cfg.Engine == "" {
		return nil, nil
	}
	a, err := r.provider(r.Cfg.Engine)
	if err != nil {
		return nil, err
	}
	src, _ := engine.Orphans(a)
	return src, nil
}

// sweepEngine removes the engine objects of this install whose session is
// not open: containers (or pods), then per-session volumes and images. Volumes without a session
// label (shared ones, such as a project's cache) are never touched, nor is
// anything labelled with another install's instance.
func (r *Reaper) sweepEngine(ctx context.Context, dry bool, sum *summer) {
	src, err := r.orphanSource()
	if err != nil {
		sum.fail("", fmt.Errorf("look for orphan containers: %w", err))
		return
	}
	if src == nil {
		return
	}
	instance, err := r.Store.InstanceID(ctx)
	if err != nil {
		sum.fail("", err)
		return
	}
	objs, err := src.ListObjects(ctx, instance)
	if err != nil {
		sum.fail("", fmt.Errorf("look for orphan containers: %w", err))
		return
	}
	// Read the open sessions only now: a session's row exists before its
	// container, so every container listed above whose session is still
	// being created is seen here as provisioning.
	active, _, err := r.Store.ActiveSessions(ctx)
	if err != nil {
		sum.fail("", err)
		return
	}
	snapshots, err := r.Store.SnapshotIDs(ctx) // likewise: rows come before images
	if err != nil {
		sum.fail("", err)
		return
	}
	// What runs (containers, pods) before what it uses: the networks it
	// is attached to, the image it runs, the volumes it mounts.
	rank := func(kind string) int {
		switch kind {
		case engine.KindContainer, engine.KindPod:
			return 0
		case engine.KindVolume:
			return 2
		}
		return 1
	}
	sort.SliceStable(objs, func(i, j int) bool { return rank(objs[i].Kind) < rank(objs[j].Kind) })
	for _, o := range objs {
		if ctx.Err() != nil {
			return
		}
		if o.Instance != instance || active[o.SessionID] || (o.Kind == engine.KindVolume && o.SessionID == "") {
			continue
		}
		// An image is a fork's (its session) or a snapshot's: kept while
		// either lives; one that names neither is not this sweep's.
		if o.Kind == engine.KindImage && (snapshots[o.Snapshot] || o.SessionID == "" && o.Snapshot == "") {
			continue
		}
		who := o.SessionID
		if who == "" {
			who = o.Name
		}
		if dry {
			r.logf(who, "would remove orphan %s %s", o.Kind, shortName(o))
			sum.add(func(s *Summary) { s.OrphansRemoved++ })
			continue
		}
		if err := src.RemoveObject(ctx, o); err != nil {
			if errors.Is(err, engine.ErrInUse) {
				continue // its last user has not ended yet
			}
			sum.fail(o.SessionID, fmt.Errorf("remove orphan %s %s: %w", o.Kind, shortName(o), err))
			continue
		}
		r.logf(who, "removed orphan %s %s", o.Kind, shortName(o))
		sum.add(func(s *Summary) { s.OrphansRemoved++ })
	}
}

func shortName(o engine.Object) string {
	if o.Name != "" {
		return o.Name
	}
	return short(o.ID)
}

// sweepRuns reclaims the worktrees of runs without a provisioning or open
// session: what a teardown killed between ending its session and removing
// the worktree left, a removal that failed, or a run whose rows are gone.
// The evidence next to the worktree stays.
//
// Cron runs the reaper often, so the sweep is incremental: it checks the
// runs marked reclaimed since the watermark (the start of the last sweep
// that succeeded, less a margin for transactions that committed late), and
// lists every run directory only on the first pass and then once every
// FullSweepEvery. A run directory unknown to the store is reclaimed only
// when reclaimUnknown asks for it, and then in that (full) pass.
func (r *Reaper) sweepRuns(ctx context.Context, dry, reclaimUnknown bool, passStart time.Time, sum *summer) {
	wm, haveWM, err := r.Store.MetaTime(ctx, store.KeySweepWatermark)
	if err != nil {
		sum.fail("", err)
		return
	}
	lastFull, haveFull, err := r.Store.MetaTime(ctx, store.KeySweepFull)
	if err != nil {
		sum.fail("", err)
		return
	}
	full := reclaimUnknown || !haveWM || !haveFull || passStart.Sub(lastFull) >= r.fullSweepEvery()
	var candidates []string
	var reclaimedAt map[string]time.Time
	if full {
		entries, err := os.ReadDir(r.Guard.RunsDir())
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			sum.fail("", fmt.Errorf("look for orphan worktrees: %w", err))
			return
		}
		// A run directory the store has never known (a store lost and
		// adopted, a directory copied in) is not an orphan to delete unless
		// asked: its worktree may be all that is left of someone's work.
		var known map[string]bool
		if !reclaimUnknown {
			if known, err = r.Store.KnownRuns(ctx); err != nil {
				sum.fail("", err)
				return
			}
		}
		for _, e := range entries {
			if !e.IsDir() || !fsguard.ValidID("run_", e.Name()) {
				continue
			}
			if known != nil && !known[e.Name()] {
				if _, err := os.Lstat(filepath.Join(r.Guard.RunsDir(), e.Name(), "worktree")); err == nil {
					r.logf(e.Name(), "kept worktree of a run the store does not know (`xmode reap --reclaim-unknown` removes it)")
				}
				continue
			}
			candidates = append(candidates, e.Name())
		}
	} else {
		if reclaimedAt, err = r.Store.RunsReclaimedSince(ctx, wm); err != nil {
			sum.fail("", err)
			return
		}
		for run := range reclaimedAt {
			candidates = append(candidates, run)
		}
		sort.Strings(candidates)
	}
	// Read after listing: a run's directory is created only after its
	// session's row, so a run being created is seen here as active.
	_, activeRuns, err := r.Store.ActiveSessions(ctx)
	if err != nil {
		sum.fail("", err)
		return
	}
	keep := passStart.Add(-WatermarkMargin) // the new watermark, unless a run is left to its remover
	runs, err := os.OpenRoot(r.Guard.RunsDir())
	if errors.Is(err, fs.ErrNotExist) {
		r.advanceWatermark(ctx, dry, full, passStart, keep, sum)
		return
	}
	if err != nil {
		sum.fail("", fmt.Errorf("look for orphan worktrees: %w", err))
		return
	}
	defer runs.Close()
	for _, run := range candidates {
		if ctx.Err() != nil {
			return
		}
		if activeRuns[run] {
			continue
		}
		if _, err := runs.Lstat(run + "/worktree"); err != nil {
			continue
		}
		if dry {
			r.logf(run, "would reclaim orphan worktree")
			sum.add(func(s *Summary) { s.OrphansRemoved++ })
			continue
		}
		removed, c, err := r.reclaim(ctx, run, true)
		if err != nil {
			sum.fail("", fmt.Errorf("reclaim orphan worktree of %s: %w", run, err))
			continue
		}
		switch {
		case c == store.Busy:
			// Another process is removing it; should it die, the next
			// sweep must look again.
			if at, ok := reclaimedAt[run]; ok && at.Before(keep) {
				keep = at
			} else if !ok {
				keep = time.Time{}
			}
		case c == store.Claimed && removed:
			r.logf(run, "reclaimed orphan worktree")
			sum.add(func(s *Summary) { s.OrphansRemoved++ })
		}
		if c == store.Claimed {
			// A worktree branched from a project machine: its record in
			// the machine's repository goes too, as after a teardown.
			if _, err := machines.ReleaseRun(ctx, r.Store, r.Guard, run); err != nil {
				sum.fail("", fmt.Errorf("release the project machine's record of %s: %w", run, err))
			}
		}
	}
	r.advanceWatermark(ctx, dry, full, passStart, keep, sum)
}

// WatermarkMargin is how far behind the start of a sweep its watermark is
// set: a run marked reclaimed just before the sweep began, in a transaction
// that committed after the sweep read the runs, is checked again next time.
const WatermarkMargin = time.Minute

// advanceWatermark records a sweep that found no error: the next one starts
// from keep.
func (r *Reaper) advanceWatermark(ctx context.Context, dry, full bool, passStart, keep time.Time, sum *summer) {
	sum.mu.Lock()
	failed := len(sum.s.Errors) > 0
	sum.mu.Unlock()
	if dry || failed || keep.IsZero() {
		return
	}
	if err := r.Store.SetMetaTime(ctx, store.KeySweepWatermark, keep); err != nil {
		sum.fail("", err)
		return
	}
	if full {
		if err := r.Store.SetMetaTime(ctx, store.KeySweepFull, passStart); err != nil {
			sum.fail("", err)
		}
	}
}
