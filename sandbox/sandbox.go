// Package sandbox is the session lifecycle (the design's SandboxSession and
// CommandRunner): create provisions a run directory, a worktree and the
// engine's sandbox; exec runs one step through the engine seam and records
// it with the evidence package; stop hands the session to the reaper.
package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/internal/hostenv"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/pool"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// Service runs the lifecycle against one storage root.
type Service struct {
	Cfg      *config.Config
	Store    *store.Store
	Guard    fsguard.Guard
	Progress io.Writer // clone and pull progress; nil for none
	Log      io.Writer // teardown actions; nil for none
	// Notices receives what a user should know about a create that
	// succeeds (uncommitted changes it left out); nil for none.
	Notices io.Writer
	// Verbose receives what a create decided and how long each part took
	// (`-v sandbox create`); nil for none.
	Verbose io.Writer
	// Clock is the time the service records and checks expiry against,
	// passed on to the reaper, the machines and the evidence; nil is
	// time.Now. Tests move it forward so that TTLs run out without sleeping.
	Clock func() time.Time
	// Getenv reads the host variables an egress policy's credentials name
	// (the proxy adds their values; the sandbox gets placeholders); nil is
	// os.Getenv.
	Getenv func(string) string
}

// Now is the service's clock (Clock, else time.Now).
func (s *Service) Now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

// detail says one thing a create decided, for -v.
func (s *Service) detail(format string, args ...any) {
	if s.Verbose != nil {
		fmt.Fprintf(s.Verbose, "xmode: "+format+"\n", args...)
	}
}

// seed prepares the run's object store for the first diff of a checkout
// xmode just made, before any step ran in it (changes.Service.Seed): the
// base's trees, and the checkout's files in the stat cache, so that the
// first diff reads only what changed since. Only a cache: a failure is
// reported with -v and changes nothing else.
func (s *Service) seed(ctx context.Context, runID, commit string) {
	start := time.Now()
	cr := &changes.Service{Store: s.Store, Guard: s.Guard, MaxBytes: s.Cfg.CRMaxBytes}
	n, err := cr.Seed(ctx, runID, commit)
	if err != nil {
		s.detail("stat cache not seeded (the first diff reads every file): %v", err)
		return
	}
	s.detail("stat cache: %d of the checkout's %d files recorded (%s)", n.Recorded, n.Files, took(start))
}

// seedBase starts changes.Service.SeedBase in the background; the
// function it returns waits for it to end. Only a cache: a failure is a -v
// line, and the seed does that part itself.
func (s *Service) seedBase(ctx context.Context, runID, project, commit string) (wait func()) {
	done := make(chan struct{})
	var err error
	var spent string
	go func() {
		defer close(done)
		start := time.Now()
		cr := &changes.Service{Store: s.Store, Guard: s.Guard, MaxBytes: s.Cfg.CRMaxBytes}
		err = cr.SeedBase(ctx, runID, project, commit)
		spent = took(start)
	}()
	return func() {
		<-done
		if err != nil {
			s.detail("the base's trees were not copied beside the checkout (the seed copies them): %v", err)
			return
		}
		s.detail("the base's trees copied into the run's object store beside the checkout (%s)", spent)
	}
}

// took is how long since start, for detail.
func took(start time.Time) string { return humanize.Duration(time.Since(start)) }

// CreateOptions are `sandbox create`'s inputs, flags already merged into Cfg.
type CreateOptions struct {
	Repo    string
	Ref     string
	Project string
	RunID   string // join this run's worktree instead of cloning
	// Refresh fetches the project machine before branching the worktree
	// (project machines only).
	Refresh bool
	// NetworkSet: --network was given (its value is Cfg.Network). It only
	// means something for a volume-mode docker session.
	NetworkSet bool
	// Egress are the front ends' sources of the egress policy (flags, a
	// plan's network:, an agent's hosts), before configuration's; they need
	// a proxied network (XMODE_SANDBOX_NETWORK=allow or open).
	Egress []egress.Source
	// EgressIfProxied are egress sources that say what the sandbox's work
	// needs rather than what the user asked (the hosts of the agents it is
	// for, a plan's network:): part of its policy when its network is
	// proxied, nothing otherwise.
	EgressIfProxied []egress.Source
	// Loop makes the new run a run of the governed loop (xmode run).
	Loop *store.NewLoop
	// Origin is what makes the session (store.OriginMCP; "" is the CLI),
	// OriginClient the MCP client's name and version, Title what it is for.
	Origin, OriginClient, Title string
	// EnvPolicy is what the session's host steps inherit of the
	// environment of the xmode that runs them; nil: the configured one
	// (config.Config.HostEnvFor the origin: `core` for an MCP client's
	// unless XMODE_HOST_ENV says otherwise). Recorded on the session; a
	// session whose steps do not run on the host records none.
	EnvPolicy *hostenv.Policy
	// FromSnapshot starts the session from a snapshot (its name, or its
	// ID): `sandbox create --from-snapshot`.
	FromSnapshot string
}

// Machines is the project machines of this storage root.
func (s *Service) Machines() *machines.Manager {
	return &machines.Manager{Cfg: s.Cfg, Store: s.Store, Guard: s.Guard, Progress: s.Progress, PoolEntries: s.Pools().Count, Now: s.Clock}
}

// Pools is the project machines' pools of this storage root, making their
// entries with this service's spec (what a create would make).
func (s *Service) Pools() *pool.Pools {
	return &pool.Pools{Cfg: s.Cfg, Store: s.Store, Guard: s.Guard, Progress: s.Progress, Log: s.Log, Notices: s.Notices, Clock: s.Clock,
		Spec: func(ctx context.Context, e *pool.Entry, co *machines.Checkout) (engine.Spec, error) {
			// An entry's sandbox lives until the pool retires it (its
			// maximum age); a claim moves its deadline to the session's
			// expiry (engine.Extend).
			return s.spec(ctx, e.SessionID, e.RunID, e.Project, e.WorktreePath, e.Image, e.User, s.Now().Add(s.Cfg.PoolMaxAge), co)
		},
		Seed: s.seed,
	}
}

// reaper is a Reaper for this service's store; Close it when done, as it
// keeps the engines it opened.
func (s *Service) reaper() *reaper.Reaper {
	return &reaper.Reaper{Cfg: s.Cfg, Store: s.Store, Guard: s.Guard, Log: s.Log, Now: s.Clock}
}

// teardown ends a session whose provisioning failed with err.
func (s *Service) teardown(ctx context.Context, sess *store.Session, err error) (reaper.Outcome, error) {
	r := s.reaper()
	defer r.Close()
	return r.Teardown(ctx, sess, store.StatusFailed, store.ReasonProvisionFailed, err.Error())
}

// Create provisions a session. The row exists (provisioning) before anything
// touches disk, so a crash at any point leaves something the reaper finds.
func (s *Service) Create(ctx context.Context, o CreateOptions) (*store.Session, error) {
	if o.FromSnapshot != "" {
		return s.createFromSnapshot(ctx, o)
	}
	engineName, err := engine.Choose(s.Cfg.RunnerMode, s.Cfg.Engine)
	if err != nil {
		return nil, err
	}
	// Opened first: an engine that cannot be used as configured (a docker
	// endpoint it does not speak) fails the create before anything exists.
	var provider engine.Provider // none for the cloud: nothing runs here
	if engineName != engine.Cloud {
		if provider, err = engine.Open(engineName, s.Cfg); err != nil {
			return nil, err
		}
		defer engine.Close(provider)
	}
	if err := s.Guard.CheckFree(s.Cfg.MinFree, "refusing to create a sandbox"); err != nil {
		return nil, err
	}
	now := s.Now().UTC()
	sess := store.Session{
		ID: store.NewSessionID(), User: s.Cfg.User, Project: o.Project, RunnerMode: s.Cfg.RunnerMode,
		Engine: engineName, CreatedAt: now, ExpiresAt: now.Add(s.Cfg.TTL),
		Origin: o.Origin, OriginClient: o.OriginClient, Title: o.Title,
	}
	if sess.Origin == "" {
		sess.Origin = store.OriginCLI
	}
	// Recorded before provisioning, so that a failed one still names it.
	sess.Image, _ = engine.Image(provider)
	// The network the sandbox gets, as its engine decides it (docker's bind
	// mode leaves docker's default unless one was set explicitly).
	if network, ok := engine.Network(provider); ok {
		sess.Network = network
	} else if o.NetworkSet {
		return nil, fail.Usagef("%s applies to docker sandboxes; this session runs on the host (%s engine), in the host's network", fail.Network, engineName)
	}
	if engine.OnHost(provider) {
		policy := s.Cfg.HostEnvFor(sess.Origin)
		if o.EnvPolicy != nil {
			policy = *o.EnvPolicy
		}
		sess.HostEnv = policy.String()
	}
	// A proxied network's policy, checked now: a bad rule, or an engine
	// that cannot enforce it, leaves no trace.
	pol, err := s.egressPolicy(sess.ID, o.Egress, o.EgressIfProxied)
	if err != nil {
		return nil, err
	}
	if err := checkEgress(pol, engineName, provider); err != nil {
		return nil, err
	}
	sess.NetworkPolicy = RecordPolicy(pol)
	var tgt target
	var co *machines.Checkout // the worktree comes from a project machine
	newRun := o.RunID == ""
	fromMachine := newRun && s.Cfg.ProjectMachines && o.Project != ""
	if o.Refresh && !fromMachine {
		return nil, fail.Usagef("%s fetches a project machine: it needs %s, XMODE_PROJECT_MACHINES=1 and no %s", fail.Refresh, fail.Project, fail.RunID)
	}
	if fromMachine {
		// A ready sandbox from the project's pool when one fits: nothing to
		// check out, no container to make. An empty pool costs one read.
		start := time.Now()
		var claimed *store.Session
		var resolved *machines.Checkout
		if pol == nil {
			// A proxied sandbox's policy (its placeholders, its rules' sources)
			// is its own: it is never a pool entry made before it.
			claimed, resolved, err = s.Pools().Claim(ctx, pool.ClaimOptions{Project: o.Project, Repo: o.Repo, Ref: o.Ref, Refresh: o.Refresh, Loop: o.Loop}, sess, provider)
		}
		if err != nil || claimed != nil {
			if claimed != nil {
				s.detail("took a ready sandbox from the pool of project %s: %s at %s, nothing to clone or start (%s)", o.Project, claimed.Ref, shortCommit(claimed.BaseCommit), took(start))
			}
			return claimed, err
		}
		if co = resolved; co == nil {
			if co, err = s.Machines().Checkout(ctx, o.Project, o.Repo, o.Ref, o.Refresh); err != nil {
				return nil, err
			}
		}
		s.detail("project machine %s (%s): %s at %s, no sandbox ready in its pool (%s)", o.Project, co.Machine.Repo, co.Ref, shortCommit(co.Commit), took(start))
		defer co.Close()
		sess.Repo, sess.Ref, sess.RunID = co.Machine.Repo, co.Ref, store.NewRunID()
	} else if newRun {
		if o.Repo == "" {
			return nil, s.noRepo(ctx, o.Project)
		}
		var dirty bool
		if sess.Repo, dirty, err = machines.ResolveRepo(ctx, s.Guard, o.Repo); err != nil {
			return nil, &RepoError{Repo: o.Repo, Err: err}
		}
		if dirty && s.Notices != nil {
			fmt.Fprintf(s.Notices, "xmode: note: %s has uncommitted changes; the sandbox gets what is committed, not them (commit first to include them)\n", sess.Repo)
		}
		if sess.Repo != o.Repo {
			s.detail("repository %s is %s", o.Repo, sess.Repo)
		}
		start := time.Now()
		if tgt, err = resolveRef(ctx, sess.Repo, o.Ref); err != nil {
			return nil, err
		}
		sess.Ref = o.Ref
		if sess.Ref == "" {
			sess.Ref = tgt.short()
		}
		s.detail("ref %s is %s (git ls-remote, %s)", orHEAD(o.Ref), tgt, took(start))
		sess.RunID = store.NewRunID()
	} else {
		if o.Repo != "" {
			return nil, fail.Usagef("%s and %s do not go together: a shared run already has its checkout", fail.Repo, fail.RunID)
		}
		if !fsguard.ValidID("run_", o.RunID) {
			return nil, fail.Usagef("%s %q is not a run ID (run_…)", fail.RunID, o.RunID)
		}
		run, err := s.Store.GetRun(ctx, o.RunID)
		if err != nil {
			return nil, err
		}
		if err := s.checkJoin(run, engineName, provider); err != nil {
			return nil, err
		}
		sess.RunID, sess.Repo, sess.Ref, sess.BaseCommit = run.ID, run.Repo, run.Ref, run.BaseCommit
		if sess.Project == "" {
			sess.Project = run.Project
		}
	}
	if sess.WorktreePath, err = s.Guard.Worktree(sess.RunID); err != nil {
		return nil, err
	}
	if !newRun {
		if _, err := os.Stat(sess.WorktreePath); err != nil {
			return nil, fail.NotFoundf("run %s has no worktree at %s", o.RunID, sess.WorktreePath)
		}
	}
	if o.Loop != nil && !newRun {
		return nil, fail.Usagef("a run of the loop needs a new run, not %s", fail.RunID)
	}
	if err := s.Store.CreateSession(ctx, store.NewSession{Session: sess, NewRun: newRun, MaxOpen: s.Cfg.MaxOpen, Loop: o.Loop}); err != nil {
		return nil, err
	}
	created, err := s.provision(ctx, &sess, newRun, tgt, co, nil, engineName, provider, pol)
	if err != nil {
		// Clean up with a context the user's Ctrl-C has not cancelled.
		cleanup := context.WithoutCancel(ctx)
		if o.Loop != nil {
			_ = s.Store.FinishLoopRun(cleanup, sess.RunID, store.LoopEnd{
				Status: store.RunFailed, ExitCode: fail.ExitCode(err), Error: err.Error(), Finished: s.Now(),
			})
		}
		if _, terr := s.teardown(cleanup, &sess, err); terr != nil {
			return nil, fmt.Errorf("%w (and cleaning up failed: %v)", err, terr)
		}
		return nil, err
	}
	return created, nil
}

// noRepo is the error of a create without --repo: what to give, and, when
// --project names a machine while project machines are off, how to use it.
func (s *Service) noRepo(ctx context.Context, project string) error {
	if project != "" {
		if _, err := s.Store.GetMachine(ctx, project); err == nil {
			return fail.Usagef("%s %s names a project machine, but project machines are off: set XMODE_PROJECT_MACHINES=1 to branch the sandbox from it, or give %s to clone", fail.Project, project, fail.Repo)
		}
		return fail.Usagef("%s is required: give a URL, a file:// URL or a local path (%s alone needs XMODE_PROJECT_MACHINES=1 and a machine warmed with `xmode machine warm %s --repo URL`)", fail.Repo, fail.Project, project)
	}
	return fail.Usagef("%s is required: give a URL, a file:// URL or a local path (or %s to share a run's worktree)", fail.Repo, fail.RunID)
}

// provision makes a session's worktree (for a new run: a clone of tgt, or
// a worktree of the project machine co; then, for a fork or a snapshot's
// session, what from holds on top of the base), its sandbox, and opens it.
func (s *Service) provision(ctx context.Context, sess *store.Session, newRun bool, tgt target, co *machines.Checkout, from *source, engineName string, provider engine.Provider, pol *egress.Policy) (*store.Session, error) {
	base := sess.BaseCommit // a joined run's
	if newRun {
		if err := os.MkdirAll(s.Guard.RunsDir(), fsguard.RunDirMode); err != nil {
			return nil, fmt.Errorf("create runs directory: %w", err)
		}
		var err error
		start := time.Now()
		if co != nil {
			// The base's trees go into the run's object store while git
			// checks the worktree out; the seed below then only records
			// the files.
			based := s.seedBase(ctx, sess.RunID, co.Machine.Project, co.Commit)
			base, err = s.branch(ctx, sess, co)
			based()
		} else {
			base, err = clone(ctx, sess.Repo, tgt, sess.WorktreePath, s.Progress)
		}
		if err != nil {
			return nil, fail.As(fail.Failed, err)
		}
		how := "cloned (depth 1, one branch)"
		switch {
		case co != nil:
			how = "a git worktree of the project machine"
		case tgt.ref == "":
			how = "cloned (full history, to find the commit)"
		}
		s.detail("worktree %s at %s: %s in %s", sess.WorktreePath, shortCommit(base), how, took(start))
	}
	seedAt := base
	if from != nil {
		start := time.Now()
		if err := s.applySource(ctx, sess.WorktreePath, base, from); err != nil {
			return nil, fail.As(fail.Failed, err)
		}
		base, seedAt = from.base, from.commit
		s.detail("worktree %s: what it took checked out on top of the base in %s", sess.WorktreePath, took(start))
	}
	if engineName == engine.Cloud {
		// The Codex cloud runs this session's work: the worktree gives it a
		// base commit (what the task's diff applies to), and no local sandbox.
		if newRun {
			s.seed(ctx, sess.RunID, seedAt)
		}
		if err := s.Store.Provisioned(ctx, sess.ID, base, "", "", "", nil, s.Now().Add(s.Cfg.TTL)); err != nil {
			return nil, err
		}
		return s.Store.Get(ctx, sess.ID)
	}
	// An image pull shows its progress like `docker run` does.
	engine.SetProgress(provider, s.Progress)
	// The session's expiry is set again once it opens (below), a little
	// later than this: an engine's dead-man switch keeps a margin.
	spec, err := s.spec(ctx, sess.ID, sess.RunID, sess.Project, sess.WorktreePath, sess.Image, sess.User, s.Now().Add(s.Cfg.TTL), co)
	if err != nil {
		return nil, err
	}
	if pol == nil && sess.NetworkPolicy != nil {
		// A session made with its policy already recorded (a fork's).
		p, err := PolicyOf(sess.ID, sess.NetworkPolicy)
		if err != nil {
			return nil, err
		}
		pol = &p
	}
	if pol != nil {
		spec.Egress = pol // with the front ends' sources
	}
	start := time.Now()
	sb, err := provider.Provision(ctx, spec)
	if err == nil {
		if sb.ContainerID != "" {
			s.detail("%s engine: container %s started in %s (%s mode, image %s)", engineName, shortCommit(sb.ContainerID), took(start), sb.MountMode, sb.Image)
		} else {
			s.detail("%s engine: nothing to start, steps run as processes of this host in the worktree", engineName)
		}
	}
	// Record what exists even on failure, so teardown can find it.
	sess.ContainerID, sess.MountMode, sess.Volumes = sb.ContainerID, sb.MountMode, sb.Volumes
	if sb.Image != "" {
		sess.Image = sb.Image
	}
	if sb.ContainerID != "" || len(sb.Volumes) > 0 {
		if rerr := s.Store.RecordEngine(ctx, sess.ID, sb.ContainerID, sb.MountMode, sess.Image, sb.Volumes); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return nil, err
	}
	if newRun {
		// After Provision: a provider may give the worktree to the sandbox
		// user, which changes every file's ctime. A fork's files are its
		// frozen commit's, which is what the stat cache records.
		s.seed(ctx, sess.RunID, seedAt)
	}
	if err := s.Store.Provisioned(ctx, sess.ID, base, sb.ContainerID, sb.MountMode, sess.Image, sb.Volumes, s.Now().Add(s.Cfg.TTL)); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, sess.ID)
}

// spec is the engine.Spec of a session's sandbox — and of a pool entry made
// ahead of time for one, which must be exactly what a create would make:
// xmode's labels (docs/reference.md, "Docker objects and labels"), and for a worktree of a project machine its .git
// and the project's cache volume and environment (which an engine that
// keeps no volumes ignores) — the cache of user, the session's owner or
// the user a pool entry is made for.
func (s *Service) spec(ctx context.Context, sessionID, runID, project, worktree, image, user string, expires time.Time, co *machines.Checkout) (engine.Spec, error) {
	instance, err := s.Store.InstanceID(ctx)
	if err != nil {
		return engine.Spec{}, err
	}
	spec := engine.Spec{
		SessionID: sessionID, RunID: runID, Project: project, Worktree: worktree, Image: image,
		User: user, Expires: expires,
		Labels: map[string]string{
			"xmode.managed": "true", "xmode.session": sessionID, "xmode.run": runID, "xmode.instance": instance,
		},
	}
	// A proxied network's policy from configuration (a pool entry's too).
	if spec.Egress, err = s.egressPolicy(sessionID, nil, nil); err != nil {
		return engine.Spec{}, err
	}
	spec.Getenv = s.Getenv
	if co != nil {
		spec.MachineGitDir = co.GitDir()
		spec.CacheVolume, spec.CacheMount = machines.CacheVolume(project, user), s.Cfg.ProjectCacheMount
		spec.Env = machines.CacheEnv(s.Cfg.ProjectCacheMount)
	}
	return spec, nil
}

// branch makes the session's worktree a detached git worktree of the
// project machine and releases the machine. The run is marked as the
// machine's first, so `machine rm` sees the session from then on.
func (s *Service) branch(ctx context.Context, sess *store.Session, co *machines.Checkout) (string, error) {
	defer co.Close()
	if err := s.Store.MarkRunMachine(ctx, sess.RunID, co.Machine.Project); err != nil {
		return "", err
	}
	record, err := co.AddWorktree(ctx, sess.RunID, sess.WorktreePath)
	if err != nil {
		return "", err
	}
	if err := s.Store.SetRunRecord(ctx, sess.RunID, record); err != nil {
		return "", err
	}
	return co.Commit, nil
}

// checkJoin refuses to share a run's worktree across a trust boundary: a
// docker sandbox may have planted a core.fsmonitor or a hook in it that a
// host step would then run on the host, and a bind-mode container (no
// hardening) could write what a volume-mode one trusts.
func (s *Service) checkJoin(run *store.Run, engineName string, provider engine.Provider) error {
	want := engineName + "/" + engine.MountMode(provider)
	for _, e := range run.Engines {
		if e != want {
			return fail.Refusedf("run %s was written by a %s session; a %s session may not share it (%s joins sessions of one engine and mount model: what one sandbox wrote, the other would run)", run.ID, describeEngine(e), describeEngine(want), fail.RunID)
		}
	}
	return nil
}

func describeEngine(e string) string {
	engine, mode, _ := strings.Cut(e, "/")
	if mode == "" {
		return engine
	}
	return engine + " (" + mode + " mode)"
}

// Stop is `sandbox stop`: reap this one session now.
func (s *Service) Stop(ctx context.Context, sess *store.Session, force bool) (reaper.Outcome, error) {
	r := s.reaper()
	defer r.Close()
	return r.Stop(ctx, sess, force)
}

// MeasureWorktrees fills in WorktreeBytes of the sessions still open (an
// ended session keeps the size measured at its teardown), a few at a time.
func (s *Service) MeasureWorktrees(sessions []*store.Session) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, sess := range sessions {
		if sess.Ended() {
			continue
		}
		wt, err := s.Guard.Worktree(sess.RunID)
		if err != nil {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if n, err := fsguard.DiskUsage(wt); err == nil {
				sess.WorktreeBytes = &n
			}
		})
	}
	wg.Wait()
}

// WorktreeInSandbox is the session's worktree as its steps see it, as its
// engine answers (engine.StepWorktree): the path itself for host steps,
// where the container mounts it for docker (/workspace in bind mode,
// <XMODE_SANDBOX_STORAGE_MOUNT>/runs/<run>/worktree in volume mode, its
// copy in sync mode). Agents are pointed at it (codex -C, {worktree}).
func (s *Service) WorktreeInSandbox(sess *store.Session) (string, error) {
	worktree, err := s.Guard.CheckWorktree(sess.RunID, sess.WorktreePath)
	if err != nil {
		return "", err
	}
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return "", err
	}
	defer engine.Close(provider)
	sb := sess.Sandbox()
	sb.Worktree = worktree
	return engine.StepWorktree(provider, sb)
}

// OnHost reports whether the session's steps run on this host, in the
// user's environment (engine.OnHost); no when its engine cannot be opened.
func (s *Service) OnHost(sess *store.Session) bool {
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return false
	}
	defer engine.Close(provider)
	return engine.OnHost(provider)
}

// Inherits reports whether a step of the session gets xmode's own
// variable name without its being passed by name: only a step on this
// host does (OnHost), and only what the environment policy the session
// recorded lets through (a key is left out unless the policy includes it).
func (s *Service) Inherits(sess *store.Session, name string) bool {
	return s.OnHost(sess) && hostenv.Recorded(sess.HostEnv).Passes(name)
}

// MissingPaths are the paths (absolute, as the sandbox would see them)
// that the session's sandbox does not have, asked of an engine whose
// sandboxes see a filesystem of their own (engine.PathChecker); none for
// one whose steps see the host's files. It only feeds a warning, so a
// lookup that fails leaves its path out.
func (s *Service) MissingPaths(ctx context.Context, sess *store.Session, paths []string) []string {
	if len(paths) == 0 {
		return nil
	}
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return nil
	}
	defer engine.Close(provider)
	var missing []string
	for _, p := range paths {
		if present, known, _ := engine.PathPresent(ctx, provider, sess.Sandbox(), p); known && !present {
			missing = append(missing, p)
		}
	}
	return missing
}

// Extend pushes an open session's expiry to now + d: what `sandbox extend`
// and the web UI's extend do. A lifetime over XMODE_SANDBOX_MAX_TTL is a
// usage error; a session that is not open, or that a reaper has claimed,
// is refused.
func (s *Service) Extend(ctx context.Context, sess *store.Session, d time.Duration) (*store.Session, error) {
	if d <= 0 {
		return nil, fail.Usagef("%s %s: give a positive duration, e.g. 2h", fail.TTL, d)
	}
	if err := s.Cfg.CheckTTL(d); err != nil {
		return nil, fail.Usagef("%s: %v", fail.TTL, err)
	}
	expires := s.Now().Add(d)
	if sess.Status == store.StatusOpen && sess.Engine != engine.Cloud {
		// The engine's own deadline first (engine.Extender: a pod's
		// dead-man switch), so that it never ends a sandbox before the
		// expiry the store records; a session that is not open is refused
		// by the store below, and a deadline moved for it harms nothing.
		provider, err := engine.Open(sess.Engine, s.Cfg)
		if err != nil {
			return nil, err
		}
		err = engine.Extend(ctx, provider, sess.Sandbox(), expires)
		engine.Close(provider)
		if err != nil {
			return nil, fmt.Errorf("extend the sandbox of session %s: %w", sess.ID, err)
		}
	}
	if err := s.Store.Extend(ctx, sess.ID, expires); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, sess.ID)
}
