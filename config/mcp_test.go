package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/xmode/xmode/fail"
)

// The MCP server's allow-lists: comma-separated, spaces trimmed, each
// entry checked (a path absolute, a URL with its scheme or git's
// host:path, wildcards well-formed; a variable a name or a pattern of
// names); a bad one is a usage error naming the variable.
func TestMCPAllowLists(t *testing.T) {
	c, err := Load(envOf(map[string]string{"HOME": "/h",
		"XMODE_MCP_REPOS": " /home/me/src , https://github.com/me/*,git@github.com:me/*,,",
		"XMODE_MCP_ENV":   "GITHUB_TOKEN, NPM_*,A?B,[AB]_KEY"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/home/me/src", "https://github.com/me/*", "git@github.com:me/*"}; !slices.Equal(c.MCPRepos, want) {
		t.Errorf("XMODE_MCP_REPOS: %q, want %q", c.MCPRepos, want)
	}
	if want := []string{"GITHUB_TOKEN", "NPM_*", "A?B", "[AB]_KEY"}; !slices.Equal(c.MCPEnv, want) {
		t.Errorf("XMODE_MCP_ENV: %q, want %q", c.MCPEnv, want)
	}
	if c, err := Load(envOf(map[string]string{"HOME": "/h"}), nil); err != nil || c.MCPRepos != nil || c.MCPEnv != nil {
		t.Errorf("unset: %q %q %v", c.MCPRepos, c.MCPEnv, err)
	}
	for name, v := range map[string]string{
		"XMODE_MCP_REPOS": "src/repos", "XMODE_MCP_ENV": "A=B",
	} {
		_, err := Load(envOf(map[string]string{"HOME": "/h", name: v}), nil)
		if fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "env "+name) {
			t.Errorf("%s=%s: %v", name, v, err)
		}
	}
	for _, v := range []string{"/x/[", "https://h/[a"} {
		if _, err := ParseRepoPatterns(v); err == nil {
			t.Errorf("%q: no error", v)
		}
	}
	for _, v := range []string{"A B", "[", "A.B", "A=B"} {
		if _, err := ParseEnvPatterns(v); err == nil {
			t.Errorf("%q: no error", v)
		}
	}
}
