package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// `xmode mcp` under the MCP clients people use: the MCP Inspector's CLI
// (npm @modelcontextprotocol/inspector, pinned in .ci/run), Claude Code and
// the Codex CLI. Each starts xmode itself, by a command line: a wrapper
// script that makes this test binary xmode with the rig's environment.

// npmTool finds an npm-installed CLI on PATH (.ci/run installs them).
func npmTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.Skip(t, "%s is not on PATH (npm: .ci/run installs it into /opt/xmode-agent-clis)", name)
	}
	return p
}

// wrapper writes an executable `xmode` that runs this test binary as xmode
// with the rig's environment and env, and returns its path.
func (r *mcpRig) wrapper(env ...string) string {
	r.t.Helper()
	bin := filepath.Join(r.t.TempDir(), "xmode")
	var script strings.Builder
	script.WriteString("#!/bin/sh\n")
	for _, kv := range append(append([]string{}, r.env...), env...) {
		k, v, _ := strings.Cut(kv, "=")
		script.WriteString("export " + k + "=" + shellQuote(v) + "\n")
	}
	script.WriteString("exec " + shellQuote(os.Args[0]) + " \"$@\"\n")
	if err := os.WriteFile(bin, []byte(script.String()), 0o755); err != nil {
		r.t.Fatal(err)
	}
	return bin
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// The Inspector's CLI lists the tools, then runs a session from
// sandbox_create to cr_create on a real repository — each call a server of
// its own, picking up where the last left off — on the host and docker
// engines; the change request verifies and applies to a fresh clone.
func TestMCPInspector(t *testing.T) {
	t.Parallel()
	inspector := npmTool(t, "mcp-inspector")
	for _, eng := range []string{"host", "docker"} {
		t.Run(eng, func(t *testing.T) {
			t.Parallel()
			var env []string
			if eng == "docker" {
				dockertest.Require(t)
				env = []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + dockertest.Image(t),
					"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}
			}
			r := newMCPRig(t, env...)
			xm := r.wrapper()
			run := func(args ...string) map[string]any {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				c := exec.CommandContext(ctx, inspector, append([]string{"--cli", "--cwd", r.repo, xm, "mcp"}, args...)...)
				c.Dir = r.repo
				c.Env = append(os.Environ(), "HOME="+filepath.Join(r.dir, "home"))
				var stderr strings.Builder
				c.Stderr = &stderr
				out, err := c.Output()
				if err != nil {
					t.Fatalf("mcp-inspector %s: %v\n%s\n%s", strings.Join(args, " "), err, out, stderr.String())
				}
				var v map[string]any
				if err := json.Unmarshal(out, &v); err != nil {
					t.Fatalf("mcp-inspector %s printed %q: %v", strings.Join(args, " "), out, err)
				}
				if v["isError"] == true {
					t.Fatalf("mcp-inspector %s: a tool error: %s", strings.Join(args, " "), out)
				}
				return v
			}
			tools := run("--method", "tools/list")
			var names []string
			for _, tool := range tools["tools"].([]any) {
				names = append(names, tool.(map[string]any)["name"].(string))
			}
			if got := strings.Join(names, " "); len(names) != len(mcpTools) || !strings.Contains(got, "sandbox_exec") || !strings.Contains(got, "cr_create") {
				t.Fatalf("tools/list: %s", got)
			}
			callTool := func(name string, args ...string) map[string]any {
				a := []string{"--method", "tools/call", "--tool-name", name}
				for _, kv := range args {
					a = append(a, "--tool-arg", kv)
				}
				v := run(a...)
				sc, _ := v["structuredContent"].(map[string]any)
				return sc
			}
			created := callTool("sandbox_create", "title=Inspector session")
			id := str(created, "session", "id")
			if str(created, "session", "engine") != eng || str(created, "session", "repository") != r.repo || str(created, "session", "client") == "" {
				t.Fatalf("sandbox_create: %v", created)
			}
			if ex := callTool("sandbox_exec", "session="+id, "command=echo from the inspector > made.txt && cat made.txt"); str(ex, "stdout") != "from the inspector\n" {
				t.Fatalf("sandbox_exec: %v", ex)
			}
			callTool("file_write", "session="+id, "path=docs/new.md", "content=# New\n\nwritten over MCP\n")
			callTool("file_edit", "session="+id, "path=README", "old_string=version two", "new_string=version three")
			cr := callTool("cr_create", "session="+id, "message=made by the inspector")
			crID := str(cr, "id")
			if str(cr, "title") != "Inspector session" || str(cr, "stat", "files") != "3" {
				t.Fatalf("cr_create: %v", cr)
			}
			verifyAndApply(t, r, crID, "README", "version three\n")
			verifyAndApply(t, r, crID, "docs/new.md", "# New\n\nwritten over MCP\n")
			var shown map[string]any
			json.Unmarshal([]byte(r.cliOut(nil, "sandbox", "show", id, "--json")), &shown)
			if shown["origin"] != "mcp" || !strings.HasPrefix(shown["origin_client"].(string), "inspector") {
				t.Fatalf("the session's origin: %v %v", shown["origin"], shown["origin_client"])
			}
		})
	}
}

// `claude mcp add xmode -- xmode mcp`, then `claude mcp list` health-checks
// the server (no account needed) and reports it connected.
func TestMCPClaudeCode(t *testing.T) {
	t.Parallel()
	claude := npmTool(t, "claude")
	r := newMCPRig(t)
	xm := r.wrapper()
	home := filepath.Join(r.dir, "claude-home")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, claude, args...)
		c.Dir = r.repo
		c.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "CLAUDE_CONFIG_DIR="+filepath.Join(home, ".claude"))
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mcp", "add", "xmode", "--", xm, "mcp")
	if out := run("mcp", "list"); !strings.Contains(out, "xmode:") || !strings.Contains(out, "Connected") || strings.Contains(out, "Failed") {
		t.Fatalf("claude mcp list:\n%s", out)
	}
}

// `codex mcp add xmode -- xmode mcp`, then `codex mcp list` shows it.
func TestMCPCodex(t *testing.T) {
	t.Parallel()
	// Not the codex on PATH: testscript puts its stand-in there.
	codex := codexcloudtest.RealCodex(t)
	r := newMCPRig(t)
	xm := r.wrapper()
	home := filepath.Join(r.dir, "codex-home")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, codex, args...)
		c.Dir = r.repo
		c.Env = append(os.Environ(), "HOME="+home, "CODEX_HOME="+filepath.Join(home, ".codex"))
		os.MkdirAll(filepath.Join(home, ".codex"), 0o700)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("codex %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mcp", "add", "xmode", "--", xm, "mcp")
	if out := run("mcp", "list"); !strings.Contains(out, "xmode") || !strings.Contains(out, xm) {
		t.Fatalf("codex mcp list:\n%s", out)
	}
	if cfg, err := os.ReadFile(filepath.Join(home, ".codex", "config.toml")); err != nil || !strings.Contains(string(cfg), "[mcp_servers.xmode]") {
		t.Fatalf("codex's config.toml: %s %v", cfg, err)
	}
}
