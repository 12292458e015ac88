package changes_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/sandbox"
)

// storeObjects lists the run's object store: its loose objects and its
// packs.
func storeObjects(t *testing.T, store string) (loose, packs []string) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(store, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(store, "objects"), p)
		switch {
		case strings.HasPrefix(rel, "pack/") && strings.HasSuffix(rel, ".pack"):
			packs = append(packs, rel)
		case !strings.HasPrefix(rel, "pack/") && !strings.HasPrefix(rel, "info/"):
			loose = append(loose, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return loose, packs
}

// TestSnapshotWritesOnePack: the create's seed and each snapshot write the
// objects they add as one pack, not one loose file each (a file's creation
// is what a first diff paid most for); git reads the packs (diff, fsck),
// and a snapshot that adds nothing finds everything in them and writes no
// pack.
func TestSnapshotWritesOnePack(t *testing.T) {
	e := newEnv(t, nil)
	files := map[string]string{"top.txt": "top\n"}
	for _, d := range []string{"a", "a/b", "a/b/c", "d", "e/f"} {
		for _, n := range []string{"1.txt", "2.txt", "3.go"} {
			files[d+"/"+n] = d + " " + n + "\n"
		}
	}
	e.makeRepo(files)
	s := e.create(sandbox.CreateOptions{})
	store := filepath.Join(e.root, "runs", s.RunID, changes.StoreDirName)
	loose, packs := storeObjects(t, store)
	if len(loose) != 0 || len(packs) != 1 {
		t.Fatalf("after the create: loose %v, packs %v; want the base's commit and trees in one pack", loose, packs)
	}
	wt := e.worktree(s)
	write(t, filepath.Join(wt, "a/b/c/1.txt"), "changed\n")
	write(t, filepath.Join(wt, "d/2.txt"), "changed too\n")
	write(t, filepath.Join(wt, "e/f/new.txt"), "new\n")
	if err := os.Remove(filepath.Join(wt, "a/3.go")); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	stat := func() string {
		t.Helper()
		sn, err := e.cr.Snapshot(ctx, s, changes.WantStat)
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Close()
		st, err := sn.Stat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range st.PerFile {
			got = append(got, f.Status+" "+f.Path)
		}
		return strings.Join(got, ", ")
	}
	const want = "D a/3.go, M a/b/c/1.txt, M d/2.txt, A e/f/new.txt"
	if got := stat(); got != want {
		t.Fatalf("first diff: %s; want %s", got, want)
	}
	loose, packs = storeObjects(t, store)
	if len(loose) != 0 || len(packs) != 2 {
		t.Fatalf("after the first diff: loose %v, packs %v; want its objects in one more pack", loose, packs)
	}
	if out, err := gitTry(store, nil, "fsck", "--strict", "--no-dangling"); err != nil {
		t.Fatalf("git fsck of the store: %v\n%s", err, out)
	}
	for _, p := range packs {
		if out, err := gitTry(store, nil, "verify-pack", filepath.Join(store, "objects", p)); err != nil {
			t.Fatalf("git verify-pack %s: %v\n%s", p, err, out)
		}
	}
	var before []os.FileInfo
	for _, p := range packs {
		fi, err := os.Stat(filepath.Join(store, "objects", p))
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, fi)
	}
	if got := stat(); got != want {
		t.Fatalf("second diff: %s; want %s", got, want)
	}
	// The same pack written again would have the same name: the files
	// must be the very same.
	loose2, packs2 := storeObjects(t, store)
	if len(loose2) != 0 || len(packs2) != 2 {
		t.Fatalf("after a diff that adds nothing: loose %v, packs %v; want nothing written", loose2, packs2)
	}
	for i, p := range packs2 {
		fi, err := os.Stat(filepath.Join(store, "objects", p))
		if err != nil || !os.SameFile(fi, before[i]) {
			t.Fatalf("after a diff that adds nothing: %s was written again", p)
		}
	}
}

// Many diffs, each adding objects, leave a bounded number of packs: the
// store consolidates them (geometrically) instead of gaining one per diff
// for ever; every diff stays right, and git reads the store whole.
func TestManyDiffsKeepPacksBounded(t *testing.T) {
	e := newEnv(t, nil)
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("d%d/f.txt", i%5)+fmt.Sprint(i)] = fmt.Sprintf("file %d\n", i)
	}
	e.makeRepo(files)
	s := e.create(sandbox.CreateOptions{})
	store := filepath.Join(e.root, "runs", s.RunID, changes.StoreDirName)
	wt := e.worktree(s)
	ctx := context.Background()
	const diffs = 150
	most := 0
	for i := range diffs {
		// Each diff adds a file and changes another: new blobs and trees.
		write(t, filepath.Join(wt, fmt.Sprintf("new/n%03d.txt", i)), fmt.Sprintf("new %d\n", i))
		write(t, filepath.Join(wt, "d1/f.txt1"), fmt.Sprintf("changed %d\n", i))
		sn, err := e.cr.Snapshot(ctx, s, changes.WantStat)
		if err != nil {
			t.Fatal(err)
		}
		st, err := sn.Stat(ctx)
		sn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Files != i+2 {
			t.Fatalf("diff %d: %d files changed, want %d", i, st.Files, i+2)
		}
		_, packs := storeObjects(t, store)
		most = max(most, len(packs))
	}
	// Objects: ~3 a diff and the base's; log2 of that is under 10.
	if most > 12 {
		t.Errorf("after %d diffs the store held up to %d packs; want them consolidated (at most ~12)", diffs, most)
	}
	_, packs := storeObjects(t, store)
	t.Logf("%d diffs: at most %d packs, %d at the end", diffs, most, len(packs))
	if out, err := gitTry(store, nil, "fsck", "--strict", "--no-dangling"); err != nil {
		t.Fatalf("git fsck of the store: %v\n%s", err, out)
	}
	// The last diff's every file is readable back from the consolidated
	// store: the patch holds each new file's content.
	sn, err := e.cr.Snapshot(ctx, s, changes.WantPatch)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	var patch strings.Builder
	if err := sn.Patch(ctx, &patch, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"+new 0\n", fmt.Sprintf("+new %d\n", diffs-1), fmt.Sprintf("+changed %d\n", diffs-1), "-file 1\n"} {
		if !strings.Contains(patch.String(), want) {
			t.Errorf("the patch lacks %q", want)
		}
	}
}
