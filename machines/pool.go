package machines

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/store"
)

// What project machines know of their pools (docs/project-machines.md,
// "The pool"): its size, the entries `machine show` lists, and how a
// claimed entry's worktree moves to another commit. Making and retiring
// entries is package sandbox's and the reaper's.

// PoolSize is the number of ready sandboxes the machine's pool keeps: what
// `machine warm --pool N` set, else XMODE_POOL_SIZE.
func PoolSize(mach *store.Machine, defaultSize int) int {
	if mach != nil && mach.PoolSize != nil {
		return *mach.PoolSize
	}
	return defaultSize
}

// PoolView is a machine's pool as `machine show` prints it.
type PoolView struct {
	Size    int             `json:"size"`
	Ready   int             `json:"ready"`
	Entries []PoolEntryView `json:"entries"`
}

// PoolEntryView is one entry: how old it is and what it holds.
type PoolEntryView struct {
	store.PoolEntry
	AgeSeconds int64 `json:"age_seconds"`
	// Behind: at another commit than the machine's (after a refresh).
	Behind bool `json:"behind"`
}

func (m *Manager) poolView(ctx context.Context, mach *store.Machine) (PoolView, error) {
	v := PoolView{Entries: []PoolEntryView{}}
	if m.Cfg != nil {
		v.Size = PoolSize(mach, m.Cfg.PoolSize)
	}
	entries, err := m.Store.PoolEntries(ctx, mach.Project)
	if err != nil {
		return v, err
	}
	now := m.now()
	for _, e := range entries {
		if e.State == store.PoolReady {
			v.Ready++
		}
		v.Entries = append(v.Entries, PoolEntryView{PoolEntry: *e, AgeSeconds: int64(now.Sub(e.CreatedAt) / time.Second),
			Behind: e.State == store.PoolReady && e.Commit != mach.HeadCommit})
	}
	return v, nil
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
