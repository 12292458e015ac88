package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A used storage root whose store is lost — missing, emptied, not an xmode
// store, another install's — is refused, never silently replaced; Adopt
// replaces it deliberately, keeping the root's instance.
func TestLostStoreIsRefused(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := open(t, root)
	inst, err := s.InstanceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if b, err := os.ReadFile(filepath.Join(root, InstanceFile)); err != nil || strings.TrimSpace(string(b)) != inst {
		t.Fatalf("xmode.instance = %q, %v; want %s", b, err, inst)
	}
	if err := os.Mkdir(filepath.Join(root, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(root, FileName)
	refused := func(want string) {
		t.Helper()
		s, err := Open(ctx, root)
		if err == nil {
			s.Close()
			t.Fatalf("Open of a root whose store %s succeeded", want)
		}
		if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "xmode doctor --adopt") {
			t.Fatalf("Open: %v; want ErrLost saying %q and how to adopt", err, want)
		}
	}

	// emptied (truncate -s 0), with the WAL gone too
	for _, f := range []string{db + "-wal", db + "-shm"} {
		os.Remove(f)
	}
	if err := os.Truncate(db, 0); err != nil {
		t.Fatal(err)
	}
	refused("is empty")
	// missing
	os.Remove(db)
	refused("is missing")
	// a SQLite file that is not an xmode store
	other := t.TempDir()
	o := open(t, other)
	if _, err := o.db.ExecContext(ctx, "PRAGMA user_version = 0"); err != nil {
		t.Fatal(err)
	}
	o.Close()
	copyFile(t, filepath.Join(other, FileName), db)
	refused("has no xmode schema")
	// another install's store
	third := t.TempDir()
	open(t, third).Close()
	copyFile(t, filepath.Join(third, FileName), db)
	refused("belongs to another install")
	if st, _ := os.Stat(db); st.Size() == 0 {
		t.Fatal("a refused open changed the database")
	}

	// adopting keeps this root's instance for a store that is missing
	os.Remove(db)
	a, res, err := Adopt(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := a.InstanceID(ctx); got != inst || !res.Adopted || res.Instance != inst {
		t.Fatalf("adopted store has instance %s (%+v); want the root's %s", got, res, inst)
	}
	a.Close()
	s = open(t, root) // and is an ordinary store again
	s.Close()
	_, res, err = Adopt(ctx, root)
	if err != nil || res.Adopted {
		t.Fatalf("adopting a healthy store: %+v, %v; want nothing to do", res, err)
	}
}

// A root that has never been used gets a fresh store; one made before
// xmode.instance existed gets the file on its next open.
func TestFreshAndOlderRoots(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := open(t, root)
	inst, _ := s.InstanceID(ctx)
	s.Close()
	os.Remove(filepath.Join(root, InstanceFile))
	if err := os.Mkdir(filepath.Join(root, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	s = open(t, root)
	s.Close()
	if b, _ := os.ReadFile(filepath.Join(root, InstanceFile)); strings.TrimSpace(string(b)) != inst {
		t.Fatalf("xmode.instance of an older root = %q, want %s", b, inst)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{to + "-wal", to + "-shm"} {
		os.Remove(f)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// argv is kept byte for byte, also when it is not UTF-8.
func TestArgvRoundTrip(t *testing.T) {
	for _, argv := range [][]string{{"go", "test", "./..."}, {"echo", "a\xffb", "\x1b[2J"}, {}} {
		enc, err := EncodeArgv(argv)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeArgv(enc)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(argv) {
			t.Fatalf("%q -> %s -> %q", argv, enc, got)
		}
		for i := range argv {
			if got[i] != argv[i] {
				t.Fatalf("%q -> %s -> %q", argv, enc, got)
			}
		}
	}
}
