package machines

import (
	"context"
	"fmt"
	"strings"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/gitcli"
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
		return fail.Usagef("%s %q is not a branch, tag or commit name", fail.Ref, ref)
	}
	return nil
}

// refCandidates are the refs a user's --ref may mean in a machine, in
// order: a branch (the machine keeps origin's branches as remote-tracking
// refs, so no local branch is ever stale), then a tag.
func refCandidates(ref string) []string {
	switch {
	case strings.HasPrefix(ref, "refs/heads/"):
		return []string{"refs/remotes/origin/" + strings.TrimPrefix(ref, "refs/heads/")}
	case strings.HasPrefix(ref, "refs/"):
		return []string{ref}
	}
	return []string{"refs/remotes/origin/" + ref, "refs/tags/" + ref}
}

// resolve finds ref in the machine's repository: a branch, a tag (peeled
// to its commit) or a commit the machine has. found is false when the
// machine lacks it (a fetch may bring it). One for-each-ref reads every
// candidate ref, exactly by name (rev-parse's DWIM rules could take a tag
// named "refs/remotes/origin/x" for the branch x); only a commit, or a tag
// of a tag, costs a second git.
func resolve(ctx context.Context, repoDir, ref string) (commit string, found bool, err error) {
	cands := refCandidates(ref)
	out, err := gitcli.Run(ctx, nil, repoDir, append([]string{"for-each-ref",
		"--format=%(refname) %(objecttype) %(objectname) %(*objecttype) %(*objectname)", "--end-of-options"}, cands...)...)
	if err != nil {
		return "", false, fmt.Errorf("read refs of project machine %s: %w", repoDir, err)
	}
	type refInfo struct{ typ, hash, peeledTyp, peeled string }
	refs := map[string]refInfo{}
	for _, line := range strings.Split(out, "\n") {
		// A ref name has no spaces; an unpeelable ref has no last two fields.
		f := strings.Fields(line)
		if len(f) >= 3 {
			ri := refInfo{typ: f[1], hash: f[2]}
			if len(f) == 5 {
				ri.peeledTyp, ri.peeled = f[3], f[4]
			}
			refs[f[0]] = ri
		}
	}
	for _, name := range cands {
		ri, ok := refs[name] // for-each-ref's patterns also match name/...
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "refs/remotes/") || ri.typ == "commit":
			return ri.hash, true, nil // branches point at commits
		case ri.typ == "tag" && ri.peeledTyp == "commit":
			return ri.peeled, true, nil
		case ri.typ == "tag" && ri.peeledTyp == "tag":
			// A tag of a tag: git follows the chain.
			h, err := gitcli.Run(ctx, nil, repoDir, "rev-parse", "--verify", "--quiet", "--end-of-options", name+"^{commit}")
			if err != nil {
				return "", false, fmt.Errorf("%s in %s: does not lead to a commit", name, repoDir)
			}
			return h, true, nil
		case ri.typ == "tag":
			return "", false, fmt.Errorf("%s in %s: %s is a %s, not a commit", name, repoDir, ri.peeled, ri.peeledTyp)
		default:
			return "", false, fmt.Errorf("%s in %s: %s is a %s, not a commit", name, repoDir, ri.hash, ri.typ)
		}
	}
	if !IsCommitish(ref) {
		return "", false, nil
	}
	// A commit, maybe abbreviated: git knows how to expand it.
	out, err = gitcli.Run(ctx, nil, repoDir, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	if err != nil {
		return "", false, nil
	}
	if len(ref) == 40 && out != ref {
		// A full hash names that object: a tag's hash is not its commit's.
		return "", false, nil
	}
	return out, true, nil
}
