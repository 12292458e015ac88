package gitread

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xmode/xmode/gitcli/gittest"
)

// seedRepo is a small repository made by the real git, whose objects,
// index and packs seed the fuzz targets: a text file changed commit after
// commit (git stores it as deltas), a binary file, a symlink, an
// executable, a subdirectory, a submodule (a gitlink), a merge, a commit
// with an encoding header and one with an empty message; packed once
// with offset deltas and once with ref deltas, its index written in
// versions 2, 3 and 4.
type seedRepo struct {
	tb  testing.TB
	dir string
	// packs are the repository's packs with their index, as records of
	// the fuzz target's memory index (memIndexRecords).
	packs   []seedPack
	indexes [][]byte // .git/index in versions 2 (with extensions), 3 and 4
}

type seedPack struct{ pack, index []byte }

func newSeedRepo(tb testing.TB) *seedRepo {
	tb.Helper()
	r := &seedRepo{tb: tb, dir: filepath.Join(tb.TempDir(), "repo")}
	r.git(".", "init", "-q", "-b", "main", r.dir)
	write := func(name, body string, mode os.FileMode) {
		p := filepath.Join(r.dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			tb.Fatal(err)
		}
	}
	text := strings.Repeat("a line that repeats, so that git stores its versions as deltas\n", 20)
	write("README", text, 0o644)
	write("bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
	write("data.bin", "\x00\x01\x02binary\xff\xfe", 0o644)
	os.Symlink("README", filepath.Join(r.dir, "link"))
	r.git(r.dir, "add", "-A")
	r.git(r.dir, "commit", "-qm", "first\n\nwith a body")
	first := r.git(r.dir, "rev-parse", "HEAD")
	r.git(r.dir, "update-index", "--add", "--cacheinfo", "160000,"+first+",sub")
	for i := 0; i < 4; i++ {
		text += "one more line " + strconv.Itoa(i) + "\n"
		write("README", text, 0o644)
		r.git(r.dir, "commit", "-qam", "change "+strconv.Itoa(i))
	}
	r.git(r.dir, "checkout", "-qb", "side")
	write("src/side.go", "package side\n", 0o644)
	r.git(r.dir, "add", "-A")
	r.git(r.dir, "-c", "i18n.commitEncoding=ISO-8859-1", "commit", "-qm", "side")
	r.git(r.dir, "checkout", "-q", "main")
	r.git(r.dir, "commit", "-q", "--allow-empty", "--allow-empty-message", "-m", "")
	r.git(r.dir, "merge", "-q", "--no-ff", "-m", "merge side", "side")

	r.git(r.dir, "gc", "-q", "--aggressive")
	r.addPacks()
	r.git(r.dir, "-c", "repack.useDeltaBaseOffset=false", "repack", "-q", "-adf")
	r.addPacks()

	r.indexes = append(r.indexes, r.read(".git/index"))
	write("new", "intent to add\n", 0o644)
	r.git(r.dir, "add", "-N", "new") // an extended flag: version 3
	r.indexes = append(r.indexes, r.read(".git/index"))
	r.git(r.dir, "update-index", "--index-version", "4")
	r.indexes = append(r.indexes, r.read(".git/index"))
	return r
}

func (r *seedRepo) git(dir string, args ...string) string {
	r.tb.Helper()
	return gittest.Git(r.tb, dir, args...)
}

func (r *seedRepo) read(name string) []byte {
	r.tb.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, name))
	if err != nil {
		r.tb.Fatal(err)
	}
	return b
}

// raw is what git prints, untrimmed (an object's bytes).
func (r *seedRepo) raw(stdin []byte, args ...string) []byte {
	r.tb.Helper()
	c := exec.Command("git", append([]string{"-C", r.dir}, args...)...)
	c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	c.Stdin = bytes.NewReader(stdin)
	out, err := c.Output()
	if err != nil {
		r.tb.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// addPacks records the repository's packs, each with its index as `git
// show-index` reads it.
func (r *seedRepo) addPacks() {
	r.tb.Helper()
	idxs, _ := filepath.Glob(filepath.Join(r.dir, ".git", "objects", "pack", "*.idx"))
	if len(idxs) == 0 {
		r.tb.Fatal("git wrote no pack")
	}
	for _, idx := range idxs {
		b, err := os.ReadFile(idx)
		if err != nil {
			r.tb.Fatal(err)
		}
		var records []byte
		sc := bufio.NewScanner(bytes.NewReader(r.raw(b, "show-index")))
		for sc.Scan() {
			f := strings.Fields(sc.Text()) // offset, ID, (crc)
			off, err1 := strconv.ParseUint(f[0], 10, 32)
			id, err2 := hex.DecodeString(f[1])
			if err1 != nil || err2 != nil {
				r.tb.Fatalf("show-index: %q", sc.Text())
			}
			records = append(records, id...)
			records = binary.BigEndian.AppendUint32(records, uint32(off))
		}
		pack := r.read(strings.TrimPrefix(strings.TrimSuffix(idx, ".idx")+".pack", r.dir+"/"))
		r.packs = append(r.packs, seedPack{pack, records})
	}
}

// objects are the IDs of the repository's objects of type typ.
func (r *seedRepo) objects(typ string) []Hash {
	r.tb.Helper()
	var ids []Hash
	for _, line := range strings.Split(r.git(r.dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)"), "\n") {
		id, t, _ := strings.Cut(line, " ")
		if t != typ {
			continue
		}
		h, err := ParseHash(id)
		if err != nil {
			r.tb.Fatal(err)
		}
		ids = append(ids, h)
	}
	if len(ids) == 0 {
		r.tb.Fatalf("no %s in the seed repository", typ)
	}
	return ids
}

// object is the content of object id, as git reads it.
func (r *seedRepo) object(typ string, id Hash) []byte {
	return r.raw(nil, "cat-file", typ, id.String())
}
