package pool

import (
	"context"
	"fmt"
	"time"

	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/store"
)

// View is a machine's pool as `machine show` prints it.
type View struct {
	Size    int         `json:"size"`
	Ready   int         `json:"ready"`
	Entries []EntryView `json:"entries"`
}

// EntryView is one entry: how old it is and what it holds.
type EntryView struct {
	Entry
	AgeSeconds int64 `json:"age_seconds"`
	// Behind: at another commit than the machine's (after a refresh).
	Behind bool `json:"behind"`
}

// MachineView is a machine as `machine list` and `machine show` print it,
// with its pool.
type MachineView struct {
	machines.View
	Pool View `json:"pool"`
}

// Views returns every machine with its pool, or only project's when it is
// not empty (fail.NotFound when it has none): machines.Manager.Views, and
// each machine's pool.
func (p *Pools) Views(ctx context.Context, project string) ([]MachineView, error) {
	ms, err := p.machines().Views(ctx, project)
	if err != nil {
		return nil, err
	}
	out := make([]MachineView, 0, len(ms))
	for _, m := range ms {
		v, err := p.view(ctx, &m.Machine)
		if err != nil {
			return nil, err
		}
		out = append(out, MachineView{View: m, Pool: v})
	}
	return out, nil
}

func (p *Pools) view(ctx context.Context, mach *store.Machine) (View, error) {
	v := View{Entries: []EntryView{}}
	if p.Cfg != nil {
		v.Size = Size(mach, p.Cfg.PoolSize)
	}
	entries, err := p.Entries(ctx, mach.Project)
	if err != nil {
		return v, err
	}
	now := p.now()
	for _, e := range entries {
		if e.State == Ready {
			v.Ready++
		}
		v.Entries = append(v.Entries, EntryView{Entry: *e, AgeSeconds: int64(now.Sub(e.CreatedAt) / time.Second),
			Behind: e.State == Ready && e.Commit != mach.HeadCommit})
	}
	return v, nil
}

// Count is the number of entries of a project's pool, in any state:
// machines.Remove refuses a machine a refill is still making entries of
// (machines.Manager.PoolEntries).
func (p *Pools) Count(ctx context.Context, project string) (int, error) {
	var n int
	if err := p.Store.QueryRow(ctx, `SELECT count(*) FROM pool_entries WHERE project = ?`, project).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the pool of %s: %w", project, err)
	}
	return n, nil
}
