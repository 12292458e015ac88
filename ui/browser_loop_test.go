package ui

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/loop"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// The loop in a browser: two attempts side by side on the compare page
// (their checks, evidence and the diff between them); a comment on a line
// of one attempt's diff, made by clicking the line's number (a form under
// the line, from the page's one script), sent with a request for changes
// and kept as the reviewer wrote it — markup and all, shown inert; then
// the agent's next version: the page lists the versions, marks the comment
// addressed and shows the interdiff.
func TestBrowserAttemptsAndComments(t *testing.T) {
	b := newBrowser(t)
	agent, err := filepath.Abs(filepath.Join("..", "examples", "agent.sh"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, map[string]string{"XMODE_AGENT_COMMAND_TEMPLATE": "sh " + agent + " {prompt_file}"})
	plan := filepath.Join(f.dir, "plan.yaml")
	write(t, plan, "steps:\n  - name: implement\n    agent: command\n    prompt: \"{objective}\"\n  - name: notes\n    run: [test, -s, AGENT_NOTES.md]\n")
	l := &loop.Loop{Svc: f.svc, Plans: &plans.Runner{Svc: f.svc, Agents: &agents.Runner{Svc: f.svc}}, Changes: f.cs}
	ctx := context.Background()
	res, err := l.Run(ctx, loop.Options{Create: sandbox.CreateOptions{Repo: f.repo}, Objective: "Write the notes", PlanFile: plan, Attempts: 2})
	if err != nil || len(res.Ranking) != 2 {
		t.Fatalf("two attempts: %+v %v", res, err)
	}
	cr := res.Ranking[0].CR

	b.do("log in", chromedp.Navigate(f.base+"/?token="+f.srv.Token()), chromedp.WaitVisible(`table.runs`))
	b.do("open the run of attempts", chromedp.Navigate(f.base+"/runs/"+res.RunID), chromedp.WaitVisible(`table.attempts`))
	b.do("compare its attempts", chromedp.Click(`a[href="/runs/`+res.RunID+`/compare"]`), chromedp.WaitVisible(`table.compare`))
	text := eval[string](b, "document.body.innerText")
	for _, want := range []string{"ATTEMPT 1 · RANK 1", "ATTEMPT 2 · RANK 2", "2/2 required", "2 of 2 steps passed",
		"Where attempt 1 and attempt 2 differ", "attempt 2, line 2"} {
		if !strings.Contains(text, want) {
			t.Errorf("the compare page does not say %q:\n%s", want, text)
		}
	}

	// A comment on line 1 of attempt 1's diff, by clicking its number.
	const hostile = `<img src=x onerror="alert(9)"> keep it \u202e`
	b.do("open attempt 1's change request", chromedp.Navigate(f.base+"/crs/"+cr), chromedp.WaitVisible(`button.cl[data-line="1"]`))
	b.do("click line 1", chromedp.Click(`button.cl[data-side="new"][data-line="1"]`), chromedp.WaitVisible(`tr.cform textarea`))
	b.do("write the comment", chromedp.SendKeys(`tr.cform textarea`, hostile), chromedp.Click(`tr.cform button[type="submit"]`),
		chromedp.WaitVisible(`#pending li`))
	if got := eval[string](b, `document.querySelector('#pending li').textContent`); got != "AGENT_NOTES.md:1 "+hostile {
		t.Errorf("the pending comment: %q", got)
	}
	b.do("request changes", chromedp.SendKeys(`#note`, "one thing"), chromedp.Click(`button[value="request-changes"]`), chromedp.WaitVisible(`p.flash`))
	c, err := f.st.GetChange(ctx, cr)
	if err != nil || c.Status != store.ChangeChangesRequested || len(c.Reviews) != 1 || len(c.Reviews[0].Comments) != 1 {
		t.Fatalf("the store after the review: %+v %v", c, err)
	}
	if got := c.Reviews[0].Comments[0]; got.Path != "AGENT_NOTES.md" || got.Side != store.SideNew || got.Line != 1 || got.Version != 1 || got.Text != hostile {
		t.Fatalf("the comment as stored: %+v", got)
	}
	if text := eval[string](b, "document.body.innerText"); !strings.Contains(text, `<img src=x onerror="alert(9)">`) {
		t.Errorf("the comment is not on the page as text")
	}

	// The agent answers: version 2; the comment is addressed.
	if _, err := l.Continue(ctx, loop.ContinueOptions{Run: res.RunID}); err != nil {
		t.Fatal(err)
	}
	b.do("reload", chromedp.Navigate(f.base+"/crs/"+cr), chromedp.WaitVisible(`#versions`))
	text = eval[string](b, "document.body.innerText")
	for _, want := range []string{"version 2 of 2", "addressed in v2", "interdiff v1 → v2"} {
		if !strings.Contains(text, want) {
			t.Errorf("the change request page does not say %q", want)
		}
	}
	b.do("open the interdiff", chromedp.Click(`a[href="/crs/`+cr+`?from=1&to=2#diff"]`), chromedp.WaitVisible(`table.diff`))
	text = eval[string](b, "document.body.innerText")
	if !strings.Contains(text, "Interdiff: v1 → v2") || !strings.Contains(text, `alert(9)`) {
		t.Errorf("the interdiff page:\n%s", text)
	}
	if n := eval[int](b, `document.querySelectorAll('button.cl').length`); n != 0 {
		t.Errorf("the interdiff's lines take comments (%d buttons)", n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 || len(b.exceptions) > 0 {
		t.Errorf("dialogs %q, exceptions %q", b.dialogs, b.exceptions)
	}
	for _, u := range b.requests {
		if !strings.HasPrefix(u, f.base+"/") {
			t.Errorf("a request left for another origin: %s", u)
		}
	}
}
