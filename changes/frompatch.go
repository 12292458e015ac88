package changes

import (
	"context"
	"fmt"
	"sort"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/gitread"
	"github.com/xmode/xmode/store"
)

// KindPatch marks a change request made from a patch rather than from a
// worktree.
const KindPatch = "patch"

// CreateFromPatch makes a change request from a patch against the
// session's base commit, for a change that never lived in a local worktree
// (the Codex cloud loop: a cloud task's diff). The patch is applied with
// `git apply --cached` to base_commit in the run's object store (the base
// fetched from the session's repository when the store lacks it), the
// resulting tree is recorded, and the package is made from that tree as
// Create makes it from a worktree: change.patch is git's diff of the two
// trees, so it applies exactly like any other package. A patch that does
// not apply is a usage error; an empty one is refused.
func (s *Service) CreateFromPatch(ctx context.Context, sess *store.Session, patch []byte, o CreateOptions) (*Package, error) {
	base, err := gitread.ParseHash(sess.BaseCommit)
	if err != nil {
		return nil, fail.Failedf("session %s has no base commit recorded (%q)", sess.ID, sess.BaseCommit)
	}
	st, err := openStore(s.Guard, sess.RunID)
	if err != nil {
		return nil, err
	}
	sn := &Snapshot{SessionID: sess.ID, RunID: sess.RunID, Repo: sess.Repo, Kind: KindPatch, Base: base, store: st, pending: map[Want]*diff{}}
	defer sn.Close()
	files, err := baseFiles(st, base.String())
	if err != nil {
		if ferr := fetchBase(ctx, st, sess.Repo, base); ferr != nil {
			return nil, fail.Failedf("the base commit %s is not in the run's object store and cannot be fetched from %s: %v", base, sess.Repo, ferr)
		}
		if files, err = baseFiles(st, base.String()); err != nil {
			return nil, err
		}
	}
	tree, err := applyPatch(ctx, st, files, []string{"-"}, patch, true)
	if err != nil {
		// the store may lack the base versions the patch needs
		if ferr := fetchBase(ctx, st, sess.Repo, base); ferr != nil {
			return nil, fail.Failedf("the patch does not apply to base commit %s (%v), and the base cannot be fetched from %s: %v", base, err, sess.Repo, ferr)
		}
		if tree, err = applyPatch(ctx, st, files, []string{"-"}, patch, true); err != nil {
			return nil, fail.Usagef("the patch does not apply to base commit %s: %v", base, err)
		}
	}
	sn.Tree, sn.base = tree, files
	obj := &objects{store: st}
	c, err := obj.commit(base)
	if err != nil {
		return nil, err
	}
	sn.BaseTree = c.Tree
	if err := diffFiles(obj, sn); err != nil {
		return nil, err
	}
	return s.pack(ctx, sess, sn, o, nil)
}

// diffFiles fills sn.Changes from the two trees in the store.
func diffFiles(obj *objects, sn *Snapshot) error {
	old, cur := map[string]TreeEntry{}, map[string]TreeEntry{}
	if err := obj.flatten(sn.BaseTree, "", old); err != nil {
		return err
	}
	if err := obj.flatten(sn.Tree, "", cur); err != nil {
		return err
	}
	size := func(e TreeEntry) (int64, error) {
		if e.Mode == 0 || e.Mode == gitread.ModeGitlink {
			return 0, nil
		}
		data, err := obj.load(e.Hash, gitread.TypeBlob)
		return int64(len(data)), err
	}
	for p := range mergeKeys(old, cur) {
		o, n := old[p], cur[p]
		if o == n {
			continue
		}
		c := FileChange{Path: p, Old: o, New: n}
		var err error
		if c.OldSize, err = size(o); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if c.NewSize, err = size(n); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		sn.Changes = append(sn.Changes, c)
	}
	sort.Slice(sn.Changes, func(i, j int) bool { return sn.Changes[i].Path < sn.Changes[j].Path })
	return nil
}

func mergeKeys(a, b map[string]TreeEntry) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
