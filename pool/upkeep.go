package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// The upkeep of the pools, off the create's path: `xmode reap` and
// `machine warm` call Maintain; a claim only leaves a pool short.

// Options say which pools Maintain keeps, and how.
type Options struct {
	Project string    // one machine's pool; "" for every machine's
	DryRun  bool      // say what would be done, change nothing
	Log     io.Writer // one line per entry made or retired; nil for none
}

// Report says what Maintain did.
type Report struct {
	Filled  int
	Retired int
	Errors  []reaper.Failure
	// Err is the first failure, with its kind (an unreachable daemon is
	// fail.EngineUnavailable), for a caller that fails with it.
	Err error

	mu sync.Mutex
}

func (r *Report) add(f func(*Report)) {
	r.mu.Lock()
	f(r)
	r.mu.Unlock()
}

func (r *Report) fail(id string, err error) {
	r.add(func(r *Report) {
		r.Errors = append(r.Errors, reaper.Failure{SessionID: id, Error: err.Error()})
		if r.Err == nil {
			r.Err = err
		}
	})
}

// fillParallel bounds the entries made at once: their checkouts take turns
// on the machine's lock anyway; their containers start side by side.
const fillParallel = 4

// Maintain keeps the project machines' pools (what `xmode reap` and
// `machine warm` run): it retires entries whose maker died, that are older
// than XMODE_POOL_MAX_AGE, were made for other settings than this
// configuration's, lost their container or their machine; makes what each
// user's pool lacks at its machine's commit (Users: whose pools); then
// retires the entries of those pools behind that commit (after a refresh)
// and those beyond the pool's size. Another user's entry is never retired
// for being another user's: an entry is of this configuration when it is
// what this configuration makes for its own user (Shape of Entry.User).
// Pools are made only with project machines on (only then do creates
// claim), of the shape a create with this configuration would claim. A
// failure is reported and the rest goes on; the error return is for a
// pass that could not start.
func (p *Pools) Maintain(ctx context.Context, o Options) (*Report, error) {
	rep := &Report{}
	if o.Log != nil {
		o.Log = &lockedWriter{w: o.Log} // entries are made side by side
	}
	r := p.reaper()
	r.Log = o.Log
	defer r.Close()
	var machs []*store.Machine
	if o.Project != "" {
		m, err := p.Store.GetMachine(ctx, o.Project)
		if err != nil {
			return nil, err
		}
		machs = []*store.Machine{m}
	} else {
		var err error
		if machs, err = p.Store.ListMachines(ctx); err != nil {
			return nil, err
		}
	}
	entries, err := p.Entries(ctx, o.Project)
	if err != nil {
		return nil, err
	}
	byProject := map[string]*store.Machine{}
	want := false
	for _, m := range machs {
		byProject[m.Project] = m
		want = want || Size(m, p.Cfg.PoolSize) > 0
	}
	keep := p.Cfg.ProjectMachines && (want || len(entries) > 0)
	var engineName string
	var provider engine.Provider
	if keep {
		if engineName, err = engine.Choose(p.Cfg.RunnerMode, p.Cfg.Engine); err != nil {
			keep = false // cloud_subscription: no local sandboxes to keep
		}
	}
	if keep {
		if provider, err = engine.Open(engineName, p.Cfg); err != nil {
			return nil, err
		}
		defer engine.Close(provider)
		engine.SetProgress(provider, p.Progress)
	}
	// ours: the entry is what this configuration makes for its user.
	ours := func(e *Entry) bool { return keep && e.Shape == Shape(provider, e.User) }
	_, perUser := engine.Volumes(provider)
	running := p.running(ctx, provider, entries, ours, rep)

	now := p.now()
	for _, e := range entries {
		why := ""
		switch {
		case e.State == Provisioning:
			why = "its maker is gone" // TeardownEntry takes it only then
		case e.State == Retiring:
			why = "its retirement was interrupted"
		case byProject[e.Project] == nil:
			why = "its project machine is gone"
		case now.Sub(e.CreatedAt) >= p.Cfg.PoolMaxAge:
			why = fmt.Sprintf("older than XMODE_POOL_MAX_AGE (%s)", p.Cfg.PoolMaxAge)
		case keep && !ours(e) && perUser && e.User == "":
			why = "made before pool entries recorded whose cache they mount (it may mount the cache every user shared)"
		case keep && !ours(e):
			why = "made for other settings (engine, image, limits, network…) than this configuration's"
		case running != nil && !running[e.SessionID]: // ours: the case above took the others
			why = "its container is gone or stopped"
		}
		if why != "" {
			p.retire(ctx, r, e, why, o, rep)
		}
	}
	if !keep {
		return rep, nil
	}
	// The pools this pass fills, by project: the shape of each of their
	// users.
	filled := map[string]map[string]bool{}
	for _, m := range machs {
		if ctx.Err() != nil {
			break
		}
		users, err := p.Users(ctx, provider, m.Project)
		if err != nil {
			rep.fail("", err)
			continue
		}
		filled[m.Project] = map[string]bool{}
		for _, u := range users {
			filled[m.Project][Shape(provider, u)] = true
			p.fill(ctx, r, provider, u, m, entries, o, rep)
		}
	}
	// Behind and beyond the size only now: a pool catching up with a
	// refresh keeps its old entries until the new ones are ready. The pool
	// of a user it did not fill keeps its entries (claimable, if behind,
	// by a move) until they age: it is not this pass's to empty.
	if entries, err = p.Entries(ctx, o.Project); err != nil {
		rep.fail("", err)
		return rep, nil
	}
	type pool struct{ project, shape string }
	atHead := map[pool][]*Entry{}
	for _, e := range entries {
		m := byProject[e.Project]
		if m == nil || e.State != Ready || !ours(e) {
			continue
		}
		if e.Commit != m.HeadCommit {
			if filled[e.Project][e.Shape] {
				p.retire(ctx, r, e, "behind its machine, now at "+shortCommit(m.HeadCommit), o, rep)
			}
			continue
		}
		atHead[pool{e.Project, e.Shape}] = append(atHead[pool{e.Project, e.Shape}], e)
	}
	for k, es := range atHead {
		size := Size(byProject[k.project], p.Cfg.PoolSize)
		sort.Slice(es, func(i, j int) bool { return es[i].CreatedAt.After(es[j].CreatedAt) })
		for _, e := range es[min(size, len(es)):] {
			p.retire(ctx, r, e, fmt.Sprintf("the pool keeps %d", size), o, rep)
		}
	}
	return rep, nil
}

// running returns which entries have a running container (by session
// ID), or nil when there is nothing to check — no ready entry of this
// configuration (ours) —: an engine whose objects can outlive a session
// (engine.Orphans) lists them once for the whole pass.
func (p *Pools) running(ctx context.Context, provider engine.Provider, entries []*Entry, ours func(*Entry) bool, rep *Report) map[string]bool {
	if provider == nil || !slices.ContainsFunc(entries, func(e *Entry) bool {
		return e.State == Ready && ours(e)
	}) {
		return nil
	}
	lister, ok := engine.Orphans(provider)
	if !ok {
		return nil
	}
	instance, err := p.Store.InstanceID(ctx)
	if err == nil {
		var objs []engine.Object
		if objs, err = lister.ListObjects(ctx, instance); err == nil {
			out := map[string]bool{}
			for _, o := range objs {
				if (o.Kind == engine.KindContainer || o.Kind == engine.KindPod) && o.State == "running" {
					out[o.SessionID] = true
				}
			}
			return out
		}
	}
	rep.fail("", fmt.Errorf("check the containers of pool entries: %w", err))
	return nil
}

func (p *Pools) retire(ctx context.Context, r *reaper.Reaper, e *Entry, why string, o Options, rep *Report) {
	if o.DryRun {
		if e.State == Ready {
			logf(o.Log, "%s would retire pool entry of %s: %s", e.SessionID, e.Project, why)
			rep.add(func(r *Report) { r.Retired++ })
		}
		return
	}
	took, err := p.TeardownEntry(ctx, r, e, why)
	if err != nil {
		rep.fail(e.SessionID, err)
		return
	}
	if took {
		rep.add(func(r *Report) { r.Retired++ })
	}
}

// fill makes what user's pool of the machine lacks: reserve counts and
// reserves in one transaction, so fills running at once never overshoot.
func (p *Pools) fill(ctx context.Context, r *reaper.Reaper, provider engine.Provider, user string, m *store.Machine, entries []*Entry, o Options, rep *Report) {
	shape := Shape(provider, user)
	size := Size(m, p.Cfg.PoolSize)
	if size <= 0 {
		return
	}
	if o.DryRun {
		have := 0
		for _, e := range entries {
			if e.Project == m.Project && e.Shape == shape && e.Commit == m.HeadCommit && e.State != Retiring {
				have++
			}
		}
		if n := size - have; n > 0 {
			logf(o.Log, "%s would make %d pool entries at %s%s", m.Project, n, shortCommit(m.HeadCommit), forUser(user))
			rep.add(func(r *Report) { r.Filled += n })
		}
		return
	}
	if p.Spec == nil {
		rep.fail("", errors.New("pool: no Spec to make entries with (use sandbox.Service.Pools)"))
		return
	}
	// The image is recorded before the sandbox is made, as a create records
	// its own (an engine that runs no image has none).
	image, _ := engine.Image(provider)
	reserved, err := p.reserve(ctx, newEntries{
		Project: m.Project, Repo: m.Repo, Ref: m.DefaultRef, Commit: m.HeadCommit,
		Engine: provider.Name(), Shape: shape, User: user, MountMode: engine.MountMode(provider), Image: image,
		Size: size, Owner: r.Holder(), Now: p.now(),
	})
	if err != nil {
		rep.fail("", err)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, fillParallel)
	for _, e := range reserved {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := p.fillOne(ctx, r, provider, e); err != nil {
				rep.fail(e.SessionID, fmt.Errorf("make pool entry of %s: %w", e.Project, err))
				return
			}
			logf(o.Log, "%s made pool entry of %s%s", e.SessionID, e.Project, forUser(e.User))
			rep.add(func(r *Report) { r.Filled++ })
		})
	}
	wg.Wait()
}

// fillOne makes one reserved entry the way a create makes a session from a
// machine — its worktree (machines.Checkout.AddWorktree), then the
// engine's sandbox with the create's own spec (Spec) — and marks it ready.
// A failure tears down what exists.
func (p *Pools) fillOne(ctx context.Context, r *reaper.Reaper, provider engine.Provider, e *Entry) (err error) {
	defer func() {
		if err != nil {
			if _, terr := p.TeardownEntry(context.WithoutCancel(ctx), r, e, "making it failed"); terr != nil {
				err = fmt.Errorf("%w (and cleaning up failed: %v)", err, terr)
			}
		}
	}()
	if err := os.MkdirAll(p.Guard.RunsDir(), fsguard.RunDirMode); err != nil {
		return fmt.Errorf("create runs directory: %w", err)
	}
	co, err := p.machines().Checkout(ctx, e.Project, "", "", false)
	if err != nil {
		return err
	}
	record, err := co.AddWorktree(ctx, e.RunID, e.WorktreePath)
	co.Close()
	if err != nil {
		return err
	}
	if err := p.Store.SetRunRecord(ctx, e.RunID, record); err != nil {
		return err
	}
	files, err := co.Files(ctx, co.Commit)
	if err != nil {
		return err
	}
	spec, err := p.Spec(ctx, e, co)
	if err != nil {
		return err
	}
	sb, err := provider.Provision(ctx, spec)
	e.ContainerID, e.MountMode, e.Volumes = sb.ContainerID, sb.MountMode, sb.Volumes
	if sb.Image != "" {
		e.Image = sb.Image
	}
	if sb.ContainerID != "" || len(sb.Volumes) > 0 {
		if rerr := p.recordEngine(ctx, e.SessionID, sb.ContainerID, sb.MountMode, e.Image, sb.Volumes); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return err
	}
	// After Provision, which may give the worktree to the sandbox user
	// (every file's ctime changes), and before a claim can hand it out.
	p.seed(ctx, e.RunID, co.Commit)
	return p.markReady(ctx, e.SessionID, r.Holder(), co.Commit, files, p.now())
}

// forUser says whose an entry is, for a log line: nothing for an entry
// every user's create claims.
func forUser(user string) string {
	if user == "" {
		return ""
	}
	return " for " + user
}
