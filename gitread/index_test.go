package gitread

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/gitcli/gittest"
)

// Indexes git writes — versions 2, 3 (an intent-to-add entry) and 4 (paths
// prefix-compressed) — parse to the entries git lists, and the tree xmode
// computes from them is the one git writes; an index xmode encodes is one
// git reads back as the same tree.
func TestIndexFormats(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	gittest.Git(t, ".", "init", "-q", "-b", "main", dir)
	for _, p := range []string{"a", "dir/b", "dir/sub/c c", "dir/sub/ünï", "z.sh", strings.Repeat("long/", 30) + "f"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte(p), 0o644)
	}
	os.Chmod(filepath.Join(dir, "z.sh"), 0o755)
	os.Symlink("a", filepath.Join(dir, "link"))
	gittest.Git(t, dir, "add", "-A")
	want := gittest.Git(t, dir, "write-tree")
	listed := strings.Split(gittest.Git(t, dir, "-c", "core.quotePath=false", "ls-files"), "\n")
	for _, version := range []string{"2", "4"} {
		gittest.Git(t, dir, "update-index", "--index-version", version)
		b, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
		if err != nil {
			t.Fatal(err)
		}
		es, err := ParseIndex(b)
		if err != nil {
			t.Fatalf("version %s: %v", version, err)
		}
		if len(es) != len(listed) {
			t.Fatalf("version %s: %d entries, git lists %d", version, len(es), len(listed))
		}
		for i, e := range es {
			if e.Path != listed[i] {
				t.Fatalf("version %s: entry %d is %q, git lists %q", version, i, e.Path, listed[i])
			}
		}
		if got, err := TreeOfIndex(es, nil); err != nil || got.String() != want {
			t.Fatalf("version %s: tree %s %v, git writes %s", version, got, err, want)
		}
		// our own encoding, read by git
		os.WriteFile(filepath.Join(dir, ".git", "index"), EncodeIndex(es), 0o644)
		if got := gittest.Git(t, dir, "write-tree"); got != want {
			t.Fatalf("version %s: git reads xmode's index as tree %s, want %s", version, got, want)
		}
	}
	// version 3: an intent-to-add entry carries extended flags
	os.WriteFile(filepath.Join(dir, "new"), []byte("n"), 0o644)
	gittest.Git(t, dir, "add", "-N", "new")
	b, _ := os.ReadFile(filepath.Join(dir, ".git", "index"))
	es, err := ParseIndex(b)
	found := false
	for _, e := range es {
		found = found || e.Path == "new"
	}
	if err != nil || !found {
		t.Fatalf("version 3 index: %v %+v", err, es)
	}
	for _, bad := range [][]byte{nil, []byte("DIRC"), []byte("DIRC\x00\x00\x00\x09\x00\x00\x00\x00"), append([]byte("DIRC\x00\x00\x00\x02\xff\xff\xff\xff"), make([]byte, 70)...)} {
		if _, err := ParseIndex(bad); err == nil {
			t.Errorf("ParseIndex(%q) accepted", bad)
		}
	}
}
