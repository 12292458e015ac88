package main

import (
	"strings"
	"testing"
)

// sandbox_fork is `sandbox fork` through MCP: the new sandbox is the
// client's (in scope, listed), starts where its parent is — commits,
// uncommitted and untracked files, ignored ones only when asked — and is
// refused, naming no CLI flag, for a parent that has ended.
func TestMCPSandboxFork(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	cs := r.stdio(nil, nil)
	id := str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	ok(t, cs, "sandbox_exec", map[string]any{"session": id, "command": `set -e
echo agent > agent.txt && git add agent.txt && git -c user.name=a -c user.email=a@example.com commit -qm "the agent"
echo more >> README && echo new > new.txt && echo ignored > x.log && echo '*.log' > .git/info/exclude`})

	fk := ok(t, cs, "sandbox_fork", map[string]any{"session": id, "title": "the other way"})
	fid := str(fk, "session", "id")
	if fid == id || str(fk, "forked_from") != id || str(fk, "forked_at_step") != "1" || str(fk, "session", "title") != "the other way" {
		t.Fatalf("sandbox_fork: %v", fk)
	}
	if !strings.Contains(str(ok(t, cs, "sandbox_list", nil)), fid) {
		t.Errorf("the fork is not among the client's sandboxes")
	}
	ex := ok(t, cs, "sandbox_exec", map[string]any{"session": fid, "command": "git log -1 --format=%s; git status --porcelain; test -e x.log && echo has-ignored || true"})
	if got := str(ex, "stdout"); got != "the agent\n M README\n?? new.txt\n" {
		t.Errorf("git in the fork: %q", got)
	}
	withIgn := str(ok(t, cs, "sandbox_fork", map[string]any{"session": id, "with_ignored": true}), "session", "id")
	if got := str(ok(t, cs, "sandbox_exec", map[string]any{"session": withIgn, "command": "cat x.log"}), "stdout"); got != "ignored\n" {
		t.Errorf("with_ignored: x.log is %q", got)
	}

	ok(t, cs, "sandbox_stop", map[string]any{"session": id})
	res, _ := call(t, cs, "sandbox_fork", map[string]any{"session": id})
	if msg := text(res); !res.IsError || !strings.Contains(msg, "refused: session "+id+" is destroyed, not open") || strings.Contains(msg, "--") {
		t.Errorf("sandbox_fork of an ended sandbox: %s", msg)
	}
	res, _ = call(t, cs, "sandbox_fork", map[string]any{"session": fid, "title": "two\nlines"})
	if msg := text(res); !res.IsError || !strings.Contains(msg, "title: one line") {
		t.Errorf("sandbox_fork with a two-line title: %s", msg)
	}
}
