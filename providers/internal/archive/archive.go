// Package archive is the worktree copy both providers that work on a copy
// of it share (docker's sync mode, the kubernetes engine): a tar of the
// host's worktree made without following a link, and the copy a sandbox
// sends back, which is hostile input — unpacked within a size limit,
// confined with os.Root, every name and link checked, swapped in only when
// all of it was accepted.
package archive

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// WriteTree writes dir's sub (".": all of it) as a tar whose entries are
// "worktree/<path>":
// directories, regular files and symlinks (as links), nothing else; modes
// without setuid, setgid or sticky bits; owned by uid:gid. The walk and
// every open stay inside dir (os.Root) and follow no symlink.
func WriteTree(w io.Writer, dir, sub string, uid, gid int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open the worktree: %w", err)
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	err = fs.WalkDir(root.FS(), sub, func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{
			Name: path.Join("worktree", rel), Mode: int64(info.Mode().Perm()), ModTime: info.ModTime(),
			Uid: uid, Gid: gid, Format: tar.FormatPAX,
		}
		switch {
		case info.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			return tw.WriteHeader(h)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := root.Readlink(rel)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(h)
		case info.Mode().IsRegular():
			// A file swapped for a FIFO or a link meanwhile must not
			// block the copy nor lead it elsewhere.
			f, err := fsguard.OpenRegular(root, rel)
			if nr := (*fsguard.NotRegularError)(nil); errors.As(err, &nr) {
				return fmt.Errorf("%s changed while it was copied (it is now %s)", rel, nr.Kind)
			}
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			h.Typeflag, h.Size = tar.TypeReg, st.Size()
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, st.Size())
			return err
		}
		return nil // sockets, fifos, devices: not a worktree's business
	})
	if err != nil {
		return fmt.Errorf("read the worktree: %w", err)
	}
	return tw.Close()
}

// MissingOnHost reports whether rel is gone from the host's worktree
// (looked up without following a link).
func MissingOnHost(worktree, rel string) (bool, error) {
	root, err := os.OpenRoot(worktree)
	if err != nil {
		return false, fmt.Errorf("open the worktree: %w", err)
	}
	defer root.Close()
	_, err = root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	return false, err
}

func Head(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

// ReplaceWorktree unpacks the tar r (a sandbox's copy of its worktree,
// entries "worktree/…") into a new directory in the run's directory runDir
// and swaps it in for runDir/worktree only when all of it was accepted
// (Untar): a refused copy leaves the worktree as it was. limit bounds the
// bytes read; warnf hears what could not be cleaned up; complete, when not
// nil, says whether whoever wrote r finished well (a tar cut short reads as
// a smaller worktree) and is asked before the swap.
func ReplaceWorktree(runDir string, r io.Reader, limit int64, warnf func(format string, args ...any), complete func() error) ([]string, error) {
	root, err := os.OpenRoot(runDir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", runDir, err)
	}
	defer root.Close()
	RemoveStale(root)
	suffix := randomSuffix()
	stage, old := ".sync-"+suffix, ".sync-old-"+suffix
	if err := root.Mkdir(stage, 0o700); err != nil {
		return nil, err
	}
	staged, err := root.OpenRoot(stage)
	if err != nil {
		_ = root.RemoveAll(stage)
		return nil, err
	}
	dropped, topMode, err := Untar(staged, r, limit)
	staged.Close()
	if err != nil {
		_ = root.RemoveAll(stage)
		return nil, err
	}
	if err := root.Chmod(stage, topMode); err != nil {
		_ = root.RemoveAll(stage)
		return nil, err
	}
	if complete != nil {
		if err := complete(); err != nil {
			_ = root.RemoveAll(stage)
			return nil, err
		}
	}
	if err := root.Rename("worktree", old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = root.RemoveAll(stage)
		return nil, fmt.Errorf("set the old worktree aside: %w", err)
	}
	if err := root.Rename(stage, "worktree"); err != nil {
		_ = root.Rename(old, "worktree")
		_ = root.RemoveAll(stage)
		return nil, fmt.Errorf("put the new worktree in place: %w", err)
	}
	if err := root.RemoveAll(old); err != nil {
		warnf("could not remove the previous worktree %s/%s: %v", runDir, old, err)
	}
	return dropped, nil
}

// RemoveStale removes what a SyncBack that died left in the run's
// directory (root): its directories are an hour old at least.
func RemoveStale(root *os.Root) {
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".sync-") {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Hour {
			_ = root.RemoveAll(e.Name())
		}
	}
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Untar unpacks a copy of a sandbox's worktree (entries "worktree/…", as
// the archive endpoint names them) into root, which must be empty, and
// returns what it left out and the worktree's own mode. What a sandbox
// wrote is hostile:
//
//   - the whole copy is refused (an error, nothing kept) when it is larger
//     than limit, or when an entry's name is absolute, contains "..", is
//     outside "worktree/", or lies under a symlink the copy made;
//   - left out: symlinks whose target could leave the worktree (absolute,
//     climbing above the worktree, or ".." after a name, which a symlink
//     could redirect), hard links to what is not in the copy, devices,
//     fifos and sockets;
//   - modes keep their permission bits only: no setuid, setgid or sticky;
//     nothing is chowned (xmode's user owns the files).
//
// os.Root confines every operation to root, whatever the copy holds.
func Untar(root *os.Root, r io.Reader, limit int64) (dropped []string, topMode fs.FileMode, err error) {
	topMode = 0o755
	counted := &limitReader{r: r, left: limit}
	tr := tar.NewReader(counted)
	links := map[string]bool{} // symlinks made so far
	type dirMode struct {
		name string
		mode fs.FileMode
	}
	var dirs []dirMode
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if counted.zeros < 2*512 {
				// A copy cut short at an entry's end reads as a smaller
				// worktree: only an archive's own end (two zero blocks)
				// says that all of it came.
				return nil, 0, fail.Failedf("the sandbox's copy of the worktree ended without the archive's end: it was cut short (the host's worktree is unchanged)")
			}
			break
		}
		if err != nil {
			if counted.over {
				return nil, 0, tooBig(limit)
			}
			return nil, 0, fmt.Errorf("read the sandbox's copy: %w", err)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return nil, 0, err
		}
		if name == "." {
			if h.Typeflag == tar.TypeDir {
				topMode = fs.FileMode(h.Mode).Perm() | 0o700
			}
			continue
		}
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if links[dir] {
				return nil, 0, fail.Refusedf("the sandbox's copy of the worktree puts %q under the symlink %q: refusing it (the host's worktree is unchanged)", h.Name, dir)
			}
		}
		mode := fs.FileMode(h.Mode).Perm() // setuid, setgid and sticky dropped
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return nil, 0, err
			}
		}
		if h.Typeflag != tar.TypeDir {
			// A later entry of the same name wins, as with tar.
			if st, err := root.Lstat(name); err == nil && !st.IsDir() {
				_ = root.Remove(name)
				delete(links, name)
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return nil, 0, err
			}
			// Applied at the end: a read-only directory must still take
			// its entries first.
			dirs = append(dirs, dirMode{name, mode | 0o700})
		case tar.TypeReg, tar.TypeRegA:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
			if err != nil {
				return nil, 0, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				if counted.over {
					return nil, 0, tooBig(limit)
				}
				return nil, 0, fmt.Errorf("write %s: %w", name, err)
			}
			if err := root.Chmod(name, mode); err != nil {
				return nil, 0, err
			}
		case tar.TypeSymlink:
			links[name] = true // made or not, nothing may come under it
			if !linkStaysInside(name, h.Linkname) {
				dropped = append(dropped, name+" -> "+h.Linkname)
				continue
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return nil, 0, err
			}
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			st, lerr := root.Lstat(target)
			if err != nil || target == "." || lerr != nil || !st.Mode().IsRegular() {
				dropped = append(dropped, name+" => "+h.Linkname)
				continue
			}
			if err := root.Link(target, name); err != nil {
				return nil, 0, err
			}
		default:
			dropped = append(dropped, name)
		}
	}
	if counted.over {
		return nil, 0, tooBig(limit)
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i].name) > len(dirs[j].name) })
	for _, d := range dirs {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return nil, 0, err
		}
	}
	return dropped, topMode, nil
}

func tooBig(limit int64) error {
	return fail.Refusedf("the sandbox's copy of the worktree is larger than XMODE_SANDBOX_SYNC_MAX_BYTES (%d bytes): refusing it (the host's worktree is unchanged); remove build output from the worktree or raise the limit", limit)
}

// entryName is an archive entry's path relative to the worktree ("." for
// the worktree itself); anything else is refused.
func entryName(name string) (string, error) {
	refuse := func() (string, error) {
		return "", fail.Refusedf("the sandbox's copy of the worktree has an entry named %q: refusing it (the host's worktree is unchanged)", name)
	}
	trimmed := strings.TrimSuffix(name, "/")
	if strings.HasPrefix(name, "/") || trimmed == "" {
		return refuse()
	}
	for _, part := range strings.Split(trimmed, "/") {
		if part == ".." {
			return refuse()
		}
	}
	clean := path.Clean(trimmed)
	if clean == "worktree" {
		return ".", nil
	}
	rest, ok := strings.CutPrefix(clean, "worktree/")
	if !ok {
		return refuse()
	}
	return rest, nil
}

// linkStaysInside reports whether a symlink at name (relative to the
// worktree) pointing at target resolves inside the worktree. Targets climb
// with leading ".." only: a ".." after a name is refused, since that name
// could itself be a symlink elsewhere. Every symlink of the tree passes
// this, and no entry lies under one (Untar), so following any chain of
// them stays inside.
func linkStaysInside(name, target string) bool {
	if target == "" || path.IsAbs(target) {
		return false
	}
	depth := strings.Count(name, "/") // directories above the link
	climbing := true
	for _, part := range strings.Split(target, "/") {
		switch {
		case part == "" || part == ".":
		case part == "..":
			if !climbing {
				return false
			}
			if depth--; depth < 0 {
				return false
			}
		default:
			climbing = false
		}
	}
	return true
}

// limitReader reads at most left bytes and notes when there was more, and
// how many zero bytes end what it has read so far.
type limitReader struct {
	r     io.Reader
	left  int64
	over  bool
	zeros int
}

func (l *limitReader) Read(b []byte) (int, error) {
	if l.left <= 0 {
		// One more byte tells "exactly the limit" from "more".
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			l.over = true
			return 0, errors.New("over the limit")
		}
		return 0, io.EOF
	}
	if int64(len(b)) > l.left {
		b = b[:l.left]
	}
	n, err := l.r.Read(b)
	l.left -= int64(n)
	for _, c := range b[:n] {
		if c == 0 {
			l.zeros++
		} else {
			l.zeros = 0
		}
	}
	return n, err
}
