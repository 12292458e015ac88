package changes_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/testenv"
)

// TestCheckBranchAsGit holds CheckBranch to the real `git check-ref-format
// --branch` on a table of names and on names made of the pieces git's
// rules are about: it refuses every name git refuses, and accepts every
// name git accepts but those it refuses on purpose (git's shorthand @,
// and names under refs/, which git would nest under refs/heads/).
func TestCheckBranchAsGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Skip(t, "no git binary: %v", err)
	}
	names := []string{
		"main", "xmode/cr_1", "feature/x-y", "v1.2", "é", "a.b/c", "a./b", "x@y", "a{b}", "a}b", "a@b{c", "a#b", "a!b",
		"HEAD", "HEAD/x", "x/HEAD", "FETCH_HEAD", "head",
		"refs/heads/x", "refs/heads/HEAD", "refs/x", "refs", "refs-x", "heads/x",
		"-x", "x-", "@", "@{-1}", "a@{b", "@{u}", "x@{upstream}",
		"", ".", "..", ".x", "x/.y", "x.", "x/", "/x", "a//b", "a..b", "a.lock", "a.lock/b", "a/b.lock", "lock", ".lock",
		"a b", "a\tb", "a\x7fb", "a\x01b", "a~b", "a^b", "a:b", "a?b", "a*b", "a[b", "a]b", `a\b`,
	}
	pieces := []string{"a", ".", "/", "@", "{", "-", "~", ".lock", " ", "\x01", "é", "*", `\`, "HEAD", "refs/", "x"}
	for _, p := range pieces {
		for _, q := range pieces {
			names = append(names, p+q)
		}
	}
	r := rand.New(rand.NewPCG(26, 8))
	for range 300 {
		var b strings.Builder
		for range 2 + r.IntN(4) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		names = append(names, b.String())
	}
	// Outside any repository: in one, git expands @ and @{-1}.
	dir := t.TempDir()
	env := append(os.Environ(), "GIT_CEILING_DIRECTORIES="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	stricter := func(n string) bool { return n == "@" || strings.HasPrefix(n, "refs/") }
	var accepted, refused int
	for _, name := range names {
		c := exec.Command("git", "check-ref-format", "--branch", name)
		c.Dir, c.Env = dir, env
		out, err := c.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 128) {
			t.Fatalf("git check-ref-format --branch %q: %v %s", name, err, out)
		}
		gitOK := err == nil
		ours := changes.CheckBranch(name)
		switch {
		case ours != nil && fail.KindOf(ours) != fail.Usage:
			t.Errorf("%q: %v, want a usage error", name, ours)
		case ours != nil && !strings.Contains(ours.Error(), "--branch"):
			t.Errorf("%q: %v does not name --branch", name, ours)
		case !gitOK && ours == nil:
			t.Errorf("%q: git refuses it (%s), CheckBranch accepts it", name, strings.TrimSpace(string(out)))
		case gitOK && ours != nil && !stricter(name):
			t.Errorf("%q: git accepts it, CheckBranch refuses it: %v", name, ours)
		case gitOK && ours == nil && stricter(name):
			t.Errorf("%q: CheckBranch accepts it, meant to refuse it", name)
		}
		if gitOK {
			accepted++
		} else {
			refused++
		}
	}
	if accepted < 20 || refused < 100 {
		t.Fatalf("git accepted %d and refused %d names: the table does not test both sides", accepted, refused)
	}
}

// TestCheckBranchSays: the message says which rule a name breaks.
func TestCheckBranchSays(t *testing.T) {
	for name, want := range map[string]string{
		"HEAD":         `--branch "HEAD" is not a valid branch name: HEAD is git's name for the checked-out commit`,
		"refs/heads/x": `--branch "refs/heads/x" is not a valid branch name: give it without refs/heads/ (x)`,
		"refs/x":       `--branch "refs/x" is not a valid branch name: it would be created as refs/heads/refs/x: give a name without refs/`,
		"-x":           `--branch "-x": a branch cannot start with '-'`,
		"a..b":         `--branch "a..b" is not a valid branch name: it contains '..'`,
		"a/":           `--branch "a/" is not a valid branch name: it has an empty part (a leading or trailing '/', or '//')`,
		"a.lock":       `--branch "a.lock" is not a valid branch name: a part ends with .lock`,
		"a~1":          `--branch "a~1" is not a valid branch name: it contains '~'`,
	} {
		if err := changes.CheckBranch(name); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", name, err, want)
		}
	}
}
