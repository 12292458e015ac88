package codexcloud

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// The poller's tests capture diffs verbatim: they are about the poller, not
// about change requests (cmd/xmode's cloud scripts cover the real capture).

// PatchFile keeps the patch exactly as codex printed it, at
// runs/<run>/cloud/<task_id>/diff.patch, and returns that path relative to
// the storage root. It applies nothing and records no tree.
type PatchFile struct{ Guard fsguard.Guard }

// Capture writes the patch atomically (a crash leaves the old file or the
// new one, never half), so capturing again after a crash is harmless. It
// writes through an os.Root on the run directory: a link planted there
// cannot lead the write outside it.
func (p PatchFile) Capture(_ context.Context, sess *store.Session, taskID string, patch []byte, _ string) (string, error) {
	if !ValidTaskID(taskID) {
		return "", fmt.Errorf("capture the diff of %q: not a task ID", taskID)
	}
	runDir, err := p.Guard.RunDir(sess.RunID)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return "", fmt.Errorf("capture the diff of %s: %w", taskID, err)
	}
	root, err := os.OpenRoot(runDir)
	if err != nil {
		return "", fmt.Errorf("capture the diff of %s: %w", taskID, err)
	}
	defer root.Close()
	dir := filepath.Join("cloud", taskID)
	name := filepath.Join(dir, "diff.patch")
	tmp := filepath.Join(dir, ".diff.patch.tmp")
	err = root.MkdirAll(dir, 0o755)
	if err == nil {
		err = writeSynced(root, tmp, patch)
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return "", fmt.Errorf("capture the diff of %s: %w", taskID, err)
	}
	return filepath.Join("runs", sess.RunID, name), nil
}

func writeSynced(root *os.Root, name string, data []byte) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
