package archive

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/fail"
)

// entry is one member of a crafted archive.
type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func archive(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// A copy of the worktree comes from the sandbox and is hostile. What the
// archive endpoint would never produce but a hostile daemon or a bug could
// (names outside the worktree, entries under a symlink, too much data) is
// refused whole, leaving the host's worktree as it was; what a sandbox can
// make (links out, setuid files, devices, hard links to what is not there)
// is left out or defused.
func TestSyncBackHostileArchives(t *testing.T) {
	root := t.TempDir()
	const run = "run_abcdefgh"
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 10
	replace := func(r io.Reader) ([]string, error) {
		return ReplaceWorktree(filepath.Join(root, "runs", run), r, limit, t.Logf, nil)
	}
	wt := filepath.Join(root, "runs", run, "worktree")
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, "keep.txt"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	unchanged := func(what string) {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(wt, "keep.txt")); err != nil || string(b) != "before" {
			t.Errorf("%s: the host's worktree changed: %q %v", what, b, err)
		}
		if left, _ := filepath.Glob(filepath.Join(root, "runs", run, ".sync-*")); len(left) != 0 {
			t.Errorf("%s: left %v", what, left)
		}
		if b, _ := os.ReadFile(outside); string(b) != "host secret" {
			t.Errorf("%s: the file outside the worktree changed: %q", what, b)
		}
	}
	dir := entry{name: "worktree/", typ: tar.TypeDir, mode: 0o755}
	for name, a := range map[string]*bytes.Buffer{
		"dot-dot":                         archive(t, dir, entry{name: "worktree/../escape", typ: tar.TypeReg, body: "x"}),
		"dot-dot inside":                  archive(t, dir, entry{name: "worktree/a/../b", typ: tar.TypeReg, body: "x"}),
		"absolute":                        archive(t, dir, entry{name: "/etc/evil", typ: tar.TypeReg, body: "x"}),
		"not the worktree":                archive(t, dir, entry{name: "elsewhere/x", typ: tar.TypeReg, body: "x"}),
		"under a symlink":                 archive(t, dir, entry{name: "worktree/d", typ: tar.TypeSymlink, link: "sub"}, entry{name: "worktree/d/x", typ: tar.TypeReg, body: "x"}),
		"through a link out":              archive(t, dir, entry{name: "worktree/out", typ: tar.TypeSymlink, link: filepath.Dir(outside)}, entry{name: "worktree/out/outside", typ: tar.TypeReg, body: "pwned"}),
		"larger than allowed":             archive(t, dir, entry{name: "worktree/big", typ: tar.TypeReg, body: strings.Repeat("x", 100<<10)}),
		"many small files over the limit": archive(t, append([]entry{dir}, manySmall(40, 2<<10)...)...),
	} {
		_, err := replace(a)
		if fail.KindOf(err) != fail.Refused {
			t.Errorf("%s: %v, want refused", name, err)
		}
		unchanged(name)
	}
	// A copy cut short at an entry's end (no archive end) is not a smaller
	// worktree.
	whole := archive(t, dir, entry{name: "worktree/keep.txt", typ: tar.TypeReg, body: "before"}, entry{name: "worktree/more", typ: tar.TypeReg, body: "more"})
	if _, err := replace(bytes.NewReader(whole.Bytes()[:3*512])); err == nil {
		t.Errorf("a copy cut short at an entry's end was accepted")
	}
	unchanged("cut short")
	// An entry whose header claims far more than the stream holds (a huge
	// entry cut short) is an error, the worktree untouched.
	var huge bytes.Buffer
	tw := tar.NewWriter(&huge)
	_ = tw.WriteHeader(&tar.Header{Name: "worktree/huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40})
	_, _ = tw.Write([]byte("only this"))
	if _, err := replace(&huge); err == nil {
		t.Errorf("an entry of 1 TiB that is cut short was accepted")
	}
	unchanged("a huge entry cut short")

	// Accepted, with what the host must not have left out or defused.
	dropped, err := replace(archive(t, dir,
		entry{name: "worktree/file", typ: tar.TypeReg, mode: 0o6755, body: "setuid"},
		entry{name: "worktree/sticky/", typ: tar.TypeDir, mode: 0o1777},
		entry{name: "worktree/sub/", typ: tar.TypeDir, mode: 0o555},
		entry{name: "worktree/sub/in-readonly-dir", typ: tar.TypeReg, body: "ok"},
		entry{name: "worktree/abs", typ: tar.TypeSymlink, link: outside},
		entry{name: "worktree/sub/up", typ: tar.TypeSymlink, link: "../../x"},
		entry{name: "worktree/sub/redirect", typ: tar.TypeSymlink, link: "in-readonly-dir/../.."},
		entry{name: "worktree/sub/fine", typ: tar.TypeSymlink, link: "../file"},
		entry{name: "worktree/hard", typ: tar.TypeLink, link: "worktree/file"},
		entry{name: "worktree/hard-out", typ: tar.TypeLink, link: outside},
		entry{name: "worktree/dev", typ: tar.TypeChar},
		entry{name: "worktree/fifo", typ: tar.TypeFifo},
	))
	if err != nil {
		t.Fatalf("a copy with entries to leave out: %v", err)
	}
	if len(dropped) != 6 {
		t.Errorf("left out %v, want abs, sub/up, sub/redirect, hard-out, dev, fifo", dropped)
	}
	for _, gone := range []string{"keep.txt", "abs", "sub/up", "sub/redirect", "hard-out", "dev", "fifo"} {
		if _, err := os.Lstat(filepath.Join(wt, gone)); !os.IsNotExist(err) {
			t.Errorf("%s is in the worktree: %v", gone, err)
		}
	}
	mode := func(rel string) fs.FileMode {
		st, err := os.Lstat(filepath.Join(wt, rel))
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode()
	}
	if m := mode("file"); m != 0o755 {
		t.Errorf("file mode %v, want 0755 without setuid/setgid", m)
	}
	if m := mode("sticky"); m != fs.ModeDir|0o777 {
		t.Errorf("sticky dir mode %v, want drwxrwxrwx", m)
	}
	if m := mode("sub"); m != fs.ModeDir|0o755 {
		t.Errorf("read-only dir mode %v, want it readable and writable by its owner", m)
	}
	if l, err := os.Readlink(filepath.Join(wt, "sub/fine")); err != nil || l != "../file" {
		t.Errorf("sub/fine: %q %v", l, err)
	}
	if b, err := os.ReadFile(filepath.Join(wt, "hard")); err != nil || string(b) != "setuid" {
		t.Errorf("hard link inside: %q %v", b, err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "host secret" {
		t.Errorf("the file outside changed: %q", b)
	}
}

// manySmall makes n files of size bytes each.
func manySmall(n, size int) []entry {
	var out []entry
	for i := range n {
		out = append(out, entry{name: fmt.Sprintf("worktree/f%03d", i), typ: tar.TypeReg, body: strings.Repeat("y", size)})
	}
	return out
}

// Which symlink targets stay inside the worktree whatever the links they
// pass through.
func TestLinkStaysInside(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		ok           bool
	}{
		{"a", "b", true},
		{"a", "./b/c", true},
		{"d/a", "../b", true},
		{"d/e/a", "../../b/c", true},
		{"a", "..", false},
		{"d/a", "../..", false},
		{"a", "/etc/passwd", false},
		{"a", "", false},
		{"d/a", "x/../../..", false},
		{"d/a", "x/../b", false}, // x could be a link anywhere inside
		{"a", "b/..", false},
	} {
		if got := linkStaysInside(tc.name, tc.target); got != tc.ok {
			t.Errorf("%s -> %s: %v, want %v", tc.name, tc.target, got, tc.ok)
		}
	}
}
