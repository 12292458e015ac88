package runview

import (
	"context"
	"strings"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/store"
)

// Checks is a change request's evidence as a reviewer reads it first: the
// checks — what says whether the change works — apart from the steps that
// explored on the way, which do not count for or against it.
//
// With a plan, the checks are its steps: each plan step's latest run (a
// step the plan names that never ran is missing). Without one (a session
// an MCP client or the CLI drove), each command's latest run is a check.
// Exploratory, either way: file steps (file_read, file_edit… of an MCP
// client: a failed edit is an attempt, not a check), steps stopped on
// purpose (`sandbox kill`, `sandbox stop`: a server ended when it was no
// longer needed), steps still running (a background server), and the
// earlier runs of a check that ran again.
type Checks struct {
	// FromPlan: the checks are the run's plan's steps.
	FromPlan bool
	Checks   []Check
	Explored []Explored
	// Passed, Failed and Missing count the checks.
	Passed, Failed, Missing int
}

// Check is one check and its latest run (nil: it never ran).
type Check struct {
	Name string
	Step *changes.StepEvidence
	// AllowFailure: the plan lets it fail.
	AllowFailure bool
}

// Passed reports a check whose latest run passed.
func (c Check) Passed() bool { return c.Step != nil && c.Step.Passed() }

// Explored is a step that is not a check, and why.
type Explored struct {
	Step changes.StepEvidence
	Why  string
}

// LoadChecks summarises ev, a change request's evidence.json, against its
// run's plan and what the store says stopped each step.
func LoadChecks(ctx context.Context, st *store.Store, runID string, ev *changes.Evidence) (*Checks, error) {
	var plan []PlanStep
	if r, err := st.ResolveRun(ctx, runID); err == nil && r.ID == runID {
		plan = Plan(r)
	}
	rows, err := st.Steps(ctx, runID)
	if err != nil {
		return nil, err
	}
	stoppedBy := map[int]string{}
	for _, r := range rows {
		if r.StoppedBy != "" {
			stoppedBy[r.Seq] = r.StoppedBy
		}
	}
	return SummarizeChecks(plan, ev, stoppedBy), nil
}

// SummarizeChecks reads ev (a change request's evidence.json) against plan
// (the run's plan; nil without one) and stoppedBy (what stopped a step on
// purpose, by its number: store.StepRow.StoppedBy).
func SummarizeChecks(plan []PlanStep, ev *changes.Evidence, stoppedBy map[int]string) *Checks {
	c := &Checks{FromPlan: len(plan) > 0}
	if ev == nil {
		return c
	}
	steps := ev.Steps
	latest := map[string]int{} // a check's key → its latest step's index
	why := make([]string, len(steps))
	key := func(s changes.StepEvidence) string {
		if c.FromPlan {
			return s.Name
		}
		return strings.Join(s.Argv, "\x00")
	}
	inPlan := map[string]bool{}
	for _, p := range plan {
		inPlan[p.Name] = true
	}
	for i, s := range steps {
		switch {
		case fileStep(s):
			why[i] = "a file step"
		case s.Status == changes.EvidenceRunning:
			why[i] = "still running when the change request was made"
		case stoppedBy[s.Seq] != "":
			why[i] = "stopped on purpose (`" + stoppedBy[s.Seq] + "`)"
		case c.FromPlan && !inPlan[s.Name]:
			why[i] = "not a step of the plan"
		default:
			latest[key(s)] = i
		}
	}
	for i, s := range steps {
		if why[i] == "" && latest[key(s)] != i {
			why[i] = "ran again later"
		}
	}
	if c.FromPlan {
		for _, p := range plan {
			ch := Check{Name: p.Name, AllowFailure: p.AllowFailure}
			if i, ok := latest[p.Name]; ok {
				ch.Step = &steps[i]
			}
			c.add(ch)
		}
	} else {
		for i, s := range steps {
			if why[i] == "" {
				c.add(Check{Name: s.Name, Step: &steps[i]})
			}
		}
	}
	for i, s := range steps {
		if why[i] != "" {
			c.Explored = append(c.Explored, Explored{Step: s, Why: why[i]})
		}
	}
	return c
}

func (c *Checks) add(ch Check) {
	switch {
	case ch.Step == nil:
		c.Missing++
	case ch.Passed():
		c.Passed++
	default:
		c.Failed++
	}
	c.Checks = append(c.Checks, ch)
}

// fileStep reports a step of the file tools: no process ran, its
// result.json holds the file's outcome, or it is named and run as one
// (file-edit PATH) and failed before it had one.
func fileStep(s changes.StepEvidence) bool {
	return len(s.File) > 0 || strings.HasPrefix(s.Name, "file-") && len(s.Argv) > 0 && s.Argv[0] == s.Name
}
