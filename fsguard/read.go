package fsguard

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// NotRegularError is a path that names something other than a regular
// file: xmode reads only regular files from where a sandbox could have
// written, so that a FIFO cannot block it, a device cannot feed it without
// end and a link cannot lead it elsewhere.
type NotRegularError struct {
	Path string
	Kind string // "a FIFO", "a directory", "a symlink", …
}

func (e *NotRegularError) Error() string { return e.Path + " is " + e.Kind }

// Symlink reports a link where a file was expected.
func (e *NotRegularError) Symlink() bool { return e.Kind == kindSymlink }

const kindSymlink = "a symlink"

// kindOf names what a mode is, for a message.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFLNK:
		return kindSymlink
	}
	return "not a regular file"
}

// OpenRegular opens name (slash-separated, relative to root) for reading,
// the one way xmode opens a file a sandbox could have written (a worktree's
// xmode.yaml or .git, a machine's worktree records, what `sandbox cp`
// copies out, a step's evidence): its directory through root, so nothing
// leads out of it; the file itself with O_NOFOLLOW (os.Root would follow a
// final link that stays inside) and O_NONBLOCK, so a FIFO put in its place
// cannot block the open; then fstat, and anything but a regular file is a
// *NotRegularError. The file returned is in blocking mode again.
func OpenRegular(root *os.Root, name string) (*os.File, error) {
	dir, base := path.Split(path.Clean(name))
	if dir == "" {
		dir = "."
	}
	if base == "" || base == "." || base == ".." || base == "/" {
		return nil, &NotRegularError{Path: name, Kind: "a directory"}
	}
	// O_DIRECTORY: a FIFO standing in for a directory fails at once too.
	d, err := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, &NotRegularError{Path: path.Clean(dir), Kind: "not a directory"}
		}
		return nil, err
	}
	defer d.Close()
	return openRegularAt(d, base, name)
}

// OpenRegularAt is OpenRegular for a file directly in an open directory
// (a walk that holds its directories' descriptors).
func OpenRegularAt(dir *os.File, name string) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("%q is not a name in a directory", name)
	}
	return openRegularAt(dir, name, path.Join(dir.Name(), name))
}

// openRegularAt opens base in dir, named display in errors.
func openRegularAt(dir *os.File, base, display string) (*os.File, error) {
	rc, err := dir.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var oerr error
	if err := rc.Control(func(dfd uintptr) {
		for {
			fd, oerr = unix.Openat(int(dfd), base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if oerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return nil, err
	}
	if oerr != nil {
		if oerr == unix.ELOOP {
			return nil, &NotRegularError{Path: display, Kind: kindSymlink}
		}
		return nil, &fs.PathError{Op: "open", Path: display, Err: oerr}
	}
	return regular(fd, display)
}

// OpenRegularPath opens a file the user named on the command line (a plan
// given by -f) with the same checks as OpenRegular, except that a link is
// followed, as any tool follows the paths it is given.
func OpenRegularPath(name string) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return regular(fd, name)
}

// regular checks that fd is a regular file, clears O_NONBLOCK (meaningless
// for a regular file, but what is read later should not inherit it) and
// wraps it; it closes fd on failure.
func regular(fd int, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &NotRegularError{Path: name, Kind: kindOf(st.Mode)}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// OpenRegularSized is OpenRegular that also gives the file's size (from
// the opened file, so it is the size of what is read).
func OpenRegularSized(root *os.Root, name string) (*os.File, int64, error) {
	f, err := OpenRegular(root, name)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// ReadRegular reads name under root (OpenRegular) whole; a file larger than
// max bytes is an error rather than a partial read, refused from its size
// before anything is read.
func ReadRegular(root *os.Root, name string, max int64) ([]byte, error) {
	f, size, err := OpenRegularSized(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, max)
	}
	return ReadBounded(f, name, max)
}

// ReadBounded reads r to its end, refusing more than max bytes.
func ReadBounded(r io.Reader, name string, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, max)
	}
	return b, nil
}

// OpenRoot opens the directory name under parent as an os.Root, refusing at
// once what is not a directory: os.Root's own open blocks on a FIFO put in
// a directory's place, and follows a final link that stays inside. The
// directory is opened O_DIRECTORY|O_NOFOLLOW|O_NONBLOCK and the root made
// from that very descriptor, so nothing swapped in meanwhile is opened
// instead.
func OpenRoot(parent *os.Root, name string) (*os.Root, error) {
	dir, base := path.Split(path.Clean(name))
	if dir == "" {
		dir = "."
	}
	if base == "." {
		return parent.OpenRoot(".")
	}
	d, err := parent.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, &NotRegularError{Path: path.Clean(dir), Kind: "not a directory"}
		}
		return nil, err
	}
	defer d.Close()
	return openRootAt(d, base, name)
}

// OpenRootAt is OpenRoot for a directory directly in an open directory (a
// walk that holds its directories' descriptors).
func OpenRootAt(dir *os.File, name string) (*os.Root, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("%q is not a name in a directory", name)
	}
	return openRootAt(dir, name, path.Join(dir.Name(), name))
}

// OpenRootPath is OpenRoot for a directory xmode names by its path (a
// worktree the guard derived): a host step could have put a FIFO there.
func OpenRootPath(dir string) (*os.Root, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, notDir(unix.AT_FDCWD, dir, dir, err)
	}
	return rootOf(fd, dir)
}

func openRootAt(dir *os.File, base, display string) (*os.Root, error) {
	fd, err := openDirAt(dir, base, display)
	if err != nil {
		return nil, err
	}
	return rootOf(fd, display)
}

// OpenDir opens the directory name under root as a file (to fstat or
// chmod it through its descriptor), with the checks of OpenRoot: a link or a
// FIFO in its place fails at once.
func OpenDir(root *os.Root, name string) (*os.File, error) {
	dir, base := path.Split(path.Clean(name))
	if dir == "" {
		dir = "."
	}
	d, err := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil || base == "." {
		return d, err
	}
	defer d.Close()
	fd, err := openDirAt(d, base, name)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// OpenDirAt opens the directory name directly in an open directory, with
// the checks of OpenDir: a link (even one that stays inside), a FIFO or a
// file in its place fails at once with a *NotRegularError saying what is
// there. A walk that takes a path one component at a time through it
// follows no link at all.
func OpenDirAt(dir *os.File, name string) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("%q is not a name in a directory", name)
	}
	fd, err := openDirAt(dir, name, path.Join(dir.Name(), name))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path.Join(dir.Name(), name)), nil
}

// RootOf is an os.Root of the open directory dir (through its
// /proc/self/fd link, so of that very directory); dir stays open.
func RootOf(dir *os.File) (*os.Root, error) {
	fd, err := unix.FcntlInt(dir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "dup", Path: dir.Name(), Err: err}
	}
	return rootOf(fd, dir.Name())
}

// openDirAt opens the directory base in dir O_DIRECTORY|O_NOFOLLOW|
// O_NONBLOCK: a FIFO or a link in its place fails at once.
func openDirAt(dir *os.File, base, display string) (int, error) {
	rc, err := dir.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var oerr error
	if err := rc.Control(func(dfd uintptr) {
		for {
			fd, oerr = unix.Openat(int(dfd), base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if oerr != unix.EINTR {
				break
			}
		}
		if oerr != nil {
			oerr = notDir(int(dfd), base, display, oerr)
		}
	}); err != nil {
		return -1, err
	}
	return fd, oerr
}

// notDir turns a failed O_DIRECTORY|O_NOFOLLOW open into a NotRegularError
// that says what is there instead, or a PathError.
func notDir(dirfd int, name, display string, err error) error {
	if err == unix.ENOTDIR || err == unix.ELOOP {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return &NotRegularError{Path: display, Kind: kindOf(st.Mode) + ", not a directory"}
		}
	}
	return &fs.PathError{Op: "open", Path: display, Err: err}
}

// rootOf makes an os.Root of the directory fd refers to, through its
// /proc/self/fd link (which names the open directory, not a path that could
// have been replaced), and closes fd.
func rootOf(fd int, display string) (*os.Root, error) {
	defer unix.Close(fd)
	r, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", display, err)
	}
	return r, nil
}

// ReadDir lists the directory name under root, sorted by name, refusing at
// once anything but a directory: fs.ReadDir would block on a FIFO in its
// place, and follow a link.
func ReadDir(root *os.Root, name string) ([]fs.DirEntry, error) {
	clean := path.Clean(name)
	var f *os.File
	if clean == "." {
		var err error
		if f, err = root.OpenFile(".", os.O_RDONLY|syscall.O_DIRECTORY, 0); err != nil {
			return nil, err
		}
	} else {
		dir, base := path.Split(clean)
		if dir == "" {
			dir = "."
		}
		d, err := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, err
		}
		fd, err := openDirAt(d, base, name)
		d.Close()
		if err != nil {
			return nil, err
		}
		f = os.NewFile(uintptr(fd), name)
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	return entries, err
}

// ReadExactly reads size bytes of r and insists the stream ends there;
// memory grows with what arrives (doubling, never past size), not with
// what a header or a stat claims.
func ReadExactly(r io.Reader, size int64) ([]byte, error) {
	eof := func(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) }
	b := make([]byte, 0, min(size, 1<<20))
	for int64(len(b)) < size {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(size, 2*int64(cap(b))))
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if eof(err) && int64(len(b)) < size {
			return nil, fmt.Errorf("content is %d bytes, header says %d", len(b), size)
		}
		if err != nil && !eof(err) {
			return nil, err
		}
	}
	var one [1]byte
	n, err := io.ReadFull(r, one[:])
	if n > 0 {
		return nil, fmt.Errorf("content is more than the %d bytes its header says", size)
	}
	if err != nil && !eof(err) {
		return nil, err
	}
	return b, nil
}
