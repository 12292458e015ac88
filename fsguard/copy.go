package fsguard

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
)

// Copied says what CopyTree did.
type Copied struct {
	Files, Dirs, Links int
	Bytes              int64
	// Skipped lists what is neither a file, a directory nor a symlink (a
	// FIFO, a device, a socket): never opened, never copied.
	Skipped []string
}

// CopyOptions tune CopyTree.
type CopyOptions struct {
	// Chown gives every entry created this owner (uid, gid), when set.
	Chown *[2]int
}

// CopyTree copies srcName in src to dstName in dst: a file, a directory
// with everything in it, or a symlink (as a link, never followed), like
// `docker cp`. Every read and write goes through the two os.Roots, so
// nothing outside either is touched, whatever links the tree holds or
// gains meanwhile; an existing file or link at a destination is replaced,
// never written through. Modes are kept without setuid, setgid and sticky
// bits, and modification times are kept.
func CopyTree(src *os.Root, srcName string, dst *os.Root, dstName string, o CopyOptions) (Copied, error) {
	var c Copied
	err := copyEntry(src, srcName, dst, dstName, o, &c)
	return c, err
}

func copyEntry(src *os.Root, sn string, dst *os.Root, dn string, o CopyOptions, c *Copied) error {
	info, err := src.Lstat(sn)
	if err != nil {
		return err
	}
	switch mode := info.Mode(); {
	case mode.IsDir():
		return copyDir(src, sn, dst, dn, info, o, c)
	case mode&fs.ModeSymlink != 0:
		target, err := src.Readlink(sn)
		if err != nil {
			return err
		}
		if err := clearPath(dst, dn); err != nil {
			return err
		}
		if err := dst.Symlink(target, dn); err != nil {
			return err
		}
		c.Links++
		return chown(dst, dn, o)
	case mode.IsRegular():
		return copyFile(src, sn, dst, dn, info, o, c)
	}
	c.Skipped = append(c.Skipped, sn)
	return nil
}

func copyDir(src *os.Root, sn string, dst *os.Root, dn string, info fs.FileInfo, o CopyOptions, c *Copied) error {
	if st, err := dst.Lstat(dn); err == nil && !st.IsDir() {
		return fmt.Errorf("cannot copy directory %s over %s, which is not a directory", sn, dn)
	} else if errors.Is(err, fs.ErrNotExist) {
		// Writable by us while it fills; its own mode comes last.
		if err := dst.Mkdir(dn, 0o700); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	entries, err := ReadDir(src, sn)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := copyEntry(src, path.Join(sn, e.Name()), dst, path.Join(dn, e.Name()), o, c); err != nil {
			return err
		}
	}
	c.Dirs++
	if err := chown(dst, dn, o); err != nil {
		return err
	}
	if err := dst.Chmod(dn, info.Mode().Perm()); err != nil {
		return err
	}
	return dst.Chtimes(dn, info.ModTime(), info.ModTime())
}

func copyFile(src *os.Root, sn string, dst *os.Root, dn string, info fs.FileInfo, o CopyOptions, c *Copied) error {
	// Not a link nor a FIFO swapped in meanwhile.
	in, err := OpenRegular(src, sn)
	if nr := (*NotRegularError)(nil); errors.As(err, &nr) {
		return fmt.Errorf("%s changed while it was copied (it is now %s)", sn, nr.Kind)
	}
	if err != nil {
		return err
	}
	defer in.Close()
	if err := clearPath(dst, dn); err != nil {
		return err
	}
	out, err := dst.OpenFile(dn, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Chmod(info.Mode().Perm())
	}
	if err == nil && o.Chown != nil {
		err = out.Chown(o.Chown[0], o.Chown[1])
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	c.Files++
	c.Bytes += n
	return dst.Chtimes(dn, info.ModTime(), info.ModTime())
}

// clearPath removes what is at name in dst unless it is a directory (which a
// file or link may not replace) or nothing.
func clearPath(dst *os.Root, name string) error {
	st, err := dst.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("cannot replace directory %s with a file", name)
	}
	return dst.Remove(name)
}

func chown(dst *os.Root, name string, o CopyOptions) error {
	if o.Chown == nil {
		return nil
	}
	return dst.Lchown(name, o.Chown[0], o.Chown[1])
}
