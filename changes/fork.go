package changes

import (
	"context"
	"fmt"
	"os"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitread"
	"github.com/xmode/xmode/store"
)

// Frozen is a session's worktree frozen for a fork or a snapshot
// (docs/change-requests.md, "Forks and snapshots"): the snapshot's tree and
// the agent's commits, read as data and checked against their IDs like a
// change request's, in an object store xmode owns, and a commit of that
// tree on top of the agent's last commit, which a ref of the store names so
// that git can fetch it from there into a checkout of the base.
type Frozen struct {
	Base Hash // the session's base commit
	// Head is the commit a session made from it gets as HEAD: the agent's
	// last commit that could be read back to the base, else the base.
	Head    Hash
	Tree    Hash // what the worktree held
	Commit  Hash // a commit of Tree whose parent is Head
	Commits int  // the agent's commits between Base and Head
	// Store is the object store (a bare repository) that holds it; Ref
	// the ref there that names Commit.
	Store, Ref string
	Skipped    []Skipped
	Warnings   []string
}

// FreezeOptions say what to freeze and how to name it.
type FreezeOptions struct {
	// WithIgnored takes the files the ignore rules leave out too.
	WithIgnored bool
	// Ref is the ref of the run's object store that names the frozen
	// commit (refs/xmode/forks/<session>, refs/xmode/snapshots/<id>).
	Ref string
	// Message is the frozen commit's message.
	Message string
}

// Freeze reads a session's worktree as a change request would — as data,
// no program of the worktree run, no link followed, every object checked
// against its ID, within XMODE_CR_MAX_BYTES — into the run's object store,
// and writes a commit of what it holds there (Frozen).
//
// The agent's commits come along when their first-parent chain reads back
// to the base and none is a merge (a merge's other parents are not read);
// otherwise Head is the base, the agent's work is there uncommitted, and a
// warning says why.
func (s *Service) Freeze(ctx context.Context, sess *store.Session, o FreezeOptions) (*Frozen, error) {
	sn, err := s.snapshot(ctx, sess, 0, o.WithIgnored)
	if err != nil {
		return nil, err
	}
	defer sn.Close()
	fr := &Frozen{Base: sn.Base, Head: sn.Base, Tree: sn.Tree, Store: sn.store.dir, Ref: o.Ref,
		Skipped: sn.Skipped, Warnings: sn.Warnings}
	commits := sn.Commits
	for _, c := range commits {
		if len(c.Parents) > 1 {
			fr.Warnings = append(fr.Warnings, fmt.Sprintf("the agent's commit %s is a merge, whose other parents xmode does not read: the agent's commits are not carried, their work is there uncommitted", shortHash(c.ID)))
			commits = nil
			break
		}
	}
	if n := len(commits); n > 0 {
		fr.Head, fr.Commits = commits[n-1].ID, n
	}
	fr.Commit, err = sn.store.write(gitread.TypeCommit, encodeCommit(sn.Tree, fr.Head, s.User, s.now(), o.Message+"\n"))
	if err != nil {
		return nil, fmt.Errorf("freeze %s: %w", sess.ID, err)
	}
	if err := sn.store.setRef(o.Ref, fr.Commit); err != nil {
		return nil, fmt.Errorf("freeze %s: %w", sess.ID, err)
	}
	return fr, nil
}

// SnapshotRef is the ref of a snapshot's store that names its commit.
const SnapshotRef = "refs/xmode/snapshot"

// KeepFrozen copies what fr needs beyond its base into a store of its own,
// <dir>/objects.git (a snapshot's): its commit, the agent's commits, every
// tree of them and of the base, and every blob they hold that the base
// does not — each read back from the run's object store and checked
// against its ID, written as one pack — and points SnapshotRef at its
// commit. A session made from it checks the base out of the session's
// repository (or project machine), as `sandbox create` does, and fetches
// the rest from this store. It returns the store's size on disk.
func (s *Service) KeepFrozen(ctx context.Context, runID string, fr *Frozen, dir string) (int64, error) {
	src, err := openStore(s.Guard, runID)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("create %s: %w", dir, err)
	}
	dst, err := openStoreIn(dir, "snapshot "+fr.Commit.String())
	if err != nil {
		return 0, err
	}
	defer dst.Close()
	dst.startBatch()
	c := &keeper{ctx: ctx, src: &objects{ctx: ctx, store: src}, dst: dst, seen: map[Hash]bool{}}
	// The base's trees, for git to tell what the base holds; its blobs
	// are the base's checkout's.
	base, err := c.src.commit(fr.Base)
	if err != nil {
		return 0, fail.Failedf("keep snapshot: the base commit %s: %v", fr.Base, err)
	}
	c.baseBlobs = map[Hash]bool{}
	if err := c.copyCommit(fr.Base, base, true); err != nil {
		return 0, err
	}
	for h := fr.Commit; h != fr.Base; {
		cm, err := c.src.commit(h)
		if err != nil {
			return 0, fail.Failedf("keep snapshot: commit %s: %v", h, err)
		}
		if err := c.copyCommit(h, cm, false); err != nil {
			return 0, err
		}
		if len(cm.Parents) == 0 {
			return 0, fmt.Errorf("keep snapshot: commit %s does not descend from the base %s", h, fr.Base)
		}
		h = cm.Parents[0]
	}
	if err := dst.endBatch(); err != nil {
		return 0, fmt.Errorf("keep snapshot: %w", err)
	}
	if err := dst.setRef(SnapshotRef, fr.Commit); err != nil {
		return 0, fmt.Errorf("keep snapshot: %w", err)
	}
	n, err := fsguard.DiskUsage(dst.dir)
	if err != nil {
		n = -1
	}
	return n, nil
}

// keeper copies objects from one store to another.
type keeper struct {
	ctx       context.Context
	src       *objects
	dst       *objectStore
	seen      map[Hash]bool
	baseBlobs map[Hash]bool // blobs of the base, which are not copied
}

// copyCommit copies commit h, its trees, and (unless it is the base) the
// blobs of them the base lacks; for the base, it records its blobs.
func (c *keeper) copyCommit(h Hash, cm *Commit, isBase bool) error {
	data, err := c.src.load(h, gitread.TypeCommit)
	if err != nil {
		return err
	}
	if err := c.dst.writeKnown(h, gitread.TypeCommit, data); err != nil {
		return err
	}
	return c.copyTree(cm.Tree, isBase)
}

func (c *keeper) copyTree(h Hash, isBase bool) error {
	if c.seen[h] {
		return nil
	}
	if err := c.ctx.Err(); err != nil {
		return err
	}
	c.seen[h] = true
	data, err := c.src.load(h, gitread.TypeTree)
	if err != nil {
		return fmt.Errorf("keep snapshot: tree %s: %w", h, err)
	}
	if err := c.dst.writeKnown(h, gitread.TypeTree, data); err != nil {
		return err
	}
	es, err := gitread.ParseTree(data)
	if err != nil {
		return fmt.Errorf("keep snapshot: tree %s: %w", h, err)
	}
	for _, e := range es {
		switch {
		case e.IsTree():
			if err := c.copyTree(e.Hash, isBase); err != nil {
				return err
			}
		case e.Mode == gitread.ModeGitlink:
		case isBase:
			c.baseBlobs[e.Hash] = true
		case c.baseBlobs[e.Hash] || c.seen[e.Hash]:
		default:
			c.seen[e.Hash] = true
			b, err := c.src.load(e.Hash, gitread.TypeBlob)
			if err != nil {
				return fmt.Errorf("keep snapshot: blob %s: %w", e.Hash, err)
			}
			if err := c.dst.writeKnown(e.Hash, gitread.TypeBlob, b); err != nil {
				return err
			}
		}
	}
	return nil
}
