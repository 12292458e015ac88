package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"modernc.org/sqlite"

	"github.com/xmode/xmode/storage"
)

// ReserveFile is <root>/xmode.reserve: space set aside so that the store
// can still record what happens when a sandbox has filled the disk — a
// step's end, a teardown — instead of leaving rows that say "running" for
// ever. It is given back when a write finds the disk full, and taken again
// once there is room.
const ReserveFile = "xmode.reserve"

// ReserveSize is the space the reserve holds: far more than the WAL frames
// of the writes that must get through.
const ReserveSize = 8 << 20

// keepReserve makes sure the reserve exists; without room for it, it stays
// absent until a later command finds room.
func keepReserve(root string) {
	path := filepath.Join(root, ReserveFile)
	if _, err := os.Lstat(path); err == nil {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, ReserveSize)
	f.Close()
	if err != nil {
		os.Remove(path)
	}
}

// releaseReserve frees the reserve; it reports whether there was one.
func (s *Store) releaseReserve() bool {
	return os.Remove(filepath.Join(s.guard.Root, ReserveFile)) == nil
}

// isFull reports SQLITE_FULL, or a disk-full errno.
func isFull(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == 13 {
		return true
	}
	return storage.IsDiskFull(err)
}

// isReadOnly reports SQLITE_READONLY and SQLITE_CANTOPEN.
func isReadOnly(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code()&0xff == 8 || se.Code()&0xff == 14)
}

// writeError says what a failed write means to a user: the disk is full,
// or the storage root is read-only.
func (s *Store) writeError(err error) error {
	switch {
	case err == nil:
		return nil
	case isFull(err):
		return storage.DiskFull(s.guard.Root, s.path, err)
	case isReadOnly(err) && storage.ReadOnly(s.guard.Root):
		return storage.WriteError(s.guard.Root, err)
	}
	return err
}

// exec runs one write. On a full disk it gives back the reserve and tries
// once more, so that the write that records a step's end or a teardown
// gets through.
func (s *Store) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil && isFull(err) && s.releaseReserve() {
		res, err = s.db.ExecContext(ctx, q, args...)
	}
	return res, s.writeError(err)
}
