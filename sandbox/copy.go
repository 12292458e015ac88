package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// `sandbox cp`: files in and out of a session's worktree, like `docker cp`.
// The worktree is hostile (a step wrote it): every access goes through an
// os.Root on it, so neither `..` nor a symlink leads out, and links are
// copied as links, never followed. In docker bind and volume modes the
// worktree is this machine's directory; in sync mode (a remote daemon) a
// copy out first brings the sandbox's copy back (SyncBack), and a copy in
// writes the host's worktree and then pushes that path into the sandbox's
// copy (engine.PushPath).

// CopyResult is what a copy did, and where it went.
type CopyResult struct {
	fsguard.Copied
	To string
}

// CopyOut copies rel (relative to the worktree; "." or "dir/." for what a
// directory holds) from the session's worktree to dest on this machine:
// into dest when it is a directory, as dest otherwise.
func (s *Service) CopyOut(ctx context.Context, sess *store.Session, rel, dest string) (CopyResult, error) {
	rel, contents, err := worktreePath(rel)
	if err != nil {
		return CopyResult{}, err
	}
	wt, provider, err := s.copySession(sess)
	if err != nil {
		return CopyResult{}, err
	}
	defer engine.Close(provider)
	if err := engine.SyncBack(ctx, provider, s.sandboxOf(sess, wt)); err != nil {
		return CopyResult{}, err
	}
	src, err := fsguard.OpenRootPath(wt)
	if err != nil {
		return CopyResult{}, fmt.Errorf("open the worktree: %w", err)
	}
	defer src.Close()
	info, err := src.Lstat(rel)
	if err != nil {
		return CopyResult{}, inWorktree(sess, rel, err)
	}
	if contents && !info.IsDir() {
		return CopyResult{}, fail.Usagef("%s:%s/. names what a directory holds, and %s is not a directory", sess.ID, rel, rel)
	}
	dstDir, name, err := hostTarget(dest, filepath.Base(rel), contents)
	if err != nil {
		return CopyResult{}, err
	}
	if strings.HasSuffix(dest, "/") {
		st, serr := os.Stat(dest)
		_, lerr := os.Lstat(strings.TrimRight(dest, "/")) // with its "/", a file is ENOTDIR
		if err := dirWanted(dest, serr == nil && st.IsDir(), lerr == nil, info.IsDir()); err != nil {
			return CopyResult{}, err
		}
	}
	dst, err := os.OpenRoot(dstDir)
	if err != nil {
		return CopyResult{}, fmt.Errorf("open %s: %w", dstDir, err)
	}
	defer dst.Close()
	res := CopyResult{To: filepath.Join(dstDir, name)}
	res.Copied, err = copyTree(src, rel, dst, name, contents, fsguard.CopyOptions{})
	return res, err
}

// CopyIn copies src on this machine into the session's worktree at rel:
// into rel when it is a directory, as rel otherwise. What it creates
// belongs to the worktree's owner (the sandbox's user), without setuid or
// setgid bits.
func (s *Service) CopyIn(ctx context.Context, sess *store.Session, src, rel string) (CopyResult, error) {
	given := rel
	rel, _, err := worktreePath(rel)
	if err != nil {
		return CopyResult{}, err
	}
	if err := store.CheckOpen(sess, s.Now()); err != nil {
		return CopyResult{}, err
	}
	wt, provider, err := s.copySession(sess)
	if err != nil {
		return CopyResult{}, err
	}
	defer engine.Close(provider)
	sb := s.sandboxOf(sess, wt)
	if err := engine.SyncBack(ctx, provider, sb); err != nil {
		return CopyResult{}, err
	}
	contents := strings.HasSuffix(src, "/.") || src == "."
	abs, err := filepath.Abs(src)
	if err != nil {
		return CopyResult{}, fail.Usagef("%q: %v", src, err)
	}
	srcDir, srcName := filepath.Dir(abs), filepath.Base(abs)
	if contents {
		srcDir, srcName = abs, "."
	}
	from, err := os.OpenRoot(srcDir)
	if err != nil {
		return CopyResult{}, fail.NotFoundf("%s: %v", src, errors.Unwrap(err))
	}
	defer from.Close()
	info, err := from.Lstat(srcName)
	if err != nil {
		return CopyResult{}, fail.NotFoundf("%s: no such file or directory", src)
	}
	if contents && !info.IsDir() {
		return CopyResult{}, fail.Usagef("%s names what a directory holds, and it is not a directory", src)
	}
	dst, err := fsguard.OpenRootPath(wt)
	if err != nil {
		return CopyResult{}, fmt.Errorf("open the worktree: %w", err)
	}
	defer dst.Close()
	name, err := destination(dst, rel, srcName, contents)
	if err != nil {
		return CopyResult{}, inWorktree(sess, rel, err)
	}
	if strings.HasSuffix(given, "/") {
		st, serr := dst.Stat(rel)
		_, lerr := dst.Lstat(rel)
		if err := dirWanted(sess.ID+":"+given, serr == nil && st.IsDir(), lerr == nil, info.IsDir()); err != nil {
			return CopyResult{}, err
		}
	}
	var o fsguard.CopyOptions
	if owner, ok := ownerOf(wt); ok && os.Geteuid() == 0 {
		o.Chown = &owner
	}
	res := CopyResult{To: sess.ID + ":" + name}
	res.Copied, err = copyTree(from, srcName, dst, name, contents, o)
	if err != nil {
		return res, inWorktree(sess, name, err)
	}
	if err := engine.PushPath(ctx, provider, sb, name); err != nil {
		return res, err
	}
	return res, nil
}

// destination is where a copy into the worktree goes: into rel when it is
// a directory (a link to one inside the worktree counts), else rel itself,
// whose directory must exist. A link at rel that leads out, or nowhere, is
// replaced by the copy, never followed.
func destination(dst *os.Root, rel, srcName string, contents bool) (string, error) {
	lst, err := dst.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if pst, perr := dst.Stat(path.Dir(rel)); perr != nil || !pst.IsDir() {
			return "", cmpErr(perr, fs.ErrNotExist)
		}
		return rel, nil
	case err != nil:
		return "", err
	case contents:
		return rel, nil
	case lst.IsDir():
		return path.Join(rel, srcName), nil
	case lst.Mode()&fs.ModeSymlink != 0:
		if st, err := dst.Stat(rel); err == nil && st.IsDir() {
			return path.Join(rel, srcName), nil
		}
	}
	return rel, nil
}

// dirWanted refuses what cp and docker cp refuse for a destination that
// ends in "/", which names a directory: one that is something else, or one
// that does not exist when a file (not a directory, which would make it)
// is copied. isDir: the destination is a directory (or a link to one);
// exists: it exists at all.
func dirWanted(dest string, isDir, exists, srcDir bool) error {
	switch {
	case isDir:
		return nil
	case exists:
		return fail.Usagef("%s is not a directory", dest)
	case !srcDir:
		return fail.NotFoundf("%s: no such directory: a destination ending in / must be a directory that exists", dest)
	}
	return nil
}

// copyTree is fsguard.CopyTree, or with contents each entry of a directory.
func copyTree(src *os.Root, sn string, dst *os.Root, dn string, contents bool, o fsguard.CopyOptions) (fsguard.Copied, error) {
	if !contents {
		return fsguard.CopyTree(src, sn, dst, dn, o)
	}
	if err := dst.MkdirAll(dn, 0o755); err != nil {
		return fsguard.Copied{}, err
	}
	entries, err := fsguard.ReadDir(src, sn)
	if err != nil {
		return fsguard.Copied{}, err
	}
	var all fsguard.Copied
	for _, e := range entries {
		c, err := fsguard.CopyTree(src, path.Join(sn, e.Name()), dst, path.Join(dn, e.Name()), o)
		all.Files, all.Dirs, all.Links, all.Bytes = all.Files+c.Files, all.Dirs+c.Dirs, all.Links+c.Links, all.Bytes+c.Bytes
		all.Skipped = append(all.Skipped, c.Skipped...)
		if err != nil {
			return all, err
		}
	}
	return all, nil
}

// worktreePath checks a path inside the worktree: relative, no "..".
// contents reports a trailing "/." (what a directory holds).
func worktreePath(rel string) (clean string, contents bool, err error) {
	if rel == "" {
		return "", false, fail.Usagef("give a path in the worktree after SESSION: (\".\" for all of it)")
	}
	if path.IsAbs(rel) {
		return "", false, fail.Usagef("%q: paths in a sandbox are relative to its worktree (drop the leading /)", rel)
	}
	for _, part := range strings.Split(rel, "/") {
		if part == ".." {
			return "", false, fail.Usagef("%q: \"..\" would leave the worktree", rel)
		}
	}
	contents = rel == "." || strings.HasSuffix(rel, "/.")
	return path.Clean(rel), contents, nil
}

// hostTarget is where a copy out goes: dest itself (a new name, or a file
// to replace), or name inside dest when dest is a directory, or dest's
// contents for a directory's contents.
func hostTarget(dest, name string, contents bool) (dir, base string, err error) {
	if dest == "" {
		return "", "", fail.Usagef("give a destination on this machine")
	}
	abs, err := filepath.Abs(dest)
	if err != nil {
		return "", "", fail.Usagef("%q: %v", dest, err)
	}
	st, err := os.Stat(abs)
	switch {
	case err == nil && st.IsDir() && contents:
		return abs, ".", nil
	case err == nil && st.IsDir():
		return abs, name, nil
	case err == nil && contents:
		return "", "", fail.Usagef("%s is not a directory: a directory's contents go into one", dest)
	case err == nil || errors.Is(err, fs.ErrNotExist):
		parent := filepath.Dir(abs)
		if pst, perr := os.Stat(parent); perr != nil || !pst.IsDir() {
			return "", "", fail.NotFoundf("%s: no such directory", parent)
		}
		return parent, filepath.Base(abs), nil
	}
	return "", "", err
}

// copySession is the session's guarded worktree and its engine.
func (s *Service) copySession(sess *store.Session) (string, engine.Provider, error) {
	if sess.Ended() {
		return "", nil, fail.Refusedf("session %s has ended (%s): its worktree is gone; its evidence is under %s", sess.ID, sess.Status, sess.RunDir)
	}
	wt, err := s.Guard.CheckWorktree(sess.RunID, sess.WorktreePath)
	if err != nil {
		return "", nil, err
	}
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return "", nil, err
	}
	return wt, provider, nil
}

func (s *Service) sandboxOf(sess *store.Session, wt string) engine.Sandbox {
	sb := sess.Sandbox()
	sb.Worktree = wt
	return sb
}

// inWorktree says what went wrong with a path in the worktree: missing
// (exit 3), leading out through a symlink (refused, 4), or else.
func inWorktree(sess *store.Session, rel string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fail.NotFoundf("%s:%s: no such file or directory in the worktree", sess.ID, rel)
	case strings.Contains(err.Error(), "path escapes from parent"):
		return fail.Refusedf("%s:%s leads out of the worktree through a symlink: refusing to follow it", sess.ID, rel)
	}
	return fmt.Errorf("%s:%s: %w", sess.ID, rel, err)
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// ownerOf is the owner (uid, gid) of a directory.
func ownerOf(dir string) ([2]int, bool) {
	st, err := os.Stat(dir)
	if err != nil {
		return [2]int{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]int{}, false
	}
	return [2]int{int(sys.Uid), int(sys.Gid)}, true
}
