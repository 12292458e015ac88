package changes

import (
	"bytes"
	"testing"
)

// SetRacyMargin sets how old a file must be for its hash to be cached, and
// returns the function that restores it.
func SetRacyMargin(ns int64) (restore func()) {
	old := racyMargin
	racyMargin = ns
	return func() { racyMargin = old }
}

// PlantDeepChain writes a pack into gitDir in which id is the top of a
// ref-delta chain depth deep, over a 64 KiB blob (made-up IDs below).
func PlantDeepChain(t testing.TB, gitDir, id string, depth int) {
	t.Helper()
	top, err := ParseHash(id)
	if err != nil {
		t.Fatal(err)
	}
	size := 64 << 10
	es := []packEntry{{id: fakeID(0), kind: packBlob, data: bytes.Repeat([]byte("x"), size)}}
	for i := 1; i <= depth; i++ {
		e := packEntry{id: fakeID(i), kind: packRefDelta, data: makeDelta(size, 0, size, []byte("y")), ref: es[i-1].id}
		if i == depth {
			e.id = top
		}
		size++
		es = append(es, e)
	}
	writePack(t, gitDir, "hostile", es)
}
