package ui

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/gitcli/gittest"
)

// realPatch makes a change with the real git — an edit, a rename with an
// edit, a mode change, a binary file, a symlink, a deletion, a path git
// quotes — and returns `git diff --binary -M` of it, as change.patch has
// it.
func realPatch(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	gittest.Git(t, dir, "init", "-q", "-b", "main")
	w := func(p, body string) {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var long strings.Builder
	for i := 0; i < 40; i++ {
		long.WriteString("line of the file that moves\n")
	}
	w("a.go", "package a\n\nfunc A() int { return 1 }\n")
	w("old/name.txt", long.String())
	w("run.sh", "echo hi\n")
	w("gone.txt", "bye\n")
	gittest.Git(t, dir, "add", "-A")
	gittest.Git(t, dir, "commit", "-qm", "base")
	w("a.go", "package a\n\n// A says one.\nfunc A() int { return 1 }\n")
	os.MkdirAll(filepath.Join(dir, "new"), 0o755)
	gittest.Git(t, dir, "mv", "old/name.txt", "new/name.txt")
	w("new/name.txt", long.String()+"one more\n")
	os.Chmod(filepath.Join(dir, "run.sh"), 0o755)
	os.WriteFile(filepath.Join(dir, "blob.bin"), []byte{0, 1, 2, 3, 0, 255}, 0o644)
	os.Symlink("a.go", filepath.Join(dir, "link"))
	os.Remove(filepath.Join(dir, "gone.txt"))
	w("tab\there <b>.txt", "x\n")
	gittest.Git(t, dir, "add", "-A")
	c := exec.Command("git", "-C", dir, "diff", "--cached", "--binary", "-M", "--full-index")
	out, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReadPageOfARealPatch(t *testing.T) {
	patch := realPatch(t)
	page, err := readPage(bytes.NewReader(patch), pagePos{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*diffFile{}
	for _, f := range page.Files {
		got[f.Path()] = f
	}
	if len(page.Files) != 7 || page.Next != nil {
		t.Fatalf("%d files, next %v: %v", len(page.Files), page.Next, got)
	}
	a := got["a.go"]
	if a == nil || a.Kind() != "modified" || len(a.Hunks) != 1 {
		t.Fatalf("a.go: %+v", a)
	}
	var added []string
	for _, l := range a.Hunks[0].Lines {
		if l.Kind == '+' {
			added = append(added, l.Text)
			if l.New != 3 || l.Old != 0 {
				t.Errorf("added line numbers: old %d new %d", l.Old, l.New)
			}
		}
	}
	if len(added) != 1 || added[0] != "// A says one." {
		t.Errorf("a.go added %q", added)
	}
	if r := got["new/name.txt"]; r == nil || !r.Renamed || r.OldPath != "old/name.txt" || r.Similarity < 90 {
		t.Errorf("rename: %+v", r)
	}
	if m := got["run.sh"]; m == nil || m.OldMode != "100644" || m.NewMode != "100755" || len(m.Hunks) != 0 {
		t.Errorf("mode change: %+v", m)
	}
	if b := got["blob.bin"]; b == nil || !b.Binary || !b.New || len(b.Hunks) != 0 {
		t.Errorf("binary: %+v", b)
	}
	if l := got["link"]; l == nil || l.NewMode != "120000" {
		t.Errorf("symlink: %+v", l)
	}
	if d := got["gone.txt"]; d == nil || !d.Deleted {
		t.Errorf("deletion: %+v", d)
	}
	if q := got["tab\there <b>.txt"]; q == nil || !q.New {
		t.Errorf("a quoted path: %v", got)
	}
}

// Pages cut at the budget, in the middle of a file if need be, and the
// pages together hold every line once, in order.
func TestReadPagePaging(t *testing.T) {
	patch := realPatch(t)
	whole, err := readPage(bytes.NewReader(patch), pagePos{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	flat := func(p *diffPage) (lines []string) {
		for _, f := range p.Files {
			for _, h := range f.Hunks {
				for _, l := range h.Lines {
					lines = append(lines, f.Path()+":"+string(l.Kind)+l.Text)
				}
			}
		}
		return lines
	}
	want := flat(whole)
	defer func(n int) { pageLines = n }(pageLines)
	pageLines = 3
	var all []string
	pos, pages, midFile := pagePos{}, 0, false
	for {
		p, err := readPage(bytes.NewReader(patch), pos, nil)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, flat(p)...)
		if p.Next == nil {
			break
		}
		if pages > 50 {
			t.Fatal("no end")
		}
		pos = *p.Next
		midFile = midFile || pos.Skip > 0
	}
	if pages < 4 || !midFile || strings.Join(all, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%d pages:\n%s\nwant\n%s", pages, strings.Join(all, "\n"), strings.Join(want, "\n"))
	}
}

// Highlighting keeps the hunk's lines and escapes what they hold.
func TestHighlight(t *testing.T) {
	patch := []byte("diff --git a/x.go b/x.go\n--- a/x.go\n+++ b/x.go\n@@ -1,2 +1,3 @@\n package x\n-/* old\n+/* <script>alert(1)</script> \u202e\n+still comment */\n")
	page, err := readPage(bytes.NewReader(patch), pagePos{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var h highlighter
	h.highlight(page)
	lines := page.Files[0].Hunks[0].Lines
	if len(lines) != 4 {
		t.Fatalf("%d lines", len(lines))
	}
	if !strings.Contains(string(lines[0].HTML), `<span class="k">package</span>`) {
		t.Errorf("not highlighted: %s", lines[0].HTML)
	}
	if got := string(lines[2].HTML); strings.Contains(got, "<script") || !strings.Contains(got, `<span class="esc">\u202e</span>`) || !strings.Contains(got, `class="c"`) {
		t.Errorf("comment line: %s", got)
	}
	if got := string(lines[3].HTML); !strings.Contains(got, `class="c"`) {
		t.Errorf("a comment over two lines: %s", got)
	}
}
