package changes

import (
	"bytes"
	"encoding/binary"
	"os"
)

// statCache remembers, per worktree path, the lstat data a file had when
// xmode hashed it and the blob ID it hashed to, so an unchanged file is not
// read again (what git's index does for `git status`). It lives in the
// run's object store, which no sandbox can write, and an entry is reused
// only while the file's size, inode, mtime and ctime are unchanged. The
// ctime cannot be set by a process — the kernel sets it on every change —
// and an entry is kept only for a file whose mtime and ctime were already
// more than racyMargin old when it was hashed, so a change within the same
// timestamp tick is not missed.
type statCache struct {
	entries map[string]statEntry
}

type statEntry struct {
	Size, Mtime, Ctime int64
	Ino, Dev           uint64
	Mode               uint32
	Hash               Hash
}

const (
	statCacheName  = "xmode-stat-cache"
	statCacheMagic = "XSC1"
)

// racyMargin (ns) is how old a file's mtime and ctime must be, when it is
// hashed, for the hash to be reused later.
var racyMargin = int64(2e9)

func loadStatCache(s *objectStore) *statCache {
	c := &statCache{entries: map[string]statEntry{}}
	b, err := readRegular(s.root, statCacheName, 256<<20)
	if err != nil || !bytes.HasPrefix(b, []byte(statCacheMagic)) {
		return c
	}
	b = b[len(statCacheMagic):]
	const fixed = 8*3 + 8*2 + 4 + 20
	for len(b) >= 2 {
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n+fixed {
			break
		}
		path := string(b[2 : 2+n])
		r := b[2+n:]
		var e statEntry
		e.Size = int64(binary.BigEndian.Uint64(r))
		e.Mtime = int64(binary.BigEndian.Uint64(r[8:]))
		e.Ctime = int64(binary.BigEndian.Uint64(r[16:]))
		e.Ino = binary.BigEndian.Uint64(r[24:])
		e.Dev = binary.BigEndian.Uint64(r[32:])
		e.Mode = binary.BigEndian.Uint32(r[40:])
		copy(e.Hash[:], r[44:64])
		c.entries[path] = e
		b = r[fixed:]
	}
	return c
}

func (c *statCache) encode() []byte {
	var b bytes.Buffer
	b.WriteString(statCacheMagic)
	var buf [64]byte
	for path, e := range c.entries {
		if len(path) > 0xffff {
			continue
		}
		binary.BigEndian.PutUint16(buf[:2], uint16(len(path)))
		b.Write(buf[:2])
		b.WriteString(path)
		binary.BigEndian.PutUint64(buf[0:], uint64(e.Size))
		binary.BigEndian.PutUint64(buf[8:], uint64(e.Mtime))
		binary.BigEndian.PutUint64(buf[16:], uint64(e.Ctime))
		binary.BigEndian.PutUint64(buf[24:], e.Ino)
		binary.BigEndian.PutUint64(buf[32:], e.Dev)
		binary.BigEndian.PutUint32(buf[40:], e.Mode)
		copy(buf[44:], e.Hash[:])
		b.Write(buf[:64])
	}
	return b.Bytes()
}

// save replaces the cache file (written to a temporary name, then renamed).
func (c *statCache) save(s *objectStore) error {
	tmp := statCacheName + ".tmp"
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(c.encode())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return s.root.Rename(tmp, statCacheName)
}
