package fsguard

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/xmode/xmode/internal/testenv"
)

// ChownTree gives everything under dir away, links included, and nothing
// a link points to.
func TestChownTreeFollowsNoLink(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "giving files to another user needs root")
	}
	base := t.TempDir()
	dir, outside := filepath.Join(base, "wt"), filepath.Join(base, "outside")
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o644)
	os.WriteFile(outside, []byte("keep"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "link"))
	if err := ChownTree(dir, 65532, 65533); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) (uint32, uint32) {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid
	}
	for _, p := range []string{dir, filepath.Join(dir, "sub"), filepath.Join(dir, "sub", "f"), filepath.Join(dir, "link")} {
		if u, g := owner(p); u != 65532 || g != 65533 {
			t.Errorf("%s belongs to %d:%d, want 65532:65533", p, u, g)
		}
	}
	if u, _ := owner(outside); u != 0 {
		t.Errorf("the file a link points to was given away (uid %d)", u)
	}
}
