package ui

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/pool"
	"github.com/xmode/xmode/store"
)

// get fetches a page with a logged-in client and returns its status and body.
func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

var runLinkRE = regexp.MustCompile(`<td class="mono"><a href="/runs/(run_[a-z0-9]+)">`)

// runIDs are the runs a runs page lists, in its order.
func runIDs(body string) []string {
	var ids []string
	for _, m := range runLinkRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// The runs page: newest first, a page at a time with a link to the older
// ones, filtered by status and by user (both at once too); a status it
// does not know is a usage error.
func TestRunsPageFiltersAndPages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	type seeded struct{ id, user, status string }
	var runs []seeded // oldest first
	base := time.Now().Add(-2 * time.Hour)
	for i := range 60 {
		at := base.Add(time.Duration(i) * time.Minute)
		user := []string{"alice", "bob"}[i%2]
		ns := store.NewSession{NewRun: true, Loop: &store.NewLoop{Objective: fmt.Sprintf("objective %d", i)},
			Session: store.Session{ID: store.NewSessionID(), RunID: store.NewRunID(), User: user, RunnerMode: "local_worktree",
				Engine: "host", CreatedAt: at, ExpiresAt: at.Add(time.Hour)}}
		ns.WorktreePath = f.root + "/runs/" + ns.RunID + "/worktree"
		if err := f.st.CreateSession(ctx, ns); err != nil {
			t.Fatal(err)
		}
		status := []string{store.RunReview, store.RunFailed, store.RunNoChange}[i%3]
		if err := f.st.FinishLoopRun(ctx, ns.RunID, store.LoopEnd{Status: status, ExitCode: i % 2, Finished: at.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, seeded{ns.RunID, user, status})
	}
	newest := func(keep func(seeded) bool) []string {
		var ids []string
		for _, r := range slices.Backward(runs) {
			if keep(r) {
				ids = append(ids, r.id)
			}
		}
		return ids
	}
	all := newest(func(seeded) bool { return true })
	c := f.client()

	code, body := get(t, c, f.base+"/runs")
	if got := runIDs(body); code != http.StatusOK || !slices.Equal(got, all[:runsPerPage]) {
		t.Fatalf("the first page: %d, %d runs %q…, want the newest %d in order", code, len(got), got[:min(3, len(got))], runsPerPage)
	}
	older := regexp.MustCompile(`<a href="(/runs\?[^"]+)">older`).FindStringSubmatch(body)
	if older == nil {
		t.Fatal("the first page has no link to older runs")
	}
	code, body = get(t, c, f.base+strings.ReplaceAll(older[1], "&amp;", "&"))
	if got := runIDs(body); code != http.StatusOK || !slices.Equal(got, all[runsPerPage:]) {
		t.Errorf("the older page: %d, %q, want %q", code, got, all[runsPerPage:])
	}
	if strings.Contains(body, ">older") {
		t.Errorf("the last page links to older runs")
	}

	for _, q := range []struct {
		query string
		keep  func(seeded) bool
	}{
		{"status=failed", func(r seeded) bool { return r.status == store.RunFailed }},
		{"user=bob", func(r seeded) bool { return r.user == "bob" }},
		{"status=no-change&user=alice", func(r seeded) bool { return r.status == store.RunNoChange && r.user == "alice" }},
	} {
		want := newest(q.keep)
		code, body := get(t, c, f.base+"/runs?"+q.query)
		if got := runIDs(body); code != http.StatusOK || !slices.Equal(got, want[:min(len(want), runsPerPage)]) {
			t.Errorf("/runs?%s: %d, %d runs, want %d", q.query, code, len(got), len(want))
		}
	}
	if code, body := get(t, c, f.base+"/runs?status=pwned"); code != http.StatusBadRequest || !strings.Contains(body, "use one of") {
		t.Errorf("an unknown status: %d", code)
	}
}

// A run's page: its objective, its plan, a timeline with a bar for each
// step (name, exit code, duration), and each step's output with its
// colours.
func TestRunPage(t *testing.T) {
	f := newFixture(t)
	done := f.runLoop("Two steps", `steps:
  - name: greet
    run: printf '\033[32mhello in green\033[0m\n'
  - name: check
    run: test -f main.go
`)
	res := <-done
	if res == nil {
		t.Fatal("the run did not finish")
	}
	runs, _, err := f.st.RunsPage(context.Background(), store.RunQuery{})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs: %v %v", runs, err)
	}
	code, body := get(t, f.client(), f.base+"/runs/"+runs[0].ID)
	if code != http.StatusOK {
		t.Fatalf("the run page: %d", code)
	}
	for _, want := range []string{
		"<h2>Plan</h2>", "<strong><bdi>greet</bdi></strong>", "<strong><bdi>check</bdi></strong>",
		`<svg class="timeline"`, `<span class="f2">hello in green</span>`, `id="step-1"`, `id="step-2"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the run page does not have %s", want)
		}
	}
	tl := body[strings.Index(body, `<svg class="timeline"`):]
	tl = tl[:strings.Index(tl, "</svg>")]
	if n := strings.Count(tl, "<rect "); n != 2 {
		t.Errorf("the timeline draws %d bars, want 2", n)
	}
	if n := strings.Count(tl, "exit 0 · "); n != 2 {
		t.Errorf("the timeline says exit 0 · duration %d times, want 2:\n%s", n, tl)
	}
}

// The machines pages: a project machine warmed from the repository, with
// a pool of one ready entry, as `machine list` and `machine show` show it.
func TestMachinesPages(t *testing.T) {
	f := newFixture(t)
	f.cfg.ProjectMachines = true
	ctx := context.Background()
	if _, _, err := f.svc.Machines().Warm(ctx, "demo", f.repo, ""); err != nil {
		t.Fatalf("warm: %v", err)
	}
	if err := f.st.SetPoolSize(ctx, "demo", 1); err != nil {
		t.Fatal(err)
	}
	if rep, err := f.svc.Pools().Maintain(ctx, pool.Options{Project: "demo"}); err != nil || rep.Err != nil || rep.Filled != 1 {
		t.Fatalf("fill the pool: %+v %v", rep, err)
	}
	views, err := f.svc.Pools().Views(ctx, "demo")
	if err != nil || len(views) != 1 || len(views[0].Pool.Entries) != 1 {
		t.Fatalf("the machine's view: %+v %v", views, err)
	}
	c := f.client()
	code, body := get(t, c, f.base+"/machines")
	if code != http.StatusOK || !strings.Contains(body, `<a href="/machines/demo"><bdi>demo</bdi></a>`) || !strings.Contains(body, "1 ready of 1") {
		t.Errorf("the machines page: %d\n%s", code, body)
	}
	code, body = get(t, c, f.base+"/machines/demo")
	if code != http.StatusOK || !strings.Contains(body, views[0].Pool.Entries[0].SessionID) || !strings.Contains(body, views[0].HeadCommit[:12]) {
		t.Errorf("the machine page: %d\n%s", code, body)
	}
	if code, _ := get(t, c, f.base+"/machines/nope"); code != http.StatusNotFound {
		t.Errorf("a machine that is not there: %d", code)
	}
}
