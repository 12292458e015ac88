package changes

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/fsguard"
)

// Each snapshot that adds objects writes one pack, and every read looks
// through every pack: 500 diffs made a `diff --stat` 30 → 170 ms. So after
// a flush the packs are consolidated the way `git repack --geometric=2`
// keeps them: sorted by object count, each holds at least packFactor times
// the objects of all smaller ones together, and the smallest that do not
// are merged into one — once there are more than fewPacks of them, which
// cost nothing measurable to look through (a run's first diffs merge
// nothing). The store then has at most about max(fewPacks, log2(objects))
// packs, and each object is rewritten O(log n) times over the run's life.
const (
	packFactor = 2
	fewPacks   = 8
)

// storePack is one pack of the store: its name (pack-<checksum>) and how
// many objects its index lists.
type storePack struct {
	base  string
	count int64
}

// consolidate merges the smallest packs when they break the geometric
// progression (packFactor). Called by flush (flushMu held). The merged
// pack is in place before the packs it replaces go, index first, so every
// object is in some pack a reader can open at every moment; a reader that
// listed the packs before and finds one gone lists them again (read). Two
// xmode processes never consolidate one store at once (an flock on
// objects/pack); the second leaves it to the first.
func (s *objectStore) consolidate() error {
	packs, err := s.listPacks()
	if err != nil || len(packs) <= fewPacks {
		return err
	}
	cut := geometricCut(packs)
	if cut < 2 {
		return nil
	}
	unlock, ok := s.lockPacks()
	if !ok {
		return nil
	}
	defer unlock()
	var order []Hash
	seen := map[Hash]bool{}
	var merged []string
	for _, p := range packs[:cut] {
		ids, err := s.packIDs(p.base)
		if err != nil {
			continue // gone (another consolidation took it) or unreadable: left alone
		}
		merged = append(merged, p.base)
		for _, h := range ids {
			if !seen[h] {
				seen[h] = true
				order = append(order, h)
			}
		}
	}
	if len(merged) < 2 {
		return nil
	}
	name, err := s.writePackFrom(order, func(h Hash) (pendingObject, error) {
		typ, data, err := s.read(h)
		return pendingObject{typ, data}, err
	})
	if err != nil {
		return fmt.Errorf("consolidate the run's packs: %w", err)
	}
	for _, b := range merged {
		if b == name {
			continue
		}
		_ = s.root.Remove("objects/pack/" + b + ".idx")
		_ = s.root.Remove("objects/pack/" + b + ".pack")
	}
	s.srcMu.Lock()
	s.src.Refresh()
	s.srcMu.Unlock()
	return nil
}

// geometricCut is how many of packs (sorted here by object count, smallest
// first) are to be merged: all up to the last one that holds fewer than
// packFactor times the objects of all smaller ones together. 0 or 1:
// nothing to merge.
func geometricCut(packs []storePack) int {
	slices.SortFunc(packs, func(a, b storePack) int {
		if a.count != b.count {
			return int(min(max(a.count-b.count, -1), 1))
		}
		return strings.Compare(a.base, b.base)
	})
	cut := 0
	var sum int64
	for i, p := range packs {
		if p.count < packFactor*sum {
			cut = i + 1
		}
		sum += p.count
	}
	return cut
}

// listPacks lists the store's packs with their object counts, read from
// each index's fan-out table (its last entry is the count), nothing more.
func (s *objectStore) listPacks() ([]storePack, error) {
	entries, err := fsguard.ReadDir(s.root, "objects/pack")
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []storePack
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".idx")
		if !ok || !strings.HasPrefix(base, "pack-") {
			continue
		}
		n, err := s.idxCount(base)
		if err != nil {
			continue
		}
		out = append(out, storePack{base: base, count: n})
	}
	return out, nil
}

// idxCount reads the object count of a version 2 pack index: the last
// entry of its fan-out table (after the 4-byte magic and the version).
func (s *objectStore) idxCount(base string) (int64, error) {
	f, _, err := fsguard.OpenRegularSized(s.root, "objects/pack/"+base+".idx")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var b [4]byte
	if _, err := f.ReadAt(b[:], 8+255*4); err != nil {
		return 0, err
	}
	return int64(binary.BigEndian.Uint32(b[:])), nil
}

// packIDs lists the objects of one pack, from its index.
func (s *objectStore) packIDs(base string) ([]Hash, error) {
	f, _, err := fsguard.OpenRegularSized(s.root, "objects/pack/"+base+".idx")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(bufio.NewReaderSize(f, 64<<10)).Decode(idx); err != nil {
		return nil, err
	}
	it, err := idx.Entries()
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Hash
	for {
		e, err := it.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		out = append(out, Hash(e.Hash))
	}
	return out, nil
}

// lockPacks takes an exclusive flock on objects/pack without waiting:
// ok is false when another process holds it.
func (s *objectStore) lockPacks() (unlock func(), ok bool) {
	d, err := s.root.OpenFile("objects/pack", os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false
	}
	if unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		d.Close()
		return nil, false
	}
	return func() { d.Close() }, true
}
