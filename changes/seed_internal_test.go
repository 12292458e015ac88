package changes

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/fsguard"
)

// TestWriteSeedClock: writeSeed keeps a file only once the filesystem's
// clock has passed its ctime and mtime — it waits for that on a file as
// recent as the seed — never one dated later than the wait allows, and on
// another filesystem than the store's only one older than racyMargin.
func TestWriteSeedClock(t *testing.T) {
	root := t.TempDir()
	g := fsguard.Guard{Root: root}
	if err := os.MkdirAll(filepath.Join(root, "runs", "run_seedtest"), 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := openStore(g, "run_seedtest")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A file made now: its times are the clock's tick of now.
	fresh := filepath.Join(root, "fresh")
	if err := os.WriteFile(fresh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var fst unix.Stat_t
	if err := unix.Lstat(fresh, &fst); err != nil {
		t.Fatal(err)
	}
	now := statEntryOf(&fst)
	old, future := now, now
	old.Ctime, old.Mtime = now.Ctime-10e9, now.Mtime-10e9
	future.Ctime = now.Ctime + int64(time.Hour)
	entries := func() map[string]*statEntry {
		a, b, c := old, now, future
		return map[string]*statEntry{"old": &a, "now": &b, "future": &c}
	}
	kept, err := st.writeSeed(entries(), uint64(fst.Dev))
	if err != nil {
		t.Fatal(err)
	}
	c := loadStatCache(st)
	if kept != 2 || c.entries["old"] == nil || c.entries["now"] == nil || c.entries["future"] != nil {
		t.Fatalf("same filesystem: kept %d %v; want old and now (the clock waited for), not future", kept, c.entries)
	}
	kept, err = st.writeSeed(entries(), uint64(fst.Dev)+1)
	if err != nil {
		t.Fatal(err)
	}
	c = loadStatCache(st)
	if kept != 1 || c.entries["old"] == nil {
		t.Fatalf("another filesystem: kept %d %v; want old alone (older than racyMargin)", kept, c.entries)
	}
}
