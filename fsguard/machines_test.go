package fsguard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidProject(t *testing.T) {
	for _, ok := range []string{"a", "prom", "my-project_2.x", "0", strings.Repeat("a", 63), "a..b"} {
		if !ValidProject(ok) {
			t.Errorf("ValidProject(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", ".", "..", ".hidden", "a/b", "../x", "Upper", "a b", "a\x00", strings.Repeat("a", 64), "é", "a\\b"} {
		if ValidProject(bad) {
			t.Errorf("ValidProject(%q) = true", bad)
		}
	}
}

// RemoveMachine deletes the machine's directory and nothing it links to.
func TestRemoveMachineConfined(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	g := Guard{Root: root}
	dir, err := g.MachineDir("p")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "repo", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "repo", ".git", "link"))
	os.MkdirAll(filepath.Join(g.MachinesDir(), "q"), 0o755)
	if removed, err := g.RemoveMachine("p"); err != nil || !removed {
		t.Fatalf("RemoveMachine: %v, %v", removed, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("machine dir still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatalf("followed a symlink out: %v", err)
	}
	if _, err := os.Stat(filepath.Join(g.MachinesDir(), "q")); err != nil {
		t.Fatalf("removed another machine: %v", err)
	}
	if removed, err := g.RemoveMachine("p"); err != nil || removed {
		t.Fatalf("second RemoveMachine: %v, %v", removed, err)
	}
	if _, err := g.RemoveMachine(".."); err == nil {
		t.Fatal("RemoveMachine(..) accepted")
	}
}
