package gitread

import (
	"bytes"
	"math/rand"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/xmode/xmode/gitcli/gittest"
)

// ignorePatterns are drawn from for the ignore files: git's wildmatch
// corners (**, sets, classes, escapes), negations, directory-only and
// anchored patterns, trailing spaces, comments, a CRLF line.
var ignorePatterns = []string{
	"*.log", "!keep.log", "build/", "/root-only.txt", "**/deep.txt", "docs/**", "!docs/keep.md",
	"a/**/z.txt", "*.[oa]", "[!x]*.tmp", "file[0-9].txt", "[[:digit:]]*.num", "\\#hash.txt", "\\!bang.txt",
	"space.txt ", "trail\\ ", "# a comment", "*.swp\r", "node_modules", "!important/", "**/cache/**",
	"foo/*", "!foo/bar.c", "x*y*z", "?.one", "dir/sub/", "*.d/", "!*.keep", "",
}

var ignorePaths = []string{
	"a.log", "keep.log", "sub/b.log", "sub/keep.log", "build/out.o", "src/build/x.c", "root-only.txt", "sub/root-only.txt",
	"deep.txt", "x/y/deep.txt", "docs/a.md", "docs/keep.md", "docs/in/deep.md", "a/z.txt", "a/b/c/z.txt", "lib.o", "lib.a",
	"y.tmp", "x.tmp", "file1.txt", "fileA.txt", "7.num", "n.num", "#hash.txt", "!bang.txt", "space.txt", "trail ",
	"f.swp", "node_modules/pkg/index.js", "important/x.log", "p/cache/q/r.txt", "foo/a.c", "foo/bar.c", "foo/sub/bar.c",
	"xAyBz", "q.one", "qq.one", "dir/sub/f", "thing.d/f", "a.keep", "plain.txt", "sub/plain.txt",
	"sub/build", "x/important", "docs/sub/dir/sub", // files named as directory-only patterns
}

// IgnoreRules, pushed as a walk of the tree pushes them (info/exclude,
// then each directory's .gitignore, none read inside an ignored
// directory), ignore exactly the files `git check-ignore` says git
// ignores, over random ignore files at the root, in subdirectories and in
// info/exclude.
func TestIgnoreRulesAgreeWithGit(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	for iter := 0; iter < 30; iter++ {
		dir := filepath.Join(t.TempDir(), "repo")
		gittest.Git(t, ".", "init", "-q", dir)
		var files []string
		write := func(p, body string) {
			os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
			if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range ignorePaths {
			if rnd.Intn(4) > 0 {
				write(p, "x")
				files = append(files, p)
			}
		}
		pick := func() string {
			var lines []string
			for range 2 + rnd.Intn(10) {
				lines = append(lines, ignorePatterns[rnd.Intn(len(ignorePatterns))])
			}
			return strings.Join(lines, "\n") + "\n"
		}
		write(".gitignore", pick())
		files = append(files, ".gitignore")
		for _, d := range []string{"sub", "docs", "foo", "a/b"} {
			if rnd.Intn(2) == 0 {
				write(d+"/.gitignore", pick())
				files = append(files, d+"/.gitignore")
			}
		}
		exclude := pick()
		write(".git/info/exclude", exclude)

		var rules IgnoreRules
		rules.Push(ParseIgnore([]byte(exclude), ""))
		ours := map[string]bool{}
		var walk func(rel string, ignored bool)
		walk = func(rel string, ignored bool) {
			if !ignored {
				if b, err := os.ReadFile(filepath.Join(dir, rel, ".gitignore")); err == nil {
					base := ""
					if rel != "" {
						base = rel + "/"
					}
					n := rules.Push(ParseIgnore(b, base))
					defer rules.Pop(n)
				}
			}
			entries, _ := os.ReadDir(filepath.Join(dir, rel))
			for _, e := range entries {
				if rel == "" && e.Name() == ".git" {
					continue
				}
				p := path.Join(rel, e.Name())
				ign := ignored || rules.Ignored(p, e.Name(), e.IsDir())
				if e.IsDir() {
					walk(p, ign)
				} else if ign {
					ours[p] = true
				}
			}
		}
		walk("", false)

		c := exec.Command("git", "-C", dir, "check-ignore", "--no-index", "--stdin", "-z")
		c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		c.Stdin = strings.NewReader(strings.Join(files, "\x00") + "\x00")
		out, err := c.Output()
		if ee, ok := err.(*exec.ExitError); err != nil && !(ok && ee.ExitCode() == 1) { // 1: nothing ignored
			t.Fatalf("git check-ignore: %v", err)
		}
		var theirs, mine []string
		for _, p := range bytes.Split(bytes.TrimSuffix(out, []byte{0}), []byte{0}) {
			if len(p) > 0 {
				theirs = append(theirs, string(p))
			}
		}
		for p := range ours {
			mine = append(mine, p)
		}
		sort.Strings(theirs)
		sort.Strings(mine)
		if strings.Join(theirs, "\n") != strings.Join(mine, "\n") {
			t.Fatalf("iteration %d: git ignores\n%s\nIgnoreRules ignore\n%s\n(.gitignore:\n%s)", iter, strings.Join(theirs, "\n"), strings.Join(mine, "\n"), func() string { b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); return string(b) }())
		}
	}
}
