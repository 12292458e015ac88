package changes

import (
	"bytes"
	"compress/zlib"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitread"
)

// StoreDirName is the run's object store: <root>/runs/<run>/objects.git, a
// bare repository xmode creates and alone writes (a sandbox never sees it),
// holding what change requests and diffs of the run need — the snapshot's
// blobs, trees and commit, the agent's commits, and the base's trees and
// the base versions of changed files. git runs only on this repository,
// with gitcli.Owned's configuration.
const StoreDirName = "objects.git"

// objectStore is a run's object store.
type objectStore struct {
	dir   string          // <root>/runs/<run>/objects.git
	root  *os.Root        // of dir
	src   *gitread.Source // reads it back, verified like any other
	srcMu sync.Mutex      // src is not safe for concurrent use
	mu    sync.Mutex
	known map[Hash]bool // objects seen in the store by this process
	// In batch mode (a snapshot) new objects wait in pending, to be
	// written as one pack by flush: creating a file costs ~1 ms of CPU on
	// ext4, and a diff of 50 changed files writes ~170 objects.
	batch        bool
	pending      map[Hash]pendingObject
	order        []Hash // pending, in the order written
	pendingBytes int64
	flushMu      sync.Mutex
}

// maxPending is how many bytes of new objects batch mode holds before it
// writes them out.
const maxPending = 32 << 20

// startBatch puts the store in batch mode: what is written goes into one
// pack at flush (or at maxPending), not one loose file per object.
func (s *objectStore) startBatch() {
	s.mu.Lock()
	s.batch = true
	s.mu.Unlock()
}

// endBatch flushes and leaves batch mode: what is written after is loose
// again (a change request's commit, one object).
func (s *objectStore) endBatch() error {
	s.mu.Lock()
	s.batch = false
	s.mu.Unlock()
	return s.flush()
}

// flush writes the pending objects as one pack; until it returns they
// stay pending (found by has, read and size).
func (s *objectStore) flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	order := s.order
	s.order = nil
	objs := make(map[Hash]pendingObject, len(order))
	for _, h := range order {
		objs[h] = s.pending[h]
	}
	s.mu.Unlock()
	if len(order) == 0 {
		return nil
	}
	err := s.writePack(order, objs)
	if err == nil {
		s.srcMu.Lock()
		s.src.Refresh()
		s.srcMu.Unlock()
	}
	s.mu.Lock()
	if err != nil {
		s.order = append(order, s.order...)
		s.mu.Unlock()
		return err
	}
	for _, h := range order {
		s.pendingBytes -= int64(len(s.pending[h].data))
		delete(s.pending, h)
		s.known[h] = true
	}
	s.mu.Unlock()
	// Only a cost: packs left unconsolidated are read as they are, and the
	// next flush tries again.
	_ = s.consolidate()
	return nil
}

// pendingObj returns a pending object.
func (s *objectStore) pendingObj(h Hash) (pendingObject, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.pending[h]
	return o, ok
}

// openStore opens the run's object store, creating it on first use. The
// directory is made here, owner-only, and must be a real directory: a
// symlink planted in its place is refused.
func openStore(g fsguard.Guard, runID string) (*objectStore, error) {
	runDir, err := g.RunDir(runID)
	if err != nil {
		return nil, err
	}
	return openStoreIn(runDir, runID)
}

// openStoreIn opens the object store <dir>/objects.git of what (a run, a
// snapshot), creating it on first use, as openStore does.
func openStoreIn(dir, what string) (*objectStore, error) {
	run, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer run.Close()
	if err := mkdirReal(run, StoreDirName); err != nil {
		return nil, err
	}
	root, err := run.OpenRoot(StoreDirName)
	if err != nil {
		return nil, fmt.Errorf("open object store of %s: %w", what, err)
	}
	s := &objectStore{dir: filepath.Join(dir, StoreDirName), root: root, known: map[Hash]bool{}, pending: map[Hash]pendingObject{}}
	s.src = gitread.NewSource(root, gitread.Options{Name: "the run's object store", Limits: gitread.Limits{Object: 1 << 40, Read: math.MaxInt64, All: math.MaxInt64}})
	for _, d := range []string{"objects", "refs", "refs/heads"} {
		if err := mkdirReal(root, d); err != nil {
			root.Close()
			return nil, err
		}
	}
	for name, content := range map[string]string{
		"HEAD":   "ref: refs/heads/main\n",
		"config": "[core]\n\trepositoryformatversion = 0\n\tbare = true\n",
	} {
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			root.Close()
			return nil, fmt.Errorf("create object store of %s: %w", what, err)
		}
		_, err = f.WriteString(content)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			root.Close()
			return nil, fmt.Errorf("create object store of %s: %w", what, err)
		}
	}
	return s, nil
}

// mkdirReal makes dir (0700) under root, or checks that the existing one is
// a directory and not a symlink.
func mkdirReal(root *os.Root, dir string) error {
	err := root.Mkdir(dir, 0o700)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return err
	}
	st, err := root.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s exists and is not a directory: refusing to use it", dir)
	}
	return nil
}

func (s *objectStore) Close() error {
	s.src.Close()
	return s.root.Close()
}

func loosePath(h Hash) string {
	x := h.String()
	return "objects/" + x[:2] + "/" + x[2:]
}

// has reports whether the store holds h: packed, loose or pending.
func (s *objectStore) has(h Hash) bool {
	s.mu.Lock()
	_, pending := s.pending[h]
	known := s.known[h] || pending
	s.mu.Unlock()
	if known {
		return true
	}
	s.srcMu.Lock()
	packed := s.src.InPack(h)
	s.srcMu.Unlock()
	if packed {
		s.markKnown(h)
		return true
	}
	_, err := s.root.Lstat(loosePath(h))
	if err == nil {
		s.markKnown(h)
	}
	return err == nil
}

func (s *objectStore) markKnown(h Hash) {
	s.mu.Lock()
	s.known[h] = true
	s.mu.Unlock()
}

// write stores an object and returns its ID.
func (s *objectStore) write(typ string, data []byte) (Hash, error) {
	h, err := gitread.HashObject(typ, data)
	if err != nil {
		return h, err
	}
	return h, s.writeKnown(h, typ, data)
}

// writeKnown stores an object whose ID the caller computed from data.
func (s *objectStore) writeKnown(h Hash, typ string, data []byte) error {
	if s.has(h) {
		return nil
	}
	s.mu.Lock()
	if !s.batch {
		s.mu.Unlock()
		return s.writeStream(h, typ, int64(len(data)), bytes.NewReader(data))
	}
	if _, ok := s.pending[h]; !ok {
		s.pending[h] = pendingObject{typ, data}
		s.order = append(s.order, h)
		s.pendingBytes += int64(len(data))
	}
	full := s.pendingBytes >= maxPending
	s.mu.Unlock()
	if full {
		return s.flush()
	}
	return nil
}

// zlibWriters are reused across objects: a new one allocates and clears
// the compressor's tables, most of the CPU a small object's write costs (a
// first diff writes hundreds).
var zlibWriters = sync.Pool{New: func() any {
	zw, _ := zlib.NewWriterLevel(nil, zlib.BestSpeed)
	return zw
}}

// writeStream stores size bytes of r as object h of typ, checking that
// they hash to h (the reader may be a file still being written to).
func (s *objectStore) writeStream(h Hash, typ string, size int64, r io.Reader) error {
	x := h.String()
	if err := mkdirReal(s.root, "objects/"+x[:2]); err != nil {
		return err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := "objects/" + x[:2] + "/tmp_obj_" + hex.EncodeToString(rnd[:])
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("write object %s: %w", x, err)
	}
	defer s.root.Remove(tmp) //nolint:errcheck // gone after the rename
	hh := gitread.NewHasher(typ, size)
	zw := zlibWriters.Get().(*zlib.Writer)
	defer zlibWriters.Put(zw)
	zw.Reset(f)
	fmt.Fprintf(zw, "%s %d\x00", typ, size)
	n, err := io.Copy(io.MultiWriter(zw, hh), io.LimitReader(r, size+1))
	if err == nil && n != size {
		err = errChanged
	}
	if err == nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write object %s: %w", x, err)
	}
	got, err := hh.Sum()
	if err != nil {
		return err
	}
	if got != h {
		return fmt.Errorf("write object %s: %w", x, errChanged)
	}
	if err := s.root.Rename(tmp, loosePath(h)); err != nil {
		return err
	}
	s.markKnown(h)
	return nil
}

// read returns a stored object, verified like any other.
func (s *objectStore) read(h Hash) (string, []byte, error) {
	if o, ok := s.pendingObj(h); ok {
		if got, err := gitread.HashObject(o.typ, o.data); err != nil || got != h {
			return "", nil, fmt.Errorf("object %s in the run's object store is corrupt", h)
		}
		return o.typ, o.data, nil
	}
	s.srcMu.Lock()
	typ, data, err := s.src.Read(h)
	if errors.Is(err, gitread.ErrNotFound) {
		// Its pack may have been consolidated into a new one since the
		// packs were listed (another xmode's flush): list them again.
		s.src.Refresh()
		typ, data, err = s.src.Read(h)
	}
	s.srcMu.Unlock()
	switch {
	case errors.Is(err, gitread.ErrNotFound):
		return "", nil, fmt.Errorf("object %s: %w in the run's object store", h, gitread.ErrNotFound)
	case errors.Is(err, gitread.ErrTampered), errors.Is(err, gitread.ErrCollision):
		return "", nil, fmt.Errorf("object %s in the run's object store is corrupt", h)
	}
	return typ, data, err
}

// size returns the size of a stored object from its header, without
// inflating the rest.
func (s *objectStore) size(h Hash) (int64, error) {
	if o, ok := s.pendingObj(h); ok {
		return int64(len(o.data)), nil
	}
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	n, err := s.src.Size(h)
	if errors.Is(err, gitread.ErrNotFound) {
		s.src.Refresh() // as in read
		n, err = s.src.Size(h)
	}
	return n, err
}

// setRef points refs/<name> at h.
func (s *objectStore) setRef(name string, h Hash) error {
	dir := ""
	for _, part := range strings.Split(path.Dir(name), "/") {
		dir = path.Join(dir, part)
		if err := mkdirReal(s.root, dir); err != nil {
			return err
		}
	}
	tmp := name + ".lock"
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(h.String() + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return s.root.Rename(tmp, name)
}
