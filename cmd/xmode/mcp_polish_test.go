package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sandbox_extend pushes a sandbox's expiry back, through the service the
// CLI's `sandbox extend` uses: ttl from now, the configured lifetime by
// default, refused past XMODE_SANDBOX_MAX_TTL or once ended — its errors
// naming the parameter, not the CLI's --ttl. The instructions give the
// configured lifetime and send an agent to sandbox_extend.
func TestMCPSandboxExtend(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t, "XMODE_SANDBOX_TTL=45m", "XMODE_SANDBOX_MAX_TTL=8h")
	cs := r.stdio(nil, nil)
	ins := cs.InitializeResult().Instructions
	if !strings.Contains(ins, "A sandbox lives 45m from its creation") || strings.Contains(ins, "2 hours") || !strings.Contains(ins, "call sandbox_extend") {
		t.Fatalf("the instructions do not give the configured lifetime or sandbox_extend:\n%s", ins)
	}
	made := ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo})
	id := str(made, "session", "id")
	expires := func(v map[string]any) time.Time {
		t.Helper()
		at, err := time.Parse(time.RFC3339, str(v, "session", "expires_at"))
		if err != nil {
			t.Fatalf("expires_at: %v", v)
		}
		return at
	}
	if d := time.Until(expires(made)); d > 46*time.Minute || d < 40*time.Minute {
		t.Fatalf("a new sandbox expires in %s, want 45m", d)
	}
	ext := ok(t, cs, "sandbox_extend", map[string]any{"session": id, "ttl": "4h"})
	if d := time.Until(expires(ext)); d > 4*time.Hour+time.Minute || d < 4*time.Hour-5*time.Minute || !strings.Contains(str(ext, "note"), "4h from now") {
		t.Fatalf("extended by 4h: expires in %s: %v", d, ext)
	}
	if d := time.Until(expires(ok(t, cs, "sandbox_show", map[string]any{"session": id}))); d < 4*time.Hour-5*time.Minute {
		t.Fatalf("sandbox_show after the extend: expires in %s", d)
	}
	if d := time.Until(expires(ok(t, cs, "sandbox_extend", map[string]any{"session": id}))); d > 46*time.Minute || d < 40*time.Minute {
		t.Fatalf("extended by default: expires in %s, want the configured 45m", d)
	}
	for ttl, want := range map[string]string{
		"soon": `invalid input: ttl: "soon" is not a duration`,
		"-1h":  "invalid input: ttl:",
		"9h":   "invalid input: ttl: 9h0m0s is longer than XMODE_SANDBOX_MAX_TTL",
	} {
		res, _ := call(t, cs, "sandbox_extend", map[string]any{"session": id, "ttl": ttl})
		if msg := text(res); !res.IsError || !strings.HasPrefix(msg, want) || strings.Contains(msg, "--") {
			t.Errorf("ttl %s: %s; want %q, naming no flag", ttl, msg, want)
		}
	}
	ok(t, cs, "sandbox_stop", map[string]any{"session": id})
	toolErr(t, cs, "sandbox_extend", map[string]any{"session": id}, "refused: session "+id+" is not open")
}

// Errors reach an MCP client naming the tools' parameters and tools,
// never a CLI flag.
func TestMCPErrorsNameParameters(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	cs := r.stdio(nil, nil)
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"sandbox_create", map[string]any{"ref": "no-such-branch"}, `invalid input: ref "no-such-branch": no such branch, tag or commit`},
		{"sandbox_create", map[string]any{"repository": r.repo, "ref": "0000000000000000000000000000000000000000"}, `invalid input: ref "0000000000000000000000000000000000000000"`},
	} {
		res, _ := call(t, cs, c.tool, c.args)
		if msg := text(res); !res.IsError || !strings.HasPrefix(msg, c.want) || strings.Contains(msg, "--") {
			t.Errorf("%s %v: %s; want %q, naming no flag", c.tool, c.args, msg, c.want)
		}
	}
}

// What a service tells the user to do next reaches an MCP client as the
// tool that does it, with its parameters, not as a CLI command line: an
// expired sandbox names sandbox_extend with its session and a ttl, a stop
// while a step runs sandbox_stop with force.
func TestMCPActionsAsTools(t *testing.T) {
	t.Parallel()
	clock := filepath.Join(t.TempDir(), "clock")
	r := newMCPRig(t, clockEnv+"="+clock)
	cs := r.stdio(nil, nil)
	noCLI := func(what, msg string) {
		t.Helper()
		if strings.Contains(msg, "xmode sandbox") || strings.Contains(msg, "--") {
			t.Errorf("%s names a CLI command: %s", what, msg)
		}
	}

	// A step runs in the foreground: a stop without force is refused.
	made := ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo})
	id := str(made, "session", "id")
	done := make(chan map[string]any, 1)
	go func() {
		_, out := call(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "echo $$ > running.pid; exec sleep 60", "timeout_seconds": 120})
		done <- out
	}()
	pid := waitPids(t, filepath.Join(str(made, "session", "worktree"), "running.pid"))[0]
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	res, _ := call(t, cs, "sandbox_stop", map[string]any{"session": id})
	msg := text(res)
	if !res.IsError || !strings.Contains(msg, `end it with the session: sandbox_stop with force true and session "`+id+`"`) {
		t.Errorf("sandbox_stop while a step runs: %s", msg)
	}
	noCLI("sandbox_stop while a step runs", msg)
	ok(t, cs, "sandbox_stop", map[string]any{"session": id, "force": true})
	<-done

	// An expired sandbox.
	id = str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	if err := moveClock(clock, 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	res, _ = call(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "true"})
	msg = text(res)
	if !res.IsError || !strings.HasPrefix(msg, "refused: session "+id+" expired at ") ||
		!strings.HasSuffix(msg, `: extend it with sandbox_extend with session "`+id+`" and ttl "1h" or create a new one`) {
		t.Errorf("sandbox_exec of an expired sandbox: %s", msg)
	}
	noCLI("sandbox_exec of an expired sandbox", msg)
	ok(t, cs, "sandbox_extend", map[string]any{"session": id, "ttl": "1h"})
	ok(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "true"})
}
