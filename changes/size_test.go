package changes_test

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
)

// readBytes is how many bytes this process has read (rchar: every read
// system call, a sparse file's holes included).
func readBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no rchar in /proc/self/io")
	return 0
}

// TestSizeDecidesBeforeReading: a 50 GB sparse file (new, or a tracked file
// grown to it), and new files that add up to more than the limit, are
// refused by `sandbox diff` (Snapshot) and `cr create` from their sizes:
// the refusal names the file, its size, the limit and the variable, and
// the process reads next to nothing (reading 50 GB took ~1.5 h per TB).
func TestSizeDecidesBeforeReading(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n", "data.bin": "small\n"})
	s := e.create(sandbox.CreateOptions{})
	for _, c := range []struct{ script, want string }{
		{`truncate -s 50G big.bin`, "big.bin alone is 50.0 GiB"},
		{`rm big.bin && truncate -s 50G data.bin`, "data.bin alone is 50.0 GiB"},
	} {
		e.sh(s, c.script)
		before := readBytes(t)
		done := make(chan error, 2)
		go func() {
			sn, err := e.cr.Snapshot(ctx, s, changes.WantStat)
			if err == nil {
				sn.Close()
			}
			done <- err
			_, err = e.cr.Create(ctx, s, changes.CreateOptions{})
			done <- err
		}()
		for _, what := range []string{"sandbox diff", "cr create"} {
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second): // reading 50 GB takes minutes
				t.Fatalf("%s after %q: still running after 20 s: it reads the file", what, c.script)
			}
			if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), c.want) ||
				!strings.Contains(err.Error(), "larger than XMODE_CR_MAX_BYTES (100.0 MiB)") || !strings.Contains(err.Error(), "raise XMODE_CR_MAX_BYTES") {
				t.Fatalf("%s after %q: %v", what, c.script, err)
			}
		}
		if n := readBytes(t) - before; n > 64<<20 {
			t.Fatalf("after %q: refusing read %d MiB", c.script, n>>20)
		}
	}

	// New files over the limit together: the one that goes over is
	// refused unread.
	e.sh(s, `rm data.bin && git checkout -q data.bin && head -c 3000 /dev/urandom > a.bin && head -c 3000 /dev/urandom > b.bin`)
	e.cr.MaxBytes = 5000
	_, err := e.cr.Snapshot(ctx, s, changes.WantStat)
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "its files add up to more than 4.9 KiB") ||
		!strings.Contains(err.Error(), "a.bin (2.9 KiB)") || !strings.Contains(err.Error(), "b.bin (2.9 KiB)") {
		t.Fatalf("two files over the limit together: %v", err)
	}
}

// TestWalkStopsWhenCancelled: a read under a raised limit stops as soon as
// the context is cancelled (Ctrl-C, SIGTERM), not when the file is read.
func TestWalkStopsWhenCancelled(t *testing.T) {
	e := newEnv(t, map[string]string{"XMODE_CR_MAX_BYTES": "100g"})
	e.makeRepo(map[string]string{"README": "hello\n"})
	s := e.create(sandbox.CreateOptions{})
	e.sh(s, `truncate -s 50G big.bin`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	before := readBytes(t)
	go func() { _, err := e.cr.Create(ctx, s, changes.CreateOptions{}); done <- err }()
	// wait until it is reading the file
	deadline := time.Now().Add(20 * time.Second)
	for readBytes(t)-before < 64<<20 {
		if time.Now().After(deadline) {
			t.Fatal("cr create did not start reading big.bin")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cr create went on reading after its context was cancelled")
	}
}

// TestVerifySizeFirst: a package file or a step log grown to 50 GB is
// reported from its size, not read (it would not even fit in memory).
func TestVerifySizeFirst(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n"})
	s := e.create(sandbox.CreateOptions{})
	e.sh(s, `printf 'more\n' >> README && echo step output`)
	p, err := e.cr.Create(ctx, s, changes.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(e.root, "runs", s.RunID, "steps", "0001-*", "stdout.log"))
	if len(logs) != 1 {
		t.Fatalf("the step's stdout.log: %v", logs)
	}
	for _, f := range []string{filepath.Join(p.Dir, changes.PatchFile), logs[0]} {
		if err := os.Truncate(f, 50<<30); err != nil {
			t.Fatal(err)
		}
	}
	before := readBytes(t)
	rep, err := e.cr.Verify(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if n := readBytes(t) - before; n > 64<<20 {
		t.Fatalf("verify read %d MiB", n>>20)
	}
	var problems []string
	for _, pr := range rep.Problems {
		problems = append(problems, pr.File+": "+pr.Problem)
	}
	got := strings.Join(problems, "\n")
	if rep.Intact || !strings.Contains(got, "change.patch: sha256 not computed (53687091200 bytes), the manifest says") ||
		!strings.Contains(got, "stdout.log: sha256 not computed (53687091200 bytes), evidence.json says") {
		t.Fatalf("problems:\n%s", got)
	}
}

// TestLargeTrackedFileUnchanged: a tracked file larger than
// XMODE_CR_MAX_BYTES that the sandbox did not change does not stop `sandbox
// diff` or `cr create` — whether its base blob is in the sandbox's pack
// (as cloned), loose, a delta in a pack, or gone from there (then it comes
// from the session's repository). The same file grown to 50 GB is refused
// unread (its size is not its base blob's), and one of the same size with
// another content is read, then refused.
func TestLargeTrackedFileUnchanged(t *testing.T) {
	defer changes.SetRacyMargin(1 << 62)() // no stat cache: every walk reads asset.bin
	ctx := context.Background()
	e := newEnv(t, nil)
	asset := make([]byte, 3<<20)
	rand.New(rand.NewSource(1)).Read(asset)
	e.makeRepo(map[string]string{"README": "hello\n", "asset.bin": string(asset)})
	e.cr.MaxBytes = 1 << 20
	s := e.create(sandbox.CreateOptions{})
	e.dropStatCache(s) // nor the create's seed
	e.sh(s, `printf 'more\n' >> README`)

	ok := func(stage string) {
		t.Helper()
		sn, err := e.cr.Snapshot(ctx, s, changes.WantStat)
		if err != nil {
			t.Fatalf("%s: sandbox diff: %v", stage, err)
		}
		st, err := sn.Stat(ctx)
		hashed := sn.Hashed
		sn.Close()
		if err != nil || st.Files != 1 || st.PerFile[0].Path != "README" || hashed < 2 {
			t.Fatalf("%s: sandbox diff: %+v (%d files read), %v; want README alone, asset.bin read", stage, st, hashed, err)
		}
		// the first to miss the base blob fetches it, into the run's store
		if fetched := strings.Contains(strings.Join(sn.Warnings, "\n"), "fetched"); fetched != strings.Contains(stage, "fetched") {
			t.Fatalf("%s: sandbox diff: warnings %q", stage, sn.Warnings)
		}
		if _, err := e.cr.Create(ctx, s, changes.CreateOptions{}); err != nil {
			t.Fatalf("%s: cr create: %v", stage, err)
		}
	}
	blob := git(t, e.repo, "rev-parse", "HEAD:asset.bin")
	ok("base blob in the clone's pack")
	e.sh(s, `set -e; p=$(ls .git/objects/pack/*.pack); mv "$p" .git/p.pack; rm -f .git/objects/pack/*; git unpack-objects -q < .git/p.pack; rm .git/p.pack
test -f .git/objects/`+blob[:2]+`/`+blob[2:])
	ok("base blob loose")
	// a larger blob like it at the same path: repacked, the base blob is a
	// delta of it
	e.sh(s, `set -e; { cat asset.bin; head -c 4096 /dev/urandom; } > .git/v0; git tag v0 "$(printf '100644 blob %s\tasset.bin\n' "$(git hash-object -w .git/v0)" | git mktree)"; rm .git/v0
git repack -adfq; git prune-packed; test "$(echo `+blob+` | git cat-file --batch-check='%(deltabase)')" != 0000000000000000000000000000000000000000`)
	ok("base blob a delta in a pack")
	e.sh(s, `rm .git/objects/pack/*`)
	ok("base blob fetched from the repository")

	e.sh(s, `head -c 3145728 /dev/urandom > asset.bin`)
	if _, err := e.cr.Snapshot(ctx, s, changes.WantStat); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "asset.bin alone is 3.0 MiB") {
		t.Fatalf("asset.bin changed, same size: %v", err)
	}

	e.sh(s, `git checkout -q asset.bin 2>/dev/null || true; truncate -s 50G asset.bin`)
	before := readBytes(t)
	done := make(chan error, 2)
	go func() {
		sn, err := e.cr.Snapshot(ctx, s, changes.WantStat)
		if err == nil {
			sn.Close()
		}
		done <- err
		_, err = e.cr.Create(ctx, s, changes.CreateOptions{})
		done <- err
	}()
	for _, what := range []string{"sandbox diff", "cr create"} {
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second): // reading 50 GB takes minutes
			t.Fatalf("%s of asset.bin grown to 50 GB: still running after 20 s: it reads the file", what)
		}
		if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "asset.bin alone is 50.0 GiB") {
			t.Fatalf("%s of asset.bin grown to 50 GB: %v", what, err)
		}
	}
	if n := readBytes(t) - before; n > 64<<20 {
		t.Fatalf("refusing asset.bin grown to 50 GB read %d MiB", n>>20)
	}
}

// TestPackageFilesSizeFirst: change.patch or evidence.json grown to 50 GB
// is refused by OpenFile, ReadFile and Evidence (what `cr show` reads)
// from its size, in `cr verify`'s words, without being read.
func TestPackageFilesSizeFirst(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n"})
	s := e.create(sandbox.CreateOptions{})
	e.dropStatCache(s) // nor the create's seed
	e.sh(s, `printf 'more\n' >> README`)
	created, err := e.cr.Create(ctx, s, changes.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{changes.PatchFile, changes.EvidenceFile} {
		if err := os.Truncate(filepath.Join(created.Dir, name), 50<<30); err != nil {
			t.Fatal(err)
		}
	}
	p, err := e.cr.Open(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := readBytes(t)
	refused := func(what, name string, err error) {
		t.Helper()
		want := "fails verification (" + name + ": sha256 not computed (53687091200 bytes), the manifest says " + p.Manifest.Files[name].SHA256
		if fail.KindOf(err) != fail.Failed || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v; want %q", what, err, want)
		}
	}
	_, _, err = e.cr.OpenFile(p, changes.PatchFile)
	refused("OpenFile", changes.PatchFile, err)
	_, err = e.cr.ReadFile(p, changes.PatchFile)
	refused("ReadFile", changes.PatchFile, err)
	_, err = e.cr.Evidence(p)
	refused("Evidence", changes.EvidenceFile, err)
	if n := readBytes(t) - before; n > 1<<20 {
		t.Fatalf("refusing read %d KiB", n>>10)
	}
}
