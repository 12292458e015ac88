package ui

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// A change request made of a session an agent drove (no plan) leads with
// its review history and its checks — each command's latest run — apart
// from what explored on the way: a failed file edit, a first test run
// that failed, a server ended on purpose. Its export form names the
// repository the session was made from.
func TestChangeRequestLeadsWithReviewsAndChecks(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.session()
	if code := f.exec(s, "sh", "-c", "test -f ok"); code != 1 {
		t.Fatalf("the first test run: %d", code)
	}
	if _, err := f.svc.EditFile(ctx, s, sandbox.EditOptions{Path: "main.go", Old: "not there", New: "x"}); err == nil {
		t.Fatal("an edit of text that is not there passed")
	}
	f.exec(s, "sh", "-c", "touch ok")
	f.exec(s, "sh", "-c", "test -f ok")
	server := make(chan int, 1)
	go func() { server <- f.exec(s, "sh", "-c", "echo serving; exec sleep 60") }()
	waitFor(t, "the server step to run", 20*time.Second, func() bool {
		st, err := f.st.Step(ctx, s.RunID, 5)
		if err != nil {
			return false
		}
		out, err := os.ReadFile(filepath.Join(f.root, "runs", s.RunID, "steps", "0005-"+st.Name, "stdout.log"))
		return err == nil && strings.Contains(string(out), "serving")
	})
	if err := f.svc.KillStep(ctx, s, 5, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-server
	p := f.changeRequest(s, "a change", map[string]string{"main.go": "package main\n\nfunc main() { println(1) }\n"})
	if _, err := f.cs.Review(ctx, p, store.ChangeRejected, changes.ReviewOptions{Note: "needs a test"}); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, f.client(), f.base+"/crs/"+p.ID)
	if code != http.StatusOK {
		t.Fatalf("the change request's page: %d", code)
	}
	reviews, checks, diff := strings.Index(body, `id="reviews"`), strings.Index(body, `id="checks"`), strings.Index(body, `id="diff"`)
	if reviews < 0 || checks < 0 || !(reviews < checks && checks < diff) {
		t.Errorf("the page does not lead with its reviews, then its checks (at %d, %d; the diff at %d)", reviews, checks, diff)
	}
	box := body[checks : strings.Index(body[checks:], "</details>")+checks]
	if !strings.Contains(body[reviews:checks], "needs a test") {
		t.Errorf("the review history near the top does not have the review")
	}
	for _, want := range []string{"Checks: 2 of 2 passed", "no plan: each command", "3 exploratory steps, not counted",
		"a file step", "ran again later", "stopped on purpose (`sandbox kill`)"} {
		if !strings.Contains(box, want) {
			t.Errorf("the checks box does not say %q:\n%s", want, box)
		}
	}
	if !regexp.MustCompile(`id="export-repo"[^>]*value="` + regexp.QuoteMeta(f.repo) + `"`).MatchString(body) {
		t.Errorf("the export form is not prefilled with %s", f.repo)
	}
}

// Sessions the CLI and MCP clients made are on the runs page by default,
// an MCP client's with its title as its objective; a warm pool's runs,
// nobody's yet, only with all=1.
func TestRunsPageShowsSessions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cli := f.session()
	mcp, err := f.svc.Create(ctx, sandbox.CreateOptions{Repo: f.repo, Origin: store.OriginMCP, OriginClient: "claude-code 2.1", Title: "Fix the flaky test"})
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, f.client(), f.base+"/runs")
	if code != http.StatusOK {
		t.Fatal(code)
	}
	ids := runIDs(body)
	if len(ids) != 2 || ids[0] != mcp.RunID || ids[1] != cli.RunID {
		t.Errorf("the runs page lists %q, want the MCP session's run then the CLI's", ids)
	}
	row := body[strings.Index(body, mcp.RunID):]
	row = row[:strings.Index(row, "</tr>")]
	if !strings.Contains(row, "Fix the flaky test") || !strings.Contains(row, ">MCP<") {
		t.Errorf("the MCP session's row: %s", row)
	}
}

// An error page links back: to the thing an action or a page below it was
// about, else to the list the missing thing would be in.
func TestErrorPagesLinkBack(t *testing.T) {
	w := newWorld(t)
	c := w.client()
	back := regexp.MustCompile(`<a class="back" href="([^"]+)">`)
	for path, want := range map[string]string{
		"/runs/run_aaaaaaaa":                  "/runs",
		"/runs/" + w.sess.RunID + "/steps/99": "/runs/" + w.sess.RunID,
		"/crs/cr_aaaaaaaa":                    "/crs",
		"/crs/" + w.cr + "?file=x":            "/crs",
		"/sessions/sbx_aaaaaaaa":              "/sessions",
		"/machines/nope":                      "/machines",
		"/runs?status=pwned":                  "/runs",
		"/runs/" + w.sess.RunID + "/steps/x":  "/runs/" + w.sess.RunID,
		"/runs/run_1/steps/2":                 "/runs",
	} {
		code, body := get(t, c, w.base+path)
		m := back.FindStringSubmatch(body)
		if code < 400 || m == nil || m[1] != want {
			t.Errorf("%s: %d, back to %v; want %s", path, code, m, want)
		}
	}
	// An action that failed leads back to its item's page.
	body := w.postAs(c, "/crs/"+w.cr+"/export", map[string][]string{"csrf": {w.csrf}, "repo": {"/nonexistent/repo"}}, http.StatusBadRequest)
	if m := back.FindStringSubmatch(body); m == nil || m[1] != "/crs/"+w.cr {
		t.Errorf("a failed export leads back to %v, want its change request", m)
	}
}

// An error that names an input links to the field that gives it, in the
// UI's words — never a CLI flag the reviewer does not have.
func TestErrorNamesItsField(t *testing.T) {
	w := newWorld(t)
	c := w.client()
	body := w.postAs(c, "/crs/"+w.cr+"/export", map[string][]string{"csrf": {w.csrf}, "repo": {w.repo}, "branch": {"HEAD"}}, http.StatusBadRequest)
	link := regexp.MustCompile(`<a href="/crs/` + regexp.QuoteMeta(w.cr) + `#export-branch">the export&#39;s branch</a>`)
	if !link.MatchString(body) {
		t.Errorf("a refused branch name does not link to the branch field:\n%s", body)
	}
	if strings.Contains(body, "--branch") {
		t.Errorf("the UI's error names a CLI flag:\n%s", body)
	}
	if _, page := get(t, c, w.base+"/crs/"+w.cr); !strings.Contains(page, `id="export-branch"`) {
		t.Errorf("the change request page has no field export-branch to link to")
	}
}
