package fsguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/xmode/xmode/fail"
)

// MachinesDirName is the directory of project machines in the storage root.
const MachinesDirName = "project_machines"

// ValidProject reports whether id is a project ID: 1 to 63 lowercase
// letters, digits, '-', '_' or '.', not starting with '.'. Such an ID is one
// path component that is never "." or "..", and a valid docker volume name
// suffix, so paths and volumes derived from it cannot escape.
func ValidProject(id string) bool {
	if id == "" || len(id) > 63 || id[0] == '.' {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// MachinesDir is <root>/project_machines.
func (g Guard) MachinesDir() string { return filepath.Join(g.Root, MachinesDirName) }

// MachineDir is <root>/project_machines/<project>.
func (g Guard) MachineDir(project string) (string, error) {
	if !ValidProject(project) {
		return "", fail.Usagef("project %q is not a project ID: use 1 to 63 lowercase letters, digits, '-', '_' or '.', not starting with '.'", project)
	}
	return filepath.Join(g.MachinesDir(), project), nil
}

// OpenMachinesRoot opens <root>/project_machines as an os.Root, so that what
// the machines package removes inside a machine (worktree records, leftovers
// of an interrupted clone) cannot leave it, whatever symlinks a sandboxed
// command planted in a machine's .git.
func (g Guard) OpenMachinesRoot() (*os.Root, error) {
	return os.OpenRoot(g.MachinesDir())
}

// RemoveMachine deletes <root>/project_machines/<project> and nothing else,
// confined with os.Root like RemoveWorktree. It reports whether there was
// anything to remove.
func (g Guard) RemoveMachine(project string) (bool, error) {
	if _, err := g.MachineDir(project); err != nil {
		return false, err
	}
	return removeIn(g.MachinesDir(), project, "project machine")
}

// removeIn deletes dir/name (a name the caller derived from an ID) and
// nothing else, confined with os.Root: a symlink in its place is removed,
// not followed. It reports whether there was anything to remove.
func removeIn(dir, name, what string) (bool, error) {
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", dir, err)
	}
	defer root.Close()
	if _, err := root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := root.RemoveAll(name); err != nil {
		return false, fmt.Errorf("remove %s %s: %w", what, name, err)
	}
	return true, nil
}

// RecordOverlay is the directory, inside a project-machine worktree's
// record (.git/worktrees/<name>/), that holds what git writes from inside a
// docker sandbox instead of the machine: objects/ (the machine's objects its
// alternate), refs/ (a copy of the machine's refs at create) and logs/. The
// sandbox sees them where git looks (the machine's objects, refs and logs);
// the machine itself stays read-only. Teardown removes it with the record.
const RecordOverlay = "xmode"

// MachineObjectsMount is where a docker sandbox sees the machine's own
// objects, read-only: the alternate of the run's objects.
const MachineObjectsMount = "/xmode/machine-objects"
