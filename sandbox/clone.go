package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/internal/progress"
	"github.com/xmode/xmode/machines"
)

// target is a ref resolved against the remote before anything is written.
type target struct {
	ref  string // full name of a branch or tag (refs/heads/…, refs/tags/…); "" for a commit
	hash string // commit (maybe abbreviated, lowercase) when ref is ""
}

// short is the name a user would give for t.ref: main for refs/heads/main,
// v1 for refs/tags/v1; "" for a commit.
func (t target) short() string {
	if s, ok := strings.CutPrefix(t.ref, "refs/heads/"); ok {
		return s
	}
	return strings.TrimPrefix(t.ref, "refs/tags/")
}

// String says what t is: "branch main", "tag v1", "commit 1a2b3c".
func (t target) String() string {
	switch {
	case strings.HasPrefix(t.ref, "refs/heads/"):
		return "branch " + t.short()
	case t.ref != "":
		return "tag " + t.short()
	}
	return "commit " + shortCommit(t.hash)
}

// shortCommit is a commit (or container) ID cut to 12 characters, as git
// and docker show them.
func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// orHEAD is a --ref as given, "HEAD" (the remote's) when none was.
func orHEAD(ref string) string {
	if ref == "" {
		return "HEAD"
	}
	return ref
}

// checkRepo refuses a repository git could take for an option. A local
// path is absolute by now (machines.NormaliseRepo), so only a URL can
// start with '-'; git itself blocks such a path too, but xmode says why.
func checkRepo(repo string) error {
	if strings.HasPrefix(repo, "-") {
		return fail.Usagef("%s %q: a repository cannot start with '-'", fail.Repo, repo)
	}
	return nil
}

// RepoError is a repository that could not be read — not a repository,
// or git could not list or clone it — with the error saying why (its kind
// kept). A front end that must not tell a client why (MCP: what the
// host's network and files reach) tells it apart.
type RepoError struct {
	Repo string
	Err  error
}

func (e *RepoError) Error() string { return e.Err.Error() }
func (e *RepoError) Unwrap() error { return e.Err }

// gitMessage is what git said when it failed, for a user-facing message.
func gitMessage(err error) string {
	var ge *gitcli.Error
	if errors.As(err, &ge) && ge.Stderr != "" {
		return ge.Stderr
	}
	return err.Error()
}

// resolveRef lists the remote's refs (git ls-remote: no disk writes, one
// round trip) and resolves the user's --ref to a branch, a tag or a
// commit. An unknown name is a usage error, found before any session or
// directory exists. The ref never reaches git's command line here: it is
// matched against the listing.
func resolveRef(ctx context.Context, repo, ref string) (target, error) {
	if err := checkRepo(repo); err != nil {
		return target{}, err
	}
	out, err := gitcli.Run(ctx, nil, "", "ls-remote", "--symref", "--", repo)
	if err != nil {
		if ctx.Err() != nil {
			return target{}, err
		}
		return target{}, &RepoError{Repo: repo, Err: fail.Failedf("cannot read repository %s: %s", repo, gitMessage(err))}
	}
	// Lines are "<hash>\t<name>", "ref: <target>\t<name>" for a symbolic
	// ref (HEAD), and "<hash>\t<tag>^{}" for what an annotated tag peels to.
	hashes := map[string]string{}
	var headTarget string
	for _, line := range strings.Split(out, "\n") {
		val, name, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		if t, sym := strings.CutPrefix(val, "ref: "); sym {
			if name == "HEAD" {
				headTarget = t
			}
			continue
		}
		hashes[name] = val
	}
	if len(hashes) == 0 {
		// No branch, no tag: a repository made by git init and never
		// committed to. Nothing could be checked out, whatever --ref says.
		return target{}, fail.Usagef("repository %s has no commits: commit something first", repo)
	}
	if ref == "" || ref == "HEAD" {
		if headTarget != "" {
			if _, ok := hashes[headTarget]; ok {
				return target{ref: headTarget}, nil
			}
		} else if h, ok := hashes["HEAD"]; ok {
			return target{hash: h}, nil // a detached HEAD
		}
		return target{}, fail.Failedf("repository %s has no HEAD (empty?): give %s", repo, fail.Ref)
	}
	for _, name := range []string{ref, "refs/heads/" + ref, "refs/tags/" + ref} {
		if _, ok := hashes[name]; !ok || strings.HasSuffix(name, "^{}") {
			continue
		}
		if short, ok := strings.CutPrefix(name, "refs/heads/"); ok && short != "" {
			return target{ref: name}, nil
		}
		if short, ok := strings.CutPrefix(name, "refs/tags/"); ok && short != "" {
			if _, branch := hashes["refs/heads/"+short]; branch {
				// clone --branch takes the branch of that name: check the
				// tag's commit out instead.
				commit := hashes[name]
				if peeled, ok := hashes[name+"^{}"]; ok {
					commit = peeled
				}
				return target{hash: commit}, nil
			}
			return target{ref: name}, nil
		}
	}
	if machines.IsCommitish(strings.ToLower(ref)) {
		if filepath.IsAbs(repo) {
			// A local repository tells at once whether it has the
			// commit: a mistake then leaves nothing, as a bad branch does.
			// (A remote's commit is found only by the clone.)
			if _, err := gitcli.Run(ctx, nil, repo, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}"); err != nil {
				if ctx.Err() != nil {
					return target{}, ctx.Err()
				}
				return target{}, fail.Usagef("%s %q: no such branch, tag or commit in %s (or more than one commit starts with it)", fail.Ref, ref, repo)
			}
		}
		return target{hash: strings.ToLower(ref)}, nil
	}
	return target{}, fail.Usagef("%s %q: no such branch, tag or commit in %s", fail.Ref, ref, repo)
}

// clone checks out t into dir and returns the commit it checked out. A
// branch or tag is cloned shallow (depth 1, one branch, no tags); a commit
// needs the history to find it, so it is a full clone without a checkout,
// then a detached checkout of the commit. --no-local makes a local path
// cloned like a file:// URL: shallow, and without hard links from the
// sandbox's .git into the user's repository, which a step could write
// through.
func clone(ctx context.Context, repo string, t target, dir string, out io.Writer) (string, error) {
	if err := checkRepo(repo); err != nil {
		return "", err
	}
	// A tag checked out detaches HEAD: git's advice about it is noise here.
	args := []string{"-c", "advice.detachedHead=false", "clone", "--no-local"}
	if out != nil {
		args = append(args, "--progress")
	} else {
		args = append(args, "--quiet")
	}
	if t.ref != "" {
		args = append(args, "--depth", "1", "--single-branch", "--no-tags", "--branch", t.short())
	} else {
		args = append(args, "--no-checkout")
	}
	// xmode makes the directory, not git: git interrupted (Ctrl-C, or xmode
	// killed) then empties it but leaves it, so it stays the half-made
	// worktree the reaper looks for and removes through the guard.
	if err := os.MkdirAll(filepath.Dir(dir), fsguard.RunDirMode); err != nil {
		return "", fmt.Errorf("create the run directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the worktree: %w", err)
	}
	bar := progress.NewGit(out)
	_, err := gitcli.Run(ctx, bar.Writer(), "", append(args, "--", repo, dir)...)
	bar.Close()
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		return "", &RepoError{Repo: repo, Err: fmt.Errorf("git clone %s: %s", repo, gitMessage(err))}
	}
	if t.hash != "" {
		h, err := gitcli.Run(ctx, nil, dir, "rev-parse", "--verify", "--quiet", "--end-of-options", t.hash+"^{commit}")
		if err != nil {
			if ctx.Err() != nil {
				return "", err
			}
			// The same mistake as a bad branch (exit 2), found only now.
			if len(t.hash) < 40 {
				return "", fail.Usagef("%s %q: no such branch, tag or commit in %s (or more than one commit starts with it)", fail.Ref, t.hash, repo)
			}
			return "", fail.Usagef("%s %q: no such branch, tag or commit in %s", fail.Ref, t.hash, repo)
		}
		if _, err := gitcli.Run(ctx, nil, dir, "checkout", "--quiet", "--detach", h); err != nil {
			return "", fmt.Errorf("git checkout %s: %w", t.hash, err)
		}
		return h, nil
	}
	head, err := gitcli.Run(ctx, nil, dir, "rev-parse", "--verify", "HEAD")
	if err != nil {
		return "", fmt.Errorf("read HEAD of the new checkout: %w", err)
	}
	return head, nil
}
