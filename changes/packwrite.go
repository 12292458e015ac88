package changes

import (
	"bufio"
	"compress/zlib"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"

	"github.com/xmode/xmode/gitread"
)

// packTypes are the pack entry types of the objects xmode writes.
var packTypes = map[string]byte{gitread.TypeCommit: 1, gitread.TypeTree: 2, gitread.TypeBlob: 3, gitread.TypeTag: 4}

// packZlib compresses pack entries Huffman-only: a fifth of the CPU of
// zlib.BestSpeed on a diff's objects (which was a third of a first diff's
// CPU), for entries about twice as large — a diff's pack stays well under
// a megabyte.
var packZlib = sync.Pool{New: func() any {
	zw, _ := zlib.NewWriterLevel(nil, zlib.HuffmanOnly)
	return zw
}}

// pendingObject is an object written in batch mode, not yet in a pack.
type pendingObject struct {
	typ  string
	data []byte
}

// packWriter counts what it writes, the pack's checksum and the current
// entry's CRC.
type packWriter struct {
	w   io.Writer
	sum hash.Hash // SHA-1 of the whole pack, its trailer and its name
	crc hash.Hash32
	off int64
}

func (p *packWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.sum.Write(b[:n])
	p.crc.Write(b[:n])
	p.off += int64(n)
	return n, err
}

// writePack writes objs (in order) as one pack, undeltified, with its
// index built by go-git's idxfile: objects/pack/pack-<checksum>.{pack,idx},
// the pack renamed into place before its index (a reader lists indexes).
// Each object is checked to hash to its ID as it is written.
func (s *objectStore) writePack(order []Hash, objs map[Hash]pendingObject) error {
	_, err := s.writePackFrom(order, func(h Hash) (pendingObject, error) { return objs[h], nil })
	return err
}

// writePackFrom is writePack with each object asked for as it is written,
// so that a pack of many (a consolidation) never holds them all at once.
// It returns the pack's name (pack-<checksum>).
func (s *objectStore) writePackFrom(order []Hash, get func(Hash) (pendingObject, error)) (string, error) {
	if err := mkdirReal(s.root, "objects/pack"); err != nil {
		return "", err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := "objects/pack/tmp_pack_" + hex.EncodeToString(rnd[:])
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", fmt.Errorf("write a pack: %w", err)
	}
	defer s.root.Remove(tmp) //nolint:errcheck // gone after the rename
	bw := bufio.NewWriterSize(f, 256<<10)
	checksum, idx, err := encodePack(bw, order, get)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write a pack: %w", err)
	}
	name := "objects/pack/pack-" + hex.EncodeToString(checksum[:])
	tmpIdx := tmp + ".idx"
	fi, err := s.root.OpenFile(tmpIdx, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", fmt.Errorf("write a pack index: %w", err)
	}
	defer s.root.Remove(tmpIdx) //nolint:errcheck // gone after the rename
	// Buffered: the encoder writes the fan-out table four bytes at a time.
	ibw := bufio.NewWriterSize(fi, 64<<10)
	_, err = idxfile.NewEncoder(ibw).Encode(idx)
	if err == nil {
		err = ibw.Flush()
	}
	if cerr := fi.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write a pack index: %w", err)
	}
	if err := s.root.Rename(tmp, name+".pack"); err != nil {
		return "", err
	}
	return path.Base(name), s.root.Rename(tmpIdx, name+".idx")
}

// encodePack writes the pack of the objects get gives for order to w and
// returns its checksum and index.
func encodePack(w io.Writer, order []Hash, get func(Hash) (pendingObject, error)) (Hash, *idxfile.MemoryIndex, error) {
	p := &packWriter{w: w, sum: sha1.New(), crc: crc32.NewIEEE()}
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(order)))
	if _, err := p.Write(hdr[:]); err != nil {
		return Hash{}, nil, err
	}
	iw := new(idxfile.Writer)
	zw := packZlib.Get().(*zlib.Writer)
	defer packZlib.Put(zw)
	var buf [16]byte
	for _, h := range order {
		o, err := get(h)
		if err != nil {
			return Hash{}, nil, err
		}
		kind, ok := packTypes[o.typ]
		if !ok {
			return Hash{}, nil, fmt.Errorf("object %s: unknown type %q", h, o.typ)
		}
		got, err := gitread.HashObject(o.typ, o.data)
		if err != nil {
			return Hash{}, nil, err
		}
		if got != h {
			return Hash{}, nil, fmt.Errorf("write object %s: %w", h, errChanged)
		}
		off := p.off
		p.crc.Reset()
		// type and size: 3 bits and 4 bits, then 7 bits a byte, low first
		size := uint64(len(o.data))
		n := 0
		c := kind<<4 | byte(size&0x0f)
		for size >>= 4; size > 0; size >>= 7 {
			buf[n] = c | 0x80
			n++
			c = byte(size & 0x7f)
		}
		buf[n] = c
		n++
		if _, err := p.Write(buf[:n]); err != nil {
			return Hash{}, nil, err
		}
		zw.Reset(p)
		if _, err := zw.Write(o.data); err != nil {
			return Hash{}, nil, err
		}
		if err := zw.Close(); err != nil {
			return Hash{}, nil, err
		}
		iw.Add(plumbing.Hash(h), uint64(off), p.crc.Sum32())
	}
	var checksum Hash
	copy(checksum[:], p.sum.Sum(nil))
	if _, err := w.Write(checksum[:]); err != nil {
		return Hash{}, nil, err
	}
	if err := iw.OnFooter(plumbing.Hash(checksum)); err != nil {
		return Hash{}, nil, err
	}
	idx, err := iw.Index()
	return checksum, idx, err
}
