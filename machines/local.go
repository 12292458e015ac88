package machines

import (
	"context"
	"path/filepath"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
)

// ResolveRepo is NormaliseRepo, then, for a local path, the repository it
// is in: `--repo .` works from any directory of a checkout and means the
// whole repository, and a path in no repository is a usage error (like a
// missing one). dirty reports a working tree with uncommitted changes,
// which a clone leaves out.
func ResolveRepo(ctx context.Context, g fsguard.Guard, repo string) (norm string, dirty bool, err error) {
	norm, err = NormaliseRepo(g, repo)
	if err != nil || !filepath.IsAbs(norm) {
		return norm, false, err
	}
	bare, err := gitcli.Run(ctx, nil, norm, "rev-parse", "--is-bare-repository")
	if err != nil {
		if ctx.Err() != nil {
			return "", false, ctx.Err()
		}
		return "", false, fail.Usagef("%s %s is not a git repository, nor inside one: give a repository's path or URL", fail.Repo, repo)
	}
	if bare == "true" {
		return norm, false, nil
	}
	top, err := gitcli.Run(ctx, nil, norm, "rev-parse", "--show-toplevel")
	if err != nil || top == "" {
		return norm, false, nil // inside a .git directory: git takes it as it is
	}
	if g.Root != "" && g.Contains(top) {
		return "", false, fail.Refusedf("%s %s is inside the storage root %s: a sandbox's worktree is not a repository xmode clones from (a step may have written its .git)", fail.Repo, repo, g.Root)
	}
	status, err := gitcli.Run(ctx, nil, top, "status", "--porcelain", "--untracked-files=no")
	return top, err == nil && status != "", nil
}
