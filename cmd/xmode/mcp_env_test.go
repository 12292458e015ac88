package main

import (
	"strings"
	"testing"
)

// sandbox_exec's env: a variable of the server's environment only when
// XMODE_MCP_ENV allows it (none by default), its value masked in the
// reply and the evidence; NAME=VALUE of the client's own always, its own
// value whatever the server's is.
func TestMCPEnvAllowList(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t, "ALLOWED_ONE=value-one-allowed", "NOT_ALLOWED=value-two-server", "XMODE_MCP_ENV=ALLOWED_*, OTHER")
	cs := r.stdio(nil, nil)
	id := str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	ex := ok(t, cs, "sandbox_exec", map[string]any{"session": id, "env": []string{"ALLOWED_ONE"}, "name": "check",
		"command": `test "${ALLOWED_ONE#value-one-}" = allowed && echo "got $ALLOWED_ONE"`})
	if str(ex, "exit_code") != "0" || str(ex, "stdout") != "got ***\n" {
		t.Fatalf("an allowed variable: %v", ex)
	}
	for _, name := range []string{"NOT_ALLOWED", "HOME", "XMODE_STORAGE_ROOT"} {
		toolErr(t, cs, "sandbox_exec", map[string]any{"session": id, "env": []string{name}, "command": "true"},
			"refused: env "+name+": the user has not allowed MCP clients to ask for that variable of the server's environment (XMODE_MCP_ENV")
	}
	ex = ok(t, cs, "sandbox_exec", map[string]any{"session": id, "env": []string{"MINE=my value", "NOT_ALLOWED=the client's"},
		"command": `echo "$MINE / $NOT_ALLOWED"`})
	if str(ex, "stdout") != "my value / the client's\n" {
		t.Fatalf("the client's own values: %v", ex)
	}
	evidenceHas(t, r.root, "value-one-allowed", false)
	evidenceHas(t, r.root, "value-two-server", false)

	// Unset, no variable of the server's can be asked for.
	plain := newMCPRig(t, "ALLOWED_ONE=value-one-allowed")
	pc := plain.stdio(nil, nil)
	pid := str(ok(t, pc, "sandbox_create", map[string]any{"repository": plain.repo}), "session", "id")
	res, _ := call(t, pc, "sandbox_exec", map[string]any{"session": pid, "env": []string{"ALLOWED_ONE"}, "command": "true"})
	if !res.IsError || !strings.Contains(text(res), "XMODE_MCP_ENV") {
		t.Fatalf("without XMODE_MCP_ENV: %s", text(res))
	}
}

// A host sandbox made through MCP inherits the core environment of the
// server, not the whole of it: a secret-named variable and an ordinary one
// of the client's shell stay out of its steps unless the user says so.
func TestMCPHostSandboxInheritsCore(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t, "MY_API_TOKEN=tok-from-the-shell", "SOME_SETTING=from-the-shell")
	cs := r.stdio(nil, nil)
	id := str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	ex := ok(t, cs, "sandbox_exec", map[string]any{"session": id,
		"command": `echo "token=${MY_API_TOKEN:-unset} setting=${SOME_SETTING:-unset} path=${PATH:+set} home=${HOME:+set}"`})
	if got := str(ex, "stdout"); got != "token=unset setting=unset path=set home=set\n" {
		t.Fatalf("an MCP host sandbox's step sees %q, want the core environment only", got)
	}

	// The user widens it explicitly.
	all := newMCPRig(t, "MY_API_TOKEN=tok-from-the-shell", "SOME_SETTING=from-the-shell", "XMODE_HOST_ENV=all")
	ac := all.stdio(nil, nil)
	aid := str(ok(t, ac, "sandbox_create", map[string]any{"repository": all.repo}), "session", "id")
	ex = ok(t, ac, "sandbox_exec", map[string]any{"session": aid, "command": `echo "setting=${SOME_SETTING:-unset} token=${MY_API_TOKEN:-unset}"`})
	if got := str(ex, "stdout"); got != "setting=from-the-shell token=unset\n" {
		t.Fatalf("with XMODE_HOST_ENV=all the step sees %q, want the setting and still no token", got)
	}
}
