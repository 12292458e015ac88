package gitread

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/gitcli/gittest"
)

// The paths git's own tests (t1014-read-tree-confusing, t0060-path-utils)
// and verify_path's rules refuse or keep, each also put to the real git:
// `git update-index --add --cacheinfo` with core.protectNTFS and
// core.protectHFS on must refuse exactly the paths gitRefuses refuses.
func TestGitRefuses(t *testing.T) {
	const zwnj = "\u200c"
	refused := []string{
		".git", ".GIT", ".Git", "sub/.git", "sub/.gIt/config", ".git/x", ".GIT/hooks/pre-commit", "sub/.Git/config",
		"git~1", "GIT~1", "Git~1/HEAD", "git~1/HEAD", "GIT~1/x", "git~1.", "git~1 ", "git~1:x", "git~1...:alternate-stream",
		".git.", ".git./x", ".git ", ".git /x", ".git. ", ".git . .", ".git...:alternate-stream", ".git::$INDEX_ALLOCATION", ".git:x/y",
		`.\.GIT\foobar`, `.git\foobar`, `x\.git`, `a/b\git~1`,
		zwnj + ".Git", ".gI" + zwnj + "T", ".GiT" + zwnj, ".g\u200di\u202et\ufeff/x", ".git" + zwnj + "/x",
		".git\xff", // bytes that are not UTF-8 end the name for HFS+, as in git
		"sub/..", "../x", "a/./b",
	}
	kept := []string{
		".gitignore", ".github/x", ".gitmodules", ".gitattributes", ".git-foo", ".gitx", "git", "git~2", "git~2x", "git~1x", "git~10",
		"xgit~1", ".git.x", ".git x", "x.git", "a.git/b", "...", "..x", ".x", `\.git`, ".g.it",
		".gi" + zwnj,         // "." "g" "i" then the end: no t
		".gi\u200bt",         // U+200B is not one HFS+ ignores
		".git\u00a0", ".gıt", // a no-break space; a dotless i
		"gitmod~1", ".gitmodules.", "GI7EBA~1", // only symlinks of these names are refused
	}
	// symlinks: also .gitmodules and what NTFS and HFS+ read as it
	refusedLinks := []string{
		".gitmodules", ".Gitmodules", ".gitmoduleS", ".git" + zwnj + "modules", ".gitmodules ", ".gitmodules.", ".gitmodules . ", ".Gitmodules..",
		"GITMOD~1", "gitmod~4", "GITMOD~3  ", "gitmod~4 . ", "GI7EBA~1", "gi7eba~9", "GI7EB~10", "GI7EB~99", "GI7E~100", "~1000000", "~9999999",
		".gitmodules:$DATA", "gitmod~4 . :$DATA", "sub/.gitmodules", ".gitmodules/x", ".GITMODULES/x",
	}
	keptLinks := []string{
		".gitmodules x", ".gitmodules .x", " .gitmodules", "..gitmodules", "gitmodules", ".gitmodule", ".gitmodules x ",
		"GI7EBA~", "GI7EBA~0", "GI7EBA~~1", "GI7EBA~X", "Gx7EBA~1", "GI7EBX~1", "GI7EB~1", "GI7EB~01", "GI7EB~1X", ".gitmodules,:$DATA",
		"gitmod~5", "gitmod~1/x", ".gitignore", "link",
	}

	repo := t.TempDir()
	gittest.Git(t, repo, "init", "-q")
	blob := gittest.Git(t, repo, "hash-object", "-w", "--stdin")
	git := func(path string, link bool) bool {
		mode := "100644"
		if link {
			mode = "120000"
		}
		c := exec.Command("git", "-c", "core.protectNTFS=true", "-c", "core.protectHFS=true", "-C", repo,
			"update-index", "--add", "--cacheinfo", mode+","+blob+","+path)
		index := filepath.Join(repo, "scratch-index")
		os.Remove(index) // one path at a time
		c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_INDEX_FILE="+index)
		out, err := c.CombinedOutput()
		if err != nil && !strings.Contains(strings.ToLower(string(out)), "invalid path") {
			t.Fatalf("git update-index %q: %v: %s", path, err, out)
		}
		return err != nil
	}
	check := func(paths []string, link, wantRefused bool) {
		for _, p := range paths {
			why := Refuses(p, link)
			if (why != "") != wantRefused {
				t.Errorf("Refuses(%q, symlink %v) = %q, want refused %v", p, link, why, wantRefused)
			}
			if git(p, link) != wantRefused {
				t.Errorf("git refuses %q (symlink %v): %v, the table says %v", p, link, !wantRefused, wantRefused)
			}
		}
	}
	check(refused, false, true)
	check(refused, true, true)
	check(kept, false, false)
	check(refusedLinks, true, true)
	check(refusedLinks, false, false) // as files, git keeps them
	check(keptLinks, true, false)
}
