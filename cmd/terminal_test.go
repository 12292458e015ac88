package cmd

import (
	"bytes"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// isTerminal tells a terminal from a pipe and a buffer, through xmode's
// pipeWriter too: progress, colour and the pager depend on it.
func TestIsTerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, tc := range map[string]struct {
		w    io.Writer
		want bool
	}{
		"pty":                    {tty, true},
		"pty behind pipeWriter":  {newPipeWriter(tty), true},
		"pipe":                   {w, false},
		"pipe behind pipeWriter": {newPipeWriter(w), false},
		"buffer":                 {&bytes.Buffer{}, false},
	} {
		if got := isTerminal(tc.w); got != tc.want {
			t.Errorf("isTerminal(%s) = %v, want %v", name, got, tc.want)
		}
	}
}

// One terminal-detection library: golang.org/x/term, the Go team's own,
// which raw mode needs anyway. No package of xmode imports go-isatty
// (fatih/color still does, for itself).
func TestOneTerminalLibrary(t *testing.T) {
	seen := 0
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		seen++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/mattn/go-isatty" {
				t.Errorf("%s imports go-isatty: use term.IsTerminal (golang.org/x/term), or isTerminal in cmd", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 100 {
		t.Fatalf("read only %d Go files: the walk is broken", seen)
	}
}
