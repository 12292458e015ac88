package fsguard

import (
	"path/filepath"

	"github.com/xmode/xmode/fail"
)

// SnapshotsDir is <root>/snapshots: what `sandbox snapshot` keeps of a
// session without a running sandbox, one directory per snapshot.
func (g Guard) SnapshotsDir() string { return filepath.Join(g.Root, "snapshots") }

// SnapshotDir is <root>/snapshots/<snapshot>.
func (g Guard) SnapshotDir(id string) (string, error) {
	if !ValidID("snp_", id) {
		return "", fail.Refusedf("snapshot id %q is malformed; refusing to derive a path from it", id)
	}
	return filepath.Join(g.SnapshotsDir(), id), nil
}

// RemoveSnapshot deletes <root>/snapshots/<snapshot> and nothing else,
// confined with os.Root (a symlink put in its place is removed, not
// followed). It reports whether there was anything to remove.
func (g Guard) RemoveSnapshot(id string) (bool, error) {
	if _, err := g.SnapshotDir(id); err != nil {
		return false, err
	}
	return removeIn(g.SnapshotsDir(), id, "snapshot")
}
