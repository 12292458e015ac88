package storage

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
