package mcpserver

import (
	"errors"
	"strings"
	"testing"

	"github.com/xmode/xmode/fail"
)

// A service's error reaches an MCP client in MCP's words: a flag as the
// tool's parameter, a command a tool does as the tool; a command the user
// runs, a git option and a flag MCP has no word for stay as they are.
func TestToolErrorsInMCPWords(t *testing.T) {
	for in, want := range map[string]string{
		`--ref "nope": no such branch, tag or commit in /r`:                                       `ref "nope": no such branch, tag or commit in /r`,
		`--repo "-x": a repository cannot start with '-'`:                                         `repository "-x": a repository cannot start with '-'`,
		`--ttl: 9h is longer than XMODE_SANDBOX_MAX_TTL (8h)`:                                     `ttl: 9h is longer than XMODE_SANDBOX_MAX_TTL (8h)`,
		"session sbx_1 expired and is being reaped: create a new one with `xmode sandbox create`": "session sbx_1 expired and is being reaped: create a new one with sandbox_create",
		"review it with `xmode cr review --approve`, then `git log --oneline`":                    "review it with `xmode cr review --approve`, then `git log --oneline`",
		"--network is for docker sandboxes (--timeout 5s, or --bogus)":                            "network is for docker sandboxes (timeout_seconds 5s, or --bogus)",
		"git diff --stat failed; x--repo stays":                                                   "git diff --stat failed; x--repo stays",
	} {
		if got := mcpWords(in); got != want {
			t.Errorf("%s\n got %s\nwant %s", in, got, want)
		}
	}
	if got := toolError(fail.Usagef("--ref %q: no such branch", "x")).Error(); got != `invalid input: ref "x": no such branch` {
		t.Errorf("toolError: %s", got)
	}
	if got := toolError(errors.New("--workdir a: escapes")).Error(); !strings.HasPrefix(got, "failed: workdir a") {
		t.Errorf("toolError of a plain error: %s", got)
	}
}
