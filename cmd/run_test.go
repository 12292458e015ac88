package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writePlan writes a plan file and returns its path.
func writePlan(t *testing.T, plan string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(p, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// agent run's flags and prompt sources are checked before a step starts.
func TestAgentRunFlags(t *testing.T) {
	c := newTestCLI(t)
	id := c.session()
	big := filepath.Join(t.TempDir(), "big.md")
	if err := os.WriteFile(big, make([]byte, maxPromptBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{id, "--prompt", "x"}, "--agent is required"},
		{[]string{id, "--agent", "gpt", "--prompt", "x"}, `"gpt" is not an agent`},
		{[]string{id, "--agent", "command"}, "give the prompt once"},
		{[]string{id, "--agent", "command", "--prompt", "x", "-"}, "give the prompt once"},
		{[]string{id, "--agent", "command", "--prompt", "x", "--prompt-file", big}, "give the prompt once"},
		{[]string{id, "extra"}, "give a session, and - to read the prompt"},
		{[]string{id, "--agent", "command", "--prompt-file", filepath.Join(t.TempDir(), "none.md")}, "--prompt-file: open "},
		{[]string{id, "--agent", "command", "--prompt-file", big}, "larger than 4 MiB"},
	} {
		c.fails(2, tc.says, append([]string{"agent", "run"}, tc.args...)...)
	}
	if out := c.ok("sandbox", "logs", id, "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("refused agent runs left steps: %s", out)
	}
}

// agent run with the command agent: the prompt from standard input reaches
// the template's {prompt_file}; its output streams, or only the step's
// JSON with --json; its status is xmode's.
func TestAgentRunCommand(t *testing.T) {
	c := newTestCLI(t)
	id := c.session()
	c.env["XMODE_AGENT_COMMAND_TEMPLATE"] = "cat {prompt_file}"
	c.in = "make it so\n"
	if out := c.ok("agent", "run", id, "--agent", "command", "-"); !strings.Contains(out, "make it so") {
		t.Errorf("agent run: stdout %q, want the prompt the agent printed", out)
	}
	var res struct {
		Name     string `json:"name"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(c.ok("agent", "run", id, "--agent", "command", "--prompt", "again", "--json")), &res); err != nil {
		t.Fatalf("agent run --json: %v\n%s", err, c.stdout.String())
	}
	if res.Name != "agent-command" || res.ExitCode != 0 {
		t.Errorf("agent run --json: %+v", res)
	}
	c.env["XMODE_AGENT_COMMAND_TEMPLATE"] = "false"
	if code := c.run("agent", "run", id, "--agent", "command", "--prompt", "x"); code != 1 {
		t.Errorf("agent run of a failing agent: exit %d, want its 1: %s", code, c.stderr.String())
	}
}

// pipeline run: the plan's steps in order, the first failing required step
// stops it and gives its status, a table of outcomes on stdout (the JSON
// report with --json); a plan that is not there is a usage error.
func TestPipelineRun(t *testing.T) {
	c := newTestCLI(t)
	id := c.session()
	plan := writePlan(t, `steps:
  - name: ok
    run: [true]
  - name: flaky
    run: "exit 3"
    allow_failure: true
  - name: fails
    run: [sh, -c, "exit 6"]
  - name: after
    run: [true]
`)
	c.fails(2, "no plan: give -f FILE, or add xmode.yaml", "pipeline", "run", id)
	c.fails(2, "", "pipeline", "run", id, "-f", filepath.Join(t.TempDir(), "none.yaml"))
	c.fails(2, "", "pipeline", "run", id, "-f", plan, "--from", "nosuch")

	if code := c.run("pipeline", "run", id, "-f", plan); code != 6 {
		t.Fatalf("pipeline run: exit %d, want the failing step's 6: %s", code, c.stderr.String())
	}
	table := regexp.MustCompile(`^STEP +STATUS +EXIT +DURATION
ok +passed +0 +\S+
flaky +failed \(allowed\) +3 +\S+
fails +failed +6 +\S+
after +not run +- +-
$`)
	if !table.MatchString(c.stdout.String()) {
		t.Errorf("pipeline run's table:\n%s", c.stdout.String())
	}
	if !strings.Contains(c.stderr.String(), "==> fails\n") {
		t.Errorf("pipeline run's progress on stderr: %q", c.stderr.String())
	}

	if code := c.run("pipeline", "run", id, "-f", plan, "--from", "fails", "--keep-going", "--json"); code != 6 {
		t.Fatalf("pipeline run --keep-going: exit %d, want 6", code)
	}
	var rep struct {
		ExitCode int `json:"exit_code"`
		Steps    []struct {
			Step   string `json:"step"`
			Status string `json:"status"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(c.stdout.Bytes(), &rep); err != nil {
		t.Fatalf("pipeline run --json: %v\n%s", err, c.stdout.String())
	}
	var got []string
	for _, s := range rep.Steps {
		got = append(got, s.Step+":"+s.Status)
	}
	if rep.ExitCode != 6 || strings.Join(got, " ") != "ok:skipped flaky:skipped fails:failed after:passed" {
		t.Errorf("pipeline run --from fails --keep-going --json: exit %d, steps %v", rep.ExitCode, got)
	}
}

// xmode run: its summary (run, session, change request, status, plan) and
// the steps, then run list and run show of it, as text and JSON.
func TestRunLoopOutput(t *testing.T) {
	c := newTestCLI(t)
	c.fails(2, `unexpected argument "bogus"`, "run", "bogus")
	c.fails(2, "did you mean list?", "run", "lst")
	c.fails(2, "--objective is required", "run", "--repo", testRepo(t))

	plan := writePlan(t, "steps:\n  - name: write\n    run: echo notes > NOTES\n")
	out := c.ok("run", "--repo", testRepo(t), "--objective", "Write notes\nin a file", "-f", plan)
	summary := regexp.MustCompile(`^run: +(run_\w+)
session: +sbx_\w+ \(stopped\)
cr: +(cr_\w+)
status: +review
plan: +` + regexp.QuoteMeta(plan) + `

STEP +STATUS +EXIT +DURATION
write +passed +0 +\S+
$`)
	m := summary.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("xmode run:\n%s", out)
	}
	run, cr := m[1], m[2]

	if out := c.ok("run", "list", "-q"); out != run+"\n" {
		t.Errorf("run list -q: %q", out)
	}
	if !regexp.MustCompile(`^RUN +STATUS +EXIT +CR +CREATED +OBJECTIVE\n` + run + ` +review +0 +` + cr + ` +\d+s ago +Write notes\n$`).MatchString(c.ok("run", "list")) {
		t.Errorf("run list:\n%s", c.stdout.String())
	}
	out = c.ok("run", "show", run)
	for _, want := range []string{"Run:             " + run + "\n", "Objective:       Write notes\n                 in a file\n",
		"Status:          review\n", "Plan:            " + plan + ": write\n", "Change request:  " + cr + "\n", "0001-write "} {
		if !strings.Contains(out, want) {
			t.Errorf("run show has no %q:\n%s", want, out)
		}
	}
	var v struct {
		ID             string            `json:"id"`
		Plan           json.RawMessage   `json:"plan"`
		Sessions       []json.RawMessage `json:"sessions"`
		Steps          []json.RawMessage `json:"steps"`
		ChangeRequests []string          `json:"change_requests"`
	}
	if err := json.Unmarshal([]byte(c.ok("run", "show", run, "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.ID != run || len(v.Sessions) != 1 || len(v.Steps) != 1 || len(v.ChangeRequests) != 1 || v.ChangeRequests[0] != cr || !strings.Contains(string(v.Plan), `"write"`) {
		t.Errorf("run show --json: %+v", v)
	}
	c.fails(3, "", "run", "show", "run_zzzzzzzz")
}
