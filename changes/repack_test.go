package changes

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/xmode/xmode/fsguard"
)

// Two xmode processes on one run's store: one's flushes consolidate the
// packs, the other, which listed them before, still reads every object —
// those of the packs that went (it holds them open) and those written
// since (it lists the packs again when one is not found) — and its own
// flush consolidates nothing twice (the other holds no lock by then, and
// what is merged is merged once).
func TestConsolidateUnderAnotherReader(t *testing.T) {
	root := t.TempDir()
	g := fsguard.Guard{Root: root}
	if err := os.MkdirAll(filepath.Join(root, "runs", "run_repacktest"), 0o700); err != nil {
		t.Fatal(err)
	}
	open := func() *objectStore {
		st, err := openStore(g, "run_repacktest")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, b := open(), open()
	var ids []Hash
	batch := func(st *objectStore, i int) {
		t.Helper()
		st.startBatch()
		for j := range 3 {
			h, err := st.write("blob", fmt.Appendf(nil, "object %d.%d\n", i, j))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, h)
		}
		if err := st.endBatch(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range fewPacks {
		batch(a, i)
	}
	if _, _, err := b.read(ids[0]); err != nil { // b lists the packs now
		t.Fatal(err)
	}
	for i := fewPacks; i < 4*fewPacks; i++ {
		batch(a, i)
	}
	packs, err := a.listPacks()
	if err != nil {
		t.Fatal(err)
	}
	if len(packs) > fewPacks+1 {
		t.Fatalf("%d packs after %d flushes: not consolidated", len(packs), 4*fewPacks)
	}
	for _, h := range ids {
		if _, data, err := b.read(h); err != nil || len(data) == 0 {
			t.Fatalf("the other reader lost %s: %v", h, err)
		}
		if n, err := b.size(h); err != nil || n == 0 {
			t.Fatalf("the other reader cannot size %s: %v", h, err)
		}
	}
	batch(b, 1000)
	for _, h := range ids {
		if _, _, err := a.read(h); err != nil {
			t.Fatalf("after the other's flush, %s: %v", h, err)
		}
	}
}

// geometricCut merges the smallest packs up to the last one that holds
// fewer than twice all the smaller ones together.
func TestGeometricCut(t *testing.T) {
	for _, c := range []struct {
		counts []int64
		cut    int
	}{
		{[]int64{100}, 0},
		{[]int64{1, 2, 6, 18, 100}, 0},
		{[]int64{1, 2, 4, 8, 100}, 4}, // 4 < 2×(1+2)
		{[]int64{5, 5}, 2},
		{[]int64{100, 5, 5, 20}, 2},
		{[]int64{5, 5, 20, 59}, 4},
		{[]int64{3, 7, 100, 1000}, 0},
	} {
		var packs []storePack
		for i, n := range c.counts {
			packs = append(packs, storePack{base: fmt.Sprint("pack-", i), count: n})
		}
		if got := geometricCut(packs); got != c.cut {
			t.Errorf("geometricCut(%v) = %d, want %d", c.counts, got, c.cut)
		}
	}
}
