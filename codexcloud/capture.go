package codexcloud

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/xmode/xmode/storage"
	"github.com/xmode/xmode/store"
)

// DiffCapturer freezes a finished task's diff for review and returns what it
// recorded (a change request's ID). The poller calls it once per task, before
// the session becomes ready; a capture that fails parks the task, and the
// session stays submitted.
type DiffCapturer interface {
	Capture(ctx context.Context, sess *store.Session, taskID string, patch []byte, title string) (id string, err error)
}

// PatchFile is the interim DiffCapturer, until the change-request package
// takes its place: it keeps the patch exactly as codex printed it, at
// runs/<run>/cloud/<task_id>/diff.patch, and returns that path relative to
// the storage root. It applies nothing and records no tree.
type PatchFile struct{ Guard storage.Guard }

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
