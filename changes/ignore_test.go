package changes_test

import (
	"context"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/sandbox"
)

// ignorePatterns are the rules the differential test draws from: git's
// wildmatch corners (**, sets, classes, escapes), negations, directory-only
// and anchored patterns, trailing spaces, comments.
var ignorePatterns = []string{
	"*.log", "!keep.log", "build/", "/root-only.txt", "**/deep.txt", "docs/**", "!docs/keep.md",
	"a/**/z.txt", "*.[oa]", "[!x]*.tmp", "file[0-9].txt", "[[:digit:]]*.num", "\\#hash.txt", "\\!bang.txt",
	"space.txt ", "trail\\ ", "# a comment", "*.swp", "node_modules", "!important/", "**/cache/**",
	"foo/*", "!foo/bar.c", "x*y*z", "?.one", "dir/sub/", "*.d/", "!*.keep",
}

var ignorePaths = []string{
	"a.log", "keep.log", "sub/b.log", "sub/keep.log", "build/out.o", "src/build/x.c", "root-only.txt", "sub/root-only.txt",
	"deep.txt", "x/y/deep.txt", "docs/a.md", "docs/keep.md", "docs/in/deep.md", "a/z.txt", "a/b/c/z.txt", "lib.o", "lib.a",
	"y.tmp", "x.tmp", "file1.txt", "fileA.txt", "7.num", "n.num", "#hash.txt", "!bang.txt", "space.txt", "trail ",
	"f.swp", "node_modules/pkg/index.js", "important/x.log", "p/cache/q/r.txt", "foo/a.c", "foo/bar.c", "foo/sub/bar.c",
	"xAyBz", "q.one", "qq.one", "dir/sub/f", "thing.d/f", "a.keep", "plain.txt", "sub/plain.txt",
}

// TestIgnoreRulesMatchGit: random ignore files (at the root and in
// subdirectories, and info/exclude) over a fixed set of paths; the
// snapshot must stage exactly what `git add -A` stages.
func TestIgnoreRulesMatchGit(t *testing.T) {
	seed := fidelitySeed(t)
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "base\n"})
	s := e.create(sandbox.CreateOptions{})
	wt := e.worktree(s)
	rnd := rand.New(rand.NewSource(seed))
	for i := 0; i < 25; i++ {
		var sh []string
		sh = append(sh, "find . -mindepth 1 -maxdepth 1 ! -name .git ! -name README -exec rm -rf {} +")
		for _, p := range ignorePaths {
			if rnd.Intn(4) == 0 {
				continue
			}
			if d := filepath.Dir(p); d != "." {
				sh = append(sh, "mkdir -p "+q(d))
			}
			sh = append(sh, "printf x > "+q(p))
		}
		pick := func() string {
			var lines []string
			for j := 0; j < 1+rnd.Intn(6); j++ {
				lines = append(lines, ignorePatterns[rnd.Intn(len(ignorePatterns))])
			}
			return strings.Join(lines, "\n") + "\n"
		}
		sh = append(sh, printf([]byte(pick()), ".gitignore"))
		for _, d := range []string{"sub", "docs", "foo"} {
			if rnd.Intn(2) == 0 {
				sh = append(sh, "mkdir -p "+d, printf([]byte(pick()), d+"/.gitignore"))
			}
		}
		sh = append(sh, printf([]byte(pick()), ".git/info/exclude"))
		e.sh(s, strings.Join(sh, " && "))
		sn, err := e.cr.Snapshot(ctx, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		sn.Close()
		idx := filepath.Join(t.TempDir(), "index")
		env := []string{"GIT_INDEX_FILE=" + idx}
		gitWith(t, wt, env, "read-tree", "HEAD")
		gitWith(t, wt, env, "add", "-A")
		if want := gitWith(t, wt, env, "write-tree"); want != sn.Tree.String() {
			staged := gitWith(t, wt, env, "ls-files")
			ours := gitWith(t, wt, []string{"GIT_DIR=" + filepath.Join(e.root, "runs", s.RunID, "objects.git")}, "ls-tree", "-r", "--name-only", sn.Tree.String())
			t.Fatalf("iteration %d (seed %d): tree %s, git add -A stages %s\ngit stages:\n%s\nwe stage:\n%s",
				i, seed, sn.Tree, want, staged, ours)
		}
	}
}
