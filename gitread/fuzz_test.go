package gitread

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/xmode/xmode/gitread/gitreadtest"
)

// The fuzz targets read what a sandbox could write — packs, deltas, an
// index, trees, commits, ignore patterns — and must neither panic, nor
// hang, nor allocate beyond their bounds; where there is a simpler way to
// the same answer (a round trip, a regular
// expression, the delta format applied plainly) they must agree with it. Their seeds come from a repository
// the real git made (seedRepo). `make fuzz` runs each for a while.

// fuzzLimits keep a fuzzed read small: objects up to 1 MiB, 8 MiB of
// work a read, 32 MiB in all.
var fuzzLimits = Limits{Object: 1 << 20, ObjectName: "the limit", Read: 8 << 20, All: 32 << 20, AllName: "the fuzzed pack", Cache: 1 << 20}

// memIndex is a pack index held as records of an ID (20 bytes) and an
// offset (4 bytes, big-endian), so the fuzzer mutates the index with the
// pack: the offsets go-git's idxfile would give, unchecked, as a hostile
// index may hold any.
type memIndex map[Hash]int64

func parseMemIndex(b []byte) (memIndex, []Hash) {
	idx := memIndex{}
	var ids []Hash
	for ; len(b) >= 24 && len(ids) < 256; b = b[24:] {
		var h Hash
		copy(h[:], b)
		if _, dup := idx[h]; !dup {
			ids = append(ids, h)
		}
		idx[h] = int64(binary.BigEndian.Uint32(b[20:]))
	}
	return idx, ids
}

func (m memIndex) FindOffset(h plumbing.Hash) (int64, error) {
	if off, ok := m[Hash(h)]; ok {
		return off, nil
	}
	return 0, plumbing.ErrObjectNotFound
}

// memorySource reads pack (indexed by index) as if it were the one pack
// of the empty git directory root.
func memorySource(root *os.Root, pack []byte, index memIndex) *Source {
	s := NewSource(root, Options{Name: "the fuzzed pack", Limits: fuzzLimits})
	s.packs = []*packFile{{name: "pack-fuzz", r: bytes.NewReader(pack), close: func() error { return nil }, size: int64(len(pack)), idx: index}}
	s.packsOpen = true
	return s
}

func emptyRoot(tb testing.TB) *os.Root {
	root, err := os.OpenRoot(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { root.Close() })
	return root
}

// FuzzPackObject reads every object a pack's index names through the
// bounded reader: an object it returns hashes to its ID and has the size
// its headers declare, and all the reads stay within their bounds.
func FuzzPackObject(f *testing.F) {
	r := newSeedRepo(f)
	for _, p := range r.packs {
		f.Add(p.pack, p.index)
	}
	// hand-made: a delta of itself, and a chain through a missing base
	self := gitreadtest.FakeID(1)
	pack, offs := gitreadtest.EncodePack([]gitreadtest.Entry{
		{Kind: gitreadtest.Blob, Data: []byte("base")},
		{Kind: gitreadtest.RefDelta, Data: gitreadtest.Delta(4, 0, 4, []byte("!")), Ref: self},
		{Kind: gitreadtest.OfsDelta, Data: gitreadtest.Delta(5, 1, 3, nil), Ofs: 1},
	})
	var index []byte
	for i, id := range []Hash{gitreadtest.FakeID(0), self, gitreadtest.FakeID(2)} {
		index = binary.BigEndian.AppendUint32(append(index, id[:]...), uint32(offs[i]))
	}
	f.Add(pack, index)
	for _, h := range hostilePacks() {
		f.Add(h[0], h[1])
	}
	root := emptyRoot(f)
	f.Fuzz(func(t *testing.T, pack, index []byte) {
		if checkPackHeader(bytes.NewReader(pack)) != nil {
			return // openPack refuses it
		}
		idx, ids := parseMemIndex(index)
		s := memorySource(root, pack, idx)
		for _, id := range ids {
			typ, data, err := s.Read(id)
			size, serr := s.Size(id)
			if err != nil {
				continue
			}
			if got, _ := HashObject(typ, data); got != id {
				t.Fatalf("read %s: a %s that hashes to %s", id, typ, got)
			}
			if serr != nil || size != int64(len(data)) {
				t.Fatalf("read %s: %d bytes, its headers say %d (%v)", id, len(data), size, serr)
			}
		}
		if s.spent > fuzzLimits.All {
			t.Fatalf("the reads spent %d bytes, over the bound of %d", s.spent, fuzzLimits.All)
		}
	})
}

// rawPack is a pack of entries given byte for byte (headers and data
// however malformed), each indexed under gitreadtest.FakeID(i) at its
// offset, and a made-up trailer.
func rawPack(entries ...[]byte) (pack, index []byte) {
	pack = []byte("PACK\x00\x00\x00\x02")
	pack = binary.BigEndian.AppendUint32(pack, uint32(len(entries)))
	for i, e := range entries {
		index = indexRecord(index, gitreadtest.FakeID(i), len(pack))
		pack = append(pack, e...)
	}
	return append(pack, bytes.Repeat([]byte{0xee}, 20)...), index
}

func indexRecord(index []byte, id Hash, off int) []byte {
	return binary.BigEndian.AppendUint32(append(index, id[:]...), uint32(off))
}

// hostilePacks are packs (and their indexes) a sandbox could write to
// reach each refusal of readEntry and unpack.
func hostilePacks() [][2][]byte {
	blob := append([]byte{packBlob<<4 | 4}, deflate([]byte("base"))...)
	var out [][2][]byte
	add := func(pack, index []byte) { out = append(out, [2][]byte{pack, index}) }
	// an index pointing into the header, past the entries, and at 2 GiB
	pack, index := rawPack(blob)
	index = indexRecord(index, gitreadtest.FakeID(7), 3)
	index = indexRecord(index, gitreadtest.FakeID(8), len(pack)-20)
	add(pack, indexRecord(index, gitreadtest.FakeID(9), 1<<31))
	// an entry size that overflows; an entry type git does not write
	add(rawPack(append([]byte{packBlob<<4 | 0x8f}, bytes.Repeat([]byte{0xff}, 10)...)))
	add(rawPack(append([]byte{5 << 4}, deflate(nil)...)))
	// an entry over the limit (2 MiB), and one whose data is not zlib or
	// shorter than its header says
	add(rawPack(append([]byte{packBlob<<4 | 0x80, 0x80, 0x80, 0x08}, deflate([]byte("small"))...)))
	add(rawPack(append([]byte{packBlob<<4 | 5}, "not zlib"...)))
	add(rawPack(append([]byte{packBlob<<4 | 10}, deflate([]byte("short"))...)))
	// offset deltas: a base before the pack, an offset that overflows, a
	// delta git would not write, a result over the limit
	add(rawPack(append([]byte{packOfsDelta<<4 | 1, 100}, deflate([]byte{0})...)))
	add(rawPack(append([]byte{packOfsDelta<<4 | 1}, append(bytes.Repeat([]byte{0xff}, 9), 1)...)))
	add(rawPack(blob, append([]byte{packOfsDelta<<4 | 1, byte(len(blob))}, deflate([]byte{0x80})...)))
	huge := []byte{4, 0x80, 0x80, 0x80, 0x01}
	add(rawPack(blob, append([]byte{packOfsDelta<<4 | byte(len(huge)), byte(len(blob))}, deflate(huge)...)))
	// reference deltas: a base no index names, a header cut by the end of
	// the pack
	missing := gitreadtest.FakeID(77)
	add(rawPack(append(append([]byte{packRefDelta<<4 | 1}, missing[:]...), deflate([]byte{0})...)))
	cut, index := rawPack(blob)
	cut = append(cut[:len(cut)-20], packRefDelta<<4|0x81, 0)
	cut = append(cut, bytes.Repeat([]byte{0xee}, 19)...)
	add(cut, indexRecord(index, gitreadtest.FakeID(5), len(cut)-21))
	return out
}

// seedDeltas are the deltas of the seed repository's packs with their
// bases, as real git wrote them.
func seedDeltas(t testing.TB, r *seedRepo) [][2][]byte {
	var out [][2][]byte
	root := emptyRoot(t)
	for _, p := range r.packs {
		idx, ids := parseMemIndex(p.index)
		s := memorySource(root, p.pack, idx)
		for _, id := range ids {
			e, err := readEntry(packPos{s.packs[0], idx[id]})
			if err != nil {
				t.Fatal(err)
			}
			var base object
			switch e.kind {
			case packOfsDelta:
				base, err = s.unpack(packPos{s.packs[0], e.baseOff}, nil)
			case packRefDelta:
				base, err = s.unpack(packPos{s.packs[0], idx[e.baseID]}, nil)
			default:
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			delta, err := s.inflate(e)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, [2][]byte{base.data, delta})
		}
	}
	if len(out) == 0 {
		t.Fatal("the seed repository's packs hold no delta")
	}
	return out
}

// refDelta applies a delta as gitformat-pack describes the format, with
// no bound and no shortcut: the base's size and the result's (varints),
// then instructions — a byte with its high bit set copies from the base
// (its low four bits say which offset bytes follow, the next three which
// size bytes, a size of 0 meaning 0x10000), a byte 1 to 127 inserts that
// many bytes of the delta, 0 is reserved.
func refDelta(base, delta []byte) ([]byte, bool) {
	varint := func() (uint64, bool) {
		var v uint64
		for shift := 0; len(delta) > 0 && shift < 64; shift += 7 {
			c := delta[0]
			delta = delta[1:]
			v |= uint64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	src, ok1 := varint()
	dst, ok2 := varint()
	if !ok1 || !ok2 || src != uint64(len(base)) {
		return nil, false
	}
	var out []byte
	for len(delta) > 0 {
		op := delta[0]
		delta = delta[1:]
		switch {
		case op&0x80 != 0:
			var off, n uint64
			for bit := 0; bit < 7; bit++ {
				if op&(1<<bit) == 0 {
					continue
				}
				if len(delta) == 0 {
					return nil, false
				}
				if bit < 4 {
					off |= uint64(delta[0]) << (8 * bit)
				} else {
					n |= uint64(delta[0]) << (8 * (bit - 4))
				}
				delta = delta[1:]
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > uint64(len(base)) {
				return nil, false
			}
			out = append(out, base[off:off+n]...)
		case op != 0:
			if int(op) > len(delta) {
				return nil, false
			}
			out = append(out, delta[:op]...)
			delta = delta[op:]
		default:
			return nil, false
		}
		if uint64(len(out)) > dst {
			return nil, false
		}
	}
	return out, uint64(len(out)) == dst
}

// FuzzApplyDelta applies a delta to a base: the result is refDelta's, or
// a refusal where refDelta fails or the result would pass the limit or
// what the read has left; a result is paid for, once.
func FuzzApplyDelta(f *testing.F) {
	for _, d := range seedDeltas(f, newSeedRepo(f)) {
		f.Add(d[0], d[1])
	}
	max := sizeLimit{1 << 20, "the limit"}
	f.Fuzz(func(t *testing.T, base, delta []byte) {
		w := &work{left: 4 << 20}
		out, err := applyDelta(base, delta, max, w)
		ref, ok := refDelta(base, delta)
		switch {
		case err != nil && ok && int64(len(ref)) <= max.max:
			t.Fatalf("applyDelta refuses a delta of %d bytes: %v", len(ref), err)
		case err == nil && !ok:
			t.Fatalf("applyDelta applies a delta the format does not allow: %q", out)
		case err == nil && int64(len(out)) > max.max:
			t.Fatalf("a result of %d bytes, over the limit", len(out))
		case err == nil && !bytes.Equal(out, ref):
			t.Fatalf("applyDelta gives %q, the format says %q", out, ref)
		case err == nil && w.used != int64(len(out)):
			t.Fatalf("%d bytes, %d paid for", len(out), w.used)
		}
	})
}

// FuzzParseIndex parses an index (versions 2 to 4): keeping only the
// gitlinks agrees with keeping all, an index of what it read (version 2,
// EncodeIndex) reads back the same, and the tree of it is computed or
// refused without a panic.
func FuzzParseIndex(f *testing.F) {
	indexes := newSeedRepo(f).indexes
	for _, b := range indexes {
		f.Add(b)
	}
	v2 := indexes[0]
	header := func(version, count uint32) []byte {
		return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte("DIRC"), version), count)
	}
	entry := func(flags uint16, path string) []byte {
		e := binary.BigEndian.AppendUint16(make([]byte, 60), flags)
		return append(append(e, path...), 0, 0, 0, 0, 0, 0, 0, 0)
	}
	for _, hostile := range [][]byte{
		nil, header(9, 0), header(2, 1<<31), v2[:len(v2)/2],
		append(header(2, 1), entry(0x4000, "extended flags in version 2")...),
		append(header(2, 1), entry(0, "")...),
		append(header(2, 1), append(make([]byte, 62), "no NUL"...)...),
		append(header(4, 1), append(binary.BigEndian.AppendUint16(make([]byte, 60), 1), 5, 'x', 0)...),
		append(header(4, 1), append(make([]byte, 62), 0x80)...),
	} {
		f.Add(hostile)
	}
	gitlinks := func(m uint32) bool { return m == ModeGitlink }
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := ParseIndex(b)
		links, lerr := ParseIndexOf(b, gitlinks)
		if (err == nil) != (lerr == nil) {
			t.Fatalf("all entries: %v; gitlinks only: %v", err, lerr)
		}
		if err != nil {
			return
		}
		want := slices.DeleteFunc(slices.Clone(es), func(e IndexEntry) bool { return !gitlinks(e.Mode) })
		if !slices.Equal(links, want) {
			t.Fatalf("gitlinks only: %+v, of all: %+v", links, want)
		}
		TreeOfIndex(es, nil)
		for _, e := range es {
			if e.Stage != 0 || e.Path == "" {
				return // EncodeIndex writes stage 0
			}
		}
		back, err := ParseIndex(EncodeIndex(slices.Clone(es)))
		if err != nil {
			t.Fatalf("EncodeIndex of %d entries does not parse: %v", len(es), err)
		}
		cmp := func(a, b IndexEntry) int {
			return strings.Compare(a.Path, b.Path)*4 + cmpInt(a.Mode, b.Mode)*2 + bytes.Compare(a.Hash[:], b.Hash[:])
		}
		slices.SortFunc(es, cmp)
		slices.SortFunc(back, cmp)
		for i := range es {
			es[i].Stat = IndexStat{} // EncodeIndex writes no stat data
		}
		if !slices.Equal(es, back) {
			t.Fatalf("read back %+v, wrote %+v", back, es)
		}
	})
}

func cmpInt(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FuzzParseTree parses a tree: every entry it returns has a name that
// stays inside the tree and a mode git writes, and encoding the entries
// parses back to them.
func FuzzParseTree(f *testing.F) {
	r := newSeedRepo(f)
	for _, id := range r.objects(TypeTree) {
		f.Add(r.object(TypeTree, id))
	}
	id := strings.Repeat("\x01", 20)
	for _, hostile := range []string{
		"100664 old group-writable\x00" + id, "100644 ..\x00" + id, "100644 a/b\x00" + id, "100644 \x00" + id,
		"644 bad mode\x00" + id, "10x644 not octal\x00" + id, "1000000644 too long\x00" + id, "100644 cut\x00short", "no space",
	} {
		f.Add([]byte(hostile))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := ParseTree(data)
		if err != nil {
			return
		}
		for _, e := range es {
			if e.Name == "" || e.Name == "." || e.Name == ".." || strings.Contains(e.Name, "/") {
				t.Fatalf("entry name %q", e.Name)
			}
			switch e.Mode {
			case ModeTree, ModeFile, ModeExec, ModeSymlink, ModeGitlink:
			default:
				t.Fatalf("entry %q: mode %o", e.Name, e.Mode)
			}
		}
		back, err := ParseTree(EncodeTree(es))
		if err != nil || !slices.Equal(back, es) {
			t.Fatalf("encoded and parsed again: %+v, %v; want %+v", back, err, es)
		}
	})
}

// FuzzParseCommit parses a commit: one it accepts has a tree and prints
// as JSON (what xmode shows of it).
func FuzzParseCommit(f *testing.F) {
	r := newSeedRepo(f)
	for _, id := range r.objects(TypeCommit) {
		f.Add(r.object(TypeCommit, id))
	}
	tree := "tree " + strings.Repeat("ab", 20) + "\n"
	for _, hostile := range []string{
		"", tree + tree, "tree 123\n", tree + "parent nothex\n", tree + "author no email\n",
		tree + "author A <a@b> not-a-time +0100\ncommitter C <c@d> 1700000000 -0130\n\nmessage",
		tree + "author A <a@b> 99999999999999 +9999\n", strings.TrimSuffix(tree, "\n"),
	} {
		f.Add([]byte(hostile))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCommit(Hash{1}, data)
		if err != nil {
			return
		}
		if c.Tree.IsZero() && !bytes.Contains(data, []byte("tree "+strings.Repeat("0", 40))) {
			t.Fatalf("no tree: %+v", c)
		}
		if _, err := json.Marshal(c); err != nil {
			t.Fatalf("as JSON: %v", err)
		}
	})
}

// wildRef is a plain reference for the patterns it can express, from
// their documented meaning (gitignore(5), "PATTERN FORMAT"): literals,
// '?', '*' and backslash escapes, no sets; with pathname '*' and '?' do
// not match '/', and "**" as a whole component matches across
// directories — "**/" any leading directories, none included, "/**" at
// the end everything inside, "/**/" zero or more directories — while any
// other run of stars is one '*'. It is a regular expression over the
// bytes (each byte one rune, so '?' is one byte); ok is false for a
// pattern it does not cover.
func wildRef(pattern, text string, pathname bool) (match, ok bool) {
	if strings.Contains(pattern, `\/`) {
		return false, false // an escaped '/' beside "**" is a corner left out
	}
	one := "."
	if pathname {
		one = "[^/]"
	}
	var re strings.Builder
	re.WriteString(`(?s)\A`)
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch c {
		case '[':
			return false, false
		case '*':
			n := 1
			for i+1 < len(pattern) && pattern[i+1] == '*' {
				i, n = i+1, n+1
			}
			left := i-n < 0 || pattern[i-n] == '/'
			switch {
			case !pathname:
				re.WriteString(".*")
			case n > 1 && left && i+1 == len(pattern):
				re.WriteString(".*") // "/**" at the end (or all of it)
			case n > 1 && left && pattern[i+1] == '/':
				re.WriteString("(?:.*/)?") // "**/": any directories, none included
				i++
			default:
				re.WriteString("[^/]*")
			}
		case '?':
			re.WriteString(one)
		case '\\':
			if i++; i == len(pattern) {
				return false, true // a trailing backslash matches nothing
			}
			re.WriteString(regexp.QuoteMeta(string(rune(pattern[i]))))
		default:
			re.WriteString(regexp.QuoteMeta(string(rune(c))))
		}
	}
	re.WriteString(`\z`)
	runes := make([]rune, len(text))
	for i := 0; i < len(text); i++ {
		runes[i] = rune(text[i])
	}
	return regexp.MustCompile(re.String()).MatchString(string(runes)), true
}

// FuzzWildmatch matches a pattern against a text: it ends within a
// second, and agrees with wildRef where that applies.
func FuzzWildmatch(f *testing.F) {
	for _, c := range t3070 {
		f.Add(c.pattern, c.text, true)
		f.Add(c.pattern, c.text, false)
	}
	f.Add("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a", strings.Repeat("a", 60)+"b", false) // TestWildmatchNotExponential
	f.Fuzz(func(t *testing.T, pattern, text string, pathname bool) {
		if len(pattern) > 256 || len(text) > 256 {
			return
		}
		start := time.Now()
		got := Wildmatch(pattern, text, pathname)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Wildmatch(%q, %q, %v) took %v", pattern, text, pathname, d)
		}
		if want, ok := wildRef(pattern, text, pathname); ok && got != want {
			t.Fatalf("Wildmatch(%q, %q, pathname %v) = %v, the regular expression says %v", pattern, text, pathname, got, want)
		}
	})
}

// The seed packs read whole through memorySource, so the fuzzing starts
// from packs whose objects all read: one with offset deltas, one with
// ref deltas.
func TestFuzzSeedPacksRead(t *testing.T) {
	r := newSeedRepo(t)
	if len(r.packs) != 2 {
		t.Fatalf("%d packs, want one with offset deltas and one with ref deltas", len(r.packs))
	}
	root := emptyRoot(t)
	for i, p := range r.packs {
		idx, ids := parseMemIndex(p.index)
		s := memorySource(root, p.pack, idx)
		kinds := map[int]int{}
		for _, id := range ids {
			if _, _, err := s.Read(id); err != nil {
				t.Fatalf("pack %d: %v", i, err)
			}
			e, _ := readEntry(packPos{s.packs[0], idx[id]})
			kinds[e.kind]++
		}
		if want := []int{packOfsDelta, packRefDelta}[i]; kinds[want] == 0 || len(ids) < 20 {
			t.Fatalf("pack %d: %d objects, by kind %v", i, len(ids), kinds)
		}
	}
}

// wildRef itself agrees with git on every t3070 case it covers, so that
// a disagreement FuzzWildmatch finds is Wildmatch's.
func TestWildRefAgreesWithT3070(t *testing.T) {
	covered := 0
	for _, c := range t3070 {
		for _, v := range []struct {
			pathname, want bool
		}{{true, c.wildmatch}, {false, c.pathmatch}} {
			got, ok := wildRef(c.pattern, c.text, v.pathname)
			if !ok {
				continue
			}
			covered++
			if got != v.want {
				t.Errorf("wildRef(%q, %q, pathname %v) = %v, git says %v", c.pattern, c.text, v.pathname, got, v.want)
			}
		}
	}
	if covered < 150 {
		t.Fatalf("wildRef covers only %d of t3070's cases", covered)
	}
	t.Logf("wildRef covers %d of t3070's %d cases", covered, 2*len(t3070))
}
