package clidocs

import (
	"os"
	"path/filepath"
	"testing"
)

// docs/cli says what --help says: regenerating it changes nothing. When
// this fails, run `make docs` and commit the result.
func TestReferenceUpToDate(t *testing.T) {
	fresh := t.TempDir()
	if err := Markdown(fresh); err != nil {
		t.Fatal(err)
	}
	committed := filepath.Join("..", "..", "docs", "cli")
	want := files(t, fresh)
	have := files(t, committed)
	for name, text := range want {
		if got, ok := have[name]; !ok {
			t.Errorf("docs/cli/%s is missing: run `make docs`", name)
		} else if got != text {
			t.Errorf("docs/cli/%s is stale (it differs from the command's --help): run `make docs`", name)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/cli/%s documents a command that no longer exists: run `make docs`", name)
		}
	}
}

// The man pages generate (make install installs them).
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if err := Man(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "xmode-sandbox-shell.1")); err != nil {
		t.Fatalf("no man page for xmode sandbox shell: %v", err)
	}
}

func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}
