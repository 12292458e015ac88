package changes

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"

	"github.com/xmode/xmode/storage"
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
// for. A tampered or corrupt object is an error, never an answer.
type objectSource struct {
	root      *os.Root
	ownsRoot  bool   // Close closes root too
	name      string // for messages
	limit     int64
	packs     []*packFile
	packsOpen bool
	// cache keeps delta bases (objects up to 1 MB), bounded in total.
	cache     map[packPos]object
	cacheSize int64
	reading   map[Hash]bool // objects being resolved: a ref-delta back to one is a cycle
	zr        io.ReadCloser // reused: a zlib reader costs ~40 KB to make
	// alt is searched for what this source lacks: the run's own objects
	// (storage.RecordOverlay) beside a project machine's.
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

// maxDeltaDepth bounds delta chains (git's own limit when packing is 4095).
const maxDeltaDepth = 5000

// openSource opens the objects of the git directory root (which it now
// owns). Its packs are opened on the first object not found loose; a pack
// whose index does not parse is skipped: its objects are then simply not
// found.
func openSource(root *os.Root, name string, limit int64) *objectSource {
	return &objectSource{root: root, ownsRoot: true, name: name, limit: limit, cache: map[packPos]object{}}
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

// readDirNames lists dir under root (storage.ReadDir: a FIFO in its place
// does not block, a link is not followed).
func readDirNames(root *os.Root, dir string) ([]string, error) {
	entries, err := storage.ReadDir(root, dir)
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

// openRegular opens name under root for reading as storage.OpenRegular
// does (no final link followed, no FIFO waited on, only a regular file),
// with its size.
func openRegular(root *os.Root, name string) (*os.File, int64, error) {
	f, err := storage.OpenRegular(root, name)
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

// read returns the object h, verified.
func (s *objectSource) read(h Hash) (string, []byte, error) {
	return s.readDepth(h, 0)
}

func (s *objectSource) readDepth(h Hash, depth int) (string, []byte, error) {
	if depth > maxDeltaDepth {
		return "", nil, fmt.Errorf("object %s: delta chain too deep", h)
	}
	if s.reading[h] {
		return "", nil, fmt.Errorf("object %s: delta cycle", h)
	}
	if s.reading == nil {
		s.reading = map[Hash]bool{}
	}
	s.reading[h] = true
	defer delete(s.reading, h)
	typ, data, err := s.find(h, depth)
	if err != nil {
		return "", nil, err
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

func (s *objectSource) find(h Hash, depth int) (string, []byte, error) {
	hex := h.String()
	typ, data, err := s.loose("objects/" + hex[:2] + "/" + hex[2:])
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return typ, data, err
	}
	s.openPacks()
	for _, p := range s.packs {
		off, err := p.idx.FindOffset(plumbing.Hash(h))
		if err != nil {
			continue
		}
		o, err := s.packObject(p, off, depth)
		if err != nil {
			return "", nil, fmt.Errorf("object %s in %s: %w", h, p.name, err)
		}
		return o.typ, o.data, nil
	}
	if s.alt != nil {
		return s.alt.find(h, depth)
	}
	return "", nil, fmt.Errorf("object %s: %w in %s", h, errNotFound, s.name)
}

// loose reads a zlib-compressed "<type> <size>\0<content>" object file.
func (s *objectSource) loose(name string) (string, []byte, error) {
	f, _, err := openRegular(s.root, name)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	zr, err := s.zlib(f)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	var hdr []byte
	var one [1]byte
	for {
		if _, err := io.ReadFull(zr, one[:]); err != nil {
			return "", nil, fmt.Errorf("%s: bad header: %w", name, err)
		}
		if one[0] == 0 {
			break
		}
		if hdr = append(hdr, one[0]); len(hdr) > 32 {
			return "", nil, fmt.Errorf("%s: bad header", name)
		}
	}
	typ, sizeStr, ok := strings.Cut(string(hdr), " ")
	size, err := strconv.ParseInt(sizeStr, 10, 64)
	if !ok || err != nil || size < 0 || !validType(typ) {
		return "", nil, fmt.Errorf("%s: bad header %q", name, hdr)
	}
	if size > s.limit {
		return "", nil, fmt.Errorf("%s: %w (%d bytes)", name, errTooLarge, size)
	}
	data, err := readExactly(zr, size)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	return typ, data, nil
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
// grows with what arrives, never with what a header claims.
func readExactly(r io.Reader, size int64) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(int(min(size, 1<<20)))
	n, err := io.Copy(&b, io.LimitReader(r, size+1))
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	if n != size {
		return nil, fmt.Errorf("content is %d bytes, header says %d", n, size)
	}
	return b.Bytes(), nil
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

func (s *objectSource) packObject(p *packFile, off int64, depth int) (object, error) {
	if depth > maxDeltaDepth {
		return object{}, errors.New("delta chain too deep")
	}
	if o, ok := s.cache[packPos{p, off}]; ok {
		return o, nil
	}
	if off < 12 || off >= p.size-20 {
		return object{}, fmt.Errorf("offset %d outside the pack", off)
	}
	var hdr [32]byte
	n, err := p.f.ReadAt(hdr[:], off)
	if err != nil && !errors.Is(err, io.EOF) {
		return object{}, err
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
		return object{}, err
	}
	kind := int(c>>4) & 7
	size := int64(c & 15)
	for shift := 4; c&0x80 != 0; shift += 7 {
		if c, err = next(); err != nil {
			return object{}, err
		}
		if shift > 56 {
			return object{}, errors.New("entry size overflows")
		}
		size |= int64(c&0x7f) << shift
	}
	if size > s.limit {
		return object{}, fmt.Errorf("%w (%d bytes)", errTooLarge, size)
	}
	var o object
	switch kind {
	case packCommit, packTree, packBlob, packTag:
		data, err := s.inflate(p, off+int64(i), size)
		if err != nil {
			return object{}, err
		}
		o = object{packTypes[kind], data}
	case packOfsDelta:
		if c, err = next(); err != nil {
			return object{}, err
		}
		rel := int64(c & 0x7f)
		for c&0x80 != 0 {
			if c, err = next(); err != nil {
				return object{}, err
			}
			if rel > 1<<48 {
				return object{}, errors.New("delta offset overflows")
			}
			rel = ((rel + 1) << 7) | int64(c&0x7f)
		}
		baseOff := off - rel
		if rel <= 0 || baseOff < 12 {
			return object{}, errors.New("delta base outside the pack")
		}
		base, err := s.packObject(p, baseOff, depth+1)
		if err != nil {
			return object{}, err
		}
		if o, err = s.undelta(p, off+int64(i), size, base); err != nil {
			return object{}, err
		}
	case packRefDelta:
		if len(buf) < i+20 {
			return object{}, errors.New("truncated entry header")
		}
		var bh Hash
		copy(bh[:], buf[i:i+20])
		i += 20
		btyp, bdata, err := s.readDepth(bh, depth+1)
		if err != nil {
			return object{}, err
		}
		if o, err = s.undelta(p, off+int64(i), size, object{btyp, bdata}); err != nil {
			return object{}, err
		}
	default:
		return object{}, fmt.Errorf("unknown entry type %d", kind)
	}
	if int64(len(o.data)) <= 1<<20 {
		if s.cacheSize > 64<<20 {
			clear(s.cache)
			s.cacheSize = 0
		}
		s.cache[packPos{p, off}] = o
		s.cacheSize += int64(len(o.data))
	}
	return o, nil
}

func (s *objectSource) inflate(p *packFile, at, size int64) ([]byte, error) {
	zr, err := s.zlib(io.NewSectionReader(p.f, at, p.size-20-at))
	if err != nil {
		return nil, err
	}
	return readExactly(zr, size)
}

func (s *objectSource) undelta(p *packFile, at, size int64, base object) (object, error) {
	delta, err := s.inflate(p, at, size)
	if err != nil {
		return object{}, err
	}
	data, err := applyDelta(base.data, delta, s.limit)
	if err != nil {
		return object{}, err
	}
	return object{base.typ, data}, nil
}

// applyDelta applies a git delta to base, refusing a result over limit.
func applyDelta(base, delta []byte, limit int64) ([]byte, error) {
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
	out := make([]byte, 0, min(dstSize, 1<<20))
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
