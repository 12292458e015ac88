package gitread

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"strings"
	"testing"

	"github.com/xmode/xmode/gitread/gitreadtest"
)

// testLimits are the bounds docs/change-requests.md ("Hostile packs")
// gives for objects of at most object bytes, with slack for the work
// bounds instead of 256 MiB.
func testLimits(object, slack int64) Limits {
	read := object*8 + slack
	return Limits{Object: object, ObjectName: "XMODE_CR_MAX_BYTES", Read: read, All: 4 * read, AllName: "all the objects of one snapshot", Cache: min(object+64<<20, 512<<20)}
}

func fakeID(i int) Hash { return gitreadtest.FakeID(i) }

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
		h, _ := HashObject(TypeBlob, content)
		return h
	}
	es := []gitreadtest.Entry{{ID: id(0), Kind: gitreadtest.Blob, Data: content}}
	size := len(content)
	for i := 1; i <= depth; i++ {
		add := []byte{byte('a' + i%26)}
		d := gitreadtest.Delta(size, 0, size, add)
		size++
		if realIDs {
			content = append(content, add...)
		}
		es = append(es, gitreadtest.Entry{ID: id(i), Kind: gitreadtest.RefDelta, Data: d, Ref: es[i-1].ID})
	}
	gitreadtest.WritePack(t, gitDir, "chain", es)
	return es[depth].ID, content
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
	alloc := allocated(func() { _, _, err = s.Read(top) })
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
	top, want := refChain(t, gitDir, 1<<10, MaxDeltaDepth, true)
	s = openTestSource(t, gitDir, 100<<20)
	typ, data, err := s.Read(top)
	if err != nil || typ != TypeBlob || !bytes.Equal(data, want) {
		t.Fatalf("a %d-deep chain: %s %d bytes, %v", MaxDeltaDepth, typ, len(data), err)
	}
}

// A chain within the depth bound whose links rebuild more than one read
// may (Limits.Read) is refused once that much is spent, holding one base
// and one result at a time; its error does not grow with the chain either.
func TestSourceBoundsWorkPerRead(t *testing.T) {
	gitDir := t.TempDir()
	top, _ := refChain(t, gitDir, 256<<10, 4000, false) // ~1 GiB to rebuild
	lim := testLimits(1<<20, 32<<20)
	s := openTestSourceLimits(t, gitDir, lim)
	_, _, err := s.Read(top)
	if !errors.Is(err, ErrTooMuchWork) || len(err.Error()) > 300 {
		t.Fatalf("a chain that rebuilds 1 GiB: %v", err)
	}
	if s.spent > lim.Read {
		t.Fatalf("spent %d bytes, over the bound of %d", s.spent, lim.Read)
	}
	// a corrupt base at the bottom of a deep chain: one line too
	gitDir = t.TempDir()
	es := []gitreadtest.Entry{{ID: fakeID(0), Kind: gitreadtest.Blob, Data: []byte("base")}}
	for i := 1; i <= 4000; i++ {
		es = append(es, gitreadtest.Entry{ID: fakeID(i), Kind: gitreadtest.RefDelta, Data: gitreadtest.Delta(99, 0, 1, nil), Ref: es[i-1].ID})
	}
	gitreadtest.WritePack(t, gitDir, "bad", es)
	s = openTestSource(t, gitDir, 1<<20)
	if _, _, err := s.Read(fakeID(4000)); err == nil || len(err.Error()) > 300 {
		t.Fatalf("a corrupt deep chain: %d bytes of error: %.300v", len(fmt.Sprint(err)), err)
	}
}

// Reads that each stay within their bound stop once all the reads of the
// source spent Limits.All.
func TestSourceBoundsWorkPerSource(t *testing.T) {
	gitDir := t.TempDir()
	var es []gitreadtest.Entry
	var ids []Hash
	for i := 0; i < 40; i++ {
		data := bytes.Repeat([]byte{byte(i)}, 512<<10)
		h, _ := HashObject(TypeBlob, data)
		es = append(es, gitreadtest.Entry{ID: h, Kind: gitreadtest.Blob, Data: data})
		ids = append(ids, h)
	}
	gitreadtest.WritePack(t, gitDir, "many", es)
	// Read 9 MiB, All 36 MiB: 36 reads of 1 MiB of work
	s := openTestSourceLimits(t, gitDir, testLimits(1<<20, 1<<20))
	var err error
	n := 0
	for _, h := range ids {
		if _, _, err = s.Read(h); err != nil {
			break
		}
		n++
	}
	if !errors.Is(err, ErrTooMuchWork) || !strings.Contains(err.Error(), "for all the objects of one snapshot") || n < 30 || n == len(ids) {
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
	es := []gitreadtest.Entry{{ID: fakeID(-1), Kind: gitreadtest.Blob, Data: base}}
	var ids []Hash
	for i := 0; i < 300; i++ {
		add := []byte(fmt.Sprintf("version %d\n", i))
		off := (i * 7919) % (len(base) - 4096)
		want := append(append([]byte(nil), base[off:off+4096]...), add...)
		h, _ := HashObject(TypeBlob, want)
		ids = append(ids, h)
		es = append(es, gitreadtest.Entry{ID: h, Kind: gitreadtest.OfsDelta, Data: gitreadtest.Delta(len(base), off, 4096, add), Ofs: 0})
	}
	gitreadtest.WritePack(t, gitDir, "fan", es)
	s := openTestSource(t, gitDir, 100<<20)
	var err error
	alloc := allocated(func() {
		for _, h := range ids {
			if _, _, err = s.Read(h); err != nil {
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
		c.add(packPos{p, i}, object{TypeBlob, make([]byte, 4)})
	}
	if c.size > 10 || len(c.byPos) != 2 {
		t.Fatalf("cache holds %d bytes in %d entries", c.size, len(c.byPos))
	}
	if _, ok := c.get(packPos{p, 4}); !ok {
		t.Fatal("the newest entry was evicted")
	}
	c.add(packPos{p, 9}, object{TypeBlob, make([]byte, 11)})
	if _, ok := c.get(packPos{p, 9}); ok {
		t.Fatal("an object larger than the cache was cached")
	}
}
