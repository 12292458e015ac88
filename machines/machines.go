// Package machines keeps project machines, the design's Phase C
// (Sandboxes::ProjectMachine): one warm checkout per project under
// <root>/project_machines/<project>/repo, from which every run of the
// project gets a detached git worktree at <root>/runs/<run>/worktree instead
// of a clone of its own. The git binary (through package gitcli) clones,
// fetches, reads refs and makes the worktrees, so git, users and agents all
// see real linked worktrees. A flock(2) per machine serialises what git
// needs serialised; docs/project-machines.md explains the layout.
package machines

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/internal/progress"
	"github.com/xmode/xmode/store"
)

// VolumePrefix starts the name of every project's dependency-cache volume.
const VolumePrefix = "xmode_proj_"

// VolumeName is the base name of a project's dependency-cache volumes
// (CacheVolume), and the name of the one volume all its sandboxes shared
// before caches were per user (`machine rm` still removes it).
func VolumeName(project string) string { return VolumePrefix + project }

// CacheVolume is the docker volume that caches a project's dependencies for
// one user's sandboxes: VolumeName, ".u" and 12 hex digits of the user's
// SHA-256 (user names may hold what a volume name may not). One user's
// sandbox can never write what another user's runs read or execute (a Go
// build cache, a module's extracted source): docs/project-machines.md,
// "Isolation".
func CacheVolume(project, user string) string {
	sum := sha256.Sum256([]byte(user))
	return VolumeName(project) + ".u" + hex.EncodeToString(sum[:6])
}

// CacheEnv points the usual dependency caches under mount, the project's
// cache volume inside a docker sandbox, so they survive across runs.
func CacheEnv(mount string) []string {
	return []string{
		"XDG_CACHE_HOME=" + mount,            // go build cache, pip, and most tools
		"GOMODCACHE=" + mount + "/go-mod",    // Go modules
		"npm_config_cache=" + mount + "/npm", // npm
		"PIP_CACHE_DIR=" + mount + "/pip",    // pip (also under XDG; explicit wins)
		"BUNDLE_PATH=" + mount + "/bundle",   // Ruby gems installed by bundler
	}
}

// Manager warms, branches and removes project machines of one storage root.
type Manager struct {
	Cfg      *config.Config
	Store    *store.Store
	Guard    fsguard.Guard
	Progress io.Writer // git's clone and fetch progress (a terminal); nil: quiet
	Now      func() time.Time
	// PoolEntries counts the entries of a machine's pool (package pool
	// keeps them, above this one): Remove refuses a machine while a refill
	// is making entries of it. nil counts none.
	PoolEntries func(ctx context.Context, project string) (int, error)
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now().UTC()
	}
	return time.Now().UTC()
}

// RepoDir is <root>/project_machines/<project>/repo.
func (m *Manager) RepoDir(project string) (string, error) {
	dir, err := m.Guard.MachineDir(project)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "repo"), nil
}

func isRepo(repoDir string) bool {
	st, err := os.Stat(filepath.Join(repoDir, ".git"))
	return err == nil && st.IsDir()
}

// NormaliseRepo accepts a URL, a file:// URL or a local path; a local path
// must exist and becomes absolute, so the machine does not depend on the
// directory xmode ran in. A repository inside the storage root is refused:
// a sandbox's worktree (or a machine) is the sandbox's to write, .git
// included, and cloning it would run git on what the sandbox configured.
func NormaliseRepo(g fsguard.Guard, repo string) (string, error) {
	local, isURL := repo, strings.Contains(repo, "://") || strings.HasPrefix(repo, "git@")
	if isURL {
		p, ok := strings.CutPrefix(repo, "file://")
		if !ok {
			return repo, nil
		}
		local = p
	}
	abs, err := filepath.Abs(local)
	if err != nil {
		return "", fail.Usagef("%s %q: %v", fail.Repo, repo, err)
	}
	if g.Root != "" && g.Contains(abs) {
		return "", fail.Refusedf("%s %s is inside the storage root %s: a sandbox's worktree is not a repository xmode clones from (a step may have written its .git); push what you need from it to another repository first", fail.Repo, repo, g.Root)
	}
	if isURL {
		return repo, nil
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fail.Usagef("%s %q: no such repository (give a URL, a file:// URL or an existing path)", fail.Repo, repo)
	}
	return abs, nil
}

// machine returns the recorded machine, nil when there is none.
func (m *Manager) machine(ctx context.Context, project string) (*store.Machine, error) {
	mach, err := m.Store.GetMachine(ctx, project)
	if fail.KindOf(err) == fail.NotFound {
		return nil, nil
	}
	return mach, err
}

// Warm creates the machine of project (a clone of repo) or, when it exists,
// fetches it. ref, when given, becomes the machine's default ref (what
// `sandbox create --project` checks out without --ref); the first warm
// otherwise takes the remote's HEAD. repo may be empty for an existing
// machine and may not differ from the one it was warmed from.
func (m *Manager) Warm(ctx context.Context, project, repo, ref string) (mach *store.Machine, cloned bool, err error) {
	dir, err := m.Guard.MachineDir(project)
	if err != nil {
		return nil, false, err
	}
	if ref != "" {
		if err := checkRef(ref); err != nil {
			return nil, false, err
		}
	}
	prev, err := m.machine(ctx, project)
	if err != nil {
		return nil, false, err
	}
	if repo != "" {
		if repo, _, err = ResolveRepo(ctx, m.Guard, repo); err != nil {
			return nil, false, err
		}
	}
	switch {
	case prev == nil && repo == "":
		return nil, false, fail.Usagef("%s is required to warm project machine %s the first time", fail.Repo, project)
	case prev != nil && repo != "" && repo != prev.Repo:
		return nil, false, fail.Refusedf("project machine %s was warmed from %s, not %s: remove it first with `xmode machine rm %s`", project, prev.Repo, repo, project)
	case prev != nil:
		repo = prev.Repo
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("create %s: %w", dir, err)
	}
	lk, err := lockMachine(ctx, dir, project, m.Progress)
	if errors.Is(err, errGone) {
		return nil, false, gone(project)
	}
	if err != nil {
		return nil, false, err
	}
	defer lk.unlock()
	if prev == nil {
		// A first warm that fails leaves nothing: no lock file, no
		// half-made checkout (a killed one is the reaper's, see
		// RemoveUnrecorded).
		defer func() {
			if err != nil {
				m.dropUnrecorded(context.WithoutCancel(ctx), project)
			}
		}()
	}
	repoDir := filepath.Join(dir, "repo")
	if cloned = !isRepo(repoDir); cloned {
		if err := m.clone(ctx, project, repo); err != nil {
			return nil, false, err
		}
	}
	defaultRef := ref
	if defaultRef == "" && prev != nil {
		defaultRef = prev.DefaultRef
	}
	if defaultRef == "" {
		head, err := gitcli.Run(ctx, nil, repoDir, "symbolic-ref", "--short", "refs/remotes/origin/HEAD")
		if err != nil {
			return nil, false, fail.Failedf("%s has no default branch (its HEAD is detached or missing): warm with %s BRANCH", repo, fail.Ref)
		}
		defaultRef = strings.TrimPrefix(head, "origin/")
	}
	mach = &store.Machine{Project: project, Repo: repo, DefaultRef: defaultRef, Volume: VolumeName(project), CreatedAt: m.now()}
	if prev != nil {
		mach.CreatedAt = prev.CreatedAt
	}
	if err := m.refresh(ctx, mach, !cloned); err != nil {
		return nil, false, err
	}
	return mach, cloned, nil
}

// clone makes <machine>/repo: into a fresh directory beside it, renamed
// into place when complete, so an interrupted clone is never taken for a
// machine. Leftovers of an interrupted clone go first. Caller holds the
// exclusive lock.
func (m *Manager) clone(ctx context.Context, project, repo string) error {
	root, err := m.Guard.OpenMachinesRoot()
	if err != nil {
		return fmt.Errorf("open %s: %w", m.Guard.MachinesDir(), err)
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), project)
	if err != nil {
		return fmt.Errorf("read project machine %s: %w", project, err)
	}
	for _, e := range entries {
		if e.Name() == "repo" || strings.HasPrefix(e.Name(), "clone-") {
			if err := root.RemoveAll(project + "/" + e.Name()); err != nil {
				return fmt.Errorf("remove leftovers of project machine %s: %w", project, err)
			}
		}
	}
	var b [6]byte
	rand.Read(b[:])
	dir := filepath.Join(m.Guard.MachinesDir(), project)
	tmp := filepath.Join(dir, "clone-"+hex.EncodeToString(b[:]))
	// --no-local: a local path is fetched like a URL, into a pack, instead of
	// hard-linking its (maybe loose) objects: worktrees check out faster.
	args := []string{"clone", "--no-checkout", "--no-local", "-c", "gc.autoDetach=false"}
	if m.Progress != nil {
		args = append(args, "--progress")
	} else {
		args = append(args, "--quiet")
	}
	bar := progress.NewGit(m.Progress)
	_, err = gitcli.Run(ctx, bar.Writer(), "", append(args, "--", repo, tmp)...)
	bar.Close()
	if err != nil {
		root.RemoveAll(project + "/" + filepath.Base(tmp))
		return fail.As(fail.Failed, fmt.Errorf("warm project machine %s: %w", project, err))
	}
	// No branch and no tag: a repository made by git init and never
	// committed to, said as `sandbox create` says it.
	refs, err := gitcli.Run(ctx, nil, tmp, "for-each-ref", "--count=1", "--format=%(refname)", "refs/remotes/", "refs/tags/")
	if err != nil {
		root.RemoveAll(project + "/" + filepath.Base(tmp))
		return fmt.Errorf("warm project machine %s: %w", project, err)
	}
	if refs == "" {
		root.RemoveAll(project + "/" + filepath.Base(tmp))
		return fail.Usagef("repository %s has no commits: commit something first", repo)
	}
	// No local branch: the machine's checkout is detached (see refresh).
	// A HEAD that names a branch the repository lacks stays unborn: Warm
	// then needs --ref, and refresh detaches it.
	if head, err := gitcli.Run(ctx, nil, tmp, "rev-parse", "--verify", "--quiet", "HEAD"); err == nil && head != "" {
		if _, err := gitcli.Run(ctx, nil, tmp, "update-ref", "--no-deref", "HEAD", head); err != nil {
			return err
		}
	}
	if branches, err := gitcli.Run(ctx, nil, tmp, "for-each-ref", "--format=%(refname:short)", "refs/heads/"); err != nil {
		return err
	} else if branches != "" {
		if _, err := gitcli.Run(ctx, nil, tmp, append([]string{"branch", "--quiet", "-D"}, strings.Fields(branches)...)...); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, filepath.Join(dir, "repo")); err != nil {
		return fmt.Errorf("warm project machine %s: %w", project, err)
	}
	return nil
}

// refresh fetches the machine (unless it was just cloned), resolves its
// default ref, moves the machine's own checkout there and records it all.
// Caller holds the exclusive lock.
func (m *Manager) refresh(ctx context.Context, mach *store.Machine, fetch bool) error {
	repoDir, err := m.RepoDir(mach.Project)
	if err != nil {
		return err
	}
	if fetch {
		if err := m.fetch(ctx, repoDir, mach.Project); err != nil {
			return err
		}
	}
	commit, found, err := resolve(ctx, repoDir, mach.DefaultRef)
	if err != nil {
		return err
	}
	if !found {
		return fail.Usagef("%s %q: no such branch, tag or commit in %s", fail.Ref, mach.DefaultRef, mach.Repo)
	}
	// The machine's own checkout follows the default ref, detached: no
	// local branch exists, so `git checkout main` in a worktree starts
	// from origin's main as of the last fetch, never from a stale copy.
	if _, err := gitcli.Run(ctx, nil, repoDir, "checkout", "--quiet", "--force", "--detach", commit); err != nil {
		return fmt.Errorf("update the checkout of project machine %s: %w", mach.Project, err)
	}
	mach.HeadCommit, mach.LastFetchAt = commit, m.now()
	return m.Store.PutMachine(ctx, *mach)
}

// fetch brings every branch (as origin/*) and tag of origin into the
// machine; branches and tags gone from origin go too. Caller holds the
// exclusive lock.
func (m *Manager) fetch(ctx context.Context, repoDir, project string) error {
	// --update-head-ok: a worktree whose HEAD a step pointed at
	// refs/remotes/origin/* must not block the project's fetch ("refusing
	// to fetch into branch checked out"); its checkout is its own business.
	// No --quiet: git reports a rejected ref in the summary --quiet hides,
	// and that line is the error a user needs (stderr is a pipe, so no
	// progress is drawn unless asked for).
	args := []string{"fetch", "--prune", "--no-write-fetch-head", "--update-head-ok"}
	if m.Progress != nil {
		args = append(args, "--progress")
	}
	args = append(args, "origin", "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
	bar := progress.NewGit(m.Progress)
	_, err := gitcli.Run(ctx, bar.Writer(), repoDir, args...)
	bar.Close()
	if err != nil {
		return fail.As(fail.Failed, fmt.Errorf("fetch project machine %s: %w", project, err))
	}
	return nil
}
