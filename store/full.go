package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"

	"golang.org/x/sys/unix"
	"modernc.org/sqlite"

	"github.com/xmode/xmode/fsguard"
)

// ReserveFile is <root>/xmode.reserve: space set aside so that the store
// can still record what happens when a sandbox has filled the disk — a
// step's end, a teardown — instead of leaving rows that say "running" for
// ever. A write that finds the disk full gives back one ReserveChunk of it
// and tries again, so one full disk costs one chunk, not the reserve, and
// a second or third fill before anything is freed is still recorded; the
// reserve is made whole again once there is room (keepReserve).
const ReserveFile = "xmode.reserve"

// ReserveSize is the space the reserve holds: far more than the WAL frames
// of the writes that must get through.
const ReserveSize = 8 << 20

// ReserveChunk is what one write that found the disk full takes from the
// reserve: a step's end or a teardown needs a few pages of WAL, a
// result.json one block.
const ReserveChunk = 1 << 20

// keepReserve makes the reserve whole when there is room for it and a
// chunk to spare; without, it stays as it is until a later open or
// teardown finds room. A whole reserve costs one lstat: this runs at every
// open of the store.
func keepReserve(root string) {
	path := filepath.Join(root, ReserveFile)
	var st unix.Stat_t
	have := int64(0)
	if err := unix.Lstat(path, &st); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return // not ours to touch
		}
		if st.Size >= ReserveSize {
			return
		}
		have = st.Size
	}
	if free, err := fsguard.Free(root); err != nil || free < ReserveSize-have+ReserveChunk {
		return
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if err := unix.Fallocate(fd, 0, 0, ReserveSize); err != nil {
		// Give back what a failed allocation may have taken.
		if have == 0 {
			unix.Unlink(path)
		} else {
			unix.Ftruncate(fd, have)
		}
	}
}

// KeepReserve makes the reserve whole again if there is room: after a
// teardown has freed space, not only at the next open.
func (s *Store) KeepReserve() { keepReserve(s.guard.Root) }

// releaseReserve gives back one ReserveChunk of the reserve; it reports
// whether there was any left.
func (s *Store) releaseReserve() bool {
	path := filepath.Join(s.guard.Root, ReserveFile)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	if st.Size <= ReserveChunk {
		return unix.Unlink(path) == nil && st.Size > 0
	}
	return unix.Ftruncate(fd, st.Size-ReserveChunk) == nil
}

// MakeRoom gives back one chunk of the reserve for a small write outside
// the store that must get through on a full disk (a step's result.json);
// it reports whether there was any left to give.
func (s *Store) MakeRoom() bool { return s.releaseReserve() }

// isFull reports SQLITE_FULL, or a disk-full errno.
func isFull(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == 13 {
		return true
	}
	return fsguard.IsDiskFull(err)
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
		return fsguard.DiskFull(s.guard.Root, s.path, err)
	case isReadOnly(err) && fsguard.ReadOnly(s.guard.Root):
		return fsguard.WriteError(s.guard.Root, err)
	}
	return err
}

// reserveTries bounds the chunks one write may take from the reserve: a
// sandbox still filling the disk must not drain it through one statement.
const reserveTries = 2

// exec runs one write. On a full disk it gives back a chunk of the reserve
// and tries again, so that the write that records a step's end or a
// teardown gets through.
func (s *Store) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := s.db.ExecContext(ctx, q, args...)
	for i := 0; i < reserveTries && err != nil && isFull(err) && s.releaseReserve(); i++ {
		res, err = s.db.ExecContext(ctx, q, args...)
	}
	return res, s.writeError(err)
}

// execNoReserve runs a write that may fail on a full disk without costing
// the reserve: one that is repeated anyway (a heartbeat) while a sandbox
// may still be filling the disk.
func (s *Store) execNoReserve(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := s.db.ExecContext(ctx, q, args...)
	return res, s.writeError(err)
}
