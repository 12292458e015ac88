package runview

import (
	"cmp"
	"context"
	"slices"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/store"
)

// Attempt is one attempt of a run of attempts (`xmode run --attempts N`)
// as `run show`, `xmode run` and the UI's compare page rank it.
type Attempt struct {
	Attempt   int    `json:"attempt"`
	RunID     string `json:"id"`
	SessionID string `json:"session_id"`
	CR        string `json:"cr_id"`
	Status    string `json:"status"`
	ExitCode  *int   `json:"exit_code"`
	// Rank is its place, from 1 (Rank's order).
	Rank int `json:"rank"`
	// Required and Checks count its checks (Checks: the plan's steps,
	// each its latest run), the required ones (not allow_failure) and
	// all; the Passed fields, those that passed.
	RequiredPassed int `json:"required_passed"`
	Required       int `json:"required"`
	ChecksPassed   int `json:"checks_passed"`
	Checks         int `json:"checks"`
	// Files, Insertions and Deletions are its change request's newest
	// version's stat (0 without one).
	Files      int `json:"files"`
	Insertions int `json:"insertions"`
	Deletions  int `json:"deletions"`
}

// Rank lists the attempts of a run of attempts, best first: those with a
// change request to review, then the most required checks passed, then
// the most checks passed, then the smallest change (lines added and
// removed), then by number. The checks are counted as a change request's
// page counts them (SummarizeChecks), from the steps the store records of
// the attempt's run.
func Rank(ctx context.Context, st *store.Store, parent string) ([]Attempt, error) {
	runs, err := st.Attempts(ctx, parent)
	if err != nil {
		return nil, err
	}
	out := make([]Attempt, 0, len(runs))
	for _, r := range runs {
		a := Attempt{Attempt: r.Attempt, RunID: r.ID, CR: r.CR, Status: r.Status, ExitCode: r.ExitCode}
		sessions, err := st.RunSessions(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		if len(sessions) > 0 {
			a.SessionID = sessions[0].ID
		}
		if r.CR != "" {
			c, err := st.GetChange(ctx, r.CR)
			if err != nil {
				return nil, err
			}
			a.Files, a.Insertions, a.Deletions = c.Files, c.Insertions, c.Deletions
		}
		rows, err := st.Steps(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		ev := &changes.Evidence{}
		stoppedBy := map[int]string{}
		for _, row := range rows {
			ev.Steps = append(ev.Steps, changes.StepEvidence{Seq: row.Seq, Name: row.Name, Argv: row.Argv, Status: changes.StepStatus(row), ExitCode: row.ExitCode})
			if row.StoppedBy != "" {
				stoppedBy[row.Seq] = row.StoppedBy
			}
		}
		for _, c := range SummarizeChecks(Plan(r), ev, stoppedBy).Checks {
			a.Checks++
			if !c.AllowFailure {
				a.Required++
			}
			if c.Passed() {
				a.ChecksPassed++
				if !c.AllowFailure {
					a.RequiredPassed++
				}
			}
		}
		out = append(out, a)
	}
	slices.SortStableFunc(out, func(x, y Attempt) int {
		reviewable := func(a Attempt) int {
			if a.CR != "" && a.Status != store.RunFailed {
				return 0
			}
			return 1
		}
		return cmp.Or(
			cmp.Compare(reviewable(x), reviewable(y)),
			cmp.Compare(y.RequiredPassed, x.RequiredPassed),
			cmp.Compare(y.ChecksPassed, x.ChecksPassed),
			cmp.Compare(x.Insertions+x.Deletions, y.Insertions+y.Deletions),
			cmp.Compare(x.Attempt, y.Attempt),
		)
	})
	for i := range out {
		out[i].Rank = i + 1
	}
	return out, nil
}
