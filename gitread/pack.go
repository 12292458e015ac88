package gitread

import (
	"bufio"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"

	"github.com/xmode/xmode/fsguard"
)

// packIndex finds an object's entry in a pack: go-git's decoded pack
// index (idxfile.MemoryIndex) for a pack on disk.
type packIndex interface {
	FindOffset(plumbing.Hash) (int64, error)
}

type packFile struct {
	name  string
	r     io.ReaderAt
	close func() error
	size  int64
	idx   packIndex
}

type packPos struct {
	p   *packFile
	off int64
}

type object struct {
	typ  string
	data []byte
}

// openPack opens objects/pack/<base>.{idx,pack} under root. The index is
// decoded by go-git's idxfile, which checks its size against the object
// count it claims before allocating anything and its checksum; every
// offset it gives is checked against the pack (readEntry).
func openPack(root *os.Root, base string) (*packFile, error) {
	idxF, _, err := fsguard.OpenRegularSized(root, "objects/pack/"+base+".idx")
	if err != nil {
		return nil, err
	}
	defer idxF.Close()
	idx := idxfile.NewMemoryIndex()
	// Buffered: the decoder reads the fan-out table four bytes at a time
	// (a read system call each, ~1,000 for an index of 2,000 objects).
	if err := idxfile.NewDecoder(bufio.NewReaderSize(idxF, 64<<10)).Decode(idx); err != nil {
		return nil, err
	}
	f, size, err := fsguard.OpenRegularSized(root, "objects/pack/"+base+".pack")
	if err != nil {
		return nil, err
	}
	if err := checkPackHeader(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s.pack is not a pack", base)
	}
	return &packFile{name: base, r: f, close: f.Close, size: size, idx: idx}, nil
}

// checkPackHeader checks "PACK" and a version git writes (2 or 3).
func checkPackHeader(r io.ReaderAt) error {
	var hdr [12]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return err
	}
	if v := binary.BigEndian.Uint32(hdr[4:]); string(hdr[:4]) != "PACK" || (v != 2 && v != 3) {
		return errors.New("not a pack")
	}
	return nil
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

var packTypes = map[int]string{packCommit: TypeCommit, packTree: TypeTree, packBlob: TypeBlob, packTag: TypeTag}

// entry is a pack entry's header.
type entry struct {
	pos     packPos
	kind    int
	size    int64 // of the entry's inflated data: the object, or the delta
	at      int64 // where its zlib data starts
	baseOff int64 // packOfsDelta: the base's offset
	baseID  Hash  // packRefDelta: the base's ID
}

// readEntry reads the header of the entry at pos, which must lie between
// the pack's header and its trailing checksum.
func readEntry(pos packPos) (entry, error) {
	p, off := pos.p, pos.off
	e := entry{pos: pos}
	if off < 12 || off >= p.size-20 {
		return e, fmt.Errorf("offset %d outside the pack", off)
	}
	var hdr [32]byte
	n, err := p.r.ReadAt(hdr[:], off)
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

// entrySize is the size of the object at pos from headers alone: the
// entry's, or for a delta the result size its data begins with.
func (s *Source) entrySize(pos packPos) (int64, error) {
	e, err := readEntry(pos)
	if err != nil {
		return 0, fmt.Errorf("entry at %d of %s: %w", pos.off, pos.p.name, err)
	}
	if _, full := packTypes[e.kind]; full {
		return e.size, nil
	}
	// A delta's data begins with two varints: its base's size, then its
	// result's.
	p := e.pos.p
	zr, err := s.zlib(ctxReader{s.ctx, io.NewSectionReader(p.r, e.at, p.size-20-e.at)})
	if err != nil {
		return 0, err
	}
	var hdr [20]byte
	n, _ := io.ReadFull(zr, hdr[:min(int64(len(hdr)), e.size)])
	b := hdr[:n]
	var size int64
	for i := 0; i < 2; i++ {
		size = 0
		for shift := 0; ; shift += 7 {
			if len(b) == 0 || shift > 56 {
				return 0, fmt.Errorf("entry at %d of %s: corrupt delta", e.pos.off, p.name)
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

// unpack resolves the pack entry at pos. It walks the delta chain down to
// a full object or a cached base reading entry headers only — refusing a
// chain deeper than MaxDeltaDepth, one that loops, or an entry larger
// than the limit, before anything is inflated — then inflates the base
// and applies the deltas upward, caching each result: memory holds one
// base and one result at a time, whatever the depth, and every error is
// one line however deep the chain.
func (s *Source) unpack(pos packPos, w *work) (object, error) {
	var chain []entry
	var base object
	for {
		if err := s.ctx.Err(); err != nil {
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
		if err := s.max.check(e.size); err != nil {
			return object{}, fmt.Errorf("entry at %d of %s: %w", pos.off, pos.p.name, err)
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
		if len(chain) == MaxDeltaDepth {
			return object{}, fmt.Errorf("delta chain deeper than %d", MaxDeltaDepth)
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
		if err := s.ctx.Err(); err != nil {
			return object{}, err
		}
		if err := w.take(e.size); err != nil {
			return object{}, err
		}
		delta, err := s.inflate(e)
		if err != nil {
			return object{}, fmt.Errorf("entry at %d of %s: %w", e.pos.off, e.pos.p.name, err)
		}
		data, err := applyDelta(base.data, delta, s.max, w)
		if err != nil {
			return object{}, fmt.Errorf("entry at %d of %s: %w", e.pos.off, e.pos.p.name, err)
		}
		base = object{base.typ, data}
		s.cache.add(e.pos, base)
	}
	return base, nil
}

func (s *Source) inflate(e entry) ([]byte, error) {
	p := e.pos.p
	zr, err := s.zlib(ctxReader{s.ctx, io.NewSectionReader(p.r, e.at, p.size-20-e.at)})
	if err != nil {
		return nil, err
	}
	return fsguard.ReadExactly(zr, e.size)
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
