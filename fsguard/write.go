package fsguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
// had no room for: where, and what to remove. IsDiskFull knows it, whatever
// layer the cause came from (SQLITE_FULL included).
func DiskFull(root, path string, err error) error {
	return &fail.Error{Kind: fail.Failed, Err: &diskFull{msg: fmt.Sprintf("disk full on %s (%v): free space on the storage root's filesystem — stop idle sandboxes (`xmode sandbox stop ID`), run `xmode reap`, or remove old evidence under %s/runs/*/steps", path, err, root)}}
}

type diskFull struct{ msg string }

func (e *diskFull) Error() string        { return e.msg }
func (e *diskFull) Is(target error) bool { return target == syscall.ENOSPC }

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
		return fail.Failedf("storage root %s is read-only (%v): point %s or XMODE_STORAGE_ROOT at a writable directory", root, err, fail.StorageRoot)
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

// Free is the space an unprivileged writer may still use on dir's
// filesystem.
func Free(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// Full reports whether dir's filesystem has less than min bytes free: too
// little for the next write to be sure of room. A filesystem that cannot
// be asked is not full.
func Full(dir string, min int64) bool {
	free, err := Free(dir)
	return err == nil && free < min
}

// CheckFree refuses work that would start with less than min bytes free on
// the storage root's filesystem (XMODE_MIN_FREE; 0 turns it off).
func (g Guard) CheckFree(min int64, what string) error {
	if min <= 0 {
		return nil
	}
	free, err := Free(g.Root)
	if err != nil {
		return err
	}
	if free < min {
		return fail.Refusedf("%s: only %d MiB free on the storage root's filesystem (%s), below XMODE_MIN_FREE (%d MiB): stop idle sandboxes (%s), run `xmode reap`, or remove old evidence under %s/runs/*/steps",
			what, free>>20, g.Root, min>>20, fail.Do("sandbox stop").Some("ID"), g.Root)
	}
	return nil
}

// DiskUsage is the space dir's files take on disk (like du -s), walked
// without following symlinks.
func DiskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	return total, err
}

// AllowsSetuid reports whether dir's filesystem honours setuid bits (it is
// not mounted nosuid).
func AllowsSetuid(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	return st.Flags&unix.ST_NOSUID == 0, nil
}
