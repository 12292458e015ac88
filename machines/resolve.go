package machines

import (
	"context"
	"errors"
	"fmt"
	"strings"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/xmode/xmode/fail"
)

// IsCommitish reports whether ref looks like a (possibly abbreviated)
// commit: 4 to 64 lowercase hex digits. A loop, not a regexp, because it is
// compiled into every xmode start-up.
func IsCommitish(ref string) bool {
	if len(ref) < 4 || len(ref) > 64 {
		return false
	}
	for _, r := range ref {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// checkRef refuses what git would not take as a ref name or commit, before
// it can become a path inside .git or an option of git.
func checkRef(ref string) error {
	bad := ref == "@" || strings.HasPrefix(ref, "-") || strings.HasPrefix(ref, "/") ||
		strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, ".") || strings.HasSuffix(ref, ".lock") ||
		strings.Contains(ref, "..") || strings.Contains(ref, "//") || strings.Contains(ref, "@{") ||
		strings.Contains(ref, "/.") || strings.HasPrefix(ref, ".")
	for _, r := range ref {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(`~^:?*[\`, r) {
			bad = true
		}
	}
	if bad {
		return fail.Usagef("--ref %q is not a branch, tag or commit name", ref)
	}
	return nil
}

// refCandidates are the refs a user's --ref may mean in a machine, in
// order: a branch (the machine keeps origin's branches as remote-tracking
// refs, so no local branch is ever stale), then a tag.
func refCandidates(ref string) []plumbing.ReferenceName {
	switch {
	case strings.HasPrefix(ref, "refs/heads/"):
		return []plumbing.ReferenceName{plumbing.NewRemoteReferenceName("origin", strings.TrimPrefix(ref, "refs/heads/"))}
	case strings.HasPrefix(ref, "refs/"):
		return []plumbing.ReferenceName{plumbing.ReferenceName(ref)}
	}
	return []plumbing.ReferenceName{plumbing.NewRemoteReferenceName("origin", ref), plumbing.NewTagReferenceName(ref)}
}

// resolve finds ref in the machine's repository without starting a
// process: a branch, a tag (peeled to its commit) or a commit the machine
// has. found is false when the machine lacks it (a fetch may bring it).
func resolve(ctx context.Context, repoDir, ref string) (commit string, found bool, err error) {
	r, err := gogit.PlainOpen(repoDir)
	if err != nil {
		return "", false, fmt.Errorf("open project machine %s: %w", repoDir, err)
	}
	for _, name := range refCandidates(ref) {
		rf, err := r.Reference(name, true)
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			continue
		}
		if err != nil {
			return "", false, fmt.Errorf("read %s in %s: %w", name, repoDir, err)
		}
		if name.IsRemote() {
			return rf.Hash().String(), true, nil // branches point at commits
		}
		h, err := peel(r, rf.Hash())
		if err != nil {
			return "", false, fmt.Errorf("%s in %s: %w", name, repoDir, err)
		}
		return h, true, nil
	}
	if !IsCommitish(ref) {
		return "", false, nil
	}
	if len(ref) == 40 {
		if _, err := r.CommitObject(plumbing.NewHash(ref)); err == nil {
			return ref, true, nil
		}
		return "", false, nil
	}
	// An abbreviated commit: git knows how to expand it.
	out, err := runGit(ctx, nil, repoDir, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	if err != nil {
		return "", false, nil
	}
	return out, true, nil
}

// peel follows annotated tags to the commit they name.
func peel(r *gogit.Repository, h plumbing.Hash) (string, error) {
	for range 10 {
		obj, err := r.Object(plumbing.AnyObject, h)
		if err != nil {
			return "", err
		}
		switch o := obj.(type) {
		case *object.Commit:
			return o.Hash.String(), nil
		case *object.Tag:
			h = o.Target
		default:
			return "", fmt.Errorf("%s is a %s, not a commit", h, obj.Type())
		}
	}
	return "", fmt.Errorf("tag chain at %s is too long", h)
}
