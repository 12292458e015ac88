package pool

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// TeardownEntry retires a pool entry the way a session is torn down: its
// engine objects first, through the reaper (an entry whose container may
// still live is never forgotten), then its row — marking its run reclaimed
// in the same transaction — then its worktree, through the guard, and its
// record in the project machine. It takes the entry first: a ready one,
// one r is making (its own failure), or one whose maker or retirer is
// gone. It reports false, doing nothing, when the entry was claimed or
// someone alive holds it. Safe to repeat until it converges.
func (p *Pools) TeardownEntry(ctx context.Context, r *reaper.Reaper, e *Entry, why string) (bool, error) {
	took, err := p.take(ctx, e.SessionID, r.Holder(), now(r), reaper.StaleClaim)
	if err != nil || !took {
		return false, err
	}
	if err := r.RemoveObjects(ctx, e.Sandbox(), "pool entry", why); err != nil {
		return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
	}
	if err := p.drop(ctx, e.SessionID, e.RunID, now(r)); err != nil {
		return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
	}
	removed, c, err := r.Reclaim(ctx, e.RunID)
	if err != nil {
		return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
	}
	if c == store.Claimed {
		if _, err := machines.ReleaseRun(ctx, p.Store, p.Guard, e.RunID); err != nil {
			return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
		}
		// Nothing of a run no session used is left to show.
		if err := p.Store.ForgetRun(ctx, e.RunID); err != nil {
			return false, err
		}
	}
	if removed {
		r.Logf(e.SessionID, "retired pool entry of %s: %s", e.Project, why)
	} else {
		r.Logf(e.SessionID, "retired pool entry of %s (%s): it had no worktree", e.Project, why)
	}
	return true, nil
}

// Drain retires every entry of a project's pool (before `machine rm`): the
// ready ones and those whose maker died. An entry being made by a live
// process stays; machines.Remove then refuses, and says so.
func (p *Pools) Drain(ctx context.Context, project string, log io.Writer) (int, error) {
	if err := p.dropWarm(ctx, project); err != nil {
		return 0, err
	}
	entries, err := p.Entries(ctx, project)
	if err != nil || len(entries) == 0 {
		return 0, err
	}
	r := p.reaper()
	r.Log = log
	defer r.Close()
	n := 0
	for _, e := range entries {
		took, err := p.TeardownEntry(ctx, r, e, "its machine is being removed")
		if err != nil {
			return n, err
		}
		if took {
			n++
		}
	}
	return n, nil
}

// dropWarm removes the engine's own pools of the project (engine.WarmPooler)
// under this configuration's engine, when it has them.
func (p *Pools) dropWarm(ctx context.Context, project string) error {
	if !p.Cfg.ProjectMachines {
		return nil
	}
	name, err := engine.Choose(p.Cfg.RunnerMode, p.Cfg.Engine)
	if err != nil {
		return nil // the cloud's: no engine here
	}
	provider, err := engine.Open(name, p.Cfg)
	if err != nil {
		return err
	}
	defer engine.Close(provider)
	w, ok := engine.WarmPools(provider)
	if !ok {
		return nil
	}
	spec, err := p.warmSpec(ctx, provider, project, 0)
	if err == nil {
		err = w.KeepWarm(ctx, spec, 0)
	}
	if err != nil {
		return fmt.Errorf("remove the warm pool of %s: %w", project, err)
	}
	return nil
}

// now is the Reaper's clock.
func now(r *reaper.Reaper) time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
