package gitread

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// IndexEntry is what xmode takes from a git index: a path, its mode and
// object, and its merge stage.
type IndexEntry struct {
	Path  string
	Mode  uint32
	Hash  Hash
	Stage int
	// Stat is the lstat data git recorded for the entry's file — a claim,
	// like the rest of the entry.
	Stat IndexStat
}

// IndexStat is the lstat data of an index entry as git stores it: times in
// seconds and nanoseconds, the rest truncated to 32 bits. A size of 0 on a
// non-empty blob is git's mark of a "racily clean" entry it must check.
type IndexStat struct {
	CtimeSec, CtimeNsec, MtimeSec, MtimeNsec uint32
	Dev, Ino, UID, GID, Size                 uint32
}

// ParseIndex decodes a git index (versions 2, 3 and 4) as data: every
// length is checked against what is left, nothing is allocated from a
// count the file claims. Extensions are ignored; the trailing checksum is
// not checked (the content is a claim either way).
func ParseIndex(b []byte) ([]IndexEntry, error) {
	return ParseIndexOf(b, nil)
}

// ParseIndexOf is ParseIndex keeping only the entries whose mode keep
// accepts (nil: all); the others' paths are not even made into strings
// (in versions 2 and 3, where paths do not build on one another).
func ParseIndexOf(b []byte, keep func(mode uint32) bool) ([]IndexEntry, error) {
	bad := func(what string) error { return fmt.Errorf("index: %s", what) }
	if len(b) < 12 || string(b[:4]) != "DIRC" {
		return nil, bad("no DIRC header")
	}
	version := binary.BigEndian.Uint32(b[4:])
	if version < 2 || version > 4 {
		return nil, bad(fmt.Sprintf("version %d", version))
	}
	count := binary.BigEndian.Uint32(b[8:])
	rest := b[12:]
	var out []IndexEntry
	prev := ""
	for i := uint32(0); i < count; i++ {
		if len(rest) < 62 {
			return nil, bad("truncated entry")
		}
		e := IndexEntry{Mode: binary.BigEndian.Uint32(rest[24:])}
		copy(e.Hash[:], rest[40:60])
		be := binary.BigEndian
		e.Stat = IndexStat{CtimeSec: be.Uint32(rest), CtimeNsec: be.Uint32(rest[4:]), MtimeSec: be.Uint32(rest[8:]),
			MtimeNsec: be.Uint32(rest[12:]), Dev: be.Uint32(rest[16:]), Ino: be.Uint32(rest[20:]),
			UID: be.Uint32(rest[28:]), GID: be.Uint32(rest[32:]), Size: be.Uint32(rest[36:])}
		flags := binary.BigEndian.Uint16(rest[60:])
		e.Stage = int(flags>>12) & 3
		n := 62
		if flags&0x4000 != 0 {
			if version < 3 || len(rest) < 64 {
				return nil, bad("extended flags")
			}
			n = 64
		}
		wanted := keep == nil || keep(e.Mode)
		if version == 4 {
			// v4 paths build on the previous one: every path is made
			strip, m := gitVarint(rest[n:])
			if m <= 0 || strip > uint64(len(prev)) {
				return nil, bad("path prefix")
			}
			n += m
			nul := bytes.IndexByte(rest[n:], 0)
			if nul < 0 {
				return nil, bad("unterminated path")
			}
			e.Path = prev[:len(prev)-int(strip)] + string(rest[n:n+nul])
			n += nul + 1
			prev = e.Path
		} else {
			nul := bytes.IndexByte(rest[n:], 0)
			if nul < 0 {
				return nil, bad("unterminated path")
			}
			if nul == 0 {
				return nil, bad("empty path")
			}
			if wanted {
				e.Path = string(rest[n : n+nul])
			}
			n += nul + 1
			n = (n + 7) &^ 7 // padded to 8 bytes with NULs
			if n > len(rest) {
				return nil, bad("truncated padding")
			}
		}
		if version == 4 && e.Path == "" {
			return nil, bad("empty path")
		}
		if wanted {
			out = append(out, e)
		}
		rest = rest[n:]
	}
	return out, nil
}

// gitVarint decodes git's offset varint (varint.c): big-endian 7-bit
// groups, each continuation adding one. It returns the value and the bytes
// read (0 when malformed).
func gitVarint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	c := b[0]
	v := uint64(c & 127)
	i := 1
	for c&128 != 0 {
		if i >= len(b) || v > 1<<50 {
			return 0, 0
		}
		c = b[i]
		i++
		v = ((v + 1) << 7) | uint64(c&127)
	}
	return v, i
}

// EncodeIndex writes a version 2 index of entries (stage 0, no stat data,
// so git checks every file it cares about), sorting es by path.
func EncodeIndex(es []IndexEntry) []byte {
	sort.Slice(es, func(i, j int) bool { return es[i].Path < es[j].Path })
	var b bytes.Buffer
	b.WriteString("DIRC")
	binary.Write(&b, binary.BigEndian, uint32(2))
	binary.Write(&b, binary.BigEndian, uint32(len(es)))
	var fixed [62]byte
	for _, e := range es {
		clear(fixed[:])
		binary.BigEndian.PutUint32(fixed[24:], e.Mode)
		copy(fixed[40:60], e.Hash[:])
		binary.BigEndian.PutUint16(fixed[60:], uint16(min(len(e.Path), 0xfff)))
		b.Write(fixed[:])
		b.WriteString(e.Path)
		n := 62 + len(e.Path)
		pad := 8 - n%8
		b.Write(make([]byte, pad))
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

// TreeOfIndex is the ID of the tree an index describes (what `git
// write-tree` would write); each tree is passed to write unless it is
// nil.
func TreeOfIndex(es []IndexEntry, write func(h Hash, typ string, data []byte) error) (Hash, error) {
	type dir struct {
		entries []TreeEntry
		subs    map[string]*dir
	}
	root := &dir{subs: map[string]*dir{}}
	for _, e := range es {
		if e.Stage != 0 {
			return Hash{}, errors.New("index has unmerged entries")
		}
		d := root
		parts := splitPath(e.Path)
		for _, name := range parts[:len(parts)-1] {
			sub := d.subs[name]
			if sub == nil {
				sub = &dir{subs: map[string]*dir{}}
				d.subs[name] = sub
			}
			d = sub
		}
		d.entries = append(d.entries, TreeEntry{Name: parts[len(parts)-1], Mode: e.Mode, Hash: e.Hash})
	}
	var hash func(d *dir) (Hash, error)
	hash = func(d *dir) (Hash, error) {
		es := d.entries
		for name, sub := range d.subs {
			h, err := hash(sub)
			if err != nil {
				return Hash{}, err
			}
			es = append(es, TreeEntry{Name: name, Mode: ModeTree, Hash: h})
		}
		SortTree(es)
		data := EncodeTree(es)
		h, err := HashObject(TypeTree, data)
		if err == nil && write != nil {
			err = write(h, TypeTree, data)
		}
		return h, err
	}
	return hash(root)
}

func splitPath(p string) []string {
	var parts []string
	for {
		i := bytes.IndexByte([]byte(p), '/')
		if i < 0 {
			return append(parts, p)
		}
		parts = append(parts, p[:i])
		p = p[i+1:]
	}
}
