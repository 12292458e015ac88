// Package gittest is the tests' way of running the real git for their
// fixtures (repositories, commits, tags), outside gitcli's safety settings
// and with a fixed identity, so commits work on a machine without a git
// identity configured. Only tests import it.
package gittest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Git runs git -C dir args… and returns its trimmed output, failing the
// test when git fails.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	// safe.directory: a test inspects worktrees a docker sandbox's user owns.
	c := exec.Command("git", append([]string{"-c", "safe.directory=*", "-C", dir}, args...)...)
	c.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
