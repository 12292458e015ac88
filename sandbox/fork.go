package sandbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// A fork (`sandbox fork`) and a snapshot (`sandbox snapshot`) take a
// session's worktree as it is now — its commits, uncommitted and untracked
// files, and ignored ones when asked — and, on an engine whose sandboxes
// have a filesystem of their own (engine.Snapshotter: docker), that
// filesystem as an image. The worktree is read as a change request reads it
// (changes.Freeze: as data, every object checked, nothing of the sandbox
// run or followed) into an object store xmode owns; the new worktree is a
// checkout of the base made as `sandbox create` makes one (a clone of the
// session's repository, or a worktree of its project machine), into which
// git fetches the frozen commit from that store and checks out only what
// differs. git runs on xmode's own repositories only: the store, and a
// checkout no step has run in yet (docs/change-requests.md, "Forks and
// snapshots").

// ForkOptions are `sandbox fork`'s inputs, flags already merged into Cfg.
type ForkOptions struct {
	// WithIgnored takes the files the ignore rules leave out too.
	WithIgnored bool
	// Origin, OriginClient and Title are as in CreateOptions.
	Origin, OriginClient, Title string
}

// source is what a fork or a create from a snapshot starts from.
type source struct {
	base, head, tree, commit string
	store, ref               string // where git fetches commit from
}

// checkQuiet refuses to take a session whose step runs in the foreground
// (of a live xmode): its worktree is being written, and what it would take
// is half of it. Background steps (`exec --detach`) are the session's own,
// as a container's processes are to `docker commit`: their files are taken
// as they are at that instant. It returns the last step begun in the run.
func (s *Service) checkQuiet(ctx context.Context, sess *store.Session, verb string) (int, error) {
	last, running, err := s.Store.ForkPoint(ctx, sess.RunID)
	if err != nil {
		return 0, err
	}
	stale := s.Now().Add(-reaper.DefaultStaleAfter)
	var live []string
	first := 0
	for _, st := range running {
		if st.Detached || st.Gone(stale) {
			continue
		}
		if first == 0 {
			first = st.Seq
		}
		pid, _, _ := strings.Cut(st.Owner, ":")
		live = append(live, fmt.Sprintf("step %d (%s, xmode pid %s)", st.Seq, st.Name, pid))
	}
	if len(live) > 0 {
		return 0, fail.Refusedf("session %s has a step running in the foreground: %s; %s it once the step has ended (`xmode sandbox logs %s %d --follow` waits for it), or end the step with %s",
			sess.ID, strings.Join(live, ", "), verb, sess.ID, first, fail.Do("sandbox kill", sess.ID, strconv.Itoa(first)))
	}
	return last, nil
}

// take is what a fork or a snapshot of a session starts with.
type take struct {
	last     int             // the last step begun in the session's run
	provider engine.Provider // the session's engine; Close it
	machine  string          // the project machine its worktree came from, "" for a clone
}

// startTake checks that sess can be taken now — open, unexpired, no step in
// the foreground (checkQuiet), room on the disk — and opens its engine.
func (s *Service) startTake(ctx context.Context, sess *store.Session, verb string) (*take, error) {
	if err := store.CheckOpen(sess, s.Now()); err != nil {
		return nil, err
	}
	last, err := s.checkQuiet(ctx, sess, verb)
	if err != nil {
		return nil, err
	}
	machine, _, err := s.Store.RunMachine(ctx, sess.RunID)
	if err != nil {
		return nil, err
	}
	if err := s.Guard.CheckFree(s.Cfg.MinFree, "refusing to "+verb+" a sandbox"); err != nil {
		return nil, err
	}
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return nil, err
	}
	return &take{last: last, provider: provider, machine: machine}, nil
}

// checkStill refuses a take during which a foreground step began in the
// session's run (the worktree may have been written while it was read).
func (s *Service) checkStill(ctx context.Context, sess *store.Session, last int, verb string) error {
	after, err := s.Store.StepsAfter(ctx, sess.RunID, last)
	if err != nil {
		return err
	}
	for _, st := range after {
		if !st.Detached {
			return fail.Refusedf("step %d (%s) began in session %s while its worktree was being read: %s it again once the step has ended", st.Seq, st.Name, sess.ID, verb)
		}
	}
	return nil
}

// Fork makes a new session whose worktree is parent's as it is now, and
// whose sandbox's filesystem outside the worktree is parent's too on an
// engine that has one. It runs on parent's engine, with the configuration
// of now otherwise (lifetime, limits), counts against the quota as any
// session, and records parent and the last step parent's run had begun.
func (s *Service) Fork(ctx context.Context, parent *store.Session, o ForkOptions) (*store.Session, error) {
	tk, err := s.startTake(ctx, parent, "fork")
	if err != nil {
		return nil, err
	}
	defer engine.Close(tk.provider)
	last, provider := tk.last, tk.provider
	now := s.Now().UTC()
	sess := store.Session{
		ID: store.NewSessionID(), RunID: store.NewRunID(), User: s.Cfg.User, Project: parent.Project,
		RunnerMode: parent.RunnerMode, Engine: parent.Engine, CreatedAt: now, ExpiresAt: now.Add(s.Cfg.TTL),
		Repo: parent.Repo, Ref: parent.Ref, BaseCommit: parent.BaseCommit,
		Origin: o.Origin, OriginClient: o.OriginClient, Title: o.Title,
		ForkedFrom: parent.ID, ForkedAtSeq: last,
	}
	if sess.Origin == "" {
		sess.Origin = store.OriginCLI
	}
	sess.Image, _ = engine.Image(provider)
	if network, ok := engine.Network(provider); ok {
		sess.Network = network
	}
	// A fork of a proxied sandbox reaches what its parent may, from the
	// parent's policy as it is now (its credentials with placeholders of
	// their own).
	if parent.NetworkPolicy != nil {
		pol, err := PolicyOf(sess.ID, parent.NetworkPolicy)
		if err != nil {
			return nil, fmt.Errorf("fork %s: its network policy: %w", parent.ID, err)
		}
		for i := range pol.Credentials {
			pol.Credentials[i].Placeholder = egress.NewPlaceholder()
		}
		if err := checkEgress(&pol, sess.Engine, provider); err != nil {
			return nil, err
		}
		sess.NetworkPolicy, sess.Network = RecordPolicy(&pol), string(pol.Mode)
	}
	if sess.WorktreePath, err = s.Guard.Worktree(sess.RunID); err != nil {
		return nil, err
	}
	// Refused before anything is made; the insert checks it again.
	if err := s.Store.CheckQuota(ctx, sess.User, s.Cfg.MaxOpen, now); err != nil {
		return nil, err
	}
	// The worktree is read before the session is recorded: a parent whose
	// worktree cannot be taken (too large, a step began) leaves nothing
	// behind but what its own run's object store caches.
	start := time.Now()
	cr := &changes.Service{Store: s.Store, Guard: s.Guard, MaxBytes: s.Cfg.CRMaxBytes, User: s.Cfg.User, Cfg: s.Cfg, Now: s.Clock}
	fr, err := cr.Freeze(ctx, parent, changes.FreezeOptions{
		WithIgnored: o.WithIgnored, Ref: "refs/xmode/forks/" + sess.ID,
		Message: fmt.Sprintf("xmode: session %s, forked from %s after step %d", sess.ID, parent.ID, last),
	})
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", parent.ID, err)
	}
	s.detail("read the worktree of %s: tree %s, %d of the agent's commits (%s)", parent.ID, shortCommit(fr.Tree.String()), fr.Commits, took(start))
	s.warnAll(fr.Warnings, fr.Skipped)
	if err := s.Store.CreateSession(ctx, store.NewSession{Session: sess, NewRun: true, MaxOpen: s.Cfg.MaxOpen}); err != nil {
		return nil, err
	}
	created, err := s.fork(ctx, parent, &sess, last, tk.machine, fr, provider)
	return created, s.undo(ctx, &sess, err)
}

// undo tears down a session whose making failed with err (nil: it did not)
// as a failed create is, with a context Ctrl-C has not cancelled, and
// returns err.
func (s *Service) undo(ctx context.Context, sess *store.Session, err error) error {
	if err == nil {
		return nil
	}
	if _, terr := s.teardown(context.WithoutCancel(ctx), sess, err); terr != nil {
		return fmt.Errorf("%w (and cleaning up failed: %v)", err, terr)
	}
	return err
}

func (s *Service) fork(ctx context.Context, parent, sess *store.Session, last int, machine string, fr *changes.Frozen, provider engine.Provider) (*store.Session, error) {
	src := &source{base: fr.Base.String(), head: fr.Head.String(), tree: fr.Tree.String(), commit: fr.Commit.String(), store: fr.Store, ref: fr.Ref}
	labels, err := s.labels(ctx, map[string]string{"xmode.session": sess.ID, "xmode.run": sess.RunID})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	image, ok, err := engine.SnapshotImage(ctx, provider, parent.Sandbox(), sess.ID, labels)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", parent.ID, err)
	}
	if ok {
		// Recorded at once: a fork that dies from here leaves it findable.
		sess.Image = image
		if err := s.Store.RecordEngine(ctx, sess.ID, "", "", image, nil); err != nil {
			return nil, err
		}
		s.detail("the filesystem of %s is image %s (%s)", parent.ID, image, took(start))
	}
	if err := s.checkStill(ctx, parent, last, "fork"); err != nil {
		return nil, err
	}
	return s.fromSource(ctx, sess, machine, src, provider)
}

// baseTarget is what to clone for a checkout of base from repo: ref, as
// the session was made, when the repository still has it (a shallow clone
// of a branch or tag, moved to base afterwards when it moved on), else the
// commit itself.
func (s *Service) baseTarget(ctx context.Context, repo, ref, base string) (target, error) {
	if ref != "" {
		if tgt, err := resolveRef(ctx, repo, ref); err == nil {
			return tgt, nil
		} else if fail.KindOf(err) != fail.Usage {
			return target{}, err
		}
	}
	return target{hash: base}, nil
}

// labels are xmode's labels of an engine object of this install, with
// extra (docs/reference.md, "Docker objects and labels").
func (s *Service) labels(ctx context.Context, extra map[string]string) (map[string]string, error) {
	instance, err := s.Store.InstanceID(ctx)
	if err != nil {
		return nil, err
	}
	l := map[string]string{"xmode.managed": "true", "xmode.instance": instance}
	for k, v := range extra {
		l[k] = v
	}
	return l, nil
}

// warnAll says on Notices what a fork or a snapshot left out or could not
// take.
func (s *Service) warnAll(warnings []string, skipped []changes.Skipped) {
	if s.Notices == nil {
		return
	}
	for _, sk := range skipped {
		fmt.Fprintf(s.Notices, "xmode: left out %s: %s\n", sk.Path, sk.Reason)
	}
	for _, w := range warnings {
		fmt.Fprintf(s.Notices, "xmode: warning: %s\n", w)
	}
}

// applySource makes the fresh checkout at dir (checkedOut: the commit it
// holds) what src holds: the base first, should the checkout be of a
// branch that has moved on since; then git fetches src's commit from its
// store and checks out the files that differ, and HEAD and the index move
// to src's head — so the agent's commits are HEAD's history, what it had
// not committed is uncommitted, and what was untracked is untracked.
func (s *Service) applySource(ctx context.Context, dir, checkedOut string, src *source) error {
	run := func(args ...string) error {
		_, err := gitcli.Run(ctx, nil, dir, args...)
		return err
	}
	if checkedOut != src.base {
		if err := run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--depth=1", "origin", src.base); err != nil {
			return fmt.Errorf("fetch the base %s: %w", shortCommit(src.base), err)
		}
		branch, _ := gitcli.Run(ctx, nil, dir, "symbolic-ref", "--quiet", "--short", "HEAD")
		args := []string{"checkout", "--quiet", "--detach", src.base}
		if branch = strings.TrimSpace(branch); branch != "" {
			args = []string{"checkout", "--quiet", "-B", branch, src.base}
		}
		if err := run(args...); err != nil {
			return fmt.Errorf("check out the base %s: %w", shortCommit(src.base), err)
		}
	}
	// The base is what the checkout has and the store knows: named alone,
	// git's negotiation ends at once, however far the machine moved on.
	if err := run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--negotiation-tip="+src.base, "--", src.store, src.ref); err != nil {
		return fmt.Errorf("fetch what the worktree held from %s: %w", src.store, err)
	}
	if err := run("read-tree", "-u", "--reset", src.tree); err != nil {
		return fmt.Errorf("check out what the worktree held: %w", err)
	}
	if err := run("reset", "--quiet", "--mixed", src.head); err != nil {
		return fmt.Errorf("move HEAD to %s: %w", shortCommit(src.head), err)
	}
	return nil
}

// SnapshotOptions are `sandbox snapshot`'s inputs.
type SnapshotOptions struct {
	Name        string        // "" names it after its ID
	TTL         time.Duration // 0: XMODE_SNAPSHOT_TTL
	WithIgnored bool
}

// CheckSnapshotName refuses a snapshot name that is not one: a step name's
// rule (1 to 63 letters, digits, '.', '_' or '-', starting with a letter or
// digit, not a number).
func CheckSnapshotName(name string) error {
	if err := evidence.CheckName(name); err != nil {
		return fail.Usagef("%s %q is not a snapshot name: 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit, and not a number", fail.Name, name, evidence.MaxNameLen)
	}
	return nil
}

// Snapshot keeps sess's worktree (and, on an engine that has one, its
// sandbox's filesystem) without a running sandbox, until it expires:
// `sandbox create --from-snapshot` starts from it. It counts against the
// user's XMODE_SNAPSHOT_MAX, checked before anything is made.
func (s *Service) Snapshot(ctx context.Context, sess *store.Session, o SnapshotOptions) (*store.Snapshot, error) {
	if o.Name != "" {
		if err := CheckSnapshotName(o.Name); err != nil {
			return nil, err
		}
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = s.Cfg.SnapshotTTL
	}
	if ttl < 0 {
		return nil, fail.Usagef("%s %s: a snapshot's lifetime must be positive", fail.TTL, ttl)
	}
	tk, err := s.startTake(ctx, sess, "snapshot")
	if err != nil {
		return nil, err
	}
	defer engine.Close(tk.provider)
	last, provider, machine := tk.last, tk.provider, tk.machine
	now := s.Now().UTC()
	sn := &store.Snapshot{
		ID: store.NewSnapshotID(), Name: o.Name, User: s.Cfg.User, SessionID: sess.ID, Seq: last,
		Repo: sess.Repo, Ref: sess.Ref, Project: sess.Project, Machine: machine, BaseCommit: sess.BaseCommit,
		RunnerMode: sess.RunnerMode, Engine: sess.Engine, Network: sess.Network, WithIgnored: o.WithIgnored,
		CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	if sn.Name == "" {
		sn.Name = sn.ID
	}
	if err := s.Store.CreateSnapshot(ctx, *sn, s.Cfg.SnapshotMax); err != nil {
		return nil, err
	}
	if err := s.snapshot(ctx, sess, sn, last, ttl, provider); err != nil {
		r := s.reaper()
		defer r.Close()
		if _, rerr := r.RemoveSnapshot(context.WithoutCancel(ctx), sn); rerr != nil {
			return nil, fmt.Errorf("%w (and cleaning up failed: %v)", err, rerr)
		}
		return nil, err
	}
	return s.Store.GetSnapshot(ctx, sn.ID)
}

func (s *Service) snapshot(ctx context.Context, sess *store.Session, sn *store.Snapshot, last int, ttl time.Duration, provider engine.Provider) error {
	cr := &changes.Service{Store: s.Store, Guard: s.Guard, MaxBytes: s.Cfg.CRMaxBytes, User: s.Cfg.User, Cfg: s.Cfg, Now: s.Clock}
	fr, err := cr.Freeze(ctx, sess, changes.FreezeOptions{
		WithIgnored: sn.WithIgnored, Ref: "refs/xmode/snapshots/" + sn.ID,
		Message: fmt.Sprintf("xmode: snapshot %s of session %s after step %d", sn.ID, sess.ID, last),
	})
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", sess.ID, err)
	}
	s.warnAll(fr.Warnings, fr.Skipped)
	dir, err := s.Guard.SnapshotDir(sn.ID)
	if err != nil {
		return err
	}
	if sn.Bytes, err = cr.KeepFrozen(ctx, sess.RunID, fr, dir); err != nil {
		return fmt.Errorf("snapshot %s: %w", sess.ID, err)
	}
	labels, err := s.labels(ctx, map[string]string{"xmode.snapshot": sn.ID})
	if err != nil {
		return err
	}
	image, ok, err := engine.SnapshotImage(ctx, provider, sess.Sandbox(), sn.ID, labels)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", sess.ID, err)
	}
	if ok {
		sn.Image = image
		if err := s.Store.SetSnapshotImage(ctx, sn.ID, image); err != nil {
			return err
		}
	}
	if err := s.checkStill(ctx, sess, last, "snapshot"); err != nil {
		return err
	}
	sn.Head, sn.Tree, sn.Commit, sn.Warnings = fr.Head.String(), fr.Tree.String(), fr.Commit.String(), fr.Warnings
	for _, sk := range fr.Skipped {
		sn.Warnings = append(sn.Warnings, "left out "+sk.Path+": "+sk.Reason)
	}
	sn.ExpiresAt = s.Now().UTC().Add(ttl)
	return s.Store.SnapshotMade(ctx, sn)
}

// RemoveSnapshot is `sandbox snapshots rm`: the snapshot's image (once no
// sandbox runs it), its store and its row go.
func (s *Service) RemoveSnapshot(ctx context.Context, sn *store.Snapshot) error {
	r := s.reaper()
	defer r.Close()
	_, err := r.RemoveSnapshot(ctx, sn)
	return err
}

// createFromSnapshot is `sandbox create --from-snapshot`: a session whose
// worktree (and filesystem, when the snapshot has an image) is the
// snapshot's, on the engine it was taken on.
func (s *Service) createFromSnapshot(ctx context.Context, o CreateOptions) (*store.Session, error) {
	switch {
	case o.Repo != "" || o.Ref != "" || o.Project != "" || o.RunID != "" || o.Refresh:
		return nil, fail.Usagef("%s goes alone: the snapshot says the repository, the ref and the project (leave out %s, %s, %s, %s and %s)",
			fail.FromSnapshot, fail.Repo, fail.Ref, fail.Project, fail.Refresh, fail.RunID)
	case o.Loop != nil:
		return nil, fail.Usagef("a run of the loop does not start from a snapshot")
	}
	sn, err := s.Store.ResolveSnapshot(ctx, s.Cfg.User, o.FromSnapshot)
	if err != nil {
		return nil, err
	}
	switch {
	case sn.Status != store.SnapshotReady:
		return nil, fail.Refusedf("snapshot %s is still being made: wait for `xmode sandbox snapshot` to finish", sn.Name)
	case sn.Expired(s.Now()):
		return nil, fail.Refusedf("snapshot %s expired at %s: take a new one with `xmode sandbox snapshot SESSION`", sn.Name, sn.ExpiresAt.Format(time.RFC3339))
	}
	provider, err := engine.Open(sn.Engine, s.Cfg)
	if err != nil {
		return nil, err
	}
	defer engine.Close(provider)
	if o.NetworkSet {
		if _, ok := engine.Network(provider); !ok {
			return nil, fail.Usagef("%s applies to docker sandboxes; this snapshot's sessions run on the host (%s engine), in the host's network", fail.Network, sn.Engine)
		}
	}
	if err := s.Guard.CheckFree(s.Cfg.MinFree, "refusing to create a sandbox"); err != nil {
		return nil, err
	}
	dir, err := s.Guard.SnapshotDir(sn.ID)
	if err != nil {
		return nil, err
	}
	now := s.Now().UTC()
	sess := store.Session{
		ID: store.NewSessionID(), RunID: store.NewRunID(), User: s.Cfg.User, Project: sn.Project,
		RunnerMode: sn.RunnerMode, Engine: sn.Engine, CreatedAt: now, ExpiresAt: now.Add(s.Cfg.TTL),
		Repo: sn.Repo, Ref: sn.Ref, BaseCommit: sn.BaseCommit,
		Origin: o.Origin, OriginClient: o.OriginClient, Title: o.Title, FromSnapshot: sn.ID,
	}
	if sess.Origin == "" {
		sess.Origin = store.OriginCLI
	}
	sess.Image, _ = engine.Image(provider)
	if sn.Image != "" {
		sess.Image = sn.Image
	}
	if network, ok := engine.Network(provider); ok {
		sess.Network = network
	}
	// A proxied network's policy, as a create's: the flags' rules first.
	pol, err := s.egressPolicy(sess.ID, o.Egress, o.EgressIfProxied)
	if err != nil {
		return nil, err
	}
	if err := checkEgress(pol, sess.Engine, provider); err != nil {
		return nil, err
	}
	sess.NetworkPolicy = RecordPolicy(pol)
	if sess.WorktreePath, err = s.Guard.Worktree(sess.RunID); err != nil {
		return nil, err
	}
	if err := s.Store.CreateSession(ctx, store.NewSession{Session: sess, NewRun: true, MaxOpen: s.Cfg.MaxOpen}); err != nil {
		return nil, err
	}
	src := &source{base: sn.BaseCommit, head: sn.Head, tree: sn.Tree, commit: sn.Commit,
		store: dir + "/" + changes.StoreDirName, ref: changes.SnapshotRef}
	created, err := s.fromSource(ctx, &sess, sn.Machine, src, provider)
	return created, s.undo(ctx, &sess, err)
}

// fromSource checks the base out (a worktree of the project machine
// machine, else a clone of the session's repository) and makes it src.
func (s *Service) fromSource(ctx context.Context, sess *store.Session, machine string, src *source, provider engine.Provider) (*store.Session, error) {
	var co *machines.Checkout
	var tgt target
	var err error
	if machine != "" {
		if co, err = s.Machines().Checkout(ctx, machine, "", src.base, false); err != nil {
			return nil, err
		}
		defer co.Close()
	} else if tgt, err = s.baseTarget(ctx, sess.Repo, sess.Ref, src.base); err != nil {
		return nil, err
	}
	return s.provision(ctx, sess, true, tgt, co, src, sess.Engine, provider, nil)
}
