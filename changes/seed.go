package changes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/gitread"
)

// SeedStatCache fills the run's stat cache (statCache) from the checkout
// of commit that xmode just made in the run's worktree, before any step
// ran in it (a create, a pool entry made or moved): each regular file of
// commit's tree is recorded with its lstat data and its blob's ID, so that
// the first `sandbox diff` reads only the files whose lstat data changed
// since — what git's index does for `git status` after a clone. It replaces
// the cache the run had.
//
// Nothing the sandbox wrote is trusted, because nothing it wrote exists
// yet: the IDs come from the base commit's tree (git ls-tree, run by xmode
// on the checkout it made), never from the sandbox's index, and a later
// change to a file changes its ctime, which no process can set. A file is
// recorded only when its bytes must be its blob's (docs/change-requests.md,
// "Trust model"): its blob's size, and no attribute that makes git's
// checkout rewrite a file within its size (filter, ident,
// working-tree-encoding; end-of-line conversion only adds bytes). And only
// when its ctime and mtime are older than a file made after the lstat of
// every file: a step's later change to a file then gets a later ctime even
// on a filesystem with a coarse clock.
//
// Only a cache: a file left out is read by the first diff, as before.
func SeedStatCache(ctx context.Context, g fsguard.Guard, runID, commit string) (int, error) {
	dir, err := g.Worktree(runID)
	if err != nil {
		return 0, err
	}
	if _, err := gitread.ParseHash(commit); err != nil {
		return 0, fmt.Errorf("seed the stat cache of %s: commit %q: %w", runID, commit, err)
	}
	files, err := checkedOut(ctx, dir, commit)
	if err != nil {
		return 0, fmt.Errorf("seed the stat cache of %s: %w", runID, err)
	}
	wt, err := openWorktree(dir)
	if err != nil {
		return 0, err
	}
	defer wt.Close()
	var wst unix.Stat_t
	if err := unix.Fstat(int(wt.Fd()), &wst); err != nil {
		return 0, err
	}
	entries, err := lstatAll(wt, files)
	if err != nil {
		return 0, fmt.Errorf("seed the stat cache of %s: %w", runID, err)
	}
	st, err := openStore(g, runID)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	return st.writeSeed(entries, uint64(wst.Dev))
}

// seedFile is a regular file of the base tree and its blob.
type seedFile struct {
	path string
	hash Hash
	size int64
}

// checkedOut lists the regular files of commit whose checkout in dir must
// hold their blob's bytes when they are as large: git ls-tree gives each
// blob's ID and size, git check-attr the attributes the checkout saw (the
// same configuration: gitcli.Run's), and a path with a filter, ident or
// working-tree-encoding attribute is left out.
func checkedOut(ctx context.Context, dir, commit string) ([]seedFile, error) {
	// The worktree may already belong to the sandbox user (docker gives
	// it to them): git is told it is safe, as the checkout that made it was.
	safe := []string{"-c", "safe.directory=" + dir}
	var tree bytes.Buffer
	if err := gitcli.RunIO(ctx, dir, nil, &tree, append(safe, "ls-tree", "-r", "-l", "-z", "--full-tree", "--end-of-options", commit)...); err != nil {
		return nil, err
	}
	var files []seedFile
	var paths bytes.Buffer
	for _, rec := range strings.Split(tree.String(), "\x00") {
		meta, p, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta) // mode type id size
		if len(f) != 4 || (f[0] != "100644" && f[0] != "100755") || f[1] != "blob" {
			continue // symlinks, submodules: not regular files
		}
		h, err := gitread.ParseHash(f[2])
		if err != nil {
			return nil, fmt.Errorf("git ls-tree: %q: %w", rec, err)
		}
		size, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("git ls-tree: %q: %w", rec, err)
		}
		files = append(files, seedFile{path: p, hash: h, size: size})
		paths.WriteString(p)
		paths.WriteByte(0)
	}
	if len(files) == 0 {
		return nil, nil
	}
	// check-attr answers each path, in order, for each attribute asked.
	attrNames := []string{"filter", "ident", "working-tree-encoding"}
	var attrs bytes.Buffer
	if err := gitcli.RunIO(ctx, dir, &paths, &attrs, append(append(safe, "check-attr", "--stdin", "-z"), attrNames...)...); err != nil {
		return nil, err
	}
	rec := strings.Split(attrs.String(), "\x00")
	if len(rec) != 3*len(attrNames)*len(files)+1 {
		return nil, fmt.Errorf("git check-attr: %d fields for %d paths", len(rec)-1, len(files))
	}
	kept := files[:0]
	for i, f := range files {
		rewrites := false
		for j := range attrNames {
			r := rec[3*(len(attrNames)*i+j):]
			if r[0] != f.path || r[1] != attrNames[j] {
				return nil, fmt.Errorf("git check-attr: %q %q where %q %q was expected", r[0], r[1], f.path, attrNames[j])
			}
			if r[2] != "unspecified" && r[2] != "unset" {
				rewrites = true
			}
		}
		if !rewrites {
			kept = append(kept, f)
		}
	}
	return kept, nil
}

// lstatAll returns the lstat data of files in the worktree wt, each
// recorded with its blob's ID: those that are regular files of their
// blob's size. Directories are opened one component at a time without
// following a link; files come grouped by directory (git's tree order), so
// each directory is opened once.
func lstatAll(wt *os.File, files []seedFile) (map[string]*statEntry, error) {
	entries := make(map[string]*statEntry, len(files))
	all := make([]statEntry, len(files)) // one allocation for the entries
	var dirs dirStack
	dirs.push("", wt)
	defer dirs.closeAll()
	for i, f := range files {
		dir, name := "", f.path
		if j := strings.LastIndexByte(f.path, '/'); j >= 0 {
			dir, name = f.path[:j], f.path[j+1:]
		}
		d := dirs.open(dir)
		if d == nil {
			continue // not a directory of the checkout (any more)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				continue
			}
			return nil, fmt.Errorf("lstat %s: %w", f.path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != f.size {
			continue // not what git checked out as the blob's bytes
		}
		all[i] = statEntryOf(&st)
		all[i].Hash = f.hash
		entries[f.path] = &all[i]
	}
	return entries, nil
}

// dirStack holds the directories open along one path of the worktree.
type dirStack struct {
	paths []string // "" for the root, then "a", "a/b", ...
	files []*os.File
}

func (s *dirStack) push(p string, f *os.File) {
	s.paths = append(s.paths, p)
	s.files = append(s.files, f)
}

func (s *dirStack) pop() {
	n := len(s.files) - 1
	if n > 0 { // the root is the caller's
		s.files[n].Close()
	}
	s.paths, s.files = s.paths[:n], s.files[:n]
}

func (s *dirStack) closeAll() {
	for len(s.files) > 1 {
		s.pop()
	}
}

// open returns the directory dir ("" the root), opening what is missing
// of it below the deepest open ancestor; nil when it is not a directory.
func (s *dirStack) open(dir string) *os.File {
	for len(s.paths) > 1 {
		top := s.paths[len(s.paths)-1]
		if top == dir || strings.HasPrefix(dir, top+"/") {
			break
		}
		s.pop()
	}
	for top := s.paths[len(s.paths)-1]; top != dir; top = s.paths[len(s.paths)-1] {
		rest := dir
		if top != "" {
			rest = dir[len(top)+1:]
		}
		name, _, _ := strings.Cut(rest, "/")
		f, err := openAt(s.files[len(s.files)-1], name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
		if err != nil {
			return nil
		}
		s.push(join(top, name), f)
	}
	return s.files[len(s.files)-1]
}

// writeSeed writes entries as the stat cache, keeping only those whose
// ctime and mtime are older than the cache file itself, made after every
// lstat: a file written in the same tick of the filesystem's clock as the
// lstat could change again within it unseen. wtDev is the worktree's
// device: on another filesystem than the store's, the clocks are not
// compared, and only files older than racyMargin are kept.
func (s *objectStore) writeSeed(entries map[string]*statEntry, wtDev uint64) (int, error) {
	tmp := statCacheName + ".tmp"
	_ = s.root.Remove(tmp) // made now, so its times are the clock's now
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var probe unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &probe); err != nil {
		return 0, err
	}
	before := min(probe.Mtim.Nano(), probe.Ctim.Nano())
	if uint64(probe.Dev) != wtDev {
		before -= racyMargin
	}
	kept := 0
	data := encodeStatCache(entries, func(e *statEntry) bool {
		if e.Ctime < before && e.Mtime < before {
			kept++
			return true
		}
		return false
	})
	if _, err := f.Write(data); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return kept, s.root.Rename(tmp, statCacheName)
}
