package changes

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// packEntry is one entry of a hand-made pack: a full object, or a delta
// against an earlier entry (ofs) or an object ID (ref).
type packEntry struct {
	id   Hash // its ID in the index; zero: not indexed
	kind int
	data []byte // the object, or the delta
	ofs  int    // packOfsDelta: the index of the base entry
	ref  Hash   // packRefDelta: the base's ID
}

// writePack writes es as objects/pack/pack-<name>.{pack,idx} under gitDir,
// as git lays them out (pack v2, index v2).
func writePack(t testing.TB, gitDir, name string, es []packEntry) {
	t.Helper()
	var pack bytes.Buffer
	pack.WriteString("PACK")
	binary.Write(&pack, binary.BigEndian, uint32(2))
	binary.Write(&pack, binary.BigEndian, uint32(len(es)))
	offs := make([]int64, len(es))
	zw := zlib.NewWriter(nil) // one for all: making one costs ~0.5 MB
	for i, e := range es {
		offs[i] = int64(pack.Len())
		size := len(e.data)
		c := byte(e.kind<<4) | byte(size&15)
		size >>= 4
		for size > 0 {
			pack.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		pack.WriteByte(c)
		switch e.kind {
		case packOfsDelta:
			rel := offs[i] - offs[e.ofs]
			var b [10]byte
			pos := len(b) - 1
			b[pos] = byte(rel & 0x7f)
			for rel >>= 7; rel > 0; rel >>= 7 {
				rel--
				pos--
				b[pos] = 0x80 | byte(rel&0x7f)
			}
			pack.Write(b[pos:])
		case packRefDelta:
			pack.Write(e.ref[:])
		}
		zw.Reset(&pack)
		zw.Write(e.data)
		zw.Close()
	}
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])

	type ixe struct {
		id  Hash
		off int64
	}
	var ix []ixe
	for i, e := range es {
		if !e.id.IsZero() {
			ix = append(ix, ixe{e.id, offs[i]})
		}
	}
	sort.Slice(ix, func(i, j int) bool { return bytes.Compare(ix[i].id[:], ix[j].id[:]) < 0 })
	var idx bytes.Buffer
	idx.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
	for b := 0; b < 256; b++ {
		n := sort.Search(len(ix), func(i int) bool { return int(ix[i].id[0]) > b })
		binary.Write(&idx, binary.BigEndian, uint32(n))
	}
	for _, e := range ix {
		idx.Write(e.id[:])
	}
	for range ix {
		binary.Write(&idx, binary.BigEndian, uint32(0)) // crc
	}
	for _, e := range ix {
		binary.Write(&idx, binary.BigEndian, uint32(e.off))
	}
	idx.Write(sum[:])
	isum := sha1.Sum(idx.Bytes())
	idx.Write(isum[:])
	dir := filepath.Join(gitDir, "objects", "pack")
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "pack-"+name+".pack"), pack.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pack-"+name+".idx"), idx.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// makeDelta is a git delta from a base of srcSize bytes: copy n bytes at
// off, then insert add.
func makeDelta(srcSize, off, n int, add []byte) []byte {
	varint := func(b []byte, v int) []byte {
		for v >= 0x80 {
			b = append(b, byte(v)|0x80)
			v >>= 7
		}
		return append(b, byte(v))
	}
	d := varint(nil, srcSize)
	d = varint(d, n+len(add))
	if n > 0 {
		op := byte(0x80)
		var args []byte
		for i := 0; i < 4; i++ {
			if b := byte(off >> (8 * i)); b != 0 {
				op |= 1 << i
				args = append(args, b)
			}
		}
		for i := 0; i < 3; i++ {
			if b := byte(n >> (8 * i)); b != 0 {
				op |= 1 << (4 + i)
				args = append(args, b)
			}
		}
		d = append(append(d, op), args...)
	}
	for len(add) > 0 {
		k := min(len(add), 127)
		d = append(append(d, byte(k)), add[:k]...)
		add = add[k:]
	}
	return d
}

func fakeID(i int) Hash {
	return Hash(sha1.Sum([]byte(fmt.Sprintf("entry %d", i))))
}

// refChain is a pack of a blob of baseSize bytes and depth ref-deltas on
// top of one another, each copying its base and adding one byte. With
// realIDs every entry is indexed under its true ID (and the top's content
// returned); else under made-up IDs.
func refChain(t testing.TB, gitDir string, baseSize, depth int, realIDs bool) (top Hash, content []byte) {
	t.Helper()
	content = bytes.Repeat([]byte("0123456789abcdef"), baseSize/16)
	id := func(i int) Hash {
		if !realIDs {
			return fakeID(i)
		}
		h, _ := hashObject(typeBlob, content)
		return h
	}
	es := []packEntry{{id: id(0), kind: packBlob, data: content}}
	size := len(content)
	for i := 1; i <= depth; i++ {
		add := []byte{byte('a' + i%26)}
		d := makeDelta(size, 0, size, add)
		size++
		if realIDs {
			content = append(content, add...)
		}
		es = append(es, packEntry{id: id(i), kind: packRefDelta, data: d, ref: es[i-1].id})
	}
	writePack(t, gitDir, "chain", es)
	return es[depth].id, content
}

// allocated runs fn and returns how many bytes it allocated.
func allocated(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// A 5,000-deep ref-delta chain (what took 8 s and 2.4 GB, with a 490 KB
// error) is refused from its entry headers: nothing is inflated, and the
// error is one short line. A chain as deep as git writes (4,095) reads.
func TestSourceRefusesDeepDeltaChains(t *testing.T) {
	gitDir := t.TempDir()
	top, _ := refChain(t, gitDir, 64<<10, 5000, false)
	s := openTestSource(t, gitDir, 100<<20)
	var err error
	alloc := allocated(func() { _, _, err = s.read(top) })
	if err == nil || !strings.Contains(err.Error(), "delta chain deeper than 4095") {
		t.Fatalf("a 5,000-deep chain: %v", err)
	}
	if len(err.Error()) > 300 {
		t.Fatalf("the error grows with the chain: %d bytes", len(err.Error()))
	}
	if alloc > 8<<20 {
		t.Fatalf("refusing a 5,000-deep chain of 64 KiB objects allocated %d MiB", alloc>>20)
	}

	gitDir = t.TempDir()
	top, want := refChain(t, gitDir, 1<<10, maxDeltaDepth, true)
	s = openTestSource(t, gitDir, 100<<20)
	typ, data, err := s.read(top)
	if err != nil || typ != typeBlob || !bytes.Equal(data, want) {
		t.Fatalf("a %d-deep chain: %s %d bytes, %v", maxDeltaDepth, typ, len(data), err)
	}
}

// A chain within the depth bound whose links rebuild more than one read
// may (readWork) is refused once that much is spent, holding one base and
// one result at a time; its error does not grow with the chain either.
func TestSourceBoundsWorkPerRead(t *testing.T) {
	defer func(old int64) { workSlack = old }(workSlack)
	workSlack = 32 << 20
	gitDir := t.TempDir()
	top, _ := refChain(t, gitDir, 256<<10, 4000, false) // ~1 GiB to rebuild
	s := openTestSource(t, gitDir, 1<<20)
	_, _, err := s.read(top)
	if !errors.Is(err, errTooMuchWork) || len(err.Error()) > 300 {
		t.Fatalf("a chain that rebuilds 1 GiB: %v", err)
	}
	if s.spent > readWork(1<<20) {
		t.Fatalf("spent %d bytes, over the bound of %d", s.spent, readWork(1<<20))
	}
	// a corrupt base at the bottom of a deep chain: one line too
	gitDir = t.TempDir()
	es := []packEntry{{id: fakeID(0), kind: packBlob, data: []byte("base")}}
	for i := 1; i <= 4000; i++ {
		es = append(es, packEntry{id: fakeID(i), kind: packRefDelta, data: makeDelta(99, 0, 1, nil), ref: es[i-1].id})
	}
	writePack(t, gitDir, "bad", es)
	s = openTestSource(t, gitDir, 1<<20)
	if _, _, err := s.read(fakeID(4000)); err == nil || len(err.Error()) > 300 {
		t.Fatalf("a corrupt deep chain: %d bytes of error: %.300v", len(fmt.Sprint(err)), err)
	}
}

// Reads that each stay within their bound stop once all the reads of the
// source spent sourceWork.
func TestSourceBoundsWorkPerSource(t *testing.T) {
	defer func(old int64) { workSlack = old }(workSlack)
	workSlack = 1 << 20
	gitDir := t.TempDir()
	var es []packEntry
	var ids []Hash
	for i := 0; i < 40; i++ {
		data := bytes.Repeat([]byte{byte(i)}, 512<<10)
		h, _ := hashObject(typeBlob, data)
		es = append(es, packEntry{id: h, kind: packBlob, data: data})
		ids = append(ids, h)
	}
	writePack(t, gitDir, "many", es)
	const limit = 1 << 20 // readWork 9 MiB, sourceWork 36 MiB: 36 reads of 1 MiB of work
	s := openTestSource(t, gitDir, limit)
	var err error
	n := 0
	for _, h := range ids {
		if _, _, err = s.read(h); err != nil {
			break
		}
		n++
	}
	if !errors.Is(err, errTooMuchWork) || !strings.Contains(err.Error(), "for all the objects of one snapshot") || n < 30 || n == len(ids) {
		t.Fatalf("after %d reads: %v", n, err)
	}
}

// Many ofs-deltas of one large base (1,000 of a 100 MB base took 123 s and
// 7.4 GB): the base is inflated once and kept in the cache, so reading
// them all costs about the base once.
func TestSourceCachesDeltaBases(t *testing.T) {
	gitDir := t.TempDir()
	base := make([]byte, 8<<20)
	rand.New(rand.NewSource(1)).Read(base)
	es := []packEntry{{id: fakeID(-1), kind: packBlob, data: base}}
	var ids []Hash
	for i := 0; i < 300; i++ {
		add := []byte(fmt.Sprintf("version %d\n", i))
		off := (i * 7919) % (len(base) - 4096)
		want := append(append([]byte(nil), base[off:off+4096]...), add...)
		h, _ := hashObject(typeBlob, want)
		ids = append(ids, h)
		es = append(es, packEntry{id: h, kind: packOfsDelta, data: makeDelta(len(base), off, 4096, add), ofs: 0})
	}
	writePack(t, gitDir, "fan", es)
	s := openTestSource(t, gitDir, 100<<20)
	var err error
	alloc := allocated(func() {
		for _, h := range ids {
			if _, _, err = s.read(h); err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if alloc > 4*uint64(len(base)) || s.spent > 2*int64(len(base)) {
		t.Fatalf("reading 300 deltas of an 8 MiB base allocated %d MiB and spent %d MiB: the base is inflated more than once", alloc>>20, s.spent>>20)
	}
}

// The cache of bases stays within its bytes, least recently used out
// first.
func TestBaseCacheBound(t *testing.T) {
	c := newBaseCache(10)
	p := &packFile{}
	for i := int64(0); i < 5; i++ {
		c.add(packPos{p, i}, object{typeBlob, make([]byte, 4)})
	}
	if c.size > 10 || len(c.byPos) != 2 {
		t.Fatalf("cache holds %d bytes in %d entries", c.size, len(c.byPos))
	}
	if _, ok := c.get(packPos{p, 4}); !ok {
		t.Fatal("the newest entry was evicted")
	}
	c.add(packPos{p, 9}, object{typeBlob, make([]byte, 11)})
	if _, ok := c.get(packPos{p, 9}); ok {
		t.Fatal("an object larger than the cache was cached")
	}
}
