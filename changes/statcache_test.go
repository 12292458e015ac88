package changes_test

import (
	"context"
	"strings"
	"testing"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/sandbox"
)

// TestStatCache: an unchanged file is not read again, and a file rewritten
// in place with its size and mtime restored — only its ctime, which no
// process can set, tells — is read again.
func TestStatCache(t *testing.T) {
	defer changes.SetRacyMargin(0)()
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n", "a": "a\n", "b": "b\n"})
	s := e.create(sandbox.CreateOptions{})
	e.dropStatCache(s) // the walk's own cache, not the create's seed (seed_test.go)
	snap := func() *changes.Snapshot {
		t.Helper()
		sn, err := e.cr.Snapshot(ctx, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		sn.Close()
		return sn
	}
	if sn := snap(); sn.Hashed != 3 {
		t.Fatalf("first snapshot hashed %d files, want all 3", sn.Hashed)
	}
	if sn := snap(); sn.Hashed != 0 {
		t.Fatalf("second snapshot of an unchanged worktree hashed %d files, want 0 (stat cache)", sn.Hashed)
	}
	e.sh(s, `cp -p README /tmp/ref-$$ && printf 'HELLO\n' | dd of=README conv=notrunc 2>/dev/null && touch -r /tmp/ref-$$ README && rm /tmp/ref-$$`)
	sn := snap()
	if sn.Hashed != 1 || sn.Empty() {
		t.Fatalf("after an in-place rewrite with size and mtime kept: hashed %d, empty %v; want README read again", sn.Hashed, sn.Empty())
	}
	p, err := e.cr.Create(ctx, s, changes.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := e.cr.ReadFile(p, changes.PatchFile)
	if !strings.Contains(string(patch), "+HELLO") {
		t.Fatalf("patch:\n%s", patch)
	}
}
