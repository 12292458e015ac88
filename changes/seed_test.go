package changes_test

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// seedFiles is a repository of 24 files in three directories.
func seedFiles() map[string]string {
	files := map[string]string{"README": "hello\n", "a": "aaaa\n", ".gitignore": "*.log\n"}
	for i := range 21 {
		files[fmt.Sprintf("d%d/f%d.go", i%3, i)] = fmt.Sprintf("package d\n\nconst F%d = %d\n", i, i)
	}
	return files
}

// seedSnap is a snapshot's stat: the paths it changed and how many files
// it read.
func seedSnap(t *testing.T, e *env, s *store.Session) (paths []string, hashed int) {
	t.Helper()
	ctx := context.Background()
	sn, err := e.cr.Snapshot(ctx, s, changes.WantStat)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	st, err := sn.Stat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range st.PerFile {
		paths = append(paths, f.Path)
	}
	return paths, sn.Hashed
}

// gitChanged is what the real git says changed in the worktree since its
// HEAD, through the stat data of its index as `git diff --stat` reads it
// (read only: no refresh written back).
func gitChanged(t *testing.T, wt string) []string {
	t.Helper()
	out, err := gitTry(wt, nil, "--no-optional-locks", "diff", "--name-only", "HEAD")
	if err != nil {
		t.Fatalf("git diff: %v: %s", err, out)
	}
	var paths []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" {
			paths = append(paths, l)
		}
	}
	slices.Sort(paths)
	return paths
}

func lstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// onlyCtimeDiffers fails unless the file's size, inode, device and mtime
// are what they were and only its ctime changed: what the test must make
// for the stat cache's ctime check to be the one that tells.
func onlyCtimeDiffers(t *testing.T, what string, was, now unix.Stat_t) {
	t.Helper()
	if now.Size != was.Size || now.Ino != was.Ino || now.Dev != was.Dev || now.Mtim != was.Mtim || now.Ctim == was.Ctim {
		t.Fatalf("%s: size %d→%d, ino %d→%d, mtime %v→%v, ctime %v→%v: want all kept but the ctime",
			what, was.Size, now.Size, was.Ino, now.Ino, was.Mtim, now.Mtim, was.Ctim, now.Ctim)
	}
}

// seedCase creates a session and checks the stat cache its create seeded:
// the first snapshot reads only what a step changed — here a file
// rewritten in place within the same second as the create, its size kept
// and its mtime restored (restore: a shell command that gives $F the
// mtime $REF had) — and sees that change; a later edit is seen too; the
// real git agrees each time.
func seedCase(t *testing.T, e *env, o sandbox.CreateOptions, restore string) *store.Session {
	t.Helper()
	s := e.create(o)
	wt := e.worktree(s)
	was := lstat(t, filepath.Join(wt, "README"))
	e.sh(s, `set -e; F=README; REF=/tmp/seed-ref-$$; touch -r "$F" "$REF"
printf 'HELLO\n' | dd of="$F" conv=notrunc 2>/dev/null
`+restore+`; rm "$REF"`)
	onlyCtimeDiffers(t, "README rewritten", was, lstat(t, filepath.Join(wt, "README")))
	paths, hashed := seedSnap(t, e, s)
	if !slices.Equal(paths, []string{"README"}) || hashed != 1 {
		t.Fatalf("first diff after a same-size rewrite with the mtime restored: changed %v, %d files read; want README alone, read alone (the other %d files seeded)",
			paths, hashed, len(seedFiles())-1)
	}
	if g := gitChanged(t, wt); !slices.Equal(g, paths) {
		t.Fatalf("git diff says %v changed, xmode %v", g, paths)
	}
	e.sh(s, `printf 'more\n' >> d1/f4.go`)
	paths, hashed = seedSnap(t, e, s)
	if !slices.Equal(paths, []string{"README", "d1/f4.go"}) || hashed > 2 {
		t.Fatalf("after an edit: changed %v, %d files read; want README and d1/f4.go", paths, hashed)
	}
	if g := gitChanged(t, wt); !slices.Equal(g, paths) {
		t.Fatalf("git diff says %v changed, xmode %v", g, paths)
	}
	return s
}

// TestSeedHost: a host session's create seeds the run's stat cache, so its
// first diff reads only the file a step changed — even one rewritten with
// its size kept and its mtime restored by `touch -d` in the same second as
// the create (only its ctime tells) — and every file after a seed that is
// removed (the previous behaviour, for comparison) is read.
func TestSeedHost(t *testing.T) {
	e := newEnv(t, nil)
	e.makeRepo(seedFiles())
	seedCase(t, e, sandbox.CreateOptions{}, `touch -d "@$(stat -c %.9Y "$REF")" "$F"`)

	// Without the seed the first diff reads every file.
	s := e.create(sandbox.CreateOptions{})
	e.dropStatCache(s)
	if paths, hashed := seedSnap(t, e, s); len(paths) != 0 || hashed != len(seedFiles()) {
		t.Fatalf("unseeded first diff: changed %v, %d files read; want nothing, all %d read", paths, hashed, len(seedFiles()))
	}
}

// TestSeedForgedIndex: a sandbox that writes its own .git/index, giving a
// changed file's entry the file's new stat data beside its old blob,
// fools git diff (which trusts the index), not xmode: the stat cache is
// xmode's own, its IDs from the base commit's tree.
func TestSeedForgedIndex(t *testing.T) {
	e := newEnv(t, nil)
	e.makeRepo(seedFiles())
	s := e.create(sandbox.CreateOptions{})
	wt := e.worktree(s)
	// An mtime seconds older than the index it forges: git (without
	// nanosecond timestamps) re-reads a file as recent as its index.
	e.sh(s, `printf 'AAAA\n' | dd of=a conv=notrunc 2>/dev/null; touch -d @1000000000 a`)
	forgeIndexEntry(t, filepath.Join(wt, ".git", "index"), "a", lstat(t, filepath.Join(wt, "a")))
	if g := gitChanged(t, wt); len(g) != 0 {
		t.Fatalf("git diff sees %v through the forged index: the forgery did not take", g)
	}
	paths, _ := seedSnap(t, e, s)
	if !slices.Equal(paths, []string{"a"}) {
		t.Fatalf("with a forged index: changed %v, want a", paths)
	}
}

// forgeIndexEntry rewrites the stat data of path's entry in a version 2 or
// 3 git index to st, keeping its blob ID, and the index's checksum to
// match: what a sandbox can write into its own .git.
func forgeIndexEntry(t *testing.T, index, path string, st unix.Stat_t) {
	t.Helper()
	b, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:4]) != "DIRC" {
		t.Fatalf("%s is not an index", index)
	}
	if v := binary.BigEndian.Uint32(b[4:]); v != 2 && v != 3 {
		t.Fatalf("index version %d: only 2 and 3 are forged here", v)
	}
	n := int(binary.BigEndian.Uint32(b[8:]))
	off, found := 12, false
	for range n {
		flags := binary.BigEndian.Uint16(b[off+60:])
		fixed := 62
		if flags&0x4000 != 0 {
			fixed += 2
		}
		end := off + fixed + strings.IndexByte(string(b[off+fixed:]), 0)
		if string(b[off+fixed:end]) == path {
			put := func(at int, v int64) { binary.BigEndian.PutUint32(b[off+at:], uint32(v)) }
			put(0, st.Ctim.Sec)
			put(4, st.Ctim.Nsec)
			put(8, st.Mtim.Sec)
			put(12, st.Mtim.Nsec)
			put(16, int64(st.Dev))
			put(20, int64(st.Ino))
			put(28, int64(st.Uid))
			put(32, int64(st.Gid))
			put(36, st.Size)
			found = true
		}
		off += (end - off + 8) &^ 7 // the path NUL-padded to 8 bytes
	}
	if !found {
		t.Fatalf("no entry %s in %s", path, index)
	}
	sum := sha1.Sum(b[:len(b)-20])
	copy(b[len(b)-20:], sum[:])
	if err := os.WriteFile(index, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSeedDocker: the same on the docker engine, in bind and volume mode,
// where Provision gives the worktree to the sandbox user (every file's
// ctime changes): the seed is taken after it.
func TestSeedDocker(t *testing.T) {
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	vars := map[string]string{"XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker", "XMODE_SANDBOX_IMAGE": img}
	// busybox's touch -d takes whole seconds: -r restores the mtime to the
	// nanosecond.
	const restore = `touch -r "$REF" "$F"`
	t.Run("bind", func(t *testing.T) {
		e := newEnv(t, vars)
		e.makeRepo(seedFiles())
		instance(t, e, cli)
		seedCase(t, e, sandbox.CreateOptions{}, restore)
	})
	t.Run("volume", func(t *testing.T) {
		vol, mountpoint := dockertest.StorageVolume(t, cli)
		v := map[string]string{"XMODE_SANDBOX_STORAGE_VOLUME": vol, "XMODE_SANDBOX_STORAGE_MOUNT": mountpoint}
		for k, x := range vars {
			v[k] = x
		}
		e := newEnvAt(t, v, mountpoint)
		e.makeRepo(seedFiles())
		instance(t, e, cli)
		seedCase(t, e, sandbox.CreateOptions{}, restore)
	})
}

// TestSeedAttributes: a file whose checkout an attribute may rewrite within
// its size (filter, ident) is not seeded: the first diff reads it.
func TestSeedAttributes(t *testing.T) {
	e := newEnv(t, nil)
	files := seedFiles()
	files[".gitattributes"] = "a filter=x\nd0/*.go ident\n"
	e.makeRepo(files)
	s := e.create(sandbox.CreateOptions{})
	seeded, err := e.cr.Seed(context.Background(), s.RunID, s.BaseCommit)
	if err != nil {
		t.Fatal(err)
	}
	const rewritable = 1 + 7 // a, d0/*.go
	if seeded.Files != len(files)-rewritable || seeded.Recorded != seeded.Files {
		t.Fatalf("seeded %+v; want the %d files without such an attribute", seeded, len(files)-rewritable)
	}
	if paths, hashed := seedSnap(t, e, s); len(paths) != 0 || hashed != rewritable {
		t.Fatalf("first diff: changed %v, %d files read; want nothing, the %d with an attribute read", paths, hashed, rewritable)
	}
}

// TestSeedFromIndex: a create's seed takes the stat data from the
// checkout's own index — a clone's and a project machine's worktree's —
// with no pass over the tree, every regular file of the base recorded; the
// first diff then reads only what a step changed, a same-size rewrite with
// its mtime restored included (seedCase). Once the files are no longer as
// git recorded them (given to another owner: every ctime moved), the seed
// takes them from lstat again, and records them all still.
func TestSeedFromIndex(t *testing.T) {
	ctx := context.Background()
	restore := `touch -d "@$(stat -c %.9Y "$REF")" "$F"`
	for _, machines := range []bool{false, true} {
		t.Run(map[bool]string{false: "clone", true: "machine"}[machines], func(t *testing.T) {
			vars := map[string]string{}
			o := sandbox.CreateOptions{}
			if machines {
				vars["XMODE_PROJECT_MACHINES"] = "1"
				o = sandbox.CreateOptions{Project: "seedproj"}
			}
			e := newEnv(t, vars)
			e.makeRepo(seedFiles())
			o.Repo = e.repo
			s := e.create(o)
			seeded, err := e.cr.Seed(ctx, s.RunID, s.BaseCommit)
			if err != nil {
				t.Fatal(err)
			}
			if !seeded.FromIndex || seeded.Files != len(seedFiles()) || seeded.Recorded != seeded.Files {
				t.Fatalf("seeded %+v; want all %d files, from the index", seeded, len(seedFiles()))
			}
			seedCase(t, e, o, restore)

			if os.Geteuid() != 0 {
				return
			}
			s = e.create(o)
			wt := e.worktree(s)
			if err := filepath.Walk(wt, func(p string, _ os.FileInfo, err error) error {
				if err != nil {
					return err
				}
				return os.Lchown(p, 4321, 4321)
			}); err != nil {
				t.Fatal(err)
			}
			seeded, err = e.cr.Seed(ctx, s.RunID, s.BaseCommit)
			if err != nil {
				t.Fatal(err)
			}
			if seeded.FromIndex || seeded.Recorded != len(seedFiles()) {
				t.Fatalf("after a chown: seeded %+v; want all %d files, by lstat", seeded, len(seedFiles()))
			}
			if paths, hashed := seedSnap(t, e, s); len(paths) != 0 || hashed != 0 {
				t.Fatalf("first diff after the chown and a seed: changed %v, %d files read; want nothing read", paths, hashed)
			}
		})
	}
}
