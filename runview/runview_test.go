package runview

import (
	"strings"
	"testing"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/store"
)

func step(seq int, name, status string, argv ...string) changes.StepEvidence {
	s := changes.StepEvidence{Seq: seq, Name: name, Status: status, Argv: argv}
	if status == "passed" {
		code := 0
		s.ExitCode = &code
	}
	return s
}

// What an MCP client's session leaves: failed file edits, a server it
// killed when done, a test run that failed then passed. The checks are
// each command's latest run; the rest explored on the way, each saying
// why.
func TestChecksWithoutAPlan(t *testing.T) {
	ev := &changes.Evidence{Steps: []changes.StepEvidence{
		step(1, "file-edit", "failed", "file-edit", "main.go"),
		step(2, "file-edit", "passed", "file-edit", "main.go"),
		step(3, "go-test", "failed", "go", "test", "./..."),
		step(4, "server", "killed", "sh", "-c", "serve"),
		step(5, "go-test", "passed", "go", "test", "./..."),
		step(6, "go-vet", "passed", "go", "vet", "./..."),
		step(7, "tail", "running", "tail", "-f", "log"),
		step(8, "segv", "killed", "./crash"),
	}}
	ev.Steps[1].File = []byte(`{"op":"edit"}`)
	c := SummarizeChecks(nil, ev, map[int]string{4: store.StoppedByKill})
	var checks []string
	for _, ch := range c.Checks {
		checks = append(checks, ch.Name)
	}
	if c.FromPlan || strings.Join(checks, " ") != "go-test go-vet segv" || c.Passed != 2 || c.Failed != 1 || c.Missing != 0 {
		t.Errorf("checks %q: %+v", checks, c)
	}
	want := map[int]string{1: "a file step", 2: "a file step", 3: "ran again later", 4: "stopped on purpose (`sandbox kill`)",
		7: "still running when the change request was made"}
	if len(c.Explored) != len(want) {
		t.Errorf("explored: %+v", c.Explored)
	}
	for _, e := range c.Explored {
		if want[e.Step.Seq] != e.Why {
			t.Errorf("step %d explored because %q, want %q", e.Step.Seq, e.Why, want[e.Step.Seq])
		}
	}
}

// With a plan, its steps are the checks, in its order: the latest run of
// each, a step that never ran missing; anything else explored.
func TestChecksOfAPlan(t *testing.T) {
	plan := []PlanStep{{Name: "agent-codex", Agent: "codex"}, {Name: "test"}, {Name: "lint", AllowFailure: true}}
	ev := &changes.Evidence{Steps: []changes.StepEvidence{
		step(1, "agent-codex", "passed", "codex", "exec"),
		step(2, "test", "failed", "make", "test"),
		step(3, "test", "passed", "make", "test"),
		step(4, "debug", "failed", "cat", "x"),
	}}
	c := SummarizeChecks(plan, ev, nil)
	if !c.FromPlan || len(c.Checks) != 3 || c.Checks[1].Step.Seq != 3 || c.Checks[2].Step != nil || !c.Checks[2].AllowFailure ||
		c.Passed != 2 || c.Failed != 0 || c.Missing != 1 {
		t.Errorf("checks: %+v", c)
	}
	if len(c.Explored) != 2 || c.Explored[0].Why != "ran again later" || c.Explored[1].Why != "not a step of the plan" {
		t.Errorf("explored: %+v", c.Explored)
	}
}
