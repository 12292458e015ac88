package reaper

import (
	"context"
	"fmt"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/store"
)

// Holder names this Reaper as the owner of what it takes (claims, pool
// entries it retires): its process and a tag of its own.
func (r *Reaper) Holder() string { return r.holder() }

// TeardownEntry retires a pool entry the way a session is torn down: its
// engine objects first (an entry whose container may still live is never
// forgotten), then its row — marking its run reclaimed in the same
// transaction — then its worktree, through the guard, and its record in
// the project machine. It takes the entry first (RetirePoolEntry): a ready
// one, one this Reaper is making (its own failure), or one whose maker or
// retirer is gone. It reports false, doing nothing, when the entry was
// claimed or someone alive holds it. Safe to repeat until it converges.
func (r *Reaper) TeardownEntry(ctx context.Context, e *store.PoolEntry, why string) (bool, error) {
	took, err := r.Store.RetirePoolEntry(ctx, e.SessionID, r.holder(), r.now(), staleClaim)
	if err != nil || !took {
		return false, err
	}
	sb := e.Sandbox()
	if sb.ContainerID != "" || len(sb.Volumes) > 0 {
		provider, err := r.provider(e.Engine)
		if err != nil {
			return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
		}
		if err := provider.Destroy(ctx, sb); err != nil {
			return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
		}
		if sb.ContainerID != "" {
			r.logf(e.SessionID, "removed container %s of pool entry (%s)", short(sb.ContainerID), why)
		}
	} else if err := r.removeUnrecorded(ctx, e, why); err != nil {
		return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
	}
	if err := r.Store.DropPoolEntry(ctx, e.SessionID, e.RunID, r.now()); err != nil {
		return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
	}
	removed, c, err := r.reclaim(ctx, e.RunID, false)
	if err != nil {
		return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
	}
	if c == store.Claimed {
		if _, err := machines.ReleaseRun(ctx, r.Store, r.Guard, e.RunID); err != nil {
			return false, fmt.Errorf("retire pool entry %s: %w", e.SessionID, err)
		}
		// Nothing of a run no session used is left to show.
		if err := r.Store.ForgetRun(ctx, e.RunID); err != nil {
			return false, err
		}
	}
	if removed {
		r.logf(e.SessionID, "retired pool entry of %s: %s", e.Project, why)
	} else {
		r.logf(e.SessionID, "retired pool entry of %s (%s): it had no worktree", e.Project, why)
	}
	return true, nil
}

// removeUnrecorded removes the engine objects of an entry whose maker died
// between making them and recording them (a reap killed mid-refill leaves
// a container in state Created): found by the entry's session label among
// this install's objects, so nothing of another instance, nor of another
// entry or session, is touched. An engine without such objects has none.
func (r *Reaper) removeUnrecorded(ctx context.Context, e *store.PoolEntry, why string) error {
	provider, err := r.provider(e.Engine)
	if err != nil {
		return err
	}
	lister, ok := engine.Orphans(provider)
	if !ok {
		return nil
	}
	instance, err := r.Store.InstanceID(ctx)
	if err != nil {
		return err
	}
	objs, err := lister.ListObjects(ctx, instance)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.SessionID != e.SessionID || o.Instance != instance {
			continue
		}
		if err := lister.RemoveObject(ctx, o); err != nil {
			return fmt.Errorf("remove %s %s: %w", o.Kind, shortName(o), err)
		}
		r.logf(e.SessionID, "removed %s %s of pool entry, never recorded (%s)", o.Kind, shortName(o), why)
	}
	return nil
}

// Close releases the engine connections this Reaper opened (a Pass closes
// its own).
func (r *Reaper) Close() { r.closeProviders() }
