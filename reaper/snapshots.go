package reaper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/store"
)

// RemoveSnapshot removes a snapshot (`sandbox snapshots rm`, and the pass
// for one that expired or died half-made): its image, through the engine
// that made it — one a sandbox still runs stays, and goes with its last
// user (the orphan sweep) — then its store, confined to the storage root,
// then its row. It reports whether this call removed the row; one already
// gone is not an error.
func (r *Reaper) RemoveSnapshot(ctx context.Context, sn *store.Snapshot) (bool, error) {
	if sn.Image != "" {
		provider, err := r.provider(sn.Engine)
		if err != nil {
			return false, fmt.Errorf("remove snapshot %s: %w", sn.ID, err)
		}
		if lister, ok := engine.Orphans(provider); ok {
			instance, err := r.Store.InstanceID(ctx)
			if err != nil {
				return false, err
			}
			err = lister.RemoveObject(ctx, engine.Object{Kind: engine.KindImage, ID: sn.Image, Name: sn.Image, Instance: instance, Snapshot: sn.ID})
			switch {
			case errors.Is(err, engine.ErrInUse):
				r.logf(sn.ID, "kept image %s: a sandbox still runs it (it goes with the last one)", sn.Image)
			case err != nil:
				return false, fmt.Errorf("remove snapshot %s: %w", sn.ID, err)
			default:
				r.logf(sn.ID, "removed image %s", sn.Image)
			}
		}
	}
	if _, err := r.Guard.RemoveSnapshot(sn.ID); err != nil {
		return false, err
	}
	return r.Store.DeleteSnapshot(ctx, sn.ID)
}

// reapSnapshots removes the snapshots whose lifetime ran out and those
// whose making died (still making after the provision grace).
func (r *Reaper) reapSnapshots(ctx context.Context, dry bool, now time.Time, sum *summer) {
	sns, err := r.Store.ExpiredSnapshots(ctx, now, now.Add(-r.provisionGrace()))
	if err != nil {
		sum.fail("", err)
		return
	}
	for _, sn := range sns {
		if ctx.Err() != nil {
			return
		}
		why := "expired"
		if sn.Status == store.SnapshotMaking {
			why = "never finished"
		}
		if dry {
			r.logf(sn.ID, "would remove snapshot %s (%s)", sn.Name, why)
			sum.add(func(s *Summary) { s.SnapshotsRemoved++ })
			continue
		}
		removed, err := r.RemoveSnapshot(ctx, sn)
		if err != nil {
			sum.fail("", err)
			continue
		}
		if removed {
			r.logf(sn.ID, "removed snapshot %s (%s)", sn.Name, why)
			sum.add(func(s *Summary) { s.SnapshotsRemoved++ })
		}
	}
}
