package ui

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/chroma/v2"
)

// The lexers in lexers/ are chroma's, unchanged, at the version go.mod
// names: a chroma upgrade that changes one fails here until they are
// copied again (lexers/README.md).
func TestLexersAreChromas(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/alecthomas/chroma/v2").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Skipf("chroma's module is not in the module cache: %v", err)
	}
	paths, _ := fs.Glob(lexerFS, "lexers/*.xml")
	if len(paths) < 20 {
		t.Fatalf("%d lexers", len(paths))
	}
	for _, p := range paths {
		ours, _ := lexerFS.ReadFile(p)
		theirs, err := os.ReadFile(filepath.Join(dir, "lexers", "embedded", filepath.Base(p)))
		if err != nil || !bytes.Equal(ours, theirs) {
			t.Errorf("%s differs from chroma's (%v): copy it again from %s", p, err, dir)
		}
	}
}

// Every lexer builds and lexes, and files find theirs by name.
func TestLexers(t *testing.T) {
	var h highlighter
	reg := h.registry()
	paths, _ := fs.Glob(lexerFS, "lexers/*.xml")
	if n := len(reg.Names(false)); n != len(paths)+1 {
		t.Fatalf("%d lexers registered, want %d", n, len(paths)+1)
	}
	for _, name := range reg.Names(false) {
		it, err := reg.Get(name).Tokenise(&chroma.TokeniseOptions{State: "root"}, "x = 1 # <a>\n")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for tok := it(); tok != chroma.EOF; tok = it() {
		}
	}
	for file, want := range map[string]string{
		"main.go": "Go", "a/b/x.py": "Python", "Makefile": "Makefile", "Dockerfile": "Docker",
		"x.ts": "TypeScript", "y.rs": "Rust", "z.yaml": "YAML", "notes.unknownext": "",
	} {
		got := ""
		if l := h.lexer(file); l != nil {
			got = l.Config().Name
		}
		if got != want {
			t.Errorf("%s: lexer %q, want %q", file, got, want)
		}
	}
}
