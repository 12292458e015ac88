package changes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/gitread"
)

// Seeded is what Seed recorded: Files, the regular files of the base tree
// whose checkout must hold their blob's bytes (no attribute rewrites
// them), and Recorded, those of them the stat cache now holds (of their
// blob's size, older than the filesystem's clock).
type Seeded struct {
	Files, Recorded int
	// FromIndex: the lstat data came from the checkout's index, not from a
	// pass over the tree.
	FromIndex bool
}

// Seed prepares the run's object store for the first snapshot of a
// checkout xmode just made, before any step ran in it (a create, a pool
// entry made or moved): the base commit and its trees are copied into the
// store and flattened into the base cache, as the first snapshot would,
// and each regular file of the base tree is recorded in the stat cache
// (statCache) with its lstat data and its blob's ID, so that the first
// `sandbox diff` reads only the files whose lstat data changed since —
// what git's index does for `git status` after a clone. It replaces the
// stat cache the run had.
//
// Nothing the sandbox wrote is trusted, because nothing it wrote exists
// yet: the IDs come from the base commit's tree (read and checked like a
// snapshot's, never from the sandbox's index), and a later change to a
// file changes its ctime, which no process can set. A file is recorded
// only when its bytes must be its blob's (docs/change-requests.md, "Trust
// model"): its blob's size, and no attribute that makes git's checkout
// rewrite a file within its size (filter, ident, working-tree-encoding;
// end-of-line conversion only adds bytes). And only when its ctime and
// mtime are older than a file made after the lstat of every file: a
// step's later change to a file then gets a later ctime even on a
// filesystem with a coarse clock.
//
// Only a cache: a file left out is read by the first diff, as before.
func (s *Service) Seed(ctx context.Context, runID, commit string) (Seeded, error) {
	base, err := gitread.ParseHash(commit)
	if err != nil {
		return Seeded{}, fmt.Errorf("seed the stat cache of %s: commit %q: %w", runID, commit, err)
	}
	dir, err := s.Guard.Worktree(runID)
	if err != nil {
		return Seeded{}, err
	}
	wt, err := openWorktree(dir)
	if err != nil {
		return Seeded{}, err
	}
	defer wt.Close()
	var wst unix.Stat_t
	if err := unix.Fstat(int(wt.Fd()), &wst); err != nil {
		return Seeded{}, err
	}
	dirs, err := locateGitDirs(ctx, s.Store, s.Guard, runID, wt)
	if err != nil {
		return Seeded{}, err
	}
	defer dirs.Close()
	st, err := openStore(s.Guard, runID)
	if err != nil {
		return Seeded{}, err
	}
	defer st.Close()
	st.startBatch() // the base's trees become one pack (baseTree flushes)
	obj, done := s.openObjects(ctx, st, dirs)
	defer done()
	baseFiles, err := s.baseTree(obj, &Snapshot{SessionID: runID, Base: base})
	if err != nil {
		return Seeded{}, err
	}
	nfiles, entries, ok := seedFromIndex(dirs, baseFiles, &wst)
	if !ok {
		files, err := checkedOut(ctx, dir, commit, dirs, baseFiles)
		if err != nil {
			return Seeded{}, fmt.Errorf("seed the stat cache of %s: %w", runID, err)
		}
		if entries, err = lstatAll(wt, files); err != nil {
			return Seeded{}, fmt.Errorf("seed the stat cache of %s: %w", runID, err)
		}
		nfiles = len(files)
	}
	n, err := st.writeSeed(entries, uint64(wst.Dev))
	return Seeded{Files: nfiles, Recorded: n, FromIndex: ok}, err
}

// seedFromIndex takes the stat cache's entries from the checkout's own
// index, with no pass over the tree: git recorded each file's lstat data
// and blob ID as it wrote it, and nothing else has touched the checkout
// yet. Only what the base tree agrees with is taken — a stage-0 entry of a
// regular file whose path, mode and blob ID are the base tree's — and only
// where a file's bytes must be its blob's: ok is false (the caller takes
// the slow path: git ls-tree, check-attr, an lstat of each file) when an
// attribute could make the checkout rewrite files (a .gitattributes in the
// base, info/attributes), when the repository's config names autocrlf, or
// when the files are no longer as git recorded them as a whole (given to
// another owner — docker's sandbox user — which changed every ctime). An
// entry git marked racily clean (size 0, a non-empty blob) is left out.
// files counts the base's regular files, as checkedOut would.
func seedFromIndex(dirs *gitDirs, base map[string]TreeEntry, wst *unix.Stat_t) (files int, entries map[string]*statEntry, ok bool) {
	if dirs.common == nil || dirs.record == nil {
		return 0, nil, false
	}
	for p, e := range base {
		if p == ".gitattributes" || strings.HasSuffix(p, "/.gitattributes") {
			return 0, nil, false
		}
		if e.Mode == gitread.ModeFile || e.Mode == gitread.ModeExec {
			files++
		}
	}
	if _, err := dirs.common.Lstat("info/attributes"); err == nil {
		return 0, nil, false
	}
	config, err := fsguard.ReadRegular(dirs.common, "config", 1<<20)
	if err != nil || bytes.Contains(bytes.ToLower(config), []byte("autocrlf")) {
		return 0, nil, false
	}
	raw, err := dirs.index()
	if err != nil {
		return 0, nil, false
	}
	index, err := gitread.ParseIndex(raw)
	if err != nil {
		return 0, nil, false
	}
	entries = make(map[string]*statEntry, len(index))
	all := make([]statEntry, len(index)) // one allocation for the entries
	for i, e := range index {
		b, inBase := base[e.Path]
		if e.Stage != 0 || !inBase || b.Hash != e.Hash || b.Mode != e.Mode || (e.Mode != gitread.ModeFile && e.Mode != gitread.ModeExec) {
			continue
		}
		if e.Stat.UID != wst.Uid || e.Stat.GID != wst.Gid {
			return 0, nil, false // given to another owner since: every ctime moved
		}
		if e.Stat.Size == 0 && e.Hash != emptyBlob {
			continue // racily clean: git itself would look at it again
		}
		all[i] = statEntry{
			Size:  int64(e.Stat.Size),
			Mtime: int64(e.Stat.MtimeSec)*1e9 + int64(e.Stat.MtimeNsec),
			Ctime: int64(e.Stat.CtimeSec)*1e9 + int64(e.Stat.CtimeNsec),
			Ino:   uint64(e.Stat.Ino),
			Dev:   uint64(wst.Dev), // the checkout's files are on the worktree's filesystem
			Mode:  modeFromIndex | unix.S_IFREG | e.Mode&0o111,
			Hash:  e.Hash,
		}
		entries[e.Path] = &all[i]
	}
	return files, entries, true
}

// emptyBlob is the ID of the empty blob.
var emptyBlob = Hash{0xe6, 0x9d, 0xe2, 0x9b, 0xb2, 0xd1, 0xd6, 0x43, 0x4b, 0x8b, 0x29, 0xae, 0x77, 0x5a, 0xd8, 0xc2, 0xe4, 0x8c, 0x53, 0x91}

// SeedBase does the half of Seed that needs no checkout, so that it can
// run while git checks the worktree out (a create from project machine
// project): the base commit and its trees are copied from the machine's
// objects into the run's object store and flattened into the base cache.
// Seed, once the checkout is there, then finds them and only records the
// files. It makes the run's directory when git has not yet.
func (s *Service) SeedBase(ctx context.Context, runID, project, commit string) error {
	base, err := gitread.ParseHash(commit)
	if err != nil {
		return fmt.Errorf("seed the base of %s: commit %q: %w", runID, commit, err)
	}
	runDir, err := s.Guard.RunDir(runID)
	if err != nil {
		return err
	}
	machine, err := s.Guard.MachineDir(project)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(runDir, fsguard.RunDirMode); err != nil {
		return fmt.Errorf("seed the base of %s: %w", runID, err)
	}
	common, err := fsguard.OpenRootPath(filepath.Join(machine, "repo", ".git"))
	if err != nil {
		return fmt.Errorf("seed the base of %s: %w", runID, err)
	}
	defer common.Close()
	st, err := openStore(s.Guard, runID)
	if err != nil {
		return err
	}
	defer st.Close()
	st.startBatch() // the base's trees become one pack (baseTree flushes)
	obj, done := s.openObjects(ctx, st, &gitDirs{common: common})
	defer done()
	_, err = s.baseTree(obj, &Snapshot{SessionID: runID, Base: base})
	return err
}

// seedFile is a regular file of the base tree and its blob.
type seedFile struct {
	path string
	hash Hash
	size int64
}

// attrsThatRewrite are the attributes under which git's checkout may write
// other bytes than the blob's, as many of them.
var attrsThatRewrite = []string{"filter", "ident", "working-tree-encoding"}

// checkedOut lists the regular files of the base (path → entry) whose
// checkout in dir must hold their blob's bytes when they are as large,
// each with its blob's size: git ls-tree -l's for the same ID (one git,
// where a header read per blob costs the create ~20 ms of CPU on 1,700
// files). When the base has a .gitattributes or the repository an
// info/attributes — the only places an attribute can come from under
// gitcli's configuration — git check-attr says which paths have a filter,
// ident or working-tree-encoding attribute, and those are left out.
func checkedOut(ctx context.Context, dir, commit string, dirs *gitDirs, base map[string]TreeEntry) ([]seedFile, error) {
	// The worktree may already belong to the sandbox user (docker gives
	// it to them): git is told it is safe, as the checkout that made it was.
	safe := []string{"-c", "safe.directory=" + dir}
	var tree bytes.Buffer
	if err := gitcli.RunIO(ctx, dir, nil, &tree, append(safe, "ls-tree", "-r", "-l", "-z", "--full-tree", "--end-of-options", commit)...); err != nil {
		return nil, err
	}
	files := make([]seedFile, 0, len(base))
	attrs := false
	for _, rec := range strings.Split(tree.String(), "\x00") {
		meta, p, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		if p == ".gitattributes" || strings.HasSuffix(p, "/.gitattributes") {
			attrs = true
		}
		f := strings.Fields(meta) // mode type id size
		e, inBase := base[p]
		if len(f) != 4 || !inBase || (e.Mode != gitread.ModeFile && e.Mode != gitread.ModeExec) || f[2] != e.Hash.String() {
			continue // symlinks, submodules: not regular files; an ID the base does not have: not trusted
		}
		size, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("git ls-tree: %q: %w", rec, err)
		}
		files = append(files, seedFile{path: p, hash: e.Hash, size: size})
	}
	// By path: each directory's files come together, for lstatAll.
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	if dirs.common != nil {
		if _, err := dirs.common.Lstat("info/attributes"); err == nil {
			attrs = true
		}
	}
	if !attrs || len(files) == 0 {
		return files, nil
	}
	var paths bytes.Buffer
	for _, f := range files {
		paths.WriteString(f.path)
		paths.WriteByte(0)
	}
	var out bytes.Buffer
	args := append(append(safe, "check-attr", "--stdin", "-z"), attrsThatRewrite...)
	if err := gitcli.RunIO(ctx, dir, &paths, &out, args...); err != nil {
		return nil, err
	}
	// check-attr answers each path, in order, for each attribute asked:
	// path NUL attribute NUL value NUL.
	rec := strings.Split(out.String(), "\x00")
	k := len(attrsThatRewrite)
	if len(rec) != 3*k*len(files)+1 {
		return nil, fmt.Errorf("git check-attr: %d fields for %d paths", len(rec)-1, len(files))
	}
	kept := files[:0]
	for i, f := range files {
		rewrites := false
		for j, name := range attrsThatRewrite {
			r := rec[3*(k*i+j):]
			if r[0] != f.path || r[1] != name {
				return nil, fmt.Errorf("git check-attr: %q %q where %q %q was expected", r[0], r[1], f.path, name)
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

// maxSeedWait bounds how long writeSeed waits for the filesystem's clock
// to pass the newest file of a checkout (one tick of it, a few ms, on a
// local filesystem).
const maxSeedWait = 100 * time.Millisecond

// writeSeed writes entries as the stat cache, keeping only those whose
// ctime and mtime are older than a file made in the store after every
// lstat: a file changed in the same tick of the filesystem's clock as the
// lstat would keep its ctime, so it is recorded only once that tick has
// passed, before any step can run. When the newest file is that recent,
// writeSeed waits (at most maxSeedWait) for the clock to move on. wtDev is
// the worktree's device: on another filesystem than the store's, whose
// clock may run otherwise, only files older than racyMargin are kept.
func (s *objectStore) writeSeed(entries map[string]*statEntry, wtDev uint64) (int, error) {
	var newest int64
	for _, e := range entries {
		newest = max(newest, e.Ctime, e.Mtime)
	}
	tmp := statCacheName + ".tmp"
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	var before int64
	for deadline := time.Now().Add(maxSeedWait); ; time.Sleep(time.Millisecond) {
		if f != nil {
			f.Close()
		}
		_ = s.root.Remove(tmp) // made now, so its times are the clock's now
		var err error
		if f, err = s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return 0, err
		}
		var probe unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &probe); err != nil {
			return 0, err
		}
		before = min(probe.Mtim.Nano(), probe.Ctim.Nano())
		if uint64(probe.Dev) != wtDev {
			before -= racyMargin
			break
		}
		if newest < before || time.Now().After(deadline) {
			break
		}
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
	err := f.Close()
	f = nil
	if err != nil {
		return 0, err
	}
	return kept, s.root.Rename(tmp, statCacheName)
}
