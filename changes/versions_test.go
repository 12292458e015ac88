package changes_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// lines is n numbered lines, "line 1" to "line n".
func lines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// appliedTree applies a version's change.patch with the real git to a
// fresh clone of the base and commits it on branch: what the version's
// manifest says its tree is, checked by git itself.
func (e *env) appliedTree(p *changes.Package, branch string) (tree, commit string) {
	e.t.Helper()
	scratch := filepath.Join(e.dir, "scratch")
	if _, err := os.Stat(scratch); err != nil {
		git(e.t, e.dir, "clone", "-q", e.repo, scratch)
	}
	gitOutEnv(e.t, scratch, nil, "checkout", "-q", "-B", branch, p.BaseCommit)
	gitOutEnv(e.t, scratch, nil, "apply", "--index", filepath.Join(p.Dir, changes.PatchFile))
	tree = gitOutEnv(e.t, scratch, nil, "write-tree")
	gitOutEnv(e.t, scratch, nil, "commit", "-qm", "version of "+p.ID)
	return tree, gitOutEnv(e.t, scratch, nil, "rev-parse", "HEAD")
}

// A change request's second version, made in the sandbox of the first:
// its tree is what git makes of its patch, its manifest names the first's,
// the two verify as a chain, the interdiff holds what range-diff holds,
// and the comments the first's review made are marked addressed where the
// second changed their line.
func TestVersions(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"a.txt": lines(20), "b.txt": lines(5), "bin.dat": "\x00\x01\x02"})
	s := e.create(sandbox.CreateOptions{})
	e.sh(s, `set -e
sed -i 's/^line 3$/line three/; s/^line 15$/line fifteen/' a.txt
sed -i '/^line 2$/d' b.txt
printf '\x00\x09' > bin.dat
git commit -qam "first version"`)
	v1, err := e.cr.Create(ctx, s, changes.CreateOptions{Title: "Numbers as words"})
	if err != nil {
		t.Fatal(err)
	}
	if v1.At().Version != 1 || v1.Manifest.Version != 1 || v1.Manifest.Previous != nil {
		t.Fatalf("version 1: %+v, manifest version %d previous %+v", v1.At(), v1.Manifest.Version, v1.Manifest.Previous)
	}

	// Comments are checked against the version's diff: a path it does not
	// change, a line it does not show, a binary file are refused.
	for text, want := range map[string]string{
		"c.txt:1: x":     "does not change c.txt (it changes a.txt, b.txt, bin.dat)",
		"a.txt:10: x":    "line 10 of the version is not in the diff of a.txt (it shows lines 1-6, 12-18)",
		"b.txt:-9: x":    "line 9 of the base is not in the diff of b.txt",
		"bin.dat:1: x":   "bin.dat is a binary file",
		"a.txt:3 x":      "write it PATH:LINE: TEXT",
		"a.txt:3:   ":    "says nothing",
		"a.txt:0: zero":  "lines count from 1",
		":3: empty path": "write it PATH:LINE: TEXT",
	} {
		c, err := changes.ParseComment(text)
		if err == nil {
			_, err = e.cr.Review(ctx, v1, store.ChangeChangesRequested, changes.ReviewOptions{Comments: []store.Comment{c}})
		}
		if fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), want) {
			t.Errorf("comment %q: %v, want a usage error saying %q", text, err, want)
		}
	}
	if c, _ := e.st.GetChange(ctx, v1.ID); c.Status != store.ChangeOpen || len(c.Reviews) != 0 {
		t.Fatalf("refused comments changed the change request: %+v", c)
	}
	if _, err := e.cr.Review(ctx, v1, store.ChangeChangesRequested, changes.ReviewOptions{}); fail.KindOf(err) != fail.Usage {
		t.Fatalf("changes asked without saying which: %v", err)
	}
	var comments []store.Comment
	for _, text := range []string{"a.txt:3: say <b>three</b> \x1b[31mdigits\x1b[0m", "a.txt:15: keep this one", "b.txt:-2: why was this removed?"} {
		c, err := changes.ParseComment(text)
		if err != nil {
			t.Fatal(err)
		}
		comments = append(comments, c)
	}
	if _, err := e.cr.Review(ctx, v1, store.ChangeChangesRequested, changes.ReviewOptions{Note: "two things", Comments: comments}); err != nil {
		t.Fatal(err)
	}
	ctxs, err := e.cr.CommentContext(v1, comments)
	if err != nil || !slices.Contains(ctxs[0], "+line three") || !slices.Contains(ctxs[0], " line 1") || !slices.Contains(ctxs[2], "-line 2") {
		t.Fatalf("contexts %q, %v", ctxs, err)
	}

	// Version 2 answers the first comment and the removed line, and leaves
	// the second alone.
	e.sh(s, `set -e
sed -i 's/^line three$/line 3 (digits)/' a.txt
sed -i '1a line 2' b.txt
git commit -qam "second version"`)
	v1, err = e.cr.Open(ctx, v1.ID)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := e.cr.NewVersion(ctx, s, v1, changes.CreateOptions{Message: "answered"})
	if err != nil {
		t.Fatal(err)
	}
	if v2.ID != v1.ID || v2.At().Version != 2 || v2.At().RunID != s.RunID || v2.At().Number != 2 || v2.Title != "Numbers as words" {
		t.Fatalf("version 2: %+v %+v", v2.Change, v2.At())
	}
	if *v2.Manifest.Previous != (changes.PreviousVersion{Version: 1, ManifestSHA256: v1.At().ManifestSHA256}) {
		t.Fatalf("version 2 names %+v, version 1's manifest is %s", v2.Manifest.Previous, v1.At().ManifestSHA256)
	}
	if _, err := e.cr.NewVersion(ctx, s, v2, changes.CreateOptions{}); !errors.Is(err, changes.ErrUnchanged) || fail.KindOf(err) != fail.Refused {
		t.Fatalf("a version with nothing new: %v, want refused", err)
	}
	if _, err := e.cr.Review(ctx, v1, store.ChangeApproved, changes.ReviewOptions{}); fail.KindOf(err) != fail.Refused {
		t.Fatalf("a review of version 1 when 2 is the newest: %v", err)
	}

	// git makes of each version's patch the tree its manifest says.
	tree1, c1 := e.appliedTree(v1, "v1")
	tree2, c2 := e.appliedTree(v2, "v2")
	if tree1 != v1.At().Tree || tree2 != v2.At().Tree {
		t.Fatalf("git's trees %s %s, the versions' %s %s", tree1, tree2, v1.At().Tree, v2.At().Tree)
	}

	// The interdiff is Gerrit's: version 1's tree against version 2's.
	// git range-diff of the same two commits shows a diff of the two
	// patches; the lines it shows added or removed between them are the
	// interdiff's, file by file.
	var inter bytes.Buffer
	d, err := e.cr.WriteInterdiff(ctx, v2.Change, changes.InterdiffOptions{From: 1, To: 2}, &inter)
	if err != nil || d.FromTree != tree1 || d.ToTree != tree2 {
		t.Fatalf("interdiff %+v, %v", d, err)
	}
	if want := gitOutEnv(t, filepath.Join(e.dir, "scratch"), nil, "diff", "--no-color", tree1, tree2); strings.TrimSpace(inter.String()) != want {
		t.Fatalf("interdiff\n%s\nwant git diff of the trees\n%s", inter.String(), want)
	}
	rd := gitOutEnv(t, filepath.Join(e.dir, "scratch"), nil, "range-diff", "--no-color", "--creation-factor=100", v1.BaseCommit+".."+c1, v1.BaseCommit+".."+c2)
	if got, want := interdiffLines(inter.String()), rangeDiffLines(rd); !slices.Equal(got, want) {
		t.Fatalf("interdiff lines %q\nrange-diff's %q\n%s", got, want, rd)
	}
	var stat bytes.Buffer
	if d, err := e.cr.WriteInterdiff(ctx, v2.Change, changes.InterdiffOptions{From: -1, Stat: true}, &stat); err != nil || d.From != 1 || d.To != 2 ||
		d.Stat.Files != 2 || d.Stat.Insertions != 2 || d.Stat.Deletions != 1 || d.Stat.PerFile[0].NewSize == 0 {
		t.Fatalf("interdiff stat %+v, %v", d, err)
	}
	if _, err := e.cr.WriteInterdiff(ctx, v2.Change, changes.InterdiffOptions{From: 1, To: 3}, &stat); fail.KindOf(err) != fail.Usage {
		t.Fatalf("a version that does not exist: %v", err)
	}
	var whole bytes.Buffer
	if _, err := e.cr.WriteInterdiff(ctx, v2.Change, changes.InterdiffOptions{From: 0, To: 2}, &whole); err != nil ||
		strings.TrimSpace(whole.String()) != gitOutEnv(t, filepath.Join(e.dir, "scratch"), nil, "diff", "--no-color", v1.BaseCommit, tree2) {
		t.Fatalf("--from 0 is version 2 against the base: %v\n%s", err, whole.String())
	}

	// Which comments version 2 answered.
	c, err := e.st.GetChange(ctx, v1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cr.Annotate(ctx, c); err != nil {
		t.Fatal(err)
	}
	var marks []string
	for _, cm := range c.Reviews[0].Comments {
		marks = append(marks, fmt.Sprintf("%s %v", changes.Where(cm), *cm.Addressed))
	}
	if want := []string{"a.txt:3 true", "a.txt:15 false", "b.txt:-2 true"}; !slices.Equal(marks, want) {
		t.Fatalf("addressed: %q, want %q", marks, want)
	}

	// The chain verifies; the versions' packages are each named when
	// tampered with.
	rep, err := e.cr.Verify(ctx, v2)
	if err != nil || !rep.Intact || rep.Versions != 2 || !slices.Contains(rep.Checked, "v2/tree") {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	patch1 := filepath.Join(v1.Dir, changes.PatchFile)
	good, _ := os.ReadFile(patch1)
	write(t, patch1, strings.Replace(string(good), "line three", "line 3!!!!", 1))
	if rep, _ := e.cr.Verify(ctx, v2); rep.Intact || rep.Problems[0].Version != 1 || rep.Problems[0].File != changes.PatchFile || !strings.Contains(rep.Summary(), "in version 1") {
		t.Fatalf("version 1's patch tampered with: %+v", rep)
	}
	if _, err := e.cr.Review(ctx, v2, store.ChangeApproved, changes.ReviewOptions{}); err == nil || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("approving a change request whose version 1 is tampered with: %v", err)
	}
	write(t, patch1, string(good))
	// A forger who rewrote version 1's manifest and the store's record of
	// it is caught by version 2's link.
	man1 := filepath.Join(v1.Dir, changes.ManifestFile)
	mb, _ := os.ReadFile(man1)
	forged := strings.Replace(string(mb), `"title": "Numbers as words"`, `"title": "Something else"`, 1)
	write(t, man1, forged)
	sum := sha256.Sum256([]byte(forged))
	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.root, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE change_request_versions SET manifest_sha256 = ? WHERE cr_id = ? AND version = 1`, hex.EncodeToString(sum[:]), v1.ID); err != nil {
		t.Fatal(err)
	}
	rep, _ = e.cr.Verify(ctx, v2)
	if rep.Intact || len(rep.Problems) != 1 || rep.Problems[0].Version != 2 || !strings.Contains(rep.Problems[0].Problem, "the chain is broken") {
		t.Fatalf("a forged version 1 and its record: %+v", rep)
	}
}

// interdiffLines are the lines a diff adds and removes, "+" or "-" then
// the file and the line, sorted.
func interdiffLines(diff string) []string {
	var out []string
	file := ""
	for _, l := range strings.Split(diff, "\n") {
		switch {
		case strings.HasPrefix(l, "+++ b/"):
			file = strings.TrimPrefix(l, "+++ b/")
		case strings.HasPrefix(l, "--- "), strings.HasPrefix(l, "+++ "):
		case strings.HasPrefix(l, "+"), strings.HasPrefix(l, "-"):
			out = append(out, l[:1]+file+":"+l[1:])
		}
	}
	slices.Sort(out)
	return out
}

// rangeDiffLines are the lines git range-diff shows added to or removed
// from the patch between two commits, as the difference of the trees has
// them: a line version 2's patch adds (or version 1's removes) is added,
// one version 2's patch removes (or version 1's adds) is removed.
func rangeDiffLines(rd string) []string {
	var out []string
	file := ""
	// a file's section ("## path ##"), and range-diff's own hunk
	// headers, which name the file ("@@ path" or "@@ path: context")
	head := regexp.MustCompile(`^ {4}[ +-] {1,2}## (.*) ##$`)
	hunk := regexp.MustCompile(`^ {4}@@ ([^:]*)`)
	for _, l := range strings.Split(rd, "\n") {
		if m := head.FindStringSubmatch(l); m != nil {
			file = m[1]
			continue
		}
		if m := hunk.FindStringSubmatch(l); m != nil {
			if m[1] != "Commit message" {
				file = m[1]
			}
			continue
		}
		if len(l) < 6 || !strings.HasPrefix(l, "    ") {
			continue
		}
		outer, inner, text := l[4], l[5], l[6:]
		if outer == ' ' || inner == ' ' || strings.HasPrefix(l[5:], "@@") {
			continue
		}
		sign := "-"
		if outer == inner {
			sign = "+"
		}
		out = append(out, sign+file+":"+text)
	}
	slices.Sort(out)
	return out
}

// Two attempts on one base: the files each changes, whether both end with
// the same file, and the diff from one's tree to the other's as git makes
// it; two change requests on other bases are not compared.
func TestCompare(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"a.txt": lines(5), "b.txt": lines(5), "c.txt": lines(3)})
	a := e.create(sandbox.CreateOptions{})
	b := e.create(sandbox.CreateOptions{})
	e.sh(a, `sed -i 's/^line 1$/one/' a.txt && echo same >> b.txt && rm c.txt`)
	e.sh(b, `sed -i 's/^line 1$/uno/' a.txt && echo same >> b.txt && echo new > d.txt`)
	pa, err := e.cr.Create(ctx, a, changes.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := e.cr.Create(ctx, b, changes.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var diff bytes.Buffer
	cmp, err := e.cr.Compare(ctx, pa, pb, &diff)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range cmp.Files {
		files = append(files, fmt.Sprintf("%s %q %q %v", f.Path, f.A, f.B, f.Same))
	}
	if want := []string{`a.txt "M" "M" false`, `b.txt "M" "M" true`, `c.txt "D" "" false`, `d.txt "" "A" false`}; !slices.Equal(files, want) {
		t.Fatalf("files %q, want %q", files, want)
	}
	ta, _ := e.appliedTree(pa, "a")
	tb, _ := e.appliedTree(pb, "b")
	if want := gitOutEnv(t, filepath.Join(e.dir, "scratch"), nil, "diff", "--no-color", ta, tb); strings.TrimSpace(diff.String()) != want {
		t.Fatalf("compare's diff\n%s\nwant\n%s", diff.String(), want)
	}
	if cmp.Stat.Files != 3 {
		t.Fatalf("stat %+v", cmp.Stat)
	}
	if _, err := e.cr.Compare(ctx, pa, pa, nil); fail.KindOf(err) != fail.Usage {
		t.Fatalf("a change request with itself: %v", err)
	}
	other := *pb.Change
	other.BaseCommit = strings.Repeat("0", 40)
	if _, err := e.cr.Compare(ctx, pa, &changes.Package{Change: &other}, nil); fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "different bases") {
		t.Fatalf("other bases: %v", err)
	}
}
