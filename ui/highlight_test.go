package ui

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/chroma/v2"

	"github.com/xmode/xmode/internal/testenv"
)

// The lexers in lexers/ are chroma's, unchanged, at the version go.mod
// names: a chroma upgrade that changes one fails here until they are
// copied again (lexers/README.md). They are read from the release in the
// module cache (xmode links chroma's engine, not its lexers package).
func TestLexersAreChromas(t *testing.T) {
	version, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/alecthomas/chroma/v2").Output()
	if err != nil {
		testenv.Skip(t, "go list chroma's version: %v", err)
	}
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/alecthomas/chroma/v2@"+strings.TrimSpace(string(version))).Output()
	var mod struct{ Dir string }
	if err != nil || json.Unmarshal(out, &mod) != nil || mod.Dir == "" {
		testenv.Skip(t, "chroma's release is not in the module cache and cannot be downloaded: %v\n%s", err, out)
	}
	dir := mod.Dir
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
