package machines

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/xmode/xmode/fail"
)

// LockFile is the name of a machine's lock file, beside its repo/.
const LockFile = "lock"

// machineLock is an exclusive flock(2) on <machine>/lock, held by every git
// operation xmode runs on the machine that writes it: clone, fetch, `git
// worktree add` (concurrent adds are not safe: each reads every other's
// half-written .git/worktrees/<name> and fails on it) and rm. The kernel
// drops it when the holder dies, however it dies, so a killed xmode never
// leaves a machine locked.
type machineLock struct{ f *os.File }

// errGone: the machine was removed while we waited for its lock.
var errGone = errors.New("project machine removed")

// lockMachine waits for the lock of the machine in dir, polling so that ctx
// (Ctrl-C) can end the wait; after a second it says once on wait what it
// is waiting for.
func lockMachine(ctx context.Context, dir, project string, wait io.Writer) (*machineLock, error) {
	path := filepath.Join(dir, LockFile)
	start, delay, announced := time.Now(), time.Millisecond, false
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errGone
		}
		if err != nil {
			return nil, fmt.Errorf("open lock of project machine %s: %w", project, err)
		}
		for {
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				break
			}
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				f.Close()
				return nil, fmt.Errorf("lock project machine %s: %w", project, err)
			}
			if wait != nil && !announced && time.Since(start) > time.Second {
				fmt.Fprintf(wait, "waiting for project machine %s: another xmode is using it…\n", project)
				announced = true
			}
			select {
			case <-ctx.Done():
				f.Close()
				return nil, ctx.Err()
			case <-time.After(delay):
			}
			delay = min(2*delay, 50*time.Millisecond)
		}
		// `machine rm` deletes the lock file while holding it: a lock on an
		// unlinked file protects nothing, so check we hold the one on disk.
		var held, onDisk syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &held); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock project machine %s: %w", project, err)
		}
		err = syscall.Stat(path, &onDisk)
		if err == nil && held.Dev == onDisk.Dev && held.Ino == onDisk.Ino {
			return &machineLock{f: f}, nil
		}
		f.Close()
		if errors.Is(err, syscall.ENOENT) {
			return nil, errGone
		}
		if err != nil {
			return nil, fmt.Errorf("lock project machine %s: %w", project, err)
		}
	}
}

// tryLockMachine takes the lock of the machine in dir if it is free now;
// nil (no error) when another process holds it.
func tryLockMachine(dir string) (*machineLock, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, err
	}
	return &machineLock{f: f}, nil
}

// unlock releases the lock; calling it again does nothing.
func (l *machineLock) unlock() {
	if l != nil && l.f != nil {
		l.f.Close() // closing the only descriptor releases the flock
		l.f = nil
	}
}

func gone(project string) error {
	return fail.NotFoundf("project machine %s was removed meanwhile: warm it again with `xmode machine warm %s --repo URL`", project, project)
}
