// Package thirdparty checks the patched modules in third_party/
// (README.md): each directory is exactly the upstream release go.mod
// requires plus its patch file, so the fork stays mechanical.
package thirdparty

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/xmode/xmode/internal/testenv"
)

// goMod is what `go mod edit -json` says of xmode's go.mod.
type goMod struct {
	Require []struct{ Path, Version string }
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

// fork is a module go.mod replaces with a directory of third_party/.
type fork struct{ dir, path, version string }

// forks reads go.mod: every module replaced with ./third_party/<dir>, at
// the version its require names.
func forks(t *testing.T) []fork {
	t.Helper()
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var m goMod
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var found []fork
	for _, r := range m.Replace {
		dir, ok := strings.CutPrefix(r.New.Path, "./third_party/")
		if !ok {
			continue
		}
		f := fork{dir: dir, path: r.Old.Path}
		for _, req := range m.Require {
			if req.Path == r.Old.Path {
				f.version = req.Version
			}
		}
		if f.version == "" {
			t.Errorf("go.mod replaces %s with %s but requires no version of it: require the release third_party/%s is made from", r.Old.Path, r.New.Path, dir)
			continue
		}
		found = append(found, f)
	}
	return found
}

// TestForksAreUpstreamPlusPatch re-creates every fork with update.sh from
// the release go.mod requires and the fork's patch, and compares the result
// with the fork's tree, file by file: a hand edit not in the patch, a
// release bumped in go.mod without re-creating the fork, or a patch changed
// without the fork, fails here.
func TestForksAreUpstreamPlusPatch(t *testing.T) {
	for _, tool := range []string{"go", "gofmt", "git", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "no %s to re-create the forks with: %v", tool, err)
		}
	}
	forked := forks(t)
	if len(forked) == 0 {
		t.Fatal("go.mod replaces no module with ./third_party/<dir>")
	}

	// Nothing in third_party/ but the forks, their patches and the tools.
	want := map[string]bool{"README.md": true, "update.sh": true, "forks_test.go": true}
	for _, f := range forked {
		want[f.dir], want[f.dir+".patch"] = true, true
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range entries {
		have[e.Name()] = true
		if !want[e.Name()] {
			t.Errorf("third_party/%s is no fork go.mod replaces a module with, nor its patch: remove it, or add its replace", e.Name())
		}
	}
	for name := range want {
		if !have[name] {
			t.Errorf("third_party/%s is missing", name)
		}
	}

	out := t.TempDir()
	cmd := exec.Command("sh", "update.sh", "-o", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	made, err := cmd.Output()
	if err != nil {
		t.Fatalf("update.sh -o %s: %v\n%s%s", out, err, made, stderr.Bytes())
	}
	for _, f := range forked {
		if line := f.dir + " " + f.path + "@" + f.version; !bytes.Contains(made, []byte(line+"\n")) {
			t.Errorf("update.sh did not make %q (the version go.mod requires); it said:\n%s", line, made)
			continue
		}
		if diffs := compareTrees(t, filepath.Join(out, f.dir), f.dir); len(diffs) > 0 {
			t.Errorf("third_party/%s is not %s %s plus %s.patch:\n\t%s\nRe-create it with third_party/update.sh; to change the fork, edit it and run third_party/update.sh -diff to rewrite the patch.",
				f.dir, f.path, f.version, f.dir, strings.Join(diffs, "\n\t"))
		}
	}
}

// TestCompareTreesFindsEveryDifference: the comparison that check relies
// on reports a changed file, a file only in one tree and a changed mode.
func TestCompareTreesFindsEveryDifference(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		write(t, filepath.Join(dir, "same.go"), "package x\n", 0o644)
		write(t, filepath.Join(dir, "sub", "mode.sh"), "echo\n", 0o644)
	}
	if diffs := compareTrees(t, a, b); len(diffs) != 0 {
		t.Fatalf("equal trees: %q", diffs)
	}
	write(t, filepath.Join(a, "sub", "changed.go"), "package x\n", 0o644)
	write(t, filepath.Join(b, "sub", "changed.go"), "package y\n", 0o644)
	write(t, filepath.Join(a, "upstream-only.md"), "x", 0o644)
	write(t, filepath.Join(b, ".fork-only"), "x", 0o644)
	if err := os.Chmod(filepath.Join(b, "sub", "mode.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(compareTrees(t, a, b), "\n")
	want := strings.Join([]string{
		".fork-only: only in the fork",
		"sub/changed.go: differs",
		"sub/mode.sh: executable in one tree only",
		"upstream-only.md: not in the fork",
	}, "\n")
	if got != want {
		t.Errorf("differences:\n%s\nwant:\n%s", got, want)
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// compareTrees lists, sorted, how the fork's tree differs from the
// re-created one: files in one only, different bytes, an executable bit
// (what git keeps of a mode).
func compareTrees(t *testing.T, made, fork string) []string {
	t.Helper()
	a, b := readTree(t, made), readTree(t, fork)
	var diffs []string
	for name, fa := range a {
		fb, ok := b[name]
		switch {
		case !ok:
			diffs = append(diffs, name+": not in the fork")
		case !bytes.Equal(fa.content, fb.content):
			diffs = append(diffs, name+": differs")
		case fa.exec != fb.exec:
			diffs = append(diffs, name+": executable in one tree only")
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			diffs = append(diffs, name+": only in the fork")
		}
	}
	sort.Strings(diffs)
	return diffs
}

type file struct {
	content []byte
	exec    bool
}

// readTree reads every regular file under root by its slash-separated
// path; anything else (a link) is an error: releases hold none.
func readTree(t *testing.T, root string) map[string]file {
	t.Helper()
	files := map[string]file{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			t.Errorf("%s: not a regular file (%s)", path, info.Mode().Type())
			return nil
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = file{content, info.Mode()&0o111 != 0}
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s: %v", root, err)
	}
	return files
}
