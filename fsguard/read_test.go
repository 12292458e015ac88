package fsguard

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/internal/testenv"
)

// Whatever a sandbox put where xmode expects a file, OpenRegular answers at
// once: a regular file opens (in blocking mode), anything else — a FIFO no
// one writes, a directory, a device, a link (even one that stays inside),
// a FIFO standing in for a directory on the way — is a NotRegularError
// saying what it is.
func TestOpenRegularRefusesAllButFiles(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "plan.yaml"), []byte("steps: []\n"), 0o644))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "dir"), 0o755))
	must(os.Symlink("plan.yaml", filepath.Join(dir, "link")))
	must(unix.Mkfifo(filepath.Join(dir, "notdir"), 0o644))
	root, err := os.OpenRoot(dir)
	must(err)
	defer root.Close()

	f, err := OpenRegular(root, "plan.yaml")
	must(err)
	if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("the file is left non-blocking (flags %#x, %v)", fl, err)
	}
	f.Close()
	if b, err := ReadRegular(root, "plan.yaml", 100); err != nil || string(b) != "steps: []\n" {
		t.Errorf("ReadRegular: %q %v", b, err)
	}
	if _, err := ReadRegular(root, "plan.yaml", 4); err == nil {
		t.Error("a 10-byte file read with a bound of 4")
	}

	cases := map[string]string{
		"fifo":        "fifo is a FIFO",
		"dir":         "dir is a directory",
		"link":        "link is a symlink",
		"notdir/file": "notdir is not a directory",
	}
	if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err == nil {
		cases["null"] = "null is a character device"
	} else if os.Getuid() == 0 {
		t.Fatalf("mknod as root: %v", err)
	} else {
		defer testenv.Skip(t, "mknod of a device needs root: %v", err)
	}
	for name, want := range cases {
		start := time.Now()
		f, err := OpenRegular(root, name)
		var nr *NotRegularError
		if !errors.As(err, &nr) || err.Error() != want {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
		if f != nil {
			f.Close()
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %s", name, d)
		}
	}
	if _, err := OpenRegular(root, "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if _, err := OpenRegular(root, "../outside"); err == nil {
		t.Error("a path out of the root opened")
	}

	// A path the user gave follows its link; a FIFO or a device is refused.
	if f, err := OpenRegularPath(filepath.Join(dir, "link")); err != nil {
		t.Errorf("a user's link to a file: %v", err)
	} else {
		f.Close()
	}
	for _, p := range []string{filepath.Join(dir, "fifo"), "/dev/null", dir} {
		var nr *NotRegularError
		if _, err := OpenRegularPath(p); !errors.As(err, &nr) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := OpenRegularPath(filepath.Join(dir, "missing")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("missing: %v", err)
	}
}

// A directory a sandbox could have replaced opens as an os.Root, or lists,
// at once or not at all: a FIFO or a link in its place is refused saying
// what it is (os.OpenRoot and fs.ReadDir block on a FIFO), and the root is
// the directory that was opened, whatever is put at its path afterwards.
func TestOpenRootRefusesAllButDirectories(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a", "sub"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a", "sub", "f"), []byte("x"), 0o644))
	must(unix.Mkfifo(filepath.Join(dir, "a", "fifo"), 0o644))
	must(os.Symlink("sub", filepath.Join(dir, "a", "link")))
	root, err := os.OpenRoot(dir)
	must(err)
	defer root.Close()

	quick := func(what string, f func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatalf("%s blocked", what)
			return nil
		}
	}
	for name, want := range map[string]string{"a/fifo": "a/fifo is a FIFO, not a directory", "a/link": "a/link is a symlink, not a directory"} {
		err := quick("OpenRoot "+name, func() error { _, err := OpenRoot(root, name); return err })
		var nr *NotRegularError
		if !errors.As(err, &nr) || err.Error() != want {
			t.Errorf("OpenRoot %s: %v, want %q", name, err, want)
		}
		if err := quick("ReadDir "+name, func() error { _, err := ReadDir(root, name); return err }); err == nil {
			t.Errorf("ReadDir %s listed it", name)
		}
	}
	fifoPath := filepath.Join(dir, "a", "fifo")
	err = quick("OpenRootPath", func() error { _, err := OpenRootPath(fifoPath); return err })
	if nr := (*NotRegularError)(nil); !errors.As(err, &nr) {
		t.Errorf("OpenRootPath of a FIFO: %v", err)
	}

	sub, err := OpenRoot(root, "a/sub")
	must(err)
	defer sub.Close()
	byPath, err := OpenRootPath(filepath.Join(dir, "a", "sub"))
	must(err)
	defer byPath.Close()
	// Swapped for a FIFO after the open: both roots are still the directory.
	must(os.Rename(filepath.Join(dir, "a", "sub"), filepath.Join(dir, "a", "moved")))
	must(unix.Mkfifo(filepath.Join(dir, "a", "sub"), 0o644))
	for _, r := range []*os.Root{sub, byPath} {
		if b, err := ReadRegular(r, "f", 10); err != nil || string(b) != "x" {
			t.Errorf("the root after its path was swapped: %q %v", b, err)
		}
	}
	if es, err := ReadDir(root, "a"); err != nil || len(es) != 4 || es[0].Name() != "fifo" || es[3].Name() != "sub" {
		t.Errorf("ReadDir a: %v %v", es, err)
	}
}
