package docker

import (
	"archive/tar"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// Sync mode: a daemon on another machine cannot mount this machine's
// worktree, so the sandbox gets a copy in a volume of its own, made at
// Provision (copyIn) and brought back on demand (SyncBack) through the
// Engine API's archive endpoints. xmode.db and the evidence never leave
// this machine; only the worktree travels.

// DefaultSyncTimeout bounds one copy of a worktree either way.
const DefaultSyncTimeout = 30 * time.Minute

func (p *Provider) syncTimeout() time.Duration { return cmp.Or(p.SyncTimeout, DefaultSyncTimeout) }

// copyIn fills a created (not yet started) sync-mode container's volume with
// the worktree: a tar of the host's worktree, read without following
// symlinks, every entry owned by the sandbox user, under SyncWorktree.
func (p *Provider) copyIn(ctx context.Context, containerID, worktree, user string) error {
	uid, gid := parseUser(user)
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		err := writeTree(pw, worktree, ".", uid, gid)
		pw.CloseWithError(err)
		read <- err
	}()
	cctx, cancel := context.WithTimeout(ctx, p.syncTimeout())
	defer cancel()
	err := p.cli.CopyToContainer(cctx, containerID, SyncMount, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errCopyEnded) // the writer stops, whatever happened
	if rerr := <-read; rerr != nil && !errors.Is(rerr, errCopyEnded) {
		// Our side failed (the request's error would only say the
		// connection broke).
		return fmt.Errorf("copy the worktree into the sandbox: %w", rerr)
	}
	if err != nil {
		return p.wrap(err, "copy the worktree into the sandbox")
	}
	return nil
}

// errCopyEnded stops the tar writer once the daemon stopped reading.
var errCopyEnded = errors.New("the copy ended")

// parseUser is the numeric uid and gid of "uid:gid" (root for "").
func parseUser(user string) (int, int) {
	u, g, _ := strings.Cut(user, ":")
	uid, _ := strconv.Atoi(u)
	gid, err := strconv.Atoi(g)
	if err != nil {
		gid = uid
	}
	return uid, gid
}

// writeTree writes dir's sub (".": all of it) as a tar whose entries are
// "worktree/<path>":
// directories, regular files and symlinks (as links), nothing else; modes
// without setuid, setgid or sticky bits; owned by uid:gid. The walk and
// every open stay inside dir (os.Root) and follow no symlink.
func writeTree(w io.Writer, dir, sub string, uid, gid int) error {
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

// PushPath brings rel of the host's worktree into a sync-mode sandbox's
// copy (engine.WorktreePusher), for `sandbox cp` into a session and file
// steps: a tar of it, made as copyIn makes one, unpacked by the daemon
// over SyncWorktree; a path the host no longer has is removed from the copy.
// The daemon unpacks as root and follows links inside the container, so
// every directory on the way to rel must be a directory in the sandbox's
// copy, not a link a step planted there.
func (p *Provider) PushPath(ctx context.Context, sb engine.Sandbox, rel string) error {
	if sb.MountMode != MountSync {
		return nil
	}
	if _, err := p.guard.CheckWorktree(sb.RunID, sb.Worktree); err != nil {
		return err
	}
	if _, err := p.Ping(ctx); err != nil {
		return err
	}
	ci, err := p.ownedContainer(ctx, sb)
	if err != nil {
		return err
	}
	rel = path.Clean(rel)
	if rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
		return fail.Usagef("%q is not a path inside the worktree", rel)
	}
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		cctx, cancel := p.call(ctx)
		st, err := p.cli.ContainerStatPath(cctx, ci.ID, path.Join(SyncWorktree, d))
		cancel()
		if err != nil {
			return p.wrap(err, "look up "+d+" in the sandbox's worktree")
		}
		if !st.Mode.IsDir() {
			return fail.Refusedf("%s is not a directory in the sandbox's worktree (a symlink?): refusing to copy through it", d)
		}
	}
	if gone, err := missingOnHost(sb.Worktree, rel); err != nil {
		return err
	} else if gone {
		// Deleted on the host (a file step's delete): deleted in the copy too.
		code, out, err := p.runHelperAs(ctx, ci.ID, ci.Config.User, []string{"rm", "-rf", "--", path.Join(SyncWorktree, rel)}, p.syncTimeout())
		if err != nil {
			return fmt.Errorf("remove %s from the sandbox: %w", rel, err)
		}
		if code != 0 {
			return fail.Failedf("remove %s from the sandbox: rm exited %d: %s", rel, code, strings.TrimSpace(out))
		}
		return nil
	}
	uid, gid := parseUser(ci.Config.User)
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		err := writeTree(pw, sb.Worktree, rel, uid, gid)
		pw.CloseWithError(err)
		read <- err
	}()
	cctx, cancel := context.WithTimeout(ctx, p.syncTimeout())
	defer cancel()
	err = p.cli.CopyToContainer(cctx, ci.ID, SyncMount, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errCopyEnded)
	if rerr := <-read; rerr != nil && !errors.Is(rerr, errCopyEnded) {
		return fmt.Errorf("copy %s into the sandbox: %w", rel, rerr)
	}
	if err != nil {
		return p.wrap(err, "copy "+rel+" into the sandbox")
	}
	return nil
}

// missingOnHost reports whether rel is gone from the host's worktree
// (looked up without following a link).
func missingOnHost(worktree, rel string) (bool, error) {
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

// SyncBack makes the host's worktree what the sandbox's copy is now
// (engine.WorktreeSyncer); for sandboxes that mount the host's worktree
// (bind, volume) it does nothing. The copy comes from the sandbox and is
// hostile: it is unpacked into a fresh directory next to the worktree,
// confined with os.Root, and swapped in only when all of it was accepted,
// so a refused copy leaves the worktree as it was. See untar for what is
// refused and what is dropped.
func (p *Provider) SyncBack(ctx context.Context, sb engine.Sandbox) error {
	if sb.MountMode != MountSync {
		return nil
	}
	if _, err := p.guard.CheckWorktree(sb.RunID, sb.Worktree); err != nil {
		return err
	}
	if _, err := p.Ping(ctx); err != nil {
		return err
	}
	ci, err := p.ownedContainer(ctx, sb)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, p.syncTimeout())
	defer cancel()
	rc, _, err := p.cli.CopyFromContainer(cctx, ci.ID, SyncWorktree)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fail.Failedf("the sandbox of session %s has no worktree at %s: stop the session and create a new one", sb.SessionID, SyncWorktree)
		}
		return p.wrap(err, "copy the worktree out of the sandbox")
	}
	defer rc.Close()
	dropped, err := p.replaceWorktree(sb.RunID, rc)
	if err != nil {
		return fmt.Errorf("sync back the worktree of session %s: %w", sb.SessionID, err)
	}
	if len(dropped) > 0 {
		p.warnf("sync back of session %s: left out %d entr%s the host must not have (%s)", sb.SessionID, len(dropped), map[bool]string{true: "y", false: "ies"}[len(dropped) == 1], strings.Join(head(dropped, 5), ", "))
	}
	return nil
}

func head(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

// replaceWorktree unpacks the tar r into a new directory in the run's
// directory and swaps it in for the worktree.
func (p *Provider) replaceWorktree(runID string, r io.Reader) ([]string, error) {
	runDir, err := p.guard.RunDir(runID)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(runDir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", runDir, err)
	}
	defer root.Close()
	removeStale(root)
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
	dropped, topMode, err := untar(staged, r, p.cfg.SyncMaxBytes)
	staged.Close()
	if err != nil {
		_ = root.RemoveAll(stage)
		return nil, err
	}
	if err := root.Chmod(stage, topMode); err != nil {
		_ = root.RemoveAll(stage)
		return nil, err
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
		p.warnf("could not remove the previous worktree %s/%s: %v", runDir, old, err)
	}
	return dropped, nil
}

// removeStale removes what a SyncBack that died left in the run's
// directory: its directories are an hour old at least.
func removeStale(root *os.Root) {
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

// untar unpacks a copy of a sandbox's worktree (entries "worktree/…", as
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
func untar(root *os.Root, r io.Reader, limit int64) (dropped []string, topMode fs.FileMode, err error) {
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
// this, and no entry lies under one (untar), so following any chain of
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

// limitReader reads at most left bytes and notes when there was more.
type limitReader struct {
	r    io.Reader
	left int64
	over bool
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
	return n, err
}

// PathPresent reports whether path (absolute, as the container sees it)
// exists in the session's container: its image, or what is mounted there.
// It stats through the daemon's archive API, running nothing in the
// container.
func (p *Provider) PathPresent(ctx context.Context, sb engine.Sandbox, name string) (bool, error) {
	if !path.IsAbs(name) {
		return false, fail.Usagef("%q is not an absolute path", name)
	}
	ci, err := p.ownedContainer(ctx, sb)
	if err != nil {
		return false, err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	if _, err := p.cli.ContainerStatPath(cctx, ci.ID, path.Clean(name)); err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return false, p.wrap(err, "look up "+name+" in the sandbox")
	}
	return true, nil
}
