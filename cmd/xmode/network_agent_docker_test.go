package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// standInClaude is a stand-in for claude's CLI, committed to the test
// repository and run from the worktree (XMODE_CLAUDE_BIN): it reads its
// prompt, calls its model's API with its key as claude does (the X-Api-Key
// header, from ANTHROPIC_API_KEY), writes what its environment holds into
// the worktree (so that the change request shows what the sandbox had),
// and ends with claude's result event.
const standInClaude = `#!/bin/sh
cat >/dev/null
egressprobe get -H "X-Api-Key: $ANTHROPIC_API_KEY" https://api.anthropic.com/v1/messages || exit 1
echo "$ANTHROPIC_API_KEY" > key-seen.txt
{ env; tr '\000' '\n' < /proc/$$/environ; } | grep -i anthropic > environ-seen.txt
echo '{"type":"result","is_error":false,"result":"called the API"}'
`

// TestAgentKeyAtTheEdge: with --network allow, the claude agent's
// definition gives the sandbox its API host and its key as a credential
// added at the edge: the stand-in claude (in the sandbox) gets a
// placeholder, the test host named api.anthropic.com (resolved to a
// container of the test's) gets the key, and the key is nowhere in the
// sandbox, its evidence, the change request or the storage root. Both
// ways in: `xmode run --agent claude --network allow` (the agent's rules
// from the start) and `agent run` on a sandbox made without them (added
// as a network step before the agent's). `doctor` says where the key goes.
func TestAgentKeyAtTheEdge(t *testing.T) {
	t.Parallel()
	f := newNetFixture(t, "api.anthropic.com", "other.test")
	const secret = "sk-ant-test-5d1f0c9e7a2b4c68b3e1f0a9d7c5b2e4"
	script := filepath.Join(f.repo, "fake-claude")
	if err := os.WriteFile(script, []byte(standInClaude), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "fake-claude"}, {"commit", "-qm", "a stand-in claude"}} {
		if out, err := exec.Command("git", append([]string{"-C", f.repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	f.env = append(f.env, "ANTHROPIC_API_KEY="+secret, "XMODE_CLAUDE_BIN=/workspace/fake-claude",
		"XMODE_SANDBOX_EGRESS_CA="+dockertest.TestPKI(t).CAFile)

	if out := f.must("doctor", "--json"); !strings.Contains(out, `"agent keys"`) {
		t.Errorf("doctor --json has no agent keys line:\n%s", out)
	}
	if r := f.xmEnv([]string{"XMODE_SANDBOX_NETWORK=allow"}, "doctor"); !strings.Contains(r.stdout, "ANTHROPIC_API_KEY (claude, for api.anthropic.com): added at the edge") {
		t.Errorf("doctor does not say the key is added at the edge:\n%s", r.stdout)
	}

	// The loop: the agent's host and key are in the policy from the start.
	r := f.xm("run", "--repo", f.repo, "--objective", "call the API", "--agent", "claude", "--network", "allow", "--json", "--keep")
	if r.code != 0 {
		t.Fatalf("xmode run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var run struct {
		SessionID string `json:"session_id"`
		CR        string `json:"cr_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil || run.CR == "" {
		t.Fatalf("xmode run --json: %v\n%s", err, r.stdout)
	}
	var shown struct {
		Policy struct {
			Allow       []struct{ Rule, Source string }
			Credentials []struct{ Host, Header, From, Placeholder, Source string }
		} `json:"network_policy"`
	}
	if err := json.Unmarshal([]byte(f.must("sandbox", "show", run.SessionID, "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	creds := shown.Policy.Credentials
	if len(creds) != 1 || creds[0].Host != "api.anthropic.com" || creds[0].Header != "X-Api-Key" || creds[0].From != "ANTHROPIC_API_KEY" ||
		creds[0].Source != "agent claude" || !strings.HasPrefix(creds[0].Placeholder, "xmode-placeholder-") {
		t.Fatalf("the session's credentials: %+v", shown.Policy)
	}
	hits := f.up.Requests(t, "api.anthropic.com")
	if len(hits) != 1 || hits[0].Headers["X-Api-Key"] != secret || !hits[0].TLS {
		t.Fatalf("api.anthropic.com (the test's) saw %+v; want one HTTPS request with the key", hits)
	}
	patch := f.must("cr", "show", run.CR, "--patch")
	if !strings.Contains(patch, "+"+creds[0].Placeholder) || strings.Count(patch, "ANTHROPIC_API_KEY="+creds[0].Placeholder) != 2 {
		t.Errorf("the change request does not show the placeholder where the sandbox had the key (its variable, its process's environment):\n%s", patch)
	}
	// A request to another host carries the placeholder only.
	f.must("sandbox", "network", run.SessionID, "--allow", "other.test")
	f.must("sandbox", "exec", run.SessionID, "--", "sh", "-c", `egressprobe get -H "X-Api-Key: $ANTHROPIC_API_KEY" http://other.test/`)
	if hits := f.up.Requests(t, "other.test"); len(hits) != 1 || hits[0].Headers["X-Api-Key"] != creds[0].Placeholder {
		t.Fatalf("other.test saw %+v; want the placeholder", hits)
	}
	f.must("sandbox", "stop", run.SessionID)

	// agent run on a sandbox made without the agent's rules: a network
	// step adds them first.
	id := strings.TrimSpace(f.must("sandbox", "create", "--repo", f.repo, "-q", "--network", "allow"))
	t.Cleanup(func() { f.xm("sandbox", "stop", id) })
	if r := f.xm("agent", "run", id, "--agent", "claude", "--prompt", "call it"); r.code != 0 {
		t.Fatalf("agent run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var steps []struct {
		Seq  int    `json:"seq"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(f.must("sandbox", "logs", id, "--json")), &steps); err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Name != "agent-claude-network" || steps[1].Name != "agent-claude" {
		t.Fatalf("agent run on a sandbox without the agent's rules: steps %+v, want the network step, then the agent's", steps)
	}
	if hits := f.up.Requests(t, "api.anthropic.com"); len(hits) != 2 || hits[1].Headers["X-Api-Key"] != secret {
		t.Fatalf("api.anthropic.com saw %+v", hits)
	}
	f.must("sandbox", "stop", id)

	// The key is nowhere xmode keeps anything: evidence, logs, change
	// requests, the database and its WAL.
	found := 0
	filepath.WalkDir(f.root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		found++
		if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
			t.Errorf("the key is in %s", p)
		}
		return nil
	})
	if found < 10 {
		t.Fatalf("only %d files under the storage root: the search could not have found the key", found)
	}
}
