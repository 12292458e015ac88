// Package runview is the read model of runs and change requests: what a
// run, its steps and a change request's checks are as a person reviewing
// them sees them, in one place for every front end (`xmode ui`; `run show`
// takes the status rule from here). It reads the store, the plan a run
// recorded and a change request's evidence; it writes nothing.
package runview

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/store"
)

// NoChange is why a run ends no-change, as `xmode run`, `run show` and the
// UI say it.
const NoChange = "every step passed, and the worktree has no change against its base commit: there is nothing to review"

// Step is a step as a reviewer sees it, at a moment.
type Step struct {
	store.StepRow
	// Live: it still runs (store.StepRow.Live).
	Live bool
	// Class is how it ended, as a word a page styles: pass, fail, run,
	// lost.
	Class string
	// Exit says how it ended: "exit 0", "exit 1 (timeout)", "running",
	// "lost", "its xmode is gone".
	Exit string
	// Duration: to its end, or to the moment for a step that runs.
	Duration time.Duration
	// Command is its argv, joined by spaces.
	Command string
}

// ViewStep is row as it is at now.
func ViewStep(row store.StepRow, now time.Time) Step {
	v := Step{StepRow: row, Live: row.Live(now), Class: stepClass(row), Exit: stepExit(row), Command: strings.Join(row.Argv, " ")}
	if !v.Live && row.State == store.StateRunning {
		v.Class, v.Exit = "lost", "its xmode is gone"
	}
	end := now
	if row.FinishedAt != nil {
		end = *row.FinishedAt
	}
	v.Duration = max(0, end.Sub(row.StartedAt))
	return v
}

// stepClass is how a step ended, as a class: pass, fail, run, lost.
func stepClass(s store.StepRow) string {
	switch {
	case s.State == store.StateRunning:
		return "run"
	case s.State == store.StateLost:
		return "lost"
	case s.ExitCode != nil && *s.ExitCode == 0:
		return "pass"
	}
	return "fail"
}

// stepExit says how a step ended: "exit 0", "exit 1 (timeout)",
// "running", "lost".
func stepExit(s store.StepRow) string {
	switch {
	case s.ExitCode != nil:
		t := fmt.Sprintf("exit %d", *s.ExitCode)
		var why []string
		if s.TimedOut {
			why = append(why, "timeout")
		}
		if s.OOMKilled {
			why = append(why, "out of memory")
		}
		if s.Signal != "" {
			why = append(why, s.Signal)
		}
		if s.StoppedBy != "" {
			why = append(why, "stopped")
		}
		if len(why) > 0 {
			t += " (" + strings.Join(why, ", ") + ")"
		}
		return t
	case s.State == store.StateLost:
		return store.StateLost
	}
	return store.StateRunning
}

// PlanStep is a step of the plan a run recorded.
type PlanStep struct {
	Name         string
	Agent        string // the agent it runs ("" for a command)
	Prompt       string
	Run          []string // the command's argv
	AllowFailure bool
	Timeout      time.Duration
}

// Plan is the plan a run recorded (nil without one, or one that does not
// decode).
func Plan(r *store.LoopRun) []PlanStep {
	if r.Plan == "" {
		return nil
	}
	var p plans.Plan
	if json.Unmarshal([]byte(r.Plan), &p) != nil {
		return nil
	}
	out := make([]PlanStep, 0, len(p.Steps))
	for _, s := range p.Steps {
		out = append(out, PlanStep{Name: s.Name, Agent: s.Agent, Prompt: s.Prompt, Run: s.Run, AllowFailure: s.AllowFailure, Timeout: s.Timeout})
	}
	return out
}

// Run is a run as its page shows it.
type Run struct {
	*store.LoopRun
	// Status as users see it (the store's: its change request's review
	// shows through), and why it failed or changed nothing.
	Status, Why string
	// Title: the objective, else what its first session was for (an MCP
	// client's title), else "".
	Title    string
	Plan     []PlanStep
	Sessions []*store.Session
	Steps    []Step
	CRs      []*store.Change
	// Ranking is a run of attempts' attempts, best first (Rank); Versions
	// its change request's versions (none without one).
	Ranking  []Attempt
	Versions []store.ChangeVersion
}

// Members are a run's sessions and steps, and those of the forks of its
// change request's tree that `run continue` made (its continuations: the
// later versions' sandboxes), in that order.
func Members(ctx context.Context, st *store.Store, runID string) ([]*store.Session, []store.StepRow, error) {
	conts, err := st.Continuations(ctx, runID)
	if err != nil {
		return nil, nil, err
	}
	ids := []string{runID}
	for _, c := range conts {
		ids = append(ids, c.ID)
	}
	var sessions []*store.Session
	var steps []store.StepRow
	for _, id := range ids {
		ss, err := st.RunSessions(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		rows, err := st.Steps(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		sessions, steps = append(sessions, ss...), append(steps, rows...)
	}
	return sessions, steps, nil
}

// LoadRun reads run id (an exact, well-formed ID, else not found) with its
// sessions, steps (as at now) and change requests.
func LoadRun(ctx context.Context, st *store.Store, id string, now time.Time) (*Run, error) {
	if !fsguard.ValidID("run_", id) {
		return nil, fail.NotFoundf("no such run: run IDs look like run_7k2m9q4x")
	}
	lr, err := st.ResolveRun(ctx, id)
	if err != nil {
		return nil, err
	}
	if lr.ID != id {
		return nil, fail.NotFoundf("no run %s", id)
	}
	r := &Run{LoopRun: lr, Title: lr.Objective, Plan: Plan(lr)}
	r.Status = lr.Status
	switch r.Status {
	case store.RunNoChange:
		r.Why = NoChange
	case store.RunFailed:
		r.Why = lr.Error
	}
	sessions, rows, err := Members(ctx, st, lr.ID)
	if err != nil {
		return nil, err
	}
	r.Sessions = sessions
	if r.Title == "" {
		for _, s := range r.Sessions {
			if s.Title != "" {
				r.Title = s.Title
				break
			}
		}
	}
	for _, row := range rows {
		r.Steps = append(r.Steps, ViewStep(row, now))
	}
	if r.CRs, err = st.ListChanges(ctx, store.ChangeFilter{RunID: lr.ID}); err != nil {
		return nil, err
	}
	if lr.Attempts > 0 {
		if r.Ranking, err = Rank(ctx, st, lr.ID); err != nil {
			return nil, err
		}
	}
	if lr.CR != "" {
		if r.Versions, err = st.Versions(ctx, lr.CR); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Runs is one page of the runs list (store.RunsPage), each with its title.
func Runs(ctx context.Context, st *store.Store, q store.RunQuery) ([]*RunItem, *store.RunCursor, error) {
	page, next, err := st.RunsPage(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	out := make([]*RunItem, len(page))
	for i, r := range page {
		out[i] = &RunItem{RunSummary: r, Title: cmp.Or(r.Objective, r.SessionTitle)}
	}
	return out, next, nil
}

// RunItem is a run in the runs list.
type RunItem struct {
	*store.RunSummary
	// Title: the objective of a run of the loop, else what its first
	// session was made for (an MCP client's title).
	Title string
}
