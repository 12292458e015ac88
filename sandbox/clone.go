package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/machines"
)

// target is a ref resolved against the remote before anything is written.
type target struct {
	ref  plumbing.ReferenceName // branch or tag; "" for a commit
	hash string                 // commit (prefix) when ref is ""
}

// resolveRef lists the remote's refs (go-git; no disk writes) and resolves
// the user's --ref to a branch, a tag or a commit. An unknown name is a
// usage error, found before any session or directory exists.
func resolveRef(ctx context.Context, repo, ref string) (target, error) {
	remote := git.NewRemote(memory.NewStorage(), &gitconfig.RemoteConfig{Name: "origin", URLs: []string{repo}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{})
	if err != nil {
		return target{}, fail.Failedf("cannot read repository %s: %v", repo, err)
	}
	byName := map[plumbing.ReferenceName]*plumbing.Reference{}
	for _, r := range refs {
		byName[r.Name()] = r
	}
	if ref == "" || ref == "HEAD" {
		head, ok := byName[plumbing.HEAD]
		if !ok {
			return target{}, fail.Failedf("repository %s has no HEAD (empty?): give --ref", repo)
		}
		if head.Type() == plumbing.SymbolicReference {
			return target{ref: head.Target()}, nil
		}
		return target{hash: head.Hash().String()}, nil
	}
	for _, name := range []plumbing.ReferenceName{
		plumbing.ReferenceName(ref), plumbing.NewBranchReferenceName(ref), plumbing.NewTagReferenceName(ref),
	} {
		if _, ok := byName[name]; ok && (name.IsBranch() || name.IsTag()) {
			return target{ref: name}, nil
		}
	}
	if machines.IsCommitish(strings.ToLower(ref)) {
		return target{hash: strings.ToLower(ref)}, nil
	}
	return target{}, fail.Usagef("--ref %q: no such branch, tag or commit in %s", ref, repo)
}

// clone checks out t into dir and returns the commit it checked out. A
// branch or tag is cloned shallow (depth 1, one branch, no other tags); a
// commit needs the history to find it.
func clone(ctx context.Context, repo string, t target, dir string, progress io.Writer) (string, error) {
	opts := &git.CloneOptions{URL: repo, Progress: progress, Tags: git.NoTags}
	if t.ref != "" {
		opts.ReferenceName, opts.SingleBranch, opts.Depth = t.ref, true, 1
	}
	r, err := git.PlainCloneContext(ctx, dir, false, opts)
	if err != nil {
		return "", fmt.Errorf("git clone %s: %w", repo, err)
	}
	if t.hash != "" {
		h, err := r.ResolveRevision(plumbing.Revision(t.hash))
		if err != nil {
			return "", fail.Failedf("commit %s not found in %s: %v", t.hash, repo, err)
		}
		wt, err := r.Worktree()
		if err != nil {
			return "", err
		}
		if err := wt.Checkout(&git.CheckoutOptions{Hash: *h}); err != nil {
			return "", fmt.Errorf("git checkout %s: %w", t.hash, err)
		}
		return h.String(), nil
	}
	head, err := r.Head()
	if err != nil {
		return "", fmt.Errorf("read HEAD of the new checkout: %w", err)
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return "", ctx.Err()
	}
	return head.Hash().String(), nil
}
