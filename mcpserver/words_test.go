package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
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

// The actions services' real messages name reach an MCP client as the
// tool that does each, with its parameters — never as a CLI command line
// with arguments; one no tool does (a review) stays the command the user
// runs.
func TestActionsAsTools(t *testing.T) {
	now := time.Now()
	expired := store.CheckOpen(&store.Session{ID: "sbx_aaaaaaaa", Status: store.StatusOpen, ExpiresAt: now.Add(-time.Minute)}, now)
	_, noNetwork := (&agents.Runner{Svc: &sandbox.Service{Cfg: &config.Config{}}}).Run(context.Background(), agents.Request{
		Kind: agents.Codex, Prompt: "p", Session: &store.Session{ID: "sbx_aaaaaaaa", Status: store.StatusOpen, ExpiresAt: now.Add(time.Hour), Network: "none"}})
	for _, c := range []struct {
		err       error
		cli, want string
	}{
		{expired, "extend it with `xmode sandbox extend sbx_aaaaaaaa --ttl 1h` or create a new one",
			`refused: session sbx_aaaaaaaa expired at `},
		{noNetwork, "create the session with `xmode sandbox create --network allow --agent codex`",
			`refused: session sbx_aaaaaaaa has no network (network none), and the codex agent needs it to reach its model: create the session with sandbox_create with network "allow" and agent "codex"`},
		{fail.Refusedf("session %s has a running step: x; wait for it to end, or end it with the session: %s", "sbx_aaaaaaaa", fail.Do("sandbox stop").With(fail.Force, "").Arg("sbx_aaaaaaaa")),
			"`xmode sandbox stop --force sbx_aaaaaaaa`", `end it with the session: sandbox_stop with force true and session "sbx_aaaaaaaa"`},
		{fail.Refusedf("free one with %s", fail.Do("sandbox stop").Some("ID")), "`xmode sandbox stop ID`", "refused: free one with sandbox_stop"},
		{fail.Refusedf("end the step with %s", fail.Do("sandbox kill", "sbx_aaaaaaaa", "3")), "", `end the step with step_kill with session "sbx_aaaaaaaa" and step 3`},
		{fail.Refusedf("review it with %s", fail.Do("cr review", "cr_1").With(fail.Note, "ok")), "", "review it with `xmode cr review cr_1 --note ok`"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.cli) {
			t.Errorf("the CLI's words: %v, want %q", c.err, c.cli)
			continue
		}
		got := toolError(c.err).Error()
		cliCommand := strings.Contains(got, "--") || strings.Contains(got, "xmode sandbox")
		if !strings.Contains(got, c.want) || cliCommand && !strings.Contains(c.want, "`xmode ") {
			t.Errorf("MCP's words:\n got %s\nwant %s, and no CLI command", got, c.want)
		}
	}
	if got := toolError(expired).Error(); !strings.HasSuffix(got, `: extend it with sandbox_extend with session "sbx_aaaaaaaa" and ttl "1h" or create a new one`) {
		t.Errorf("an expired session: %s", got)
	}
}

// Every tool a command maps to exists, with a parameter for each of the
// command's operands (the snapshots are what a client is told).
func TestToolCommandsAreTools(t *testing.T) {
	for cmd, tc := range toolCommands {
		b, err := os.ReadFile(filepath.Join("testdata", "toolsnaps", tc.tool+".json"))
		if err != nil {
			t.Errorf("%s: no tool %s: %v", cmd, tc.tool, err)
			continue
		}
		var snap struct {
			InputSchema struct {
				Properties map[string]any `json:"properties"`
			} `json:"inputSchema"`
		}
		if err := json.Unmarshal(b, &snap); err != nil {
			t.Fatal(err)
		}
		for _, p := range tc.operands {
			if _, ok := snap.InputSchema.Properties[p]; !ok {
				t.Errorf("%s: tool %s has no parameter %s", cmd, tc.tool, p)
			}
		}
	}
	for flag, p := range toolParams {
		if isSetting(p) || strings.Contains(p, " ") { // a setting, or words for the user (no tool takes it)
			continue
		}
		found := false
		for _, tc := range toolCommands {
			b, _ := os.ReadFile(filepath.Join("testdata", "toolsnaps", tc.tool+".json"))
			found = found || strings.Contains(string(b), `"`+p+`": {`)
		}
		if !found {
			t.Errorf("--%s is parameter %s, which no tool a command maps to has", flag, p)
		}
	}
}
