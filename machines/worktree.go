package machines

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/store"
)

// Checkout is a ref resolved in a machine, with the machine locked until
// the worktree exists. Close it.
type Checkout struct {
	Machine *store.Machine
	Ref     string // what the session records: the user's --ref, else the machine's default ref
	Commit  string
	Warmed  bool // the machine was cloned for this checkout

	repoDir string
	lk      *machineLock
}

// Checkout prepares a worktree of project at ref ("" for the machine's
// default ref). A machine that does not exist yet is warmed from repo, and
// is fail.NotFound without it. A ref the machine lacks is fetched first;
// refresh fetches anyway. An unknown ref is fail.Usage, found before
// anything is created for the session.
func (m *Manager) Checkout(ctx context.Context, project, repo, ref string, refresh bool) (*Checkout, error) {
	dir, err := m.Guard.MachineDir(project)
	if err != nil {
		return nil, err
	}
	if ref != "" && ref != "HEAD" {
		if err := checkRef(ref); err != nil {
			return nil, err
		}
	}
	mach, err := m.machine(ctx, project)
	if err != nil {
		return nil, err
	}
	warmed := false
	switch {
	case mach == nil && repo == "":
		return nil, fail.NotFoundf("no project machine %s: warm it with `xmode machine warm %s --repo URL` (or give %s to warm it now)", project, project, fail.Repo)
	case mach == nil:
		if mach, warmed, err = m.Warm(ctx, project, repo, ""); err != nil {
			return nil, err
		}
	case repo != "":
		norm, _, err := ResolveRepo(ctx, m.Guard, repo)
		if err != nil {
			return nil, err
		}
		if norm != mach.Repo {
			// Refused, as by `machine warm`: the input is sound, the
			// machine that exists is another repository's.
			return nil, fail.Refusedf("%s %s is not the repository of project machine %s (%s): drop %s, or use another %s", fail.Repo, repo, project, mach.Repo, fail.Repo, fail.Project)
		}
	}
	want := ref
	if want == "" || want == "HEAD" {
		want = mach.DefaultRef
	}
	repoDir := filepath.Join(dir, "repo")
	lk, err := lockMachine(ctx, dir, project, m.Progress)
	if errors.Is(err, errGone) {
		return nil, gone(project)
	}
	if err != nil {
		return nil, err
	}
	commit, err := m.resolveLocked(ctx, mach, repoDir, want, refresh, warmed)
	if err != nil {
		lk.unlock()
		return nil, err
	}
	return &Checkout{Machine: mach, Ref: want, Commit: commit, Warmed: warmed, repoDir: repoDir, lk: lk}, nil
}

// resolveLocked resolves want in the locked machine, fetching first when
// asked to (refresh) and when the machine lacks it, unless it was fetched
// just now (fresh).
func (m *Manager) resolveLocked(ctx context.Context, mach *store.Machine, repoDir, want string, refresh, fresh bool) (string, error) {
	if !isRepo(repoDir) {
		return "", fail.NotFoundf("project machine %s has no checkout at %s: warm it again with `xmode machine warm %s`", mach.Project, repoDir, mach.Project)
	}
	fetch := func() error {
		// Reread: another warm may have changed the machine while we waited.
		cur, err := m.Store.GetMachine(ctx, mach.Project)
		if err != nil {
			return err
		}
		*mach = *cur
		return m.refresh(ctx, mach, true)
	}
	if refresh && !fresh {
		if err := fetch(); err != nil {
			return "", err
		}
		fresh = true
	}
	if !fresh && want == mach.DefaultRef {
		// The default ref is where the last warm left it, recorded then (as
		// a pool's claim takes it): no git to ask. Read again under the
		// lock, in case a warm moved it meanwhile.
		if cur, err := m.Store.GetMachine(ctx, mach.Project); err == nil && cur.DefaultRef == want && IsCommitish(cur.HeadCommit) && len(cur.HeadCommit) == 40 {
			*mach = *cur
			return cur.HeadCommit, nil
		}
	}
	commit, found, err := resolve(ctx, repoDir, want)
	if err == nil && !found && !fresh {
		if err := fetch(); err != nil {
			return "", err
		}
		commit, found, err = resolve(ctx, repoDir, want)
	}
	if err == nil && !found && IsCommitish(want) {
		// A commit no branch or tag reaches: ask origin for it by name.
		if _, ferr := gitcli.Run(ctx, m.Progress, repoDir, "fetch", "--quiet", "--no-write-fetch-head", "origin", want); ferr == nil {
			commit, found, err = resolve(ctx, repoDir, want)
		}
	}
	if err != nil {
		return "", err
	}
	if !found {
		return "", fail.Usagef("%s %q: no such branch, tag or commit in %s (project machine %s, fetched just now)", fail.Ref, want, mach.Repo, mach.Project)
	}
	return commit, nil
}

// GitDir is the machine's .git directory, which the worktree's .git file
// points into.
func (c *Checkout) GitDir() string { return filepath.Join(c.repoDir, ".git") }

// Close releases the machine.
func (c *Checkout) Close() {
	if c != nil {
		c.lk.unlock()
	}
}

// AddWorktree makes path a detached git worktree of the machine at the
// checkout's commit, with the git binary, so git, users and agents see a
// real linked worktree. It is locked in git (`git worktree prune`, run by
// hand or by `git gc` in any worktree, never drops it while the session
// lives; teardown removes the record, see ReleaseWorktree), and its .git
// file points into the machine by a relative path, so the worktree works
// wherever the storage root is mounted (docker volume mode). It returns the
// name git gave the worktree's record (.git/worktrees/<name>), which the
// caller records: after a step has run, the files that lead there (the
// worktree's .git, the record's gitdir) are the sandbox's to rewrite.
func (c *Checkout) AddWorktree(ctx context.Context, runID, path string) (string, error) {
	if err := c.sweepJunkRecords(); err != nil {
		return "", err
	}
	if _, err := gitcli.Run(ctx, nil, c.repoDir, "worktree", "add", "--quiet", "--detach", "--lock",
		"--reason", "xmode "+runID, path, c.Commit); err != nil {
		return "", fmt.Errorf("branch a worktree of project machine %s: %w", c.Machine.Project, err)
	}
	dotGit := filepath.Join(path, ".git")
	b, err := os.ReadFile(dotGit)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", dotGit, err)
	}
	admin, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok || filepath.Base(filepath.Dir(admin)) != "worktrees" {
		return "", fmt.Errorf("%s: unexpected content %q", dotGit, b)
	}
	record := filepath.Base(admin)
	rel, err := filepath.Rel(path, filepath.Join(c.GitDir(), "worktrees", record))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(dotGit, []byte("gitdir: "+rel+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", dotGit, err)
	}
	return record, nil
}

// sweepJunkRecords removes the worktree records a `git worktree add`
// killed in its first instants left: git makes .git/worktrees/<name>
// before it writes the "locked" file and installs its clean-up on signals,
// so a create killed (kill -9 of xmode, git TERMed with it) then leaves a
// record with neither "gitdir" nor "locked", which `git worktree prune`
// reports as stale and which no session owns. The checkout holds the
// machine's lock, so no other add is halfway through; a record with a
// "locked" file (every session's) is left alone. The removal is confined
// to the records' directory with os.Root, following no link a sandbox
// planted there.
func (c *Checkout) sweepJunkRecords() error {
	wts, err := fsguard.OpenRootPath(filepath.Join(c.GitDir(), "worktrees"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open worktree records of project machine %s: %w", c.Machine.Project, err)
	}
	defer wts.Close()
	entries, err := fs.ReadDir(wts.FS(), ".")
	if err != nil {
		return fmt.Errorf("read worktree records of project machine %s: %w", c.Machine.Project, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		_, gerr := wts.Lstat(e.Name() + "/gitdir")
		_, lerr := wts.Lstat(e.Name() + "/locked")
		if !errors.Is(gerr, fs.ErrNotExist) || !errors.Is(lerr, fs.ErrNotExist) {
			continue
		}
		if err := wts.RemoveAll(e.Name()); err != nil {
			return fmt.Errorf("remove the half-made worktree record %s of project machine %s: %w", e.Name(), c.Machine.Project, err)
		}
	}
	return nil
}

// ReleaseRun removes git's record of a run's worktree from the machine the
// run was branched from, if any: the reaper calls it once the worktree
// directory is gone. The record is the one named in the store; only a run
// without a recorded name (a create that died before recording it: no step
// ever ran) is looked up by what its gitdir points at. It reports whether
// it removed a record.
func ReleaseRun(ctx context.Context, st *store.Store, g fsguard.Guard, runID string) (bool, error) {
	project, record, err := st.RunMachine(ctx, runID)
	if err != nil || project == "" {
		return false, err
	}
	if record != "" {
		return RemoveRecord(g, project, record)
	}
	return ReleaseWorktree(g, project, runID)
}

// RemoveRecord removes the machine's .git/worktrees/<record>, confined to
// <root>/project_machines with os.Root: a symlink standing in for it is
// removed, not followed.
func RemoveRecord(g fsguard.Guard, project, record string) (bool, error) {
	if _, err := g.MachineDir(project); err != nil {
		return false, err
	}
	if record == "" || record == "." || record == ".." || strings.ContainsAny(record, "/\x00") {
		return false, fail.Refusedf("worktree record %q of project machine %s is not a name: refusing to derive a path from it", record, project)
	}
	root, err := g.OpenMachinesRoot()
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", g.MachinesDir(), err)
	}
	defer root.Close()
	name := project + "/repo/.git/worktrees/" + record
	if _, err := root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := root.RemoveAll(name); err != nil {
		return false, fmt.Errorf("remove worktree record %s of project machine %s: %w", record, project, err)
	}
	return true, nil
}

// ReleaseWorktree removes the machine's .git/worktrees/<name> of the run's
// worktree found by what its gitdir file names
// (<root>/runs/<run>/worktree/.git): for a run whose record's name was never
// stored. The removal is confined to
// <root>/project_machines with os.Root; it follows no symlink a sandbox
// planted in the machine's .git and touches no other run's record.
func ReleaseWorktree(g fsguard.Guard, project, runID string) (bool, error) {
	if _, err := g.MachineDir(project); err != nil {
		return false, err
	}
	if !fsguard.ValidID("run_", runID) {
		return false, fail.Refusedf("run id %q is malformed; refusing to derive a path from it", runID)
	}
	root, err := g.OpenMachinesRoot()
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", g.MachinesDir(), err)
	}
	defer root.Close()
	// The sandbox's to rewrite too: neither a link nor a FIFO is opened.
	wts, err := fsguard.OpenRoot(root, project+"/repo/.git/worktrees")
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open worktree records of project machine %s: %w", project, err)
	}
	defer wts.Close()
	entries, err := fs.ReadDir(wts.FS(), ".")
	if err != nil {
		return false, fmt.Errorf("read worktree records of project machine %s: %w", project, err)
	}
	suffix := "/runs/" + runID + "/worktree/.git"
	removed := false
	for _, e := range entries {
		if !e.IsDir() {
			continue // a symlink a sandbox planted is not a record
		}
		// The sandbox's to rewrite: a FIFO there must not hang the reaper.
		b, err := fsguard.ReadRegular(wts, e.Name()+"/gitdir", 4<<10)
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), suffix) {
			continue
		}
		if err := wts.RemoveAll(e.Name()); err != nil {
			return removed, fmt.Errorf("remove worktree record %s of project machine %s: %w", e.Name(), project, err)
		}
		removed = true
	}
	return removed, nil
}

// Files counts the files of the tree at commit: what a fresh worktree of
// it checks out.
func (c *Checkout) Files(ctx context.Context, commit string) (int, error) {
	out, err := gitcli.Run(ctx, nil, c.repoDir, "ls-tree", "-r", "-z", "--name-only", "--end-of-options", commit)
	if err != nil {
		return 0, fmt.Errorf("count the files of %s in project machine %s: %w", commit, c.Machine.Project, err)
	}
	return strings.Count(out, "\x00"), nil
}

// Changed counts the paths that differ between two commits of the machine:
// what a checkout from one to the other writes or deletes.
func (m *Manager) Changed(ctx context.Context, project, from, to string) (int, error) {
	repoDir, err := m.RepoDir(project)
	if err != nil {
		return 0, err
	}
	out, err := gitcli.Run(ctx, nil, repoDir, "diff-tree", "-r", "-z", "--no-renames", "--name-only", "--end-of-options", from, to)
	if err != nil {
		return 0, fmt.Errorf("compare %s and %s in project machine %s: %w", from, to, project, err)
	}
	return strings.Count(out, "\x00"), nil
}

// MoveWorktree checks out commit, detached, in a run's worktree of the
// machine: a pool entry claimed for another commit than its own. Only for
// a worktree no step has run in (a pool entry's, before the claim returns):
// git reads the worktree's record by the name stored at its creation, not
// by what the worktree's .git says. Files git writes are given to the
// worktree's owner (the sandbox user), as the first checkout was.
func (m *Manager) MoveWorktree(ctx context.Context, project, record, worktree, commit string) error {
	repoDir, err := m.RepoDir(project)
	if err != nil {
		return err
	}
	if record == "" || record == "." || record == ".." || strings.ContainsAny(record, "/\x00") {
		return fail.Refusedf("worktree record %q of project machine %s is not a name: refusing to derive a path from it", record, project)
	}
	if !IsCommitish(commit) {
		return fmt.Errorf("move worktree %s: %q is not a commit", worktree, commit)
	}
	gitDir := filepath.Join(repoDir, ".git", "worktrees", record)
	var st syscall.Stat_t
	if err := syscall.Lstat(worktree, &st); err != nil {
		return fmt.Errorf("move worktree %s: %w", worktree, err)
	}
	// The worktree may belong to the sandbox user, not to xmode: git
	// refuses such a repository unless told it is safe.
	if _, err := gitcli.Run(ctx, nil, worktree, "-c", "safe.directory="+worktree, "--git-dir", gitDir, "--work-tree", worktree,
		"checkout", "--quiet", "--detach", commit); err != nil {
		return fmt.Errorf("move worktree of project machine %s to %s: %w", project, commit, err)
	}
	if int(st.Uid) == os.Geteuid() && int(st.Gid) == os.Getegid() {
		return nil
	}
	for _, d := range []string{worktree, gitDir} {
		if err := fsguard.ChownTree(d, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("move worktree of project machine %s: %w", project, err)
		}
	}
	return nil
}
