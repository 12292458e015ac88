package changes

import (
	"compress/zlib"
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"

	"github.com/xmode/xmode/fsguard"
)

// errNotFound is an object no source holds.
var errNotFound = errors.New("object not found")

// errTooLarge is an object larger than the source's limit.
var errTooLarge = errors.New("object larger than XMODE_CR_MAX_BYTES")

// objectSource reads the objects of a git directory a sandbox may have
// written, as data: loose objects and packs under objects/, opened through
// an os.Root so no symlink leads outside the directory, with no
// objects/info/alternates followed, every declared size bounded, delta
// chains bounded and every object checked to hash to the ID it was asked
// for. A tampered or corrupt object is an error, never an answer, and
// what one read and all the reads of a source may inflate is bounded
// (readWork, sourceWork).
type objectSource struct {
	root      *os.Root
	ownsRoot  bool            // Close closes root too
	name      string          // for messages
	limit     int64           // the largest object: XMODE_CR_MAX_BYTES
	ctx       context.Context // cancels a long read; nil: never
	packs     []*packFile
	packsOpen bool
	cache     *baseCache    // resolved pack entries, for the chains that follow
	spent     int64         // bytes all reads so far inflated, rebuilt and hashed
	zr        io.ReadCloser // reused: a zlib reader costs ~40 KB to make
	// alt is searched for what this source lacks: the run's own objects
	// (fsguard.RecordOverlay) beside a project machine's.
	alt *objectSource
}

type packPos struct {
	p   *packFile
	off int64
}

type object struct {
	typ  string
	data []byte
}

type packFile struct {
	name string
	f    *os.File
	size int64
	idx  *idxfile.MemoryIndex
}

// openSource opens the objects of the git directory root (which it now
// owns). Its packs are opened on the first object not found loose; a pack
// whose index does not parse is skipped: its objects are then simply not
// found.
func openSource(root *os.Root, name string, limit int64) *objectSource {
	return &objectSource{root: root, ownsRoot: true, name: name, limit: limit, cache: newBaseCache(cacheBytes(limit))}
}

func (s *objectSource) openPacks() {
	if s.packsOpen {
		return
	}
	s.packsOpen = true
	entries, err := readDirNames(s.root, "objects/pack")
	if err != nil {
		return
	}
	for _, e := range entries {
		base, ok := strings.CutSuffix(e, ".idx")
		if !ok || !strings.HasPrefix(base, "pack-") {
			continue
		}
		if p, err := s.openPack(base); err == nil {
			s.packs = append(s.packs, p)
		}
	}
}

// readDirNames lists dir under root (fsguard.ReadDir: a FIFO in its place
// does not block, a link is not followed).
func readDirNames(root *os.Root, dir string) ([]string, error) {
	entries, err := fsguard.ReadDir(root, dir)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, err
}

func (s *objectSource) openPack(base string) (*packFile, error) {
	idxF, _, err := openRegular(s.root, "objects/pack/"+base+".idx")
	if err != nil {
		return nil, err
	}
	defer idxF.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(idxF).Decode(idx); err != nil {
		return nil, err
	}
	f, size, err := openRegular(s.root, "objects/pack/"+base+".pack")
	if err != nil {
		return nil, err
	}
	var hdr [12]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil || string(hdr[:4]) != "PACK" ||
		(binary.BigEndian.Uint32(hdr[4:]) != 2 && binary.BigEndian.Uint32(hdr[4:]) != 3) {
		f.Close()
		return nil, fmt.Errorf("%s.pack is not a pack", base)
	}
	return &packFile{name: base, f: f, size: size, idx: idx}, nil
}

// openRegular opens name under root for reading as fsguard.OpenRegular
// does (no final link followed, no FIFO waited on, only a regular file),
// with its size.
func openRegular(root *os.Root, name string) (*os.File, int64, error) {
	f, err := fsguard.OpenRegular(root, name)
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

// readRegular reads a whole regular file of at most max bytes under root.
func readRegular(root *os.Root, name string, max int64) ([]byte, error) {
	f, size, err := openRegular(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// Close releases the packs and the directory.
func (s *objectSource) Close() error {
	if s.alt != nil {
		s.alt.Close()
	}
	for _, p := range s.packs {
		p.f.Close()
	}
	if !s.ownsRoot {
		return nil
	}
	return s.root.Close()
}

// Bounds on reading a sandbox's objects (docs/change-requests.md, "Hostile
// packs"). A chain is resolved from its base up, one link at a time, so
// its depth costs a small record per link, never an object per link.
const (
	// maxDeltaDepth is the longest delta chain read: git's pack-objects
	// writes none deeper (it caps --depth at 4095).
	maxDeltaDepth = 4095
)

// readWork bounds the bytes one object read may inflate, rebuild from
// deltas and hash: 8 times the largest object plus workSlack, so a
// 50-deep chain (git's default depth) of objects up to about a seventh of
// the limit reads.
func readWork(limit int64) int64 { return satAdd(satMul(limit, 8), workSlack) }

// workSlack is 256 MiB (a variable for tests).
var workSlack int64 = 256 << 20

// sourceWork bounds the same for all the reads of one snapshot together.
func sourceWork(limit int64) int64 { return satMul(readWork(limit), 4) }

// cacheBytes bounds the cache of delta bases: room for one object of the
// limit and 64 MiB of others, at most 512 MiB.
func cacheBytes(limit int64) int64 { return min(satAdd(limit, 64<<20), 512<<20) }

func satMul(a, k int64) int64 {
	if a > math.MaxInt64/k {
		return math.MaxInt64
	}
	return a * k
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// errTooMuchWork is a read that would inflate more than its bound.
var errTooMuchWork = errors.New("reading it would inflate more than")

// work is what one read may still inflate, rebuild and hash.
type work struct {
	left, used int64
	bound      string // for the error: which bound, and how much
}

func (w *work) take(n int64) error {
	if w == nil {
		return nil
	}
	if n > w.left {
		return fmt.Errorf("%w %s", errTooMuchWork, w.bound)
	}
	w.left -= n
	w.used += n
	return nil
}

// ctxReader stops a long read once ctx is cancelled (Ctrl-C, SIGTERM).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (s *objectSource) context() context.Context {
	if s.ctx == nil {
		return context.Background()
	}
	return s.ctx
}

// read returns the object h, verified.
func (s *objectSource) read(h Hash) (string, []byte, error) {
	if err := s.context().Err(); err != nil {
		return "", nil, err
	}
	w := &work{left: readWork(s.limit), bound: humanBytes(readWork(s.limit)) + ", the bound for one object"}
	if rest := sourceWork(s.limit) - s.spent; rest < w.left {
		w.left, w.bound = max(rest, 0), humanBytes(sourceWork(s.limit))+", the bound for all the objects of one snapshot"
	}
	typ, data, err := s.find(h, w)
	if err == nil {
		err = w.take(int64(len(data))) // the hash below
	}
	s.spent += w.used
	if err != nil {
		return "", nil, fmt.Errorf("object %s in %s: %w", h, s.name, err)
	}
	got, err := hashObject(typ, data)
	if err != nil {
		return "", nil, fmt.Errorf("object %s in %s: %w", h, s.name, err)
	}
	if got != h {
		return "", nil, fmt.Errorf("object %s in %s hashes to %s: tampered or corrupt", h, s.name, got)
	}
	return typ, data, nil
}

// location is where an object is: a loose object's open file, or a pack
// entry.
type location struct {
	file *os.File // loose; the caller closes it
	name string
	pos  packPos
}

// locate finds h: loose, then in the packs, then in the alt source.
func (s *objectSource) locate(h Hash) (location, error) {
	x := h.String()
	name := "objects/" + x[:2] + "/" + x[2:]
	f, _, err := openRegular(s.root, name)
	if err == nil {
		return location{file: f, name: name}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return location{}, err
	}
	s.openPacks()
	for _, p := range s.packs {
		if off, err := p.idx.FindOffset(plumbing.Hash(h)); err == nil {
			return location{pos: packPos{p, off}}, nil
		}
	}
	if s.alt != nil {
		return s.alt.locate(h)
	}
	return location{}, errNotFound
}

func (s *objectSource) find(h Hash, w *work) (string, []byte, error) {
	loc, err := s.locate(h)
	if err != nil {
		return "", nil, err
	}
	if loc.file != nil {
		defer loc.file.Close()
		return s.looseFile(loc.file, loc.name, w)
	}
	o, err := s.unpack(loc.pos, w)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", loc.pos.p.name, err)
	}
	return o.typ, o.data, nil
}

// loose reads a loose object of the source, with no bound but its limit.
func (s *objectSource) loose(name string) (string, []byte, error) {
	f, _, err := openRegular(s.root, name)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	return s.looseFile(f, name, nil)
}

// looseFile reads a zlib-compressed "<type> <size>\0<content>" object
// file, its declared size bounded before any content is inflated.
func (s *objectSource) looseFile(f *os.File, name string, w *work) (string, []byte, error) {
	zr, typ, size, err := s.looseHeader(f, name)
	if err != nil {
		return "", nil, err
	}
	if size > s.limit {
		return "", nil, fmt.Errorf("%s: %w (%d bytes)", name, errTooLarge, size)
	}
	if err := w.take(size); err != nil {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	data, err := readExactly(zr, size)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	return typ, data, nil
}

// looseHeader reads the "<type> <size>\0" header of a loose object file
// and returns the reader positioned at its content.
func (s *objectSource) looseHeader(f *os.File, name string) (io.Reader, string, int64, error) {
	zr, err := s.zlib(ctxReader{s.context(), f})
	if err != nil {
		return nil, "", 0, fmt.Errorf("%s: %w", name, err)
	}
	var hdr []byte
	var one [1]byte
	for {
		if _, err := io.ReadFull(zr, one[:]); err != nil {
			return nil, "", 0, fmt.Errorf("%s: bad header: %w", name, err)
		}
		if one[0] == 0 {
			break
		}
		if hdr = append(hdr, one[0]); len(hdr) > 32 {
			return nil, "", 0, fmt.Errorf("%s: bad header", name)
		}
	}
	typ, sizeStr, ok := strings.Cut(string(hdr), " ")
	size, err := strconv.ParseInt(sizeStr, 10, 64)
	if !ok || err != nil || size < 0 || !validType(typ) {
		return nil, "", 0, fmt.Errorf("%s: bad header %q", name, hdr)
	}
	return zr, typ, size, nil
}

// size returns the size of object h as its header says — a loose
// object's header, a pack entry's, or for a delta the result size its
// delta data begins with — inflating a few bytes, never the object. It
// is not checked against h (nothing is, until the whole object is
// read): take it as the sandbox's word.
func (s *objectSource) size(h Hash) (int64, error) {
	if err := s.context().Err(); err != nil {
		return 0, err
	}
	loc, err := s.locate(h)
	if err != nil {
		return 0, fmt.Errorf("object %s in %s: %w", h, s.name, err)
	}
	if loc.file != nil {
		defer loc.file.Close()
		_, _, size, err := s.looseHeader(loc.file, loc.name)
		if err != nil {
			return 0, fmt.Errorf("object %s in %s: %w", h, s.name, err)
		}
		return size, nil
	}
	e, err := readEntry(loc.pos)
	if err != nil {
		return 0, fmt.Errorf("object %s in %s: entry at %d of %s: %w", h, s.name, loc.pos.off, loc.pos.p.name, err)
	}
	if _, full := packTypes[e.kind]; full {
		return e.size, nil
	}
	// A delta's data begins with two varints: its base's size, then its
	// result's.
	p := e.pos.p
	zr, err := s.zlib(ctxReader{s.context(), io.NewSectionReader(p.f, e.at, p.size-20-e.at)})
	if err != nil {
		return 0, fmt.Errorf("object %s in %s: %w", h, s.name, err)
	}
	var hdr [20]byte
	n, _ := io.ReadFull(zr, hdr[:min(int64(len(hdr)), e.size)])
	b := hdr[:n]
	var size int64
	for i := 0; i < 2; i++ {
		size = 0
		for shift := 0; ; shift += 7 {
			if len(b) == 0 || shift > 56 {
				return 0, fmt.Errorf("object %s in %s: entry at %d of %s: corrupt delta", h, s.name, e.pos.off, p.name)
			}
			c := b[0]
			b = b[1:]
			size |= int64(c&0x7f) << shift
			if c&0x80 == 0 {
				break
			}
		}
	}
	return size, nil
}

// zlib returns the source's zlib reader reset to r.
func (s *objectSource) zlib(r io.Reader) (io.Reader, error) {
	if s.zr == nil {
		zr, err := zlib.NewReader(r)
		if err != nil {
			return nil, err
		}
		s.zr = zr
		return zr, nil
	}
	return s.zr, s.zr.(zlib.Resetter).Reset(r, nil)
}

func validType(t string) bool {
	return t == typeBlob || t == typeTree || t == typeCommit || t == typeTag
}

// readExactly reads size bytes and insists the stream ends there; memory
// grows with what arrives (doubling, never past size), not with what a
// header claims.
func readExactly(r io.Reader, size int64) ([]byte, error) {
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

// Pack entry types.
const (
	packCommit   = 1
	packTree     = 2
	packBlob     = 3
	packTag      = 4
	packOfsDelta = 6
	packRefDelta = 7
)

var packTypes = map[int]string{packCommit: typeCommit, packTree: typeTree, packBlob: typeBlob, packTag: typeTag}

// entry is a pack entry's header.
type entry struct {
	pos     packPos
	kind    int
	size    int64 // of the entry's inflated data: the object, or the delta
	at      int64 // where its zlib data starts
	baseOff int64 // packOfsDelta: the base's offset
	baseID  Hash  // packRefDelta: the base's ID
}

// readEntry reads the header of the entry at pos.
func readEntry(pos packPos) (entry, error) {
	p, off := pos.p, pos.off
	e := entry{pos: pos}
	if off < 12 || off >= p.size-20 {
		return e, fmt.Errorf("offset %d outside the pack", off)
	}
	var hdr [32]byte
	n, err := p.f.ReadAt(hdr[:], off)
	if err != nil && !errors.Is(err, io.EOF) {
		return e, err
	}
	buf := hdr[:n]
	i := 0
	next := func() (byte, error) {
		if i >= len(buf) {
			return 0, errors.New("truncated entry header")
		}
		i++
		return buf[i-1], nil
	}
	c, err := next()
	if err != nil {
		return e, err
	}
	e.kind = int(c>>4) & 7
	e.size = int64(c & 15)
	for shift := 4; c&0x80 != 0; shift += 7 {
		if c, err = next(); err != nil {
			return e, err
		}
		if shift > 56 {
			return e, errors.New("entry size overflows")
		}
		e.size |= int64(c&0x7f) << shift
	}
	switch e.kind {
	case packCommit, packTree, packBlob, packTag:
	case packOfsDelta:
		if c, err = next(); err != nil {
			return e, err
		}
		rel := int64(c & 0x7f)
		for c&0x80 != 0 {
			if c, err = next(); err != nil {
				return e, err
			}
			if rel > 1<<48 {
				return e, errors.New("delta offset overflows")
			}
			rel = ((rel + 1) << 7) | int64(c&0x7f)
		}
		e.baseOff = off - rel
		if rel <= 0 || e.baseOff < 12 {
			return e, errors.New("delta base outside the pack")
		}
	case packRefDelta:
		if len(buf) < i+20 {
			return e, errors.New("truncated entry header")
		}
		copy(e.baseID[:], buf[i:i+20])
		i += 20
	default:
		return e, fmt.Errorf("unknown entry type %d", e.kind)
	}
	e.at = off + int64(i)
	return e, nil
}

// unpack resolves the pack entry at pos. It walks the delta chain down to
// a full object or a cached base reading entry headers only — refusing a
// chain deeper than maxDeltaDepth, one that loops, or an entry larger than
// the limit, before anything is inflated — then inflates the base and
// applies the deltas upward, caching each result: memory holds one base
// and one result at a time, whatever the depth, and every error is one
// line however deep the chain.
func (s *objectSource) unpack(pos packPos, w *work) (object, error) {
	ctx := s.context()
	var chain []entry
	var base object
	for {
		if err := ctx.Err(); err != nil {
			return object{}, err
		}
		if o, ok := s.cache.get(pos); ok {
			base = o
			break
		}
		e, err := readEntry(pos)
		if err != nil {
			return object{}, fmt.Errorf("entry at %d of %s: %w", pos.off, pos.p.name, err)
		}
		if e.size > s.limit {
			return object{}, fmt.Errorf("entry at %d of %s: %w (%d bytes)", pos.off, pos.p.name, errTooLarge, e.size)
		}
		if typ, full := packTypes[e.kind]; full {
			if err := w.take(e.size); err != nil {
				return object{}, err
			}
			data, err := s.inflate(e)
			if err != nil {
				return object{}, fmt.Errorf("entry at %d of %s: %w", pos.off, pos.p.name, err)
			}
			base = object{typ, data}
			s.cache.add(pos, base)
			break
		}
		if len(chain) == maxDeltaDepth {
			return object{}, fmt.Errorf("delta chain deeper than %d", maxDeltaDepth)
		}
		chain = append(chain, e)
		if e.kind == packOfsDelta {
			pos = packPos{pos.p, e.baseOff} // always earlier in the pack: no loop
			continue
		}
		loc, err := s.locate(e.baseID)
		if err != nil {
			return object{}, fmt.Errorf("delta base %s: %w", e.baseID, err)
		}
		if loc.file != nil {
			typ, data, err := s.looseFile(loc.file, loc.name, w)
			loc.file.Close()
			if err != nil {
				return object{}, fmt.Errorf("delta base %s: %w", e.baseID, err)
			}
			base = object{typ, data}
			break
		}
		for _, c := range chain {
			if c.pos == loc.pos {
				return object{}, fmt.Errorf("delta cycle through %s", e.baseID)
			}
		}
		pos = loc.pos
	}
	for i := len(chain) - 1; i >= 0; i-- {
		e := chain[i]
		if err := ctx.Err(); err != nil {
			return object{}, err
		}
		if err := w.take(e.size); err != nil {
			return object{}, err
		}
		delta, err := s.inflate(e)
		if err != nil {
			return object{}, fmt.Errorf("entry at %d of %s: %w", e.pos.off, e.pos.p.name, err)
		}
		data, err := applyDelta(base.data, delta, s.limit, w)
		if err != nil {
			return object{}, fmt.Errorf("entry at %d of %s: %w", e.pos.off, e.pos.p.name, err)
		}
		base = object{base.typ, data}
		s.cache.add(e.pos, base)
	}
	return base, nil
}

func (s *objectSource) inflate(e entry) ([]byte, error) {
	p := e.pos.p
	zr, err := s.zlib(ctxReader{s.context(), io.NewSectionReader(p.f, e.at, p.size-20-e.at)})
	if err != nil {
		return nil, err
	}
	return readExactly(zr, e.size)
}

// baseCache keeps resolved pack entries, least recently used out first,
// bounded in bytes: the objects of a chain are the bases of the next
// object's chain, so a pack of many deltas of one large base inflates it
// once.
type baseCache struct {
	max, size int64
	order     *list.List // of *cached, most recent first
	byPos     map[packPos]*list.Element
}

type cached struct {
	pos packPos
	o   object
}

func newBaseCache(max int64) *baseCache {
	return &baseCache{max: max, order: list.New(), byPos: map[packPos]*list.Element{}}
}

func (c *baseCache) get(pos packPos) (object, bool) {
	el, ok := c.byPos[pos]
	if !ok {
		return object{}, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cached).o, true
}

func (c *baseCache) add(pos packPos, o object) {
	n := int64(len(o.data))
	if n > c.max {
		return
	}
	if el, ok := c.byPos[pos]; ok {
		c.order.MoveToFront(el)
		return
	}
	for c.size+n > c.max {
		last := c.order.Back()
		old := last.Value.(*cached)
		c.order.Remove(last)
		delete(c.byPos, old.pos)
		c.size -= int64(len(old.o.data))
	}
	c.byPos[pos] = c.order.PushFront(&cached{pos, o})
	c.size += n
}

// applyDelta applies a git delta to base, refusing a result over limit or
// over what w has left.
func applyDelta(base, delta []byte, limit int64, w *work) ([]byte, error) {
	bad := errors.New("corrupt delta")
	varint := func() (int64, error) {
		var v int64
		for shift := 0; ; shift += 7 {
			if len(delta) == 0 || shift > 56 {
				return 0, bad
			}
			c := delta[0]
			delta = delta[1:]
			v |= int64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, nil
			}
		}
	}
	srcSize, err := varint()
	if err != nil || srcSize != int64(len(base)) {
		return nil, bad
	}
	dstSize, err := varint()
	if err != nil {
		return nil, bad
	}
	if dstSize > limit {
		return nil, fmt.Errorf("%w (%d bytes)", errTooLarge, dstSize)
	}
	if err := w.take(dstSize); err != nil {
		return nil, err
	}
	out := make([]byte, 0, dstSize) // bounded by the limit and paid for

	for len(delta) > 0 {
		op := delta[0]
		delta = delta[1:]
		switch {
		case op&0x80 != 0:
			var off, n int64
			for bit := 0; bit < 7; bit++ {
				if op&(1<<bit) == 0 {
					continue
				}
				if len(delta) == 0 {
					return nil, bad
				}
				if bit < 4 {
					off |= int64(delta[0]) << (8 * bit)
				} else {
					n |= int64(delta[0]) << (8 * (bit - 4))
				}
				delta = delta[1:]
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > int64(len(base)) || int64(len(out))+n > dstSize {
				return nil, bad
			}
			out = append(out, base[off:off+n]...)
		case op != 0:
			n := int64(op)
			if n > int64(len(delta)) || int64(len(out))+n > dstSize {
				return nil, bad
			}
			out = append(out, delta[:n]...)
			delta = delta[n:]
		default:
			return nil, bad
		}
	}
	if int64(len(out)) != dstSize {
		return nil, bad
	}
	return out, nil
}
