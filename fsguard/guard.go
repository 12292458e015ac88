// Package fsguard guards xmode's file system access under the storage root
// (not to be confused with store, the SQLite store): the root's layout and
// its one path guard — every path xmode writes or deletes under the root is
// derived here from IDs, and every path a database row or a sandbox claims is
// checked here — and the one way to open, read, copy and remove what a
// sandbox could have written.
package fsguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/xmode/xmode/fail"
)

// Guard is the storage-root path guard: the one place that derives the paths
// xmode writes and deletes, and refuses any that would leave the root.
// Paths come from IDs, never from what the database or a sandbox claims.
type Guard struct {
	Root string // absolute, cleaned storage root
}

// ValidID reports whether id is prefix + lowercase base32 — the only shape
// of run and session IDs, so an ID can never carry a path separator or "..".
func ValidID(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) < 8 || len(rest) > 32 {
		return false
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}

// Modes of what xmode creates under the root: runs/ and runs/<run> may be
// traversed (a sandbox reaches its worktree through them where the engine
// mounts the whole storage volume) but not listed; evidence and the store
// are for the owner alone (a step's output and --env values are there).
const (
	RunDirMode      = 0o711
	EvidenceDirMode = 0o700
)

// RunsDir is <root>/runs.
func (g Guard) RunsDir() string { return filepath.Join(g.Root, "runs") }

// RunDir is <root>/runs/<run>.
func (g Guard) RunDir(runID string) (string, error) {
	if !ValidID("run_", runID) {
		return "", fail.Refusedf("run id %q is malformed; refusing to derive a path from it", runID)
	}
	return filepath.Join(g.RunsDir(), runID), nil
}

// Worktree is <root>/runs/<run>/worktree.
func (g Guard) Worktree(runID string) (string, error) {
	d, err := g.RunDir(runID)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "worktree"), nil
}

// CheckWorktree verifies a stored worktree path: it must be exactly the path
// derived from the run. A tampered row is refused, not followed.
func (g Guard) CheckWorktree(runID, claimed string) (string, error) {
	want, err := g.Worktree(runID)
	if err != nil {
		return "", err
	}
	if claimed != "" && filepath.Clean(claimed) != want {
		return "", fail.Refusedf("worktree path %q of run %s is not %s: refusing to touch a path the storage root does not own", claimed, runID, want)
	}
	return want, nil
}

// Within refuses a path outside the storage root (lexically and after
// resolving symlinks of the part that exists).
func (g Guard) Within(path string) error {
	if !isUnder(g.Root, filepath.Clean(path)) {
		return fail.Refusedf("%s is outside the storage root %s", path, g.Root)
	}
	realRoot, err := filepath.EvalSymlinks(g.Root)
	if err != nil {
		return fmt.Errorf("resolve storage root: %w", err)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil && !isUnder(realRoot, real) {
		return fail.Refusedf("%s resolves to %s, outside the storage root %s", path, real, g.Root)
	}
	return nil
}

// Contains reports whether path is the storage root or inside it, lexically
// or once the symlinks of its existing part are resolved.
func (g Guard) Contains(path string) bool {
	if isUnder(g.Root, filepath.Clean(path)) {
		return true
	}
	realRoot, err := filepath.EvalSymlinks(g.Root)
	if err != nil {
		return false
	}
	real, err := filepath.EvalSymlinks(path)
	return err == nil && isUnder(realRoot, real)
}

// RemoveWorktree deletes <root>/runs/<run>/worktree and nothing else (but
// a run left with nothing else in it: see below). The
// removal is confined with os.Root, so a worktree a sandboxed command replaced
// with a symlink, or filled with symlinks to outside files, only loses the
// links. It reports whether there was anything to remove.
func (g Guard) RemoveWorktree(runID string) (bool, error) {
	if _, err := g.RunDir(runID); err != nil {
		return false, err
	}
	root, err := os.OpenRoot(g.RunsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", g.RunsDir(), err)
	}
	defer root.Close()
	// A run left with nothing in it (no step ran: a create that failed, a
	// pool entry never claimed) goes too; Remove only ever removes an empty
	// directory, so a run with evidence keeps it. Its object store alone
	// is not kept: without a change request it only caches the worktree
	// (the create seeds it).
	defer func() {
		if onlyObjectStore(root, runID) {
			_ = root.RemoveAll(runID + "/" + runObjectStore)
		}
		_ = root.Remove(runID) // not empty: evidence stays
	}()
	name := runID + "/worktree"
	if _, err := root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := root.RemoveAll(name); err != nil {
		return false, fmt.Errorf("remove worktree of %s: %w", runID, err)
	}
	return true, nil
}

// runObjectStore is the run's object store (changes.StoreDirName).
const runObjectStore = "objects.git"

// onlyObjectStore reports a run directory that holds its object store and
// nothing else: no worktree, no evidence, no change request.
func onlyObjectStore(runs *os.Root, runID string) bool {
	d, err := runs.Open(runID)
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.Readdirnames(3)
	return err == nil && len(names) == 1 && names[0] == runObjectStore
}

// ResolveWorkdir turns --workdir (relative to the worktree) into a path that
// stays inside it, also after symlinks in the worktree are followed.
func ResolveWorkdir(worktree, rel string) (string, error) {
	if rel == "" || rel == "." {
		return worktree, nil
	}
	if filepath.IsAbs(rel) {
		return "", fail.Usagef("%s %q must be relative to the worktree", fail.Workdir, rel)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fail.Usagef("%s %q escapes the worktree", fail.Workdir, rel)
	}
	dir := filepath.Join(worktree, clean)
	realTree, err := filepath.EvalSymlinks(worktree)
	if err != nil {
		return "", fmt.Errorf("resolve worktree: %w", err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fail.Usagef("%s %q: no such directory in the worktree", fail.Workdir, rel)
	}
	if !isUnder(realTree, real) {
		return "", fail.Usagef("%s %q escapes the worktree through a symlink", fail.Workdir, rel)
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		return "", fail.Usagef("%s %q is not a directory", fail.Workdir, rel)
	}
	return dir, nil
}

func isUnder(root, path string) bool {
	if path == root {
		return true
	}
	return strings.HasPrefix(path, strings.TrimSuffix(root, "/")+"/")
}
