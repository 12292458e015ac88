package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplitTemplate(t *testing.T) {
	for in, want := range map[string][]string{
		`sh agent.sh {prompt_file}`: {"sh", "agent.sh", "{prompt_file}"},
		`  a   b  `:                 {"a", "b"},
		`sh -c 'echo "$1" | wc -c' sh {prompt_file}`: {"sh", "-c", `echo "$1" | wc -c`, "sh", "{prompt_file}"},
		`a "b c" d\ e 'f''g' "h\"i\\j"`:              {"a", "b c", "d e", "fg", `h"i\j`},
		`--file={prompt_file} x{worktree}/y`:         {"--file={prompt_file}", "x{worktree}/y"},
		`$HOME $(id) ~ * {"json": 1}`:                {"$HOME", "$(id)", "~", "*", "{json:", "1}"},
		`''`:                                         {""},
	} {
		got, err := SplitTemplate(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("SplitTemplate(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		`sh 'open`:             "unclosed single quote",
		`sh "open`:             "unclosed double quote",
		`sh \`:                 "lone backslash",
		`   `:                  "names no command",
		`run {prompt}`:         "unknown placeholder {prompt}",
		`run {worktree} {obj}`: "unknown placeholder {obj}",
	} {
		if _, err := SplitTemplate(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("SplitTemplate(%q): error %v, want one saying %q", in, err, msg)
		}
	}
}

func TestAgentSettings(t *testing.T) {
	env := map[string]string{
		"XMODE_STORAGE_ROOT":           t.TempDir(),
		"XMODE_AGENT_COMMAND_TEMPLATE": "my-agent --dir {worktree} {prompt_file}",
		"XMODE_AGENT_ENV":              " A_KEY, B_TOKEN ,",
		"XMODE_CODEX_BIN":              "/opt/codex/bin/codex",
	}
	c, err := Load(func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.AgentCommandTemplate, []string{"my-agent", "--dir", "{worktree}", "{prompt_file}"}) ||
		!reflect.DeepEqual(c.AgentEnv, []string{"A_KEY", "B_TOKEN"}) || c.CodexBin != "/opt/codex/bin/codex" || c.ClaudeBin != "claude" {
		t.Fatalf("agent settings: %q %q %q %q", c.AgentCommandTemplate, c.AgentEnv, c.CodexBin, c.ClaudeBin)
	}
	delete(env, "XMODE_AGENT_ENV")
	if c, _ = Load(func(k string) string { return env[k] }, nil); !reflect.DeepEqual(c.AgentEnv, []string{"OPENAI_API_KEY", "CODEX_API_KEY", "ANTHROPIC_API_KEY"}) {
		t.Fatalf("default XMODE_AGENT_ENV: %q", c.AgentEnv)
	}
	for k, v := range map[string]string{"XMODE_AGENT_ENV": "OK,not-a-name", "XMODE_AGENT_COMMAND_TEMPLATE": "x {bad}", "XMODE_CLAUDE_BIN": " "} {
		bad := map[string]string{"XMODE_STORAGE_ROOT": env["XMODE_STORAGE_ROOT"], k: v}
		if _, err := Load(func(n string) string { return bad[n] }, nil); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%q: error %v, want a usage error naming it", k, v, err)
		}
	}
}
