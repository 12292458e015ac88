package storage

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/fail"
)

// IsDiskFull reports a write that failed for want of space (ENOSPC) or
// quota (EDQUOT).
func IsDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// DiskFull is the one message for a write the storage root's filesystem
// had no room for: where, and what to remove.
func DiskFull(root, path string, err error) error {
	return fail.Failedf("disk full on %s (%v): free space on the storage root's filesystem — stop idle sandboxes (`xmode sandbox stop ID`), run `xmode reap`, or remove old evidence under %s/runs/*/steps", path, err, root)
}

// WriteError turns a failed write under the storage root into the message
// a user can act on: disk full, or a read-only root; other errors pass.
func WriteError(root string, err error) error {
	if err == nil {
		return nil
	}
	var pe *os.PathError
	path := root
	if errors.As(err, &pe) {
		path = pe.Path
	}
	switch {
	case IsDiskFull(err):
		return DiskFull(root, path, err)
	case errors.Is(err, syscall.EROFS) || ReadOnly(root):
		return fail.Failedf("storage root %s is read-only (%v): point --storage-root or XMODE_STORAGE_ROOT at a writable directory", root, err)
	}
	return err
}

// ReadOnly reports whether dir sits on a read-only filesystem, or is one
// this process may not write.
func ReadOnly(dir string) bool {
	return unix.Access(dir, unix.W_OK) != nil
}

// MkdirRoot creates the storage root if it does not exist.
func MkdirRoot(root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return WriteError(root, fmt.Errorf("create storage root: %w", err))
	}
	return nil
}
