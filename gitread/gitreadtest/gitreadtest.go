// Package gitreadtest makes the hostile git data tests feed to gitread
// and its callers: packs written entry by entry (deltas of any depth,
// cycles, made-up IDs), as git lays them out. Only tests import it.
package gitreadtest

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// ID is an object ID: [20]byte, gitread.Hash's underlying type, so either
// is assignable to the other (this package does not import gitread, so
// that gitread's own tests can use it).
type ID = [20]byte

// Pack entry types, as a pack header stores them.
const (
	Commit   = 1
	Tree     = 2
	Blob     = 3
	Tag      = 4
	OfsDelta = 6
	RefDelta = 7
)

// Entry is one entry of a hand-made pack: a full object, or a delta
// against an earlier entry (OfsDelta) or an object ID (RefDelta).
type Entry struct {
	ID   ID // its ID in the index; zero: not indexed
	Kind int
	Data []byte // the object, or the delta
	Ofs  int    // OfsDelta: the index of the base entry
	Ref  ID     // RefDelta: the base's ID
}

// EncodePack is es as a version 2 pack, and each entry's offset in it.
func EncodePack(es []Entry) ([]byte, []int64) {
	var pack bytes.Buffer
	pack.WriteString("PACK")
	binary.Write(&pack, binary.BigEndian, uint32(2))
	binary.Write(&pack, binary.BigEndian, uint32(len(es)))
	offs := make([]int64, len(es))
	zw := zlib.NewWriter(nil) // one for all: making one costs ~0.5 MB
	for i, e := range es {
		offs[i] = int64(pack.Len())
		size := len(e.Data)
		c := byte(e.Kind<<4) | byte(size&15)
		size >>= 4
		for size > 0 {
			pack.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		pack.WriteByte(c)
		switch e.Kind {
		case OfsDelta:
			rel := offs[i] - offs[e.Ofs]
			var b [10]byte
			pos := len(b) - 1
			b[pos] = byte(rel & 0x7f)
			for rel >>= 7; rel > 0; rel >>= 7 {
				rel--
				pos--
				b[pos] = 0x80 | byte(rel&0x7f)
			}
			pack.Write(b[pos:])
		case RefDelta:
			pack.Write(e.Ref[:])
		}
		zw.Reset(&pack)
		zw.Write(e.Data)
		zw.Close()
	}
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])
	return pack.Bytes(), offs
}

// EncodeIndex is the version 2 pack index of the pack whose trailing
// checksum is packSum, holding ids at offs (offsets below 2 GiB).
func EncodeIndex(ids []ID, offs []int64, packSum []byte) []byte {
	type ixe struct {
		id  ID
		off int64
	}
	var ix []ixe
	for i, id := range ids {
		ix = append(ix, ixe{id, offs[i]})
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
	idx.Write(packSum)
	isum := sha1.Sum(idx.Bytes())
	idx.Write(isum[:])
	return idx.Bytes()
}

// WritePack writes es as objects/pack/pack-<name>.{pack,idx} under
// gitDir, as git lays them out (pack v2, index v2), indexing the entries
// with an ID.
func WritePack(t testing.TB, gitDir, name string, es []Entry) {
	t.Helper()
	pack, offs := EncodePack(es)
	var ids []ID
	var at []int64
	for i, e := range es {
		if e.ID != (ID{}) {
			ids = append(ids, e.ID)
			at = append(at, offs[i])
		}
	}
	idx := EncodeIndex(ids, at, pack[len(pack)-20:])
	dir := filepath.Join(gitDir, "objects", "pack")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pack-"+name+".pack"), pack, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pack-"+name+".idx"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Delta is a git delta from a base of srcSize bytes: copy n bytes at
// off, then insert add.
func Delta(srcSize, off, n int, add []byte) []byte {
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

// FakeID is a made-up object ID, the same for the same i.
func FakeID(i int) ID {
	return sha1.Sum([]byte(fmt.Sprintf("entry %d", i)))
}

// PlantDeepChain writes a pack into gitDir in which id is the top of a
// ref-delta chain depth deep, over a 64 KiB blob (made-up IDs below).
func PlantDeepChain(t testing.TB, gitDir string, id ID, depth int) {
	t.Helper()
	size := 64 << 10
	es := []Entry{{ID: FakeID(0), Kind: Blob, Data: bytes.Repeat([]byte("x"), size)}}
	for i := 1; i <= depth; i++ {
		e := Entry{ID: FakeID(i), Kind: RefDelta, Data: Delta(size, 0, size, []byte("y")), Ref: es[i-1].ID}
		if i == depth {
			e.ID = id
		}
		size++
		es = append(es, e)
	}
	WritePack(t, gitDir, "hostile", es)
}
