package changes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitread"
)

// openWorktree opens the worktree directory without following a symlink
// in its place.
func openWorktree(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// openSubdirRoot opens name, a directory directly inside the directory
// parent, as an os.Root: the very directory, never a link or a FIFO put in
// its place (fsguard.OpenRootAt).
func openSubdirRoot(parent *os.File, name string) (*os.Root, error) {
	return fsguard.OpenRootAt(parent, name)
}

func openAt(dir *os.File, name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), path.Join(dir.Name(), name)), nil
}

// walker turns a worktree into tree objects, as `git add -A` would stage
// it: every file not ignored, every tracked file even when ignored, nothing
// under an ignored directory that holds no tracked file, no .git, no empty
// directory. Every name is opened relative to its directory's descriptor
// with O_NOFOLLOW, so nothing outside the worktree is ever reached; a
// symlink is recorded as a link. Blobs that differ from the base at their
// path, and every tree, go into the object store.
type walker struct {
	ctx      context.Context // a cancelled walk stops reading at once
	store    *objectStore
	base     map[string]TreeEntry // the base tree, flattened: path → entry
	gitlinks map[string]Hash      // submodule pointers: path → commit
	tracked  *trackedSet          // what git add -A keeps even when ignored
	rules    gitread.IgnoreRules
	cache    *statCache            // from the last walk
	added    map[string]*statEntry // hashed this walk, for the next one
	limit    int64
	budget   *sizeBudget // XMODE_CR_MAX_BYTES, shared with the shards
	// baseSize gives a base blob's size from its header (objects.size);
	// nil or false: not known.
	baseSize func(Hash) (int64, bool)
	started  int64 // ns: when the walk began
	files    map[string]walked
	shards   map[string]map[string]walked // the files each shard found, by its root directory
	skipped  []Skipped
	hashed   int // files read this time (the others came from the stat cache)
	parallel int // the root's subdirectories are walked by this many goroutines
	// withIgnored takes ignored files too (a fork's --with-ignored): no
	// ignore rule leaves anything out.
	withIgnored bool
}

// walked is a file of the snapshot and its size.
type walked struct {
	TreeEntry
	size int64
}

// Skipped is a worktree path a snapshot leaves out, and why.
type Skipped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// walk returns the worktree's tree; a change over XMODE_CR_MAX_BYTES is
// refused (fail.Refused) without reading what is over.
func (w *walker) walk(root *os.File) (Hash, error) {
	w.started = time.Now().UnixNano()
	w.files = make(map[string]walked, len(w.base)/max(w.parallel, 1)+16)
	w.added = map[string]*statEntry{}
	if w.ctx == nil {
		w.ctx = context.Background()
	}
	if w.budget == nil {
		w.budget = &sizeBudget{limit: w.limit}
	}
	h, err := w.dir(root, "", false)
	sort.Slice(w.skipped, func(i, j int) bool { return w.skipped[i].Path < w.skipped[j].Path })
	if err == nil {
		err = w.budget.err()
	}
	return h, err
}

// sizeBudget is what one walk may read of the files that are part of the
// change: XMODE_CR_MAX_BYTES, shared by the walk's shards. A file is
// measured by the size fstat gives before a byte of it is read, and a
// file certainly part of the change is charged before it is read: a path
// the base lacks, or a file over the limit whose size is not its base
// blob's. So a file over the limit is only read when it is as large as
// its base version (to learn whether it changed), and charged once it
// did. Once the change is over the limit nothing more is read: the walk
// only lstats the rest to name the largest files.
type sizeBudget struct {
	limit   int64
	mu      sync.Mutex
	used    int64
	why     string  // set once the change is over the limit
	largest []sized // the largest files charged or refused, largest first
}

type sized struct {
	path string
	size int64
}

// charge counts size bytes of p as part of the change; false when that
// takes the change over the limit (or it was already).
func (b *sizeBudget) charge(p string, size int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.note(p, size)
	if b.why != "" {
		return false
	}
	if size > b.limit {
		b.why = fmt.Sprintf("%s alone is %s", p, humanBytes(size))
		return false
	}
	if b.used+size > b.limit {
		b.why = fmt.Sprintf("its files add up to more than %s", humanBytes(b.limit))
		return false
	}
	b.used += size
	return true
}

// refund takes back a charge of size bytes (when charged) for a file
// that changed size before it was read.
func (b *sizeBudget) refund(size int64, charged bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if charged && b.why == "" {
		b.used -= size
	}
}

// note keeps p among the largest files, for the refusal; b.mu is held.
func (b *sizeBudget) note(p string, size int64) {
	const keep = 5
	for i, f := range b.largest {
		if f.path == p {
			b.largest = append(b.largest[:i], b.largest[i+1:]...)
			break
		}
	}
	i := sort.Search(len(b.largest), func(i int) bool { return b.largest[i].size < size })
	if i == keep {
		return
	}
	b.largest = append(b.largest, sized{})
	copy(b.largest[i+1:], b.largest[i:])
	b.largest[i] = sized{p, size}
	b.largest = b.largest[:min(len(b.largest), keep)]
}

// over reports a change already refused: nothing more is read.
func (b *sizeBudget) over() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.why != ""
}

// err is the refusal, nil while the change is within the limit.
func (b *sizeBudget) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.why == "" {
		return nil
	}
	var names []string
	for _, f := range b.largest {
		names = append(names, fmt.Sprintf("%s (%s)", f.path, humanBytes(f.size)))
	}
	return tooLargeError(b.limit, b.why, names)
}

// trackedSet is the paths the index lists plus the base's, and the
// directories holding them, built on first use: only ignored paths and
// nested repositories ask, and most walks meet neither.
type trackedSet struct {
	once  sync.Once
	build func() []string
	paths map[string]bool
	dirs  map[string]bool
}

func (t *trackedSet) init() {
	t.once.Do(func() {
		ps := t.build()
		t.paths = make(map[string]bool, len(ps))
		t.dirs = map[string]bool{}
		for _, p := range ps {
			t.paths[p] = true
			for d := path.Dir(p); d != "."; d = path.Dir(d) {
				if t.dirs[d] {
					break
				}
				t.dirs[d] = true
			}
		}
	})
}

func (t *trackedSet) has(p string) bool    { t.init(); return t.paths[p] }
func (t *trackedSet) hasDir(d string) bool { t.init(); return t.dirs[d] }

// shard is a walker for one subtree, sharing what is only read.
func (w *walker) shard() *walker {
	return &walker{
		store: w.store, base: w.base, gitlinks: w.gitlinks, tracked: w.tracked,
		rules: w.rules.Clone(),
		cache: w.cache, added: map[string]*statEntry{}, limit: w.limit, budget: w.budget, baseSize: w.baseSize, started: w.started, ctx: w.ctx,
		files: map[string]walked{}, withIgnored: w.withIgnored,
	}
}

func (w *walker) merge(name string, s *walker) {
	if w.shards == nil {
		w.shards = map[string]map[string]walked{}
	}
	w.shards[name] = s.files // not copied: a lookup goes to the shard of its first directory
	for p, e := range s.added {
		w.added[p] = e
	}
	w.skipped = append(w.skipped, s.skipped...)
	w.hashed += s.hashed
}

// file returns what the walk found at p.
func (w *walker) file(p string) (walked, bool) {
	if i := strings.IndexByte(p, '/'); i >= 0 {
		if m, ok := w.shards[p[:i]]; ok {
			f, ok := m[p]
			return f, ok
		}
	}
	f, ok := w.files[p]
	return f, ok
}

// eachFile calls fn for every file the walk found.
func (w *walker) eachFile(fn func(p string, f walked)) {
	for p, f := range w.files {
		fn(p, f)
	}
	for _, m := range w.shards {
		for p, f := range m {
			fn(p, f)
		}
	}
}

// subdir is a directory of the root whose subtree a shard walks.
type subdir struct {
	name, path string
	ignored    bool
	shard      *walker
	hash       Hash
	err        error
}

// walkSubdirs walks the subtrees of the root's directories, w.parallel at
// a time (each opened only when its turn comes, so a root with thousands
// of directories does not hold thousands of descriptors), and merges what
// they found.
func (w *walker) walkSubdirs(parent *os.File, subs []*subdir) error {
	sem := make(chan struct{}, w.parallel)
	var wg sync.WaitGroup
	for _, d := range subs {
		d.shard = w.shard()
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f, err := openAt(parent, d.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
			if err != nil {
				d.err = fmt.Errorf("open directory %s: %w", d.path, err)
				return
			}
			d.hash, d.err = d.shard.dir(f, d.path, d.ignored)
			f.Close()
		}()
	}
	wg.Wait()
	for _, d := range subs {
		if d.err != nil {
			return d.err
		}
		w.merge(d.name, d.shard)
	}
	return nil
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func (w *walker) dir(f *os.File, rel string, ignored bool) (Hash, error) {
	if err := w.ctx.Err(); err != nil {
		return Hash{}, err
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return Hash{}, fmt.Errorf("read directory %s: %w", displayDir(rel), err)
	}
	sort.Strings(names)
	if rel != "" {
		for _, n := range names {
			if n == ".git" && !w.tracked.hasDir(rel) {
				if !ignored {
					w.skipped = append(w.skipped, Skipped{rel + "/", "a nested git repository"})
				}
				return Hash{}, nil
			}
		}
	}
	// Only a directory that lists a .gitignore has one to open (most
	// have none: an open that fails costs a system call for each).
	if !ignored && hasName(names, ".gitignore") {
		if b, err := readFileAt(f, ".gitignore", 1<<20); err == nil {
			n := w.rules.Push(gitread.ParseIgnore(b, dirBase(rel)))
			defer w.rules.Pop(n)
		}
	}
	var entries []TreeEntry
	var subs []*subdir
	for _, name := range names {
		if name == ".git" {
			continue // the repository (or a nested one's, tracked): never content
		}
		if err := w.ctx.Err(); err != nil {
			return Hash{}, err
		}
		e, ok, err := w.entry(f, rel, name, ignored, &subs)
		if err != nil {
			return Hash{}, err
		}
		if ok {
			entries = append(entries, e)
		}
	}
	if len(subs) > 0 {
		if err := w.walkSubdirs(f, subs); err != nil {
			return Hash{}, err
		}
		for _, d := range subs {
			if !d.hash.IsZero() {
				entries = append(entries, TreeEntry{Name: d.name, Mode: gitread.ModeTree, Hash: d.hash})
			}
		}
	}
	if len(entries) == 0 || w.budget.over() {
		return Hash{}, nil // a refused change makes no trees
	}
	gitread.SortTree(entries)
	data := gitread.EncodeTree(entries)
	h, err := gitread.HashObject(gitread.TypeTree, data)
	if err != nil {
		return Hash{}, err
	}
	return h, w.store.writeKnown(h, gitread.TypeTree, data)
}

// entry turns one name of the directory f (at rel) into a tree entry;
// ok is false for what the snapshot leaves out. The root's subdirectories
// are queued on subs for the parallel walk instead.
func (w *walker) entry(f *os.File, rel, name string, ignored bool, subs *[]*subdir) (e TreeEntry, ok bool, err error) {
	p := join(rel, name)
	var st unix.Stat_t
	if err := unix.Fstatat(int(f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return e, false, nil // removed while we looked
		}
		return e, false, fmt.Errorf("lstat %s: %w", p, err)
	}
	typ := st.Mode & unix.S_IFMT
	isDir := typ == unix.S_IFDIR
	// A path git refuses (.GIT, git~1, ...) is left out, and listed when
	// git add -A would have tried to add it. Its directories were checked
	// on the way down, and only a symlink's rules look past the last
	// component.
	why := ""
	if typ == unix.S_IFLNK {
		why = gitread.Refuses(p, true)
	} else {
		why = gitread.Refuses(name, false)
	}
	if why != "" {
		if !(ignored || w.rules.Ignored(p, name, isDir)) || w.tracked.has(p) || (isDir && w.tracked.hasDir(p)) {
			w.skipped = append(w.skipped, Skipped{skippedPath(p, isDir), why})
		}
		return e, false, nil
	}
	if gl := w.gitlinks[p]; !gl.IsZero() && isDir {
		e = TreeEntry{Name: name, Mode: gitread.ModeGitlink, Hash: gl}
		w.files[p] = walked{TreeEntry: e}
		return e, true, nil
	}
	// A file or symlink of the base is kept whether ignored or not (git
	// add -A keeps what is tracked), so its rules are not matched: most
	// paths of a worktree are such.
	ign := ignored
	if !ign && !w.withIgnored && !((typ == unix.S_IFREG || typ == unix.S_IFLNK) && w.inBase(p)) {
		ign = w.rules.Ignored(p, name, isDir)
	}
	if ign && !w.tracked.has(p) && !(isDir && w.tracked.hasDir(p)) {
		return e, false, nil
	}
	var size int64
	switch typ {
	case unix.S_IFDIR:
		if rel == "" && w.parallel > 1 {
			*subs = append(*subs, &subdir{name: name, path: p, ignored: ign})
			return e, false, nil
		}
		sub, err := openAt(f, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
		if err != nil {
			return e, false, fmt.Errorf("open directory %s: %w", p, err)
		}
		h, err := w.dir(sub, p, ign)
		sub.Close()
		// git keeps no empty directory
		return TreeEntry{Name: name, Mode: gitread.ModeTree, Hash: h}, !h.IsZero(), err
	case unix.S_IFLNK:
		target, err := readlinkAt(f, name)
		if err != nil {
			return e, false, fmt.Errorf("read symlink %s: %w", p, err)
		}
		if e, err = w.blob(p, name, gitread.ModeSymlink, []byte(target)); err != nil {
			return e, false, err
		}
		size = int64(len(target))
		if w.changed(p, e.Mode, e.Hash) {
			w.budget.charge(p, size)
		}
	case unix.S_IFREG:
		if e, size, ok, err = w.regular(f, p, name, &st); err != nil || !ok {
			return e, false, err
		}
	default:
		if !ign {
			w.skipped = append(w.skipped, Skipped{p, "not a regular file, directory or symlink"})
		}
		return e, false, nil
	}
	w.files[p] = walked{e, size}
	return e, true, nil
}

// inBase reports a path the base tree holds (not a directory).
func (w *walker) inBase(p string) bool {
	_, ok := w.base[p]
	return ok
}

// hasName reports whether sorted names holds name.
func hasName(names []string, name string) bool {
	i := sort.SearchStrings(names, name)
	return i < len(names) && names[i] == name
}

// skippedPath is how the skipped list names a path: a directory with a
// trailing '/', all of it left out.
func skippedPath(p string, isDir bool) string {
	if isDir {
		return p + "/"
	}
	return p
}

func displayDir(rel string) string {
	if rel == "" {
		return "the worktree"
	}
	return rel
}

func dirBase(rel string) string {
	if rel == "" {
		return ""
	}
	return rel + "/"
}

// changed reports whether an entry differs from the base at its path.
func (w *walker) changed(p string, mode uint32, h Hash) bool {
	b, ok := w.base[p]
	return !ok || b.Mode != mode || b.Hash != h
}

// blob records a small blob (a symlink target), storing it when it
// differs from the base.
func (w *walker) blob(p, name string, mode uint32, data []byte) (TreeEntry, error) {
	h, err := gitread.HashObject(gitread.TypeBlob, data)
	if err != nil {
		return TreeEntry{}, fmt.Errorf("%s: %w", p, err)
	}
	if w.changed(p, mode, h) {
		if err := w.store.writeKnown(h, gitread.TypeBlob, data); err != nil {
			return TreeEntry{}, err
		}
	}
	return TreeEntry{Name: name, Mode: mode, Hash: h}, nil
}

// inMemory is the largest file read whole to hash and store it; larger
// ones are streamed twice.
const inMemory = 32 << 20

func statEntryOf(st *unix.Stat_t) statEntry {
	return statEntry{
		Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(),
		Ino: uint64(st.Ino), Dev: uint64(st.Dev), Mode: uint32(st.Mode),
	}
}

// regular hashes a regular file, or takes its hash from the stat cache;
// ok is false for a file not read because the change is over the limit
// (w.budget says why). Its size (from lstat, checked again by fstat
// before the read) decides before a byte of it is read.
func (w *walker) regular(dir *os.File, p, name string, st *unix.Stat_t) (e TreeEntry, size int64, ok bool, err error) {
	mode := gitread.ModeFile
	if st.Mode&0o100 != 0 {
		mode = gitread.ModeExec
	}
	want := statEntryOf(st)
	_, inBase := w.base[p]
	if c, ok := w.cache.entries[p]; ok {
		if c.matches(&want) && (!w.changed(p, mode, c.Hash) || w.store.has(c.Hash)) {
			c.seen = true // each path is met by one walker only
			if w.changed(p, mode, c.Hash) {
				w.budget.charge(p, want.Size)
			}
			return TreeEntry{Name: name, Mode: mode, Hash: c.Hash}, want.Size, true, nil
		}
	}
	// What the size alone decides: a file certainly part of the change is
	// charged before it is read, so one over the limit is refused unread;
	// nothing is read once the change is over.
	if w.budget.over() {
		if !inBase {
			w.budget.charge(p, want.Size) // only to be named
		}
		return e, 0, false, nil
	}
	charged := false
	if w.certainlyChanged(p, want.Size) {
		if !w.budget.charge(p, want.Size) {
			return e, 0, false, nil
		}
		charged = true
	}
	var h Hash
	w.hashed++
	for attempt := 0; ; attempt++ {
		h, err = w.hashFile(dir, p, name, mode, want)
		if !errors.Is(err, errChanged) || attempt == 2 {
			break
		}
		var st2 unix.Stat_t
		if serr := unix.Fstatat(int(dir.Fd()), name, &st2, unix.AT_SYMLINK_NOFOLLOW); serr != nil || st2.Mode&unix.S_IFMT != unix.S_IFREG {
			return e, 0, false, fmt.Errorf("%s: %w", p, errChanged)
		}
		w.budget.refund(want.Size, charged)
		want, charged = statEntryOf(&st2), false
		if w.certainlyChanged(p, want.Size) {
			if !w.budget.charge(p, want.Size) {
				return e, 0, false, nil
			}
			charged = true
		}
	}
	if err != nil {
		return e, 0, false, fmt.Errorf("%s: %w", p, err)
	}
	if !charged && w.changed(p, mode, h) {
		w.budget.charge(p, want.Size)
	}
	if want.Ctime < w.started-racyMargin && want.Mtime < w.started-racyMargin {
		want.Hash = h
		w.added[p] = &want
	}
	return TreeEntry{Name: name, Mode: mode, Hash: h}, want.Size, true, nil
}

// certainlyChanged reports a regular file of size bytes at p that is part
// of the change whatever it holds, so that it is charged before it is
// read: p is not in the base, or the file is over the limit and its size
// is not the base blob's (the blob's header says it: reading a file as
// large as the repository's own costs what git status would). A file
// within the limit is read first: that costs at most the limit.
func (w *walker) certainlyChanged(p string, size int64) bool {
	b, ok := w.base[p]
	if !ok {
		return true
	}
	if size <= w.limit {
		return false
	}
	if b.Mode != gitread.ModeFile && b.Mode != gitread.ModeExec || w.baseSize == nil {
		return true
	}
	n, known := w.baseSize(b.Hash)
	return !known || n != size
}

// hashFile reads the file (opened without following a symlink, and
// without blocking on a FIFO swapped in), hashes it and stores it when it
// differs from the base. The file must still have the lstat data want
// after the read, else it changed meanwhile (errChanged).
func (w *walker) hashFile(dir *os.File, p, name string, mode uint32, want statEntry) (Hash, error) {
	f, err := openAt(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) {
			return Hash{}, errChanged
		}
		return Hash{}, err
	}
	defer f.Close()
	same := func() bool {
		var st unix.Stat_t
		return unix.Fstat(int(f.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && statEntryOf(&st) == want
	}
	if !same() {
		return Hash{}, errChanged
	}
	r := ctxReader{w.ctx, f} // a long read stops at Ctrl-C
	var h Hash
	if want.Size <= inMemory {
		data, err := fsguard.ReadExactly(r, want.Size)
		if err := w.ctx.Err(); err != nil {
			return Hash{}, err
		}
		if err != nil {
			return Hash{}, errChanged
		}
		if h, err = gitread.HashObject(gitread.TypeBlob, data); err != nil {
			return Hash{}, err
		}
		if !same() {
			return Hash{}, errChanged
		}
		if w.changed(p, mode, h) {
			if err := w.store.writeKnown(h, gitread.TypeBlob, data); err != nil {
				return Hash{}, err
			}
		}
		return h, nil
	}
	if h, err = hashReader(gitread.TypeBlob, want.Size, r); err != nil {
		return Hash{}, err
	}
	if !same() {
		return Hash{}, errChanged
	}
	if w.changed(p, mode, h) && want.Size <= w.limit && !w.store.has(h) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Hash{}, err
		}
		if err := w.store.writeStream(h, gitread.TypeBlob, want.Size, r); err != nil {
			return Hash{}, err
		}
	}
	return h, nil
}

func readlinkAt(dir *os.File, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", errors.New("symlink target too long")
	}
	return string(buf[:n]), nil
}

// readFileAt reads a regular file (not a symlink: git does not follow a
// symlinked .gitignore either) of at most max bytes in dir.
func readFileAt(dir *os.File, name string, max int64) ([]byte, error) {
	f, err := fsguard.OpenRegularAt(dir, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return fsguard.ReadBounded(f, name, max)
}
