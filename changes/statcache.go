package changes

import (
	"bytes"
	"encoding/binary"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/fsguard"
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
	entries map[string]*statEntry
}

type statEntry struct {
	Size, Mtime, Ctime int64
	Ino, Dev           uint64
	Mode               uint32
	Hash               Hash
	// seen: the walk met the file unchanged (the entry stays)
	seen bool
}

const (
	statCacheName  = "xmode-stat-cache"
	statCacheMagic = "XSC1"
)

// modeFromIndex marks an entry the seed took from the checkout's index
// (seedFromIndex) rather than from lstat: its mode is git's (regular, with
// or without the owner's execute bit) and its inode is git's 32 bits of
// it. Bit 31 of st_mode is never set by the kernel.
const modeFromIndex = 1 << 31

// matches reports whether a file's lstat data now (want) is what the entry
// recorded. For an entry from the index, the mode is compared as git
// records it and the inode by its low 32 bits: what would slip past that
// (a chmod, a file put in its place) changes the ctime, which the entry
// must match to the nanosecond and no process can set.
func (c *statEntry) matches(want *statEntry) bool {
	if c.Size != want.Size || c.Mtime != want.Mtime || c.Ctime != want.Ctime || c.Dev != want.Dev {
		return false
	}
	if c.Mode&modeFromIndex == 0 {
		return c.Ino == want.Ino && c.Mode == want.Mode
	}
	return uint32(c.Ino) == uint32(want.Ino) && want.Mode&unix.S_IFMT == unix.S_IFREG &&
		(want.Mode&0o100 != 0) == (c.Mode&0o100 != 0)
}

// racyMargin (ns) is how old a file's mtime and ctime must be, when it is
// hashed, for the hash to be reused later.
var racyMargin = int64(2e9)

func loadStatCache(s *objectStore) *statCache {
	c := &statCache{entries: map[string]*statEntry{}}
	b, err := fsguard.ReadRegular(s.root, statCacheName, 256<<20)
	if err != nil || !bytes.HasPrefix(b, []byte(statCacheMagic)) {
		return c
	}
	b = b[len(statCacheMagic):]
	all := string(b) // one allocation; paths are slices of it
	const fixed = 8*3 + 8*2 + 4 + 20
	c.entries = make(map[string]*statEntry, len(b)/80)
	all2 := make([]statEntry, 0, len(b)/66) // one allocation for the entries too
	for off := 0; len(b) >= 2; {
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n+fixed {
			break
		}
		path := all[off+2 : off+2+n]
		off += 2 + n + fixed
		r := b[2+n:]
		var e statEntry
		e.Size = int64(binary.BigEndian.Uint64(r))
		e.Mtime = int64(binary.BigEndian.Uint64(r[8:]))
		e.Ctime = int64(binary.BigEndian.Uint64(r[16:]))
		e.Ino = binary.BigEndian.Uint64(r[24:])
		e.Dev = binary.BigEndian.Uint64(r[32:])
		e.Mode = binary.BigEndian.Uint32(r[40:])
		copy(e.Hash[:], r[44:64])
		all2 = append(all2, e)
		c.entries[path] = &all2[len(all2)-1]
		b = r[fixed:]
	}
	return c
}

func encodeStatCache(entries map[string]*statEntry, keep func(*statEntry) bool) []byte {
	var b bytes.Buffer
	b.WriteString(statCacheMagic)
	var buf [64]byte
	for path, e := range entries {
		if len(path) > 0xffff || !keep(e) {
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

// save writes the cache for the next walk: the entries the walk met
// unchanged (seen) and those it added. Nothing is written when that is
// what the file holds already.
func (c *statCache) save(s *objectStore, added map[string]*statEntry) error {
	unseen := 0
	for _, e := range c.entries {
		if !e.seen {
			unseen++
		}
	}
	if unseen == 0 && len(added) == 0 {
		return nil
	}
	for p, e := range added {
		e.seen = true
		c.entries[p] = e
	}
	data := encodeStatCache(c.entries, func(e *statEntry) bool { return e.seen })
	tmp := statCacheName + ".tmp"
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return s.root.Rename(tmp, statCacheName)
}

// baseCache keeps a base tree flattened (its files by path, and the IDs of
// its trees, all in the store), so later snapshots of the run need not read
// its trees again. Like the stat cache it lives in the run's object store.
const (
	baseCacheName  = "xmode-base-cache"
	baseCacheMagic = "XBC1"
)

func loadBaseCache(s *objectStore, tree Hash) map[string]TreeEntry {
	b, err := fsguard.ReadRegular(s.root, baseCacheName, 256<<20)
	if err != nil || len(b) < 4+20+4 || string(b[:4]) != baseCacheMagic || !bytes.Equal(b[4:24], tree[:]) {
		return nil
	}
	ntrees := int(binary.BigEndian.Uint32(b[24:]))
	b = b[28:]
	if len(b) < ntrees*20 {
		return nil
	}
	for i := 0; i < ntrees; i++ {
		var h Hash
		copy(h[:], b[i*20:])
		s.markKnown(h)
	}
	b = b[ntrees*20:]
	files := map[string]TreeEntry{}
	for len(b) >= 2 {
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n+24 {
			return nil
		}
		p := string(b[2 : 2+n])
		e := TreeEntry{Mode: binary.BigEndian.Uint32(b[2+n:])}
		copy(e.Hash[:], b[2+n+4:])
		e.Name = p[strings.LastIndexByte(p, '/')+1:]
		files[p] = e
		b = b[2+n+24:]
	}
	return files
}

func saveBaseCache(s *objectStore, tree Hash, trees []Hash, files map[string]TreeEntry) error {
	var b bytes.Buffer
	b.WriteString(baseCacheMagic)
	b.Write(tree[:])
	binary.Write(&b, binary.BigEndian, uint32(len(trees)))
	for _, h := range trees {
		b.Write(h[:])
	}
	var buf [4]byte
	for p, e := range files {
		if len(p) > 0xffff {
			return nil // not worth caching
		}
		binary.Write(&b, binary.BigEndian, uint16(len(p)))
		b.WriteString(p)
		binary.BigEndian.PutUint32(buf[:], e.Mode)
		b.Write(buf[:])
		b.Write(e.Hash[:])
	}
	tmp := baseCacheName + ".tmp"
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return s.root.Rename(tmp, baseCacheName)
}
