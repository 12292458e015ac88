package gitread

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/gitcli/gittest"
	"github.com/xmode/xmode/gitread/gitreadtest"
)

func deflate(b []byte) []byte {
	var out bytes.Buffer
	zw := zlib.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// openTestSource reads the objects of gitDir with the bounds xmode sets
// for a limit of limit bytes.
func openTestSource(t *testing.T, gitDir string, limit int64) *Source {
	return openTestSourceLimits(t, gitDir, testLimits(limit, 256<<20))
}

func openTestSourceLimits(t *testing.T, gitDir string, lim Limits) *Source {
	t.Helper()
	root, err := os.OpenRoot(gitDir)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSource(root, Options{Name: "test", Limits: lim})
	t.Cleanup(func() { s.Close(); root.Close() })
	return s
}

// A real repository's packs, deltas included, read back object by object:
// every object git lists is found and hashes to its ID.
func TestSourceReadsGitPacks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	gittest.Git(t, ".", "init", "-q", "-b", "main", dir)
	body := strings.Repeat("a line that repeats so git deltas it\n", 200)
	for i := 0; i < 6; i++ {
		body += "one more line\n"
		os.WriteFile(filepath.Join(dir, "f.txt"), []byte(body), 0o644)
		gittest.Git(t, dir, "add", ".")
		gittest.Git(t, dir, "commit", "-qm", "v")
	}
	gittest.Git(t, dir, "gc", "-q", "--aggressive")
	s := openTestSource(t, filepath.Join(dir, ".git"), 1<<30)
	if s.openPacks(); len(s.packs) == 0 {
		t.Fatal("no pack")
	}
	list := gittest.Git(t, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype) %(deltabase)")
	deltas := 0
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		h, _ := ParseHash(f[0])
		typ, _, err := s.Read(h)
		if err != nil || typ != f[1] {
			t.Fatalf("%s: %s, %v; want a %s", f[0], typ, err, f[1])
		}
		if f[2] != strings.Repeat("0", 40) {
			deltas++
		}
	}
	if deltas == 0 {
		t.Fatal("the pack holds no delta: the test reads no delta chain")
	}
}

// A loose object whose content does not hash to its name is refused, and
// so is one whose header claims more than the limit (before any of it is
// inflated).
func TestSourceRefusesForgedAndHugeLooseObjects(t *testing.T) {
	gitDir := t.TempDir()
	real, _ := HashObject(TypeBlob, []byte("real\n"))
	x := real.String()
	os.MkdirAll(filepath.Join(gitDir, "objects", x[:2]), 0o755)
	os.WriteFile(filepath.Join(gitDir, "objects", x[:2], x[2:]), deflate([]byte("blob 7\x00forged\n")), 0o644)
	s := openTestSource(t, gitDir, 1<<20)
	if _, _, err := s.Read(real); err == nil || !strings.Contains(err.Error(), "tampered or corrupt") {
		t.Fatalf("forged object: %v", err)
	}

	huge, _ := HashObject(TypeBlob, []byte("huge"))
	y := huge.String()
	os.MkdirAll(filepath.Join(gitDir, "objects", y[:2]), 0o755)
	os.WriteFile(filepath.Join(gitDir, "objects", y[:2], y[2:]), deflate([]byte("blob 99999999999\x00huge")), 0o644)
	if _, _, err := s.Read(huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("huge header: %v, want ErrTooLarge", err)
	}
}

// A FIFO where an object should be does not block the reader.
func TestSourceDoesNotBlockOnFIFO(t *testing.T) {
	gitDir := t.TempDir()
	h, _ := HashObject(TypeBlob, []byte("x"))
	x := h.String()
	os.MkdirAll(filepath.Join(gitDir, "objects", x[:2]), 0o755)
	if err := syscall.Mkfifo(filepath.Join(gitDir, "objects", x[:2], x[2:]), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openTestSource(t, gitDir, 1<<20)
	done := make(chan error, 1)
	go func() { _, _, err := s.Read(h); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO read as an object")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
}

// packWithSelfDelta is a pack whose one object is a ref-delta against
// itself, and its v2 index.
func packWithSelfDelta(t *testing.T, dir string) Hash {
	var h Hash
	copy(h[:], bytes.Repeat([]byte{0xab}, 20))
	delta := deflate([]byte{1, 1, 0x91, 0, 1}) // src 1, dst 1, copy 1 byte
	var pack bytes.Buffer
	pack.WriteString("PACK")
	binary.Write(&pack, binary.BigEndian, uint32(2))
	binary.Write(&pack, binary.BigEndian, uint32(1))
	pack.WriteByte(byte(packRefDelta<<4) | 5) // size 5
	pack.Write(h[:])
	pack.Write(delta)
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])

	var idx bytes.Buffer
	idx.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
	for i := 0; i < 256; i++ {
		n := uint32(0)
		if i >= int(h[0]) {
			n = 1
		}
		binary.Write(&idx, binary.BigEndian, n)
	}
	idx.Write(h[:])
	binary.Write(&idx, binary.BigEndian, uint32(0))  // crc
	binary.Write(&idx, binary.BigEndian, uint32(12)) // offset
	idx.Write(sum[:])
	isum := sha1.Sum(idx.Bytes())
	idx.Write(isum[:])
	os.MkdirAll(filepath.Join(dir, "objects", "pack"), 0o755)
	os.WriteFile(filepath.Join(dir, "objects", "pack", "pack-x.pack"), pack.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, "objects", "pack", "pack-x.idx"), idx.Bytes(), 0o644)
	return h
}

// A delta whose base is itself ends in an error, not in endless recursion.
func TestSourceStopsDeltaCycles(t *testing.T) {
	gitDir := t.TempDir()
	h := packWithSelfDelta(t, gitDir)
	s := openTestSource(t, gitDir, 1<<20)
	if s.openPacks(); len(s.packs) != 1 {
		t.Fatalf("the hand-made pack was not opened")
	}
	if _, _, err := s.Read(h); err == nil || !strings.Contains(err.Error(), "delta cycle") {
		t.Fatalf("self-delta: %v, want a delta cycle", err)
	}
}

func TestApplyDeltaBounds(t *testing.T) {
	base := []byte("0123456789")
	if out, err := applyDelta(base, []byte{10, 4, 0x91, 2, 4}, sizeLimit{100, "the limit"}, nil); err != nil || string(out) != "2345" {
		t.Fatalf("copy: %q %v", out, err)
	}
	if out, err := applyDelta(base, []byte{10, 3, 3, 'a', 'b', 'c'}, sizeLimit{100, "the limit"}, nil); err != nil || string(out) != "abc" {
		t.Fatalf("insert: %q %v", out, err)
	}
	for name, d := range map[string][]byte{
		"copy past the base":       {10, 4, 0x91, 8, 4},
		"more than the target":     {10, 2, 3, 'a', 'b', 'c'},
		"wrong base size":          {9, 1, 1, 'a'},
		"insert past the delta":    {10, 3, 3, 'a'},
		"reserved opcode zero":     {10, 1, 0},
		"target shorter than said": {10, 5, 1, 'a'},
	} {
		if _, err := applyDelta(base, d, sizeLimit{100, "the limit"}, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := applyDelta(base, []byte{10, 0xe8, 0x07}, sizeLimit{100, "the limit"}, nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a target over the limit: %v", err)
	}
}

// size reads an object's size from its header alone: every object of a
// real repository (loose, packed whole, ofs-deltas) and a ref-delta chain
// give git's size, and a large packed blob or delta is not inflated.
func TestSourceSizeFromHeaders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	gittest.Git(t, ".", "init", "-q", "-b", "main", dir)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	body := strings.Repeat("a line that repeats so git deltas it\n", 200)
	for i := 0; i < 6; i++ {
		body += "one more line\n"
		big[i*4096] = 'x'
		os.WriteFile(filepath.Join(dir, "f.txt"), []byte(body), 0o644)
		os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644)
		gittest.Git(t, dir, "add", ".")
		gittest.Git(t, dir, "commit", "-qm", "v")
		if i == 4 {
			gittest.Git(t, dir, "gc", "-q", "--aggressive") // the last commit's objects stay loose
		}
	}
	s := openTestSource(t, filepath.Join(dir, ".git"), 1<<30)
	list := gittest.Git(t, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objectsize) %(deltabase)")
	deltas := 0
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		h, _ := ParseHash(f[0])
		var got int64
		var err error
		alloc := allocated(func() { got, err = s.Size(h) })
		if err != nil || strconv.FormatInt(got, 10) != f[1] {
			t.Fatalf("%s: size %d, %v; git says %s", f[0], got, err, f[1])
		}
		if alloc > 1<<20 {
			t.Fatalf("%s: the size of a %s-byte object allocated %d KiB", f[0], f[1], alloc>>10)
		}
		if f[2] != strings.Repeat("0", 40) {
			deltas++
		}
	}
	if deltas == 0 {
		t.Fatal("the pack holds no delta: the test reads no delta's size")
	}

	gitDir := t.TempDir()
	top, content := refChain(t, gitDir, 1<<10, 3, true)
	s = openTestSource(t, gitDir, 1<<30)
	if got, err := s.Size(top); err != nil || got != int64(len(content)) {
		t.Fatalf("a ref-delta: size %d, %v; want %d", got, err, len(content))
	}
	if _, err := s.Size(fakeID(99)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a missing object: %v", err)
	}
}

// InPack finds what a pack lists, not a loose object; a pack written after
// the Source opened its packs is found once it is refreshed.
func TestSourceInPackAndRefresh(t *testing.T) {
	dir := t.TempDir()
	blob := []byte("packed\n")
	id, _ := HashObject(TypeBlob, blob)
	loose, _ := HashObject(TypeBlob, []byte("loose\n"))
	os.MkdirAll(filepath.Join(dir, "objects", loose.String()[:2]), 0o755)
	os.WriteFile(filepath.Join(dir, "objects", loose.String()[:2], loose.String()[2:]), deflate([]byte("blob 6\x00loose\n")), 0o644)
	s := openTestSource(t, dir, 1<<20)
	if s.InPack(id) || s.InPack(loose) {
		t.Fatal("InPack before any pack exists")
	}
	gitreadtest.WritePack(t, dir, "late", []gitreadtest.Entry{{ID: id, Kind: gitreadtest.Blob, Data: blob}})
	if s.InPack(id) {
		t.Fatal("a pack written after the packs were listed is found without Refresh: the test shows nothing")
	}
	s.Refresh()
	if !s.InPack(id) {
		t.Fatal("InPack after Refresh: the new pack is not found")
	}
	if _, data, err := s.Read(id); err != nil || string(data) != string(blob) {
		t.Fatalf("Read after Refresh: %q, %v", data, err)
	}
	if s.InPack(loose) {
		t.Fatal("InPack reports a loose object")
	}
}
