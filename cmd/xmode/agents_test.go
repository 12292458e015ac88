package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
	"github.com/xmode/xmode/internal/testenv"
)

// agentCLI finds a real agent CLI: $XMODE_CODEX_BIN / $XMODE_CLAUDE_BIN,
// else on PATH (.ci/run installs both from npm).
func agentCLI(t *testing.T, name, variable string) string {
	t.Helper()
	if p := os.Getenv(variable); p != "" {
		return p
	}
	if name == "codex" {
		// Scripts have the stand-in on PATH under that name: the real one
		// is XMODE_TEST_CODEX_BIN, as for the cloud tests.
		return codexcloudtest.RealCodex(t)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.Skip(t, "the %s CLI is not installed (npm install @openai/codex @anthropic-ai/claude-code, or set %s)", name, variable)
	}
	return p
}

// signedOut is xmode's environment with no account anywhere: an empty
// HOME and no API key.
func signedOut(t *testing.T, c *exec.Cmd, more ...string) {
	env := slices.DeleteFunc(slices.Clone(c.Env), func(kv string) bool {
		for _, k := range []string{"HOME=", "OPENAI_API_KEY=", "CODEX_API_KEY=", "ANTHROPIC_API_KEY=", "CLAUDE_CODE_OAUTH_TOKEN="} {
			if strings.HasPrefix(kv, k) {
				return true
			}
		}
		return false
	})
	c.Env = append(append(env, "HOME="+t.TempDir()), more...)
}

type run struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func runCmd(t *testing.T, c *exec.Cmd) run {
	t.Helper()
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	r := run{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

func readStepResult(t *testing.T, root, step string) (res struct {
	Argv     []string `json:"argv"`
	ExitCode int      `json:"exit_code"`
	Agent    *struct {
		Error  string `json:"error"`
		Events int    `json:"events"`
	} `json:"agent"`
}, dir string) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "steps", "*-"+step))
	if len(m) != 1 {
		t.Fatalf("step %s: found %q", step, m)
	}
	b, err := os.ReadFile(filepath.Join(m[0], "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return res, m[0]
}

// The real codex CLI (@openai/codex 0.171), not signed in: `codex login
// status` answers at once, and xmode reports it as the step's failure
// instead of starting `codex exec`, which would wait for the network for
// ever. With a key passed in, the login check is skipped and codex accepts
// the argv xmode builds (it starts its thread).
func TestCodexNotSignedIn(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "codex", "XMODE_CODEX_BIN")
	root, id := newSession(t)
	c := xmode(t, root, "agent", "run", id, "--agent", "codex", "--prompt", "say hi")
	signedOut(t, c, "XMODE_CODEX_BIN="+bin)
	r := runCmd(t, c)
	if r.code != 1 || !strings.Contains(r.stderr, "codex is not signed in") || !strings.Contains(r.stderr, "Not logged in") {
		t.Fatalf("codex not signed in: exit %d, want 1 naming the login\n%s", r.code, r.stderr)
	}
	if r.took > 20*time.Second {
		t.Fatalf("the not-signed-in failure took %s", r.took)
	}
	res, _ := readStepResult(t, root, "agent-codex-login")
	if res.ExitCode != 1 || !slices.Equal(res.Argv, []string{bin, "login", "status"}) {
		t.Fatalf("login step: %+v", res)
	}
	if m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "steps", "*-agent-codex")); len(m) != 0 {
		t.Fatalf("codex exec ran without a login: %q", m)
	}

	// A key passed by name: no login check; codex takes the argv (-C, --json,
	// -s, -m, -) and starts; without a reachable backend it is ended by
	// --timeout (or, with a network, refused by it at once).
	const key = "sk-proj-FAKEKEYPLANTED0123456789"
	c = xmode(t, root, "agent", "run", id, "--agent", "codex", "--prompt", "say hi", "--model", "gpt-5-codex", "--timeout", "6s", "--env-pass", "OPENAI_API_KEY")
	signedOut(t, c, "XMODE_CODEX_BIN="+bin, "OPENAI_API_KEY="+key)
	r = runCmd(t, c)
	if r.code != 124 && r.code != 1 {
		t.Fatalf("codex with a fake key: exit %d\n%s", r.code, r.stderr)
	}
	res, dir := readStepResult(t, root, "agent-codex")
	events, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	stderr, _ := os.ReadFile(filepath.Join(dir, "stderr.log"))
	if !bytes.Contains(events, []byte(`"type":"thread.started"`)) || bytes.Contains(stderr, []byte("unexpected argument")) {
		t.Fatalf("codex did not take xmode's argv %q:\nevents: %s\nstderr: %s", res.Argv, events, stderr)
	}
	if res.Agent == nil || res.Agent.Error == "" {
		t.Fatalf("the failure is not in result.json: %+v", res.Agent)
	}
	if out, _ := exec.Command("grep", "-r", "-l", key, root).Output(); len(out) > 0 {
		t.Fatalf("the key is in %s", out)
	}
}

// The real claude CLI (@anthropic-ai/claude-code 2.1.x), not logged in:
// it takes xmode's argv and fails within seconds with "Not logged in",
// which becomes the step's failure: one line naming both fixes, as codex's
// does, and none of claude's stream-json on the terminal (it is in
// events.jsonl).
func TestClaudeNotLoggedIn(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "claude", "XMODE_CLAUDE_BIN")
	root, id := newSession(t)
	c := xmode(t, root, "agent", "run", id, "--agent", "claude", "--prompt", "say hi", "--model", "sonnet")
	signedOut(t, c, "XMODE_CLAUDE_BIN="+bin)
	r := runCmd(t, c)
	const want = `xmode: claude is not signed in where the session runs (claude: "Not logged in · Please run /login"): run ` +
		"`claude /login`" + ` there, or pass a key with --env-pass ANTHROPIC_API_KEY (XMODE_AGENT_ENV passes it by default when it is set)` + "\n"
	if r.code != 1 || r.stderr != want {
		t.Fatalf("claude not logged in: exit %d, stderr\n%s\nwant exit 1 and the one line\n%s", r.code, r.stderr, want)
	}
	if strings.Contains(r.stdout, `"type"`) || strings.Contains(r.stdout, "Not logged in") {
		t.Fatalf("claude's events reached the terminal:\n%s", r.stdout)
	}
	if r.took > 30*time.Second {
		t.Fatalf("the not-logged-in failure took %s", r.took)
	}
	res, dir := readStepResult(t, root, "agent-claude")
	stderr, _ := os.ReadFile(filepath.Join(dir, "stderr.log"))
	if res.Agent == nil || res.Agent.Error != "Not logged in · Please run /login" || bytes.Contains(stderr, []byte("unknown option")) {
		t.Fatalf("result: %+v\nstderr: %s", res.Agent, stderr)
	}
	events, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	if !bytes.Contains(events, []byte(`"permissionMode":"acceptEdits"`)) {
		t.Fatalf("claude's init event does not show the permission mode xmode asked for:\n%s", events)
	}
}

// A run whose agent step failed and changed nothing is failed, not in
// review: the real codex and claude CLIs not signed in, and a command agent
// whose script is missing, each end `failed` with no change request and a
// line saying why, in `xmode run`, `run show` and `run list` alike.
func TestRunAgentFailed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		agent string
		env   func(t *testing.T) []string
		why   string
		code  int
	}{
		{"codex", func(t *testing.T) []string {
			return []string{"XMODE_CODEX_BIN=" + agentCLI(t, "codex", "XMODE_CODEX_BIN")}
		}, "step agent-codex failed (exit 1): codex is not signed in where the session runs (`codex login status`: \"Not logged in\", exit 1): run `codex login` there, or pass a key with --env-pass OPENAI_API_KEY", 1},
		{"claude", func(t *testing.T) []string {
			return []string{"XMODE_CLAUDE_BIN=" + agentCLI(t, "claude", "XMODE_CLAUDE_BIN")}
		}, "step agent-claude failed (exit 1): claude is not signed in where the session runs (claude: \"Not logged in · Please run /login\"): run `claude /login` there, or pass a key with --env-pass ANTHROPIC_API_KEY", 1},
		{"command", func(t *testing.T) []string {
			return []string{"XMODE_AGENT_COMMAND_TEMPLATE=sh /nonexistent/xmode/examples/agent.sh {prompt_file}"}
			// dash, Debian's sh, exits 2; the run exits 1 (2 is xmode's own)
		}, "step agent-command failed (exit 2): the command agent failed: sh: 0: cannot open /nonexistent/xmode/examples/agent.sh", 1},
	}
	for _, tc := range cases {
		t.Run(tc.agent, func(t *testing.T) {
			t.Parallel()
			env := tc.env(t)
			dir := t.TempDir()
			repo, root := filepath.Join(dir, "repo"), filepath.Join(dir, "root")
			if err := makeRepo(repo); err != nil {
				t.Fatal(err)
			}
			c := xmode(t, root, "run", "--repo", repo, "--agent", tc.agent, "--objective", "say hi")
			signedOut(t, c, env...)
			r := runCmd(t, c)
			if r.code != tc.code || !strings.Contains(r.stdout, "\nstatus:   failed\n") || !strings.Contains(r.stdout, "\ncr:       -\n") ||
				!strings.Contains(r.stdout, "\nwhy:      "+tc.why) || !strings.Contains(r.stdout, "; the worktree has no change to review\n") {
				t.Fatalf("xmode run --agent %s: exit %d, want %d, status failed and why\n%s\n%s", tc.agent, r.code, tc.code, r.stdout, r.stderr)
			}
			c = xmode(t, root, "run", "list")
			if r := runCmd(t, c); r.code != 0 || !regexp.MustCompile(`(?m)^run_[a-z2-7]{8} +failed +`+strconv.Itoa(tc.code)+` +- `).MatchString(r.stdout) {
				t.Fatalf("run list:\n%s", r.stdout)
			}
			var runs []struct {
				ID, Status, Error string
				CR                string `json:"cr_id"`
			}
			out, err := xmode(t, root, "run", "list", "--json").Output()
			if err != nil || json.Unmarshal(out, &runs) != nil || len(runs) != 1 || runs[0].Status != "failed" || runs[0].CR != "" || !strings.HasPrefix(runs[0].Error, tc.why) {
				t.Fatalf("run list --json: %v\n%s", err, out)
			}
			if r := runCmd(t, xmode(t, root, "run", "show", runs[0].ID)); !strings.Contains(r.stdout, "\nWhy:             "+tc.why) {
				t.Fatalf("run show:\n%s", r.stdout)
			}
		})
	}
}

// Ctrl-C during `xmode run` ends the running step (its evidence kept),
// stops the session and records the run as failed; exit 130.
func TestRunInterrupt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	c := xmode(t, root, "run", "--repo", repo, "--agent", "command", "--objective", "wait", "--json")
	c.Env = append(c.Env, "XMODE_AGENT_COMMAND_TEMPLATE=sh -c 'echo started > started.txt; sleep 300 & wait'")
	var stdout bytes.Buffer
	c.Stdout = &stdout
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree", "started.txt")); len(m) == 1 {
			break
		}
		if time.Now().After(deadline) {
			c.Process.Kill()
			t.Fatal("the agent step never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	c.Process.Signal(syscall.SIGINT)
	err := c.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("xmode run after Ctrl-C: %v, want exit 130\n%s", err, stdout.String())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Ctrl-C took %s", took)
	}
	var res struct {
		RunID  string `json:"id"`
		Status string
		Steps  []struct{ Step, Status string }
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.Status != "failed" || len(res.Steps) != 1 {
		t.Fatalf("result: %+v %v\n%s", res, err, stdout.String())
	}
	if m, _ := filepath.Glob(filepath.Join(root, "runs", res.RunID, "worktree")); len(m) != 0 {
		t.Fatal("the session's worktree is still there: the session was not stopped")
	}
	step, _ := readStepResult(t, root, "agent-command")
	if step.ExitCode == 0 {
		t.Fatalf("the interrupted step: %+v", step)
	}
	out, err := xmode(t, root, "run", "show", res.RunID, "--json").Output()
	if err != nil || !bytes.Contains(out, []byte(`"status": "failed"`)) || !bytes.Contains(out, []byte(`"status": "destroyed"`)) {
		t.Fatalf("run show: %v\n%s", err, out)
	}
}
