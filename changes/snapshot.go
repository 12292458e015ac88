// Package changes turns what a sandbox did into change requests
// (docs/change-requests.md): a snapshot of the session's worktree against its
// base commit — the agent's commits, uncommitted and untracked files, with the
// repository's ignore rules — frozen into an immutable, verifiable package
// under runs/<run>/change_requests/<n>/, reviewed, and exported as a branch.
//
// Nothing here trusts the sandbox: the worktree and its .git are read as
// data (no git program runs on them, no link is followed, every object read
// is checked against its ID), the snapshot is written into the run's own
// object store, and the git binary runs only there, with xmode's own
// configuration (docs/change-requests.md, "Trust model").
package changes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/gitread"
	"github.com/xmode/xmode/store"
)

// Service builds, keeps and checks the change requests of one storage root.
type Service struct {
	Store    *store.Store
	Guard    fsguard.Guard
	MaxBytes int64  // XMODE_CR_MAX_BYTES
	User     string // author of new change requests and reviewer of decisions
	// Cfg opens a session's engine, so that one whose worktree lives
	// elsewhere (a remote docker daemon: sync mode) copies it back before
	// it is read; nil reads the worktree as it is here.
	Cfg *config.Config
	// Now is the clock a package's and a review's times are read from
	// (the sandbox service's); nil is time.Now.
	Now func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Snapshot is a session's worktree frozen against its base commit. Close
// it.
type Snapshot struct {
	SessionID string
	RunID     string
	Repo      string
	Kind      string // KindClone or KindMachine
	Base      Hash
	BaseTree  Hash
	Head      Hash      // the sandbox's HEAD; zero when unreadable
	Commits   []*Commit // the agent's commits on top of Base, oldest first
	Tree      Hash      // what the worktree holds
	Changes   []FileChange
	Skipped   []Skipped
	Warnings  []string
	Hashed    int // files read and hashed; the others' hashes came from the stat cache

	store   *objectStore
	base    map[string]TreeEntry // the base tree's files by path
	pending map[Want]*diff       // git runs started for what the caller wants
}

// FileChange is one path that differs between the base and the snapshot
// (no rename detection: that is git's, in Stat).
type FileChange struct {
	Path     string
	Old, New TreeEntry // Mode 0: absent on that side
	OldSize  int64
	NewSize  int64
}

// Close releases the object store and ends git runs not asked for.
func (sn *Snapshot) Close() error {
	for _, d := range sn.pending {
		d.abort()
	}
	sn.pending = nil
	return sn.store.Close()
}

// Empty reports a snapshot identical to its base.
func (sn *Snapshot) Empty() bool { return sn.Tree == sn.BaseTree }

// objects reads objects for a snapshot: from the run's object store when it
// has them (xmode wrote them, verified), else from the sandbox's git
// directory (verified on read), copying what it reads into the store.
type objects struct {
	ctx   context.Context // the snapshot's; nil: never cancelled
	store *objectStore
	src   *gitread.Source // nil when the sandbox has no readable git directory
	// fallback is tried once when an object can be read neither from the
	// store nor from the sandbox: it fetches the base from the session's
	// repository.
	fallback func(why error) error
	fellBack bool
	trees    []Hash     // when not nil, flatten records the trees it reads
	sizeMu   sync.Mutex // size is called by the walk's shards
}

func (o *objects) load(h Hash, want string) ([]byte, error) {
	typ, data, err := o.read(h)
	if err != nil && !errors.Is(err, gitread.ErrTooLarge) && o.fallback != nil && !o.fellBack {
		o.fellBack = true
		if ferr := o.fallback(err); ferr != nil {
			err = fmt.Errorf("%w; fetching the base from the session's repository failed too: %v", err, ferr)
		} else if o.store.has(h) {
			typ, data, err = o.store.read(h)
		}
	}
	if err != nil {
		return nil, err
	}
	if want != "" && typ != want {
		return nil, fmt.Errorf("object %s is a %s, not a %s", h, typ, want)
	}
	return data, nil
}

func (o *objects) read(h Hash) (string, []byte, error) {
	if o.store.has(h) {
		return o.store.read(h)
	}
	if o.src == nil {
		return "", nil, fmt.Errorf("object %s: %w", h, gitread.ErrNotFound)
	}
	typ, data, err := o.src.Read(h)
	if err == nil {
		err = o.store.writeKnown(h, typ, data)
	}
	return typ, data, err
}

// size returns the size of object h from its header, inflating nothing
// else: from the store, else from the sandbox's objects (its word:
// gitread.Source.Size), else from the base fetched from the session's
// repository. The walk's shards may call it at once.
func (o *objects) size(h Hash) (int64, error) {
	o.sizeMu.Lock()
	defer o.sizeMu.Unlock()
	if o.store.has(h) {
		return o.store.size(h)
	}
	err := fmt.Errorf("object %s: %w", h, gitread.ErrNotFound)
	if o.src != nil {
		n, serr := o.src.Size(h)
		if serr == nil {
			return n, nil
		}
		if o.ctx != nil && o.ctx.Err() != nil {
			return 0, o.ctx.Err()
		}
		err = serr
	}
	if o.fallback != nil && !o.fellBack {
		o.fellBack = true
		if ferr := o.fallback(err); ferr != nil {
			return 0, fmt.Errorf("%w; fetching the base from the session's repository failed too: %v", err, ferr)
		}
		if o.store.has(h) {
			return o.store.size(h)
		}
	}
	return 0, err
}

func (o *objects) commit(h Hash) (*Commit, error) {
	data, err := o.load(h, gitread.TypeCommit)
	if err != nil {
		return nil, err
	}
	return gitread.ParseCommit(h, data)
}

func (o *objects) tree(h Hash) ([]TreeEntry, error) {
	data, err := o.load(h, gitread.TypeTree)
	if err != nil {
		return nil, err
	}
	return gitread.ParseTree(data)
}

// flatten lists every non-tree entry under tree h by path.
func (o *objects) flatten(h Hash, prefix string, out map[string]TreeEntry) error {
	es, err := o.tree(h)
	if err != nil {
		return err
	}
	if o.trees != nil {
		o.trees = append(o.trees, h)
	}
	for _, e := range es {
		p := join(prefix, e.Name)
		if e.IsTree() {
			if err := o.flatten(e.Hash, p, out); err != nil {
				return err
			}
			continue
		}
		out[p] = e
	}
	return nil
}

// copyDelta makes sure the store holds every tree of b and every blob of b
// that a does not hold at the same path.
func (o *objects) copyDelta(a, b Hash) error {
	if a == b {
		return nil
	}
	var old map[string]TreeEntry
	if !a.IsZero() {
		es, err := o.tree(a)
		if err != nil {
			return err
		}
		old = make(map[string]TreeEntry, len(es))
		for _, e := range es {
			old[e.Name] = e
		}
	}
	es, err := o.tree(b)
	if err != nil {
		return err
	}
	for _, e := range es {
		prev, had := old[e.Name]
		if had && prev == e {
			continue
		}
		switch {
		case e.IsTree():
			from := Hash{}
			if had && prev.IsTree() {
				from = prev.Hash
			}
			if err := o.copyDelta(from, e.Hash); err != nil {
				return err
			}
		case e.Mode != gitread.ModeGitlink:
			if _, err := o.load(e.Hash, gitread.TypeBlob); err != nil {
				return err
			}
		}
	}
	return nil
}

// syncBack makes the worktree here what the sandbox's copy is, for an
// engine whose worktree lives elsewhere (engine.SyncBack: a no-op for the
// others). An ended session has no copy left.
func (s *Service) syncBack(ctx context.Context, sess *store.Session) error {
	if s.Cfg == nil || sess.Ended() || sess.MountMode == "" {
		return nil
	}
	a, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return err
	}
	defer engine.Close(a)
	return engine.SyncBack(ctx, a, sess.Sandbox())
}

// Snapshot freezes a session's worktree. It writes only into the run's
// object store (runs/<run>/objects.git), never into the worktree or the
// run's packages. want names the diffs the caller will ask for (0: none
// yet), so git can start while the worktree is walked.
func (s *Service) Snapshot(ctx context.Context, sess *store.Session, want Want) (*Snapshot, error) {
	return s.snapshot(ctx, sess, want, false)
}

// snapshot is Snapshot; withIgnored takes the files the ignore rules
// leave out too (a fork's or a snapshot's --with-ignored).
func (s *Service) snapshot(ctx context.Context, sess *store.Session, want Want, withIgnored bool) (*Snapshot, error) {
	if sess.Status == store.StatusProvisioning {
		return nil, fail.Refusedf("session %s is still provisioning: wait for `xmode sandbox create` to finish", sess.ID)
	}
	base, err := gitread.ParseHash(sess.BaseCommit)
	if err != nil {
		return nil, fail.Failedf("session %s has no base commit recorded (%q): nothing to compare its worktree with", sess.ID, sess.BaseCommit)
	}
	dir, err := s.Guard.Worktree(sess.RunID)
	if err != nil {
		return nil, err
	}
	if err := s.syncBack(ctx, sess); err != nil {
		return nil, err
	}
	wt, err := openWorktree(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fail.NotFoundf("the worktree of session %s (%s) is gone: its session ended and the worktree was reclaimed", sess.ID, dir)
		}
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
			return nil, fail.Refusedf("the worktree of session %s (%s) is not a directory: refusing to follow what replaced it", sess.ID, dir)
		}
		return nil, fmt.Errorf("open the worktree of %s: %w", sess.ID, err)
	}
	defer wt.Close()
	dirs, err := locateGitDirs(ctx, s.Store, s.Guard, sess.RunID, wt)
	if err != nil {
		return nil, err
	}
	defer dirs.Close()
	st, err := openStore(s.Guard, sess.RunID)
	if err != nil {
		return nil, err
	}
	st.startBatch() // the snapshot's new objects become one pack (flush below)
	sn := &Snapshot{SessionID: sess.ID, RunID: sess.RunID, Repo: sess.Repo, Kind: dirs.kind, Base: base, store: st, pending: map[Want]*diff{}}
	for _, k := range []Want{WantStat, WantPatch, WantPackage} {
		if want&k != 0 {
			sn.pending[k] = startDiff(ctx, st, k, true)
		}
	}
	ok := false
	defer func() {
		if !ok {
			sn.Close()
		}
	}()
	if dirs.note != "" {
		sn.Warnings = append(sn.Warnings, dirs.note)
	}
	obj, done := s.openObjects(ctx, st, dirs)
	defer done()
	// The base is read from the sandbox's objects, each checked against its
	// ID; what is missing or forged there is fetched from the session's
	// repository instead.
	obj.fallback = func(why error) error {
		if err := fetchBase(ctx, st, sess.Repo, base); err != nil {
			return err
		}
		sn.Warnings = append(sn.Warnings, fmt.Sprintf("the base commit was fetched from %s: the sandbox's copy could not be read (%v)", sess.Repo, why))
		return nil
	}
	baseFiles, err := s.baseTree(obj, sn)
	if err != nil {
		return nil, err
	}
	sn.base = baseFiles

	w := s.newWalker(st, dirs, baseFiles)
	w.ctx, w.withIgnored = ctx, withIgnored
	w.baseSize = func(h Hash) (int64, bool) {
		n, err := obj.size(h)
		return n, err == nil
	}
	if sn.Tree, err = w.walk(wt); err != nil {
		if fail.KindOf(err) == fail.Refused {
			_ = st.endBatch() // what was read stays known
			_ = w.cache.save(st, w.added)
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read the worktree of %s: %w", sess.ID, context.Cause(ctx))
		}
		return nil, fail.Failedf("read the worktree of %s: %v", sess.ID, err)
	}
	if sn.Tree.IsZero() {
		if sn.Tree, err = st.write(gitread.TypeTree, nil); err != nil {
			return nil, err
		}
	}
	sn.Skipped, sn.Hashed = w.skipped, w.hashed
	_ = w.cache.save(st, w.added) // only a cache

	if err := s.diffBase(obj, sn, baseFiles, w); err != nil {
		return nil, err
	}
	// Deletions count too: a diff or a package needs the base versions.
	if err := s.checkSize(sn); err != nil {
		return nil, err
	}
	obj.fallback = nil // the agent's commits are nowhere else
	s.history(obj, dirs, sn)
	// git reads the store from here on: diffs, packages, exports.
	if err := st.endBatch(); err != nil {
		return nil, fmt.Errorf("write the snapshot of %s: %w", sess.ID, err)
	}
	ok = true
	return sn, nil
}

// openObjects reads objects into the store st: from the store, else from
// the sandbox's git directory (each checked against its ID). done closes
// what it opened.
func (s *Service) openObjects(ctx context.Context, st *objectStore, dirs *gitDirs) (obj *objects, done func()) {
	obj = &objects{ctx: ctx, store: st}
	if dirs.common == nil {
		return obj, func() {}
	}
	var alt *gitread.Source
	ov := dirs.overlay()
	if ov != nil {
		alt = gitread.NewSource(ov, gitread.Options{Name: "the run's git overlay"})
	}
	obj.src = gitread.NewSource(dirs.common, gitread.Options{Name: "the sandbox's git directory", Limits: sourceLimits(s.MaxBytes), Context: ctx, Alt: alt})
	return obj, func() {
		obj.src.Close()
		if alt != nil {
			alt.Close()
			ov.Close()
		}
	}
}

// newWalker prepares the walk of a worktree: the base to compare with,
// xmode's stat cache, the submodule pointers and tracked paths of the
// sandbox's index (the base's when it has none), info/exclude.
func (s *Service) newWalker(st *objectStore, dirs *gitDirs, base map[string]TreeEntry) *walker {
	w := &walker{store: st, base: base, cache: loadStatCache(st), limit: s.MaxBytes, parallel: runtime.GOMAXPROCS(0)}
	raw, err := dirs.index()
	var links []gitread.IndexEntry
	if err == nil {
		links, err = gitread.ParseIndexOf(raw, func(m uint32) bool { return m == gitread.ModeGitlink })
	}
	w.gitlinks = map[string]Hash{}
	for _, e := range links {
		w.gitlinks[e.Path] = e.Hash
	}
	if err != nil {
		for p, e := range base {
			if e.Mode == gitread.ModeGitlink {
				w.gitlinks[p] = e.Hash
			}
		}
	}
	w.tracked = &trackedSet{build: func() []string {
		index, _ := gitread.ParseIndex(raw) // an index that does not parse tracks nothing
		ps := make([]string, 0, len(index)+len(base))
		for _, e := range index {
			ps = append(ps, e.Path)
		}
		for p := range base {
			ps = append(ps, p)
		}
		return ps
	}}
	w.rules.Push(gitread.ParseIgnore(dirs.exclude(), ""))
	return w
}

// baseTree loads the base commit and every tree of it into the store (or
// finds them there, flattened, in the base cache) and returns its files by
// path.
func (s *Service) baseTree(obj *objects, sn *Snapshot) (map[string]TreeEntry, error) {
	c, err := obj.commit(sn.Base)
	if err != nil {
		return nil, fail.Failedf("the base commit %s of %s cannot be read: %v", sn.Base, sn.SessionID, err)
	}
	sn.BaseTree = c.Tree
	if files := loadBaseCache(obj.store, c.Tree); files != nil {
		return files, nil
	}
	files := map[string]TreeEntry{}
	obj.trees = []Hash{}
	err = obj.flatten(c.Tree, "", files)
	trees := obj.trees
	obj.trees = nil
	if err != nil {
		return nil, fail.Failedf("the base commit %s of %s cannot be read: %v", sn.Base, sn.SessionID, err)
	}
	// The cache vouches for its trees: they are written out first.
	if err := obj.store.flush(); err != nil {
		return nil, fmt.Errorf("write the base trees of %s: %w", sn.SessionID, err)
	}
	_ = saveBaseCache(obj.store, c.Tree, trees, files) // only a cache
	return files, nil
}

// fetchBase fetches one commit (depth 1) from the session's repository
// into the store, as loose objects. It tells the repository it has
// nothing (the noop negotiation): the store's refs reach the base commit
// once a change request was made, and git would then send none of the
// objects the store lacks.
func fetchBase(ctx context.Context, st *objectStore, repo string, base Hash) error {
	if repo == "" || repo[0] == '-' {
		return errors.New("no repository recorded")
	}
	_, err := gitcli.RunOwned(ctx, gitcli.Owned{GitDir: st.dir}, "-c", "fetch.unpackLimit=2147483647", "-c", "fetch.negotiationAlgorithm=noop",
		"fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--depth=1", "--", repo, base.String())
	return err
}

// diffBase lists what differs from the base and puts the base versions of
// changed files into the store (git needs them to diff and to apply).
func (s *Service) diffBase(obj *objects, sn *Snapshot, base map[string]TreeEntry, w *walker) error {
	for p, o := range base {
		n, ok := w.file(p)
		if ok && n.TreeEntry == o {
			continue
		}
		c := FileChange{Path: p, Old: o, New: n.TreeEntry, NewSize: n.size}
		if o.Mode != gitread.ModeGitlink {
			// git needs the base version in the store to diff and apply
			if !obj.store.has(o.Hash) {
				_, err := obj.load(o.Hash, gitread.TypeBlob)
				if errors.Is(err, gitread.ErrTooLarge) {
					c.OldSize = s.MaxBytes + 1
					sn.Changes = append(sn.Changes, c)
					continue
				}
				if err != nil {
					return fail.Failedf("read the base version of %s: %v", p, err)
				}
			}
			size, err := obj.store.size(o.Hash)
			if err != nil {
				return err
			}
			c.OldSize = size
		}
		sn.Changes = append(sn.Changes, c)
	}
	w.eachFile(func(p string, n walked) {
		if _, ok := base[p]; !ok {
			sn.Changes = append(sn.Changes, FileChange{Path: p, New: n.TreeEntry, NewSize: n.size})
		}
	})
	sort.Slice(sn.Changes, func(i, j int) bool { return sn.Changes[i].Path < sn.Changes[j].Path })
	return nil
}

// maxCommits bounds the walk from the sandbox's HEAD back to the base.
const maxCommits = 1000

// history reads the agent's commits: the first-parent chain from the
// sandbox's HEAD back to the base. What cannot be read is a warning, not a
// failure: the snapshot of the files stands on its own.
func (s *Service) history(obj *objects, dirs *gitDirs, sn *Snapshot) {
	head, err := dirs.head()
	if err != nil {
		if dirs.record != nil {
			sn.Warnings = append(sn.Warnings, fmt.Sprintf("the sandbox's HEAD cannot be read (%v): its commits are not recorded", err))
		}
		return
	}
	sn.Head = head
	if head == sn.Base {
		return
	}
	var chain []*Commit
	for h := head; h != sn.Base; {
		if len(chain) == maxCommits {
			sn.Warnings = append(sn.Warnings, fmt.Sprintf("HEAD %s is more than %d commits from the base: its commits are not recorded", head, maxCommits))
			return
		}
		c, err := obj.commit(h)
		if err != nil {
			sn.Warnings = append(sn.Warnings, fmt.Sprintf("the sandbox's commit %s cannot be read (%v): its commits are not recorded", h, err))
			return
		}
		chain = append(chain, c)
		if len(c.Parents) == 0 {
			sn.Warnings = append(sn.Warnings, fmt.Sprintf("HEAD %s does not descend from the base commit: its commits are not recorded", head))
			return
		}
		h = c.Parents[0]
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	prev := sn.BaseTree
	for _, c := range chain {
		if err := obj.copyDelta(prev, c.Tree); err != nil {
			sn.Warnings = append(sn.Warnings, fmt.Sprintf("the sandbox's commit %s cannot be read (%v): its commits are not recorded", c.ID, err))
			return
		}
		prev = c.Tree
	}
	sn.Commits = chain
	// The snapshot leaves such paths out; export does not re-create
	// commits that hold them (Export).
	if r, err := refusedCommit(obj, sn.BaseTree, chain); err == nil && r != nil {
		sn.Warnings = append(sn.Warnings, fmt.Sprintf("the agent's commit %s holds %s (%s): cr export makes one commit of the whole change instead of re-creating the agent's commits", r.Commit[:12], r.Path, r.Reason))
	}
}

// largest returns the changed paths by decreasing size (the larger of
// their two versions), at most n.
func (sn *Snapshot) largest(n int) []FileChange {
	cs := append([]FileChange(nil), sn.Changes...)
	size := func(c FileChange) int64 { return max(c.OldSize, c.NewSize) }
	sort.SliceStable(cs, func(i, j int) bool { return size(cs[i]) > size(cs[j]) })
	return cs[:min(n, len(cs))]
}
