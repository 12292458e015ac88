package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// Warm pools (docs/project-machines.md, "The pool"): sandboxes of a project
// machine made ahead of time — a detached worktree at the machine's commit
// and, on the docker engine, its running container, made exactly as a
// create makes them — so that `sandbox create --project` only claims one.
// Making and retiring entries happens off the create's path: `xmode reap`
// and `machine warm` call MaintainPools; a claim only leaves the pool short.

// shapeSettings are the settings that make one docker sandbox differ from
// another: a create claims only an entry made with the same values.
var shapeSettings = []string{
	"XMODE_SANDBOX_DOCKER_HOST", "XMODE_SANDBOX_DOCKER_REMOTE", "XMODE_SANDBOX_RUNTIME",
	"XMODE_SANDBOX_IMAGE", "XMODE_SANDBOX_STORAGE_VOLUME", "XMODE_SANDBOX_STORAGE_MOUNT",
	"XMODE_SANDBOX_CPUS", "XMODE_SANDBOX_MEMORY", "XMODE_SANDBOX_PIDS_LIMIT", "XMODE_SANDBOX_TMPFS",
	"XMODE_SANDBOX_NETWORK", "XMODE_SANDBOX_READONLY_ROOT", "XMODE_SANDBOX_BIND_HARDENED",
	"XMODE_SANDBOX_USER", "XMODE_PROJECT_CACHE_MOUNT",
}

// Shape names the sandbox a create with cfg makes on the engine: the engine,
// and for docker its mount mode and every setting of shapeSettings (with
// whether it was set: bind mode applies only the limits that were). Pool
// entries of another shape are never claimed.
func Shape(cfg *config.Config, engineName string, provider engine.Provider) string {
	var b strings.Builder
	b.WriteString("engine=" + engineName + "\n")
	if engineName == "docker" {
		b.WriteString("mount=" + engine.MountMode(provider) + "\n")
		for _, v := range cfg.Values {
			if slices.Contains(shapeSettings, v.Name) {
				fmt.Fprintf(&b, "%s=%s set=%t\n", v.Name, v.Value, v.Source != "default")
			}
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}

// claim gives the session a ready entry of the project's pool, when one of
// this create's shape exists. Without --ref, --refresh or --repo it runs no
// git at all: the session is at the machine's commit as of its last warm,
// like a create from the machine. With them, the ref is resolved as a
// create resolves it (the machine locked), and that checkout is returned
// for the caller's fallback when no entry is claimed. An entry at another
// commit is moved there by a detached checkout in its worktree, unless a
// fresh worktree would be faster. It returns nil (and no error) to fall
// back to making the sandbox.
func (s *Service) claim(ctx context.Context, o CreateOptions, sess store.Session, provider engine.Provider) (*store.Session, *machines.Checkout, error) {
	shape := Shape(s.Cfg, sess.Engine, provider)
	commits, err := s.Store.ReadyCommits(ctx, o.Project, shape)
	if err != nil || len(commits) == 0 {
		return nil, nil, err
	}
	var co *machines.Checkout
	if o.Ref == "" && !o.Refresh && o.Repo == "" {
		mach, err := s.Store.GetMachine(ctx, o.Project)
		if err != nil {
			return nil, nil, err
		}
		sess.Repo, sess.Ref, sess.BaseCommit = mach.Repo, mach.DefaultRef, mach.HeadCommit
	} else {
		if co, err = s.Machines().Checkout(ctx, o.Project, o.Repo, o.Ref, o.Refresh); err != nil {
			return nil, nil, err
		}
		sess.Repo, sess.Ref, sess.BaseCommit = co.Machine.Repo, co.Ref, co.Commit
	}
	want, also := sess.BaseCommit, ""
	if !slices.ContainsFunc(commits, func(c store.PoolCommit) bool { return c.Commit == want }) {
		if !s.moveIsFaster(ctx, o.Project, sess.Engine, engine.MountMode(provider), commits[0], want) {
			return nil, co, nil
		}
		also = commits[0].Commit
	}
	entry, claimed, err := s.claimLive(ctx, store.PoolClaim{
		Project: o.Project, Shape: shape, Want: want, Also: also, Session: sess, MaxOpen: s.Cfg.MaxOpen,
	}, provider)
	if err != nil {
		co.Close()
		return nil, nil, err
	}
	if entry == nil {
		return nil, co, nil // taken by racing creates meanwhile
	}
	co.Close() // a move does not need the machine: it writes the worktree's own record only
	if claimed.Status == store.StatusOpen {
		return claimed, nil, nil
	}
	if err := s.moveClaimed(ctx, claimed, want); err != nil {
		cleanup := context.WithoutCancel(ctx)
		if _, terr := s.teardown(cleanup, claimed, err); terr != nil {
			return nil, nil, fmt.Errorf("%w (and cleaning up failed: %v)", err, terr)
		}
		return nil, nil, err
	}
	got, err := s.Store.Get(ctx, claimed.ID)
	return got, nil, err
}

// maxClaimTries bounds the entries one claim looks at: dead ones retired,
// live ones taken by racing creates.
const maxClaimTries = 16

// claimLive claims the entry a claim would take once its sandbox is known
// to live — its worktree there, its engine objects running (engine.Alive:
// one inspect of its container on docker) — so a claim never hands out a
// dead sandbox. A dead one (its container removed or stopped behind
// xmode's back) is retired through reaper.TeardownEntry and the next entry
// is tried; with none left it returns nil, and the create makes a sandbox.
func (s *Service) claimLive(ctx context.Context, c store.PoolClaim, provider engine.Provider) (*store.PoolEntry, *store.Session, error) {
	var r *reaper.Reaper
	for range maxClaimTries {
		c.Entry = ""
		e, err := s.Store.NextPoolEntry(ctx, c)
		if err != nil || e == nil {
			return nil, nil, err
		}
		why, err := deadEntry(ctx, provider, e)
		if err != nil {
			return nil, nil, err
		}
		if why == "" {
			c.Entry = e.SessionID
			entry, claimed, err := s.Store.ClaimPoolEntry(ctx, c)
			if err != nil || entry != nil {
				return entry, claimed, err
			}
			continue // a racing create took it
		}
		if r == nil {
			r = s.reaper()
			defer r.Close()
		}
		if _, err := r.TeardownEntry(ctx, e, why); err != nil {
			return nil, nil, err
		}
		if s.Notices != nil {
			fmt.Fprintf(s.Notices, "xmode: note: pool entry %s of %s was dead (%s): retired it\n", e.SessionID, e.Project, why)
		}
	}
	return nil, nil, nil
}

// deadEntry says why an entry's sandbox cannot be handed out ("" when it
// can): its worktree is gone, or its engine objects are.
func deadEntry(ctx context.Context, provider engine.Provider, e *store.PoolEntry) (string, error) {
	if st, err := os.Lstat(e.WorktreePath); err != nil || !st.IsDir() {
		return "its worktree is gone", nil
	}
	alive, err := engine.Alive(ctx, provider, e.Sandbox())
	if err != nil {
		return "", fmt.Errorf("check pool entry %s: %w", e.SessionID, err)
	}
	if !alive {
		return "its sandbox is gone or not running", nil
	}
	return "", nil
}

// moveClaimed moves a claimed entry's worktree to commit and opens the
// session there; its lifetime starts now.
func (s *Service) moveClaimed(ctx context.Context, sess *store.Session, commit string) error {
	_, record, err := s.Store.RunMachine(ctx, sess.RunID)
	if err != nil {
		return err
	}
	if err := s.Machines().MoveWorktree(ctx, sess.Project, record, sess.WorktreePath, commit); err != nil {
		return err
	}
	return s.Store.Provisioned(ctx, sess.ID, commit, sess.ContainerID, sess.MountMode, sess.Image, sess.Volumes, s.Now().Add(s.Cfg.TTL))
}

// moveIsFaster says whether moving an entry at from to want beats making a
// sandbox: always with docker (a fresh one also starts a container, and a
// checkout writes at most both trees), on the host when fewer paths change
// than a fresh worktree of the machine checks out. Never in sync mode: the
// sandbox works on a copy of the worktree made when the entry was.
func (s *Service) moveIsFaster(ctx context.Context, project, engineName, mountMode string, from store.PoolCommit, want string) bool {
	switch {
	case mountMode == "sync":
		return false
	case engineName == "docker":
		return true
	}
	n, err := s.Machines().Changed(ctx, project, from.Commit, want)
	return err == nil && n < from.Files
}

// PoolOptions say which pools MaintainPools keeps, and how.
type PoolOptions struct {
	Project string    // one machine's pool; "" for every machine's
	DryRun  bool      // say what would be done, change nothing
	Log     io.Writer // one line per entry made or retired; nil for none
}

// PoolReport says what MaintainPools did.
type PoolReport struct {
	Filled  int
	Retired int
	Errors  []reaper.Failure
	// Err is the first failure, with its kind (an unreachable daemon is
	// fail.EngineUnavailable), for a caller that fails with it.
	Err error

	mu sync.Mutex
}

func (r *PoolReport) add(f func(*PoolReport)) {
	r.mu.Lock()
	f(r)
	r.mu.Unlock()
}

func (r *PoolReport) fail(id string, err error) {
	r.add(func(r *PoolReport) {
		r.Errors = append(r.Errors, reaper.Failure{SessionID: id, Error: err.Error()})
		if r.Err == nil {
			r.Err = err
		}
	})
}

// fillParallel bounds the entries made at once: their checkouts take turns
// on the machine's lock anyway; their containers start side by side.
const fillParallel = 4

// MaintainPools keeps the project machines' pools (what `xmode reap` and
// `machine warm` run): it retires entries whose maker died, that are older
// than XMODE_POOL_MAX_AGE, were made for other settings than this
// configuration's, lost their container or their machine; makes what each
// pool lacks at its machine's commit; then retires the entries behind that
// commit (after a refresh) and those beyond the pool's size. Pools are made
// only with project machines on (only then do creates claim), of the shape a
// create with this configuration would claim. A failure is reported and the
// rest goes on; the error return is for a pass that could not start.
func (s *Service) MaintainPools(ctx context.Context, o PoolOptions) (*PoolReport, error) {
	rep := &PoolReport{}
	if o.Log != nil {
		o.Log = &lockedWriter{w: o.Log} // entries are made side by side
	}
	r := s.reaper()
	r.Log = o.Log
	defer r.Close()
	var machs []*store.Machine
	if o.Project != "" {
		m, err := s.Store.GetMachine(ctx, o.Project)
		if err != nil {
			return nil, err
		}
		machs = []*store.Machine{m}
	} else {
		var err error
		if machs, err = s.Store.ListMachines(ctx); err != nil {
			return nil, err
		}
	}
	entries, err := s.Store.PoolEntries(ctx, o.Project)
	if err != nil {
		return nil, err
	}
	byProject := map[string]*store.Machine{}
	want := false
	for _, m := range machs {
		byProject[m.Project] = m
		want = want || machines.PoolSize(m, s.Cfg.PoolSize) > 0
	}
	keep := s.Cfg.ProjectMachines && (want || len(entries) > 0)
	var engineName, shape string
	var provider engine.Provider
	if keep {
		if engineName, err = engine.Choose(s.Cfg.RunnerMode, s.Cfg.Engine); err != nil {
			keep = false // cloud_subscription: no local sandboxes to keep
		}
	}
	if keep {
		if provider, err = engine.Open(engineName, s.Cfg); err != nil {
			return nil, err
		}
		defer engine.Close(provider)
		engine.SetProgress(provider, s.Progress)
		shape = Shape(s.Cfg, engineName, provider)
	}
	running := s.running(ctx, provider, engineName, shape, entries, rep)

	now := s.Now()
	for _, e := range entries {
		why := ""
		switch {
		case e.State == store.PoolProvisioning:
			why = "its maker is gone" // TeardownEntry takes it only then
		case e.State == store.PoolRetiring:
			why = "its retirement was interrupted"
		case byProject[e.Project] == nil:
			why = "its project machine is gone"
		case now.Sub(e.CreatedAt) >= s.Cfg.PoolMaxAge:
			why = fmt.Sprintf("older than XMODE_POOL_MAX_AGE (%s)", s.Cfg.PoolMaxAge)
		case keep && e.Shape != shape:
			why = "made for other settings (engine, image, limits, network…) than this configuration's"
		case running != nil && e.Shape == shape && !running[e.SessionID]:
			why = "its container is gone or stopped"
		}
		if why != "" {
			s.retire(ctx, r, e, why, o, rep)
		}
	}
	if !keep {
		return rep, nil
	}
	for _, m := range machs {
		if ctx.Err() != nil {
			break
		}
		s.fill(ctx, r, provider, engineName, shape, m, entries, o, rep)
	}
	// Behind and beyond the size only now: a pool catching up with a
	// refresh keeps its old entries until the new ones are ready.
	if entries, err = s.Store.PoolEntries(ctx, o.Project); err != nil {
		rep.fail("", err)
		return rep, nil
	}
	atHead := map[string][]*store.PoolEntry{}
	for _, e := range entries {
		m := byProject[e.Project]
		if m == nil || e.State != store.PoolReady || e.Shape != shape {
			continue
		}
		if e.Commit != m.HeadCommit {
			s.retire(ctx, r, e, "behind its machine, now at "+shortCommit(m.HeadCommit), o, rep)
			continue
		}
		atHead[e.Project] = append(atHead[e.Project], e)
	}
	for project, es := range atHead {
		size := machines.PoolSize(byProject[project], s.Cfg.PoolSize)
		sort.Slice(es, func(i, j int) bool { return es[i].CreatedAt.After(es[j].CreatedAt) })
		for _, e := range es[min(size, len(es)):] {
			s.retire(ctx, r, e, fmt.Sprintf("the pool keeps %d", size), o, rep)
		}
	}
	return rep, nil
}

// running returns which entries of this shape have a running container
// (by session ID), or nil when there is nothing to check: the docker engine
// lists them once for the whole pass.
func (s *Service) running(ctx context.Context, provider engine.Provider, engineName, shape string, entries []*store.PoolEntry, rep *PoolReport) map[string]bool {
	if provider == nil || engineName != "docker" || !slices.ContainsFunc(entries, func(e *store.PoolEntry) bool {
		return e.State == store.PoolReady && e.Shape == shape
	}) {
		return nil
	}
	lister, ok := engine.Orphans(provider)
	if !ok {
		return nil
	}
	instance, err := s.Store.InstanceID(ctx)
	if err == nil {
		var objs []engine.Object
		if objs, err = lister.ListObjects(ctx, instance); err == nil {
			out := map[string]bool{}
			for _, o := range objs {
				if o.Kind == engine.KindContainer && o.State == "running" {
					out[o.SessionID] = true
				}
			}
			return out
		}
	}
	rep.fail("", fmt.Errorf("check the containers of pool entries: %w", err))
	return nil
}

func (s *Service) retire(ctx context.Context, r *reaper.Reaper, e *store.PoolEntry, why string, o PoolOptions, rep *PoolReport) {
	if o.DryRun {
		if e.State == store.PoolReady {
			logf(o.Log, "%s would retire pool entry of %s: %s", e.SessionID, e.Project, why)
			rep.add(func(r *PoolReport) { r.Retired++ })
		}
		return
	}
	took, err := r.TeardownEntry(ctx, e, why)
	if err != nil {
		rep.fail(e.SessionID, err)
		return
	}
	if took {
		rep.add(func(r *PoolReport) { r.Retired++ })
	}
}

// fill makes what the machine's pool lacks: ReservePool counts and reserves
// in one transaction, so fills running at once never overshoot.
func (s *Service) fill(ctx context.Context, r *reaper.Reaper, provider engine.Provider, engineName, shape string, m *store.Machine, entries []*store.PoolEntry, o PoolOptions, rep *PoolReport) {
	size := machines.PoolSize(m, s.Cfg.PoolSize)
	if size <= 0 {
		return
	}
	if o.DryRun {
		have := 0
		for _, e := range entries {
			if e.Project == m.Project && e.Shape == shape && e.Commit == m.HeadCommit && e.State != store.PoolRetiring {
				have++
			}
		}
		if n := size - have; n > 0 {
			logf(o.Log, "%s would make %d pool entries at %s", m.Project, n, shortCommit(m.HeadCommit))
			rep.add(func(r *PoolReport) { r.Filled += n })
		}
		return
	}
	image := ""
	if engineName == "docker" {
		image = s.Cfg.Image
	}
	reserved, err := s.Store.ReservePool(ctx, store.NewPoolEntry{
		Project: m.Project, Repo: m.Repo, Ref: m.DefaultRef, Commit: m.HeadCommit,
		Engine: engineName, Shape: shape, MountMode: engine.MountMode(provider), Image: image,
		Size: size, Owner: r.Holder(), Now: s.Now(),
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
			if err := s.fillOne(ctx, r, provider, engineName, e); err != nil {
				rep.fail(e.SessionID, fmt.Errorf("make pool entry of %s: %w", e.Project, err))
				return
			}
			logf(o.Log, "%s made pool entry of %s", e.SessionID, e.Project)
			rep.add(func(r *PoolReport) { r.Filled++ })
		})
	}
	wg.Wait()
}

// fillOne makes one reserved entry the way Create makes a session from a
// machine — its worktree (branch), then the engine's sandbox with the same
// spec (provision) — and marks it ready. A failure tears down what exists.
func (s *Service) fillOne(ctx context.Context, r *reaper.Reaper, provider engine.Provider, engineName string, e *store.PoolEntry) (err error) {
	defer func() {
		if err != nil {
			if _, terr := r.TeardownEntry(context.WithoutCancel(ctx), e, "making it failed"); terr != nil {
				err = fmt.Errorf("%w (and cleaning up failed: %v)", err, terr)
			}
		}
	}()
	if err := os.MkdirAll(s.Guard.RunsDir(), fsguard.RunDirMode); err != nil {
		return fmt.Errorf("create runs directory: %w", err)
	}
	co, err := s.Machines().Checkout(ctx, e.Project, "", "", false)
	if err != nil {
		return err
	}
	record, err := co.AddWorktree(ctx, e.RunID, e.WorktreePath)
	co.Close()
	if err != nil {
		return err
	}
	if err := s.Store.SetRunRecord(ctx, e.RunID, record); err != nil {
		return err
	}
	files, err := co.Files(ctx, co.Commit)
	if err != nil {
		return err
	}
	spec, err := s.spec(ctx, e.SessionID, e.RunID, e.Project, e.WorktreePath, e.Image, engineName, co)
	if err != nil {
		return err
	}
	sb, err := provider.Provision(ctx, spec)
	e.ContainerID, e.MountMode, e.Volumes = sb.ContainerID, sb.MountMode, sb.Volumes
	if sb.Image != "" {
		e.Image = sb.Image
	}
	if sb.ContainerID != "" || len(sb.Volumes) > 0 {
		if rerr := s.Store.RecordPoolEngine(ctx, e.SessionID, sb.ContainerID, sb.MountMode, e.Image, sb.Volumes); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return err
	}
	return s.Store.PoolEntryReady(ctx, e.SessionID, r.Holder(), co.Commit, files, s.Now())
}

// DrainPool retires every entry of a project's pool (before `machine rm`):
// the ready ones and those whose maker died. An entry being made by a live
// process stays; Remove then refuses, and says so.
func (s *Service) DrainPool(ctx context.Context, project string, log io.Writer) (int, error) {
	entries, err := s.Store.PoolEntries(ctx, project)
	if err != nil || len(entries) == 0 {
		return 0, err
	}
	r := s.reaper()
	r.Log = log
	defer r.Close()
	n := 0
	for _, e := range entries {
		took, err := r.TeardownEntry(ctx, e, "its machine is being removed")
		if err != nil {
			return n, err
		}
		if took {
			n++
		}
	}
	return n, nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
