package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/gitcli/gittest"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/store"
)

// world is a fixture with one of everything the routes name: a run with a
// step, a change request, a session.
type world struct {
	*fixture
	sess *store.Session
	cr   string
}

func newWorld(t *testing.T) *world {
	f := newFixture(t)
	s := f.session()
	f.exec(s, "sh", "-c", "echo hello")
	p := f.changeRequest(s, "a change", map[string]string{"main.go": "package main\n\nfunc main() {}\n"})
	return &world{fixture: f, sess: s, cr: p.ID}
}

// fill puts the world's IDs into a route's pattern.
func (w *world) fill(route string) (method, path string) {
	method, path, _ = strings.Cut(route, " ")
	r := strings.NewReplacer("{run}", w.sess.RunID, "{seq}", "1", "{cr}", w.cr, "{session}", w.sess.ID, "{project}", "demo", "{port}", "8080")
	return method, r.Replace(path)
}

const wantCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

func checkHeaders(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	if got := resp.Header.Get("Content-Security-Policy"); got != wantCSP {
		t.Errorf("%s: Content-Security-Policy %q", what, got)
	}
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q", what, got)
	}
}

// Every route refuses a request without the token's cookie (or with a
// wrong one, or a wrong token), shows nothing of the data, and changes
// nothing; and every route the list names is one the server has.
func TestEveryRouteNeedsTheToken(t *testing.T) {
	w := newWorld(t)
	w.client() // a login, whose CSRF token the refused requests carry
	plain := &http.Client{Timeout: 10 * time.Second, Transport: localTransport(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, route := range Routes() {
		method, path := w.fill(route)
		req, _ := http.NewRequest(method, w.base+path, nil)
		if _, pattern := w.srv.mux.Handler(req); pattern != route && !(route == "GET /" && pattern == "GET /{$}") {
			t.Errorf("%s: the server's route is %q", route, pattern)
		}
		for _, c := range []struct {
			name   string
			cookie *http.Cookie
			query  string
		}{
			{"no cookie", nil, ""},
			{"a wrong cookie", &http.Cookie{Name: cookieName, Value: strings.Repeat("0", 64)}, ""},
			{"the CSRF token as the cookie", &http.Cookie{Name: cookieName, Value: w.csrf}, ""},
			{"a wrong token", nil, "?token=nope"},
			{"an empty token", nil, "?token="},
		} {
			var body io.Reader
			if method == http.MethodPost {
				body = strings.NewReader(url.Values{"csrf": {w.csrf}, "decision": {"approve"}, "ttl": {"1h"}, "repo": {w.repo}}.Encode())
			}
			req, _ := http.NewRequest(method, w.base+path+c.query, body)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", w.base)
			if c.cookie != nil {
				req.AddCookie(c.cookie)
			}
			resp, err := plain.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized && !(c.query != "" && method == http.MethodPost && resp.StatusCode == http.StatusMethodNotAllowed) {
				t.Errorf("%s with %s: %d, want 401", route, c.name, resp.StatusCode)
			}
			if strings.Contains(string(b), w.sess.ID) || strings.Contains(string(b), w.cr) || resp.Header.Get("Set-Cookie") != "" {
				t.Errorf("%s with %s: the answer shows data or logs in: %q", route, c.name, b)
			}
			checkHeaders(t, route+" with "+c.name, resp)
		}
	}
	// Nothing changed.
	c, err := w.st.GetChange(context.Background(), w.cr)
	if err != nil || c.Status != store.ChangeOpen || len(c.Reviews) != 0 {
		t.Fatalf("the change request after refused requests: %+v %v", c, err)
	}
	if s, _ := w.st.Get(context.Background(), w.sess.ID); s.Status != store.StatusOpen {
		t.Fatalf("the session after refused requests: %s", s.Status)
	}
	if _, err := os.Stat(filepath.Join(w.repo, ".git", "refs", "heads", "xmode")); err == nil {
		t.Fatal("a refused export made a branch")
	}
}

// The token in the URL becomes an HttpOnly, SameSite=Strict cookie, and
// the browser is sent to the same page without it; with the cookie, every
// page answers, with the security headers.
func TestTokenBecomesACookie(t *testing.T) {
	w := newWorld(t)
	plain := &http.Client{Transport: localTransport(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := plain.Get(w.base + "/crs/" + w.cr + "?view=split&token=" + w.srv.Token())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/crs/"+w.cr+"?view=split" {
		t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	sc := resp.Header.Get("Set-Cookie")
	if !contains2(sc, cookieName+"=", "HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=") || strings.Contains(sc, w.srv.Token()) || strings.Contains(sc, "Domain") {
		t.Fatalf("cookie: %q", sc)
	}
	c := w.client()
	for _, route := range Routes() {
		method, path := w.fill(route)
		if method != http.MethodGet || strings.HasSuffix(path, "/live") {
			continue
		}
		resp, err := c.Get(w.base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusOK
		if strings.Contains(path, "/machines/demo") || strings.HasPrefix(path, "/cloud/") || strings.Contains(path, "/ports/") {
			want = http.StatusNotFound // no such machine; the session has no cloud task, no published port
		}
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d: %s", path, resp.StatusCode, want, b)
		}
		checkHeaders(t, path, resp)
	}
}

// A request naming another host (DNS rebinding) is refused, cookie or not.
func TestOtherHostRefused(t *testing.T) {
	w := newWorld(t)
	c := w.client()
	req, _ := http.NewRequest("GET", w.base+"/runs", nil)
	req.Host = "attacker.example:80"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("another Host: %d", resp.StatusCode)
	}
}

// A POST needs the form's CSRF token and a same-origin Origin (or
// Referer); an action never answers GET.
func TestPostNeedsSameOriginAndCSRF(t *testing.T) {
	w := newWorld(t)
	c := noRedirect(w.client())
	post := func(form url.Values, headers map[string]string) int {
		req, _ := http.NewRequest("POST", w.base+"/crs/"+w.cr+"/review", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := url.Values{"csrf": {w.csrf}, "decision": {"approve"}, "note": {"ok"}}
	noCSRF := url.Values{"decision": {"approve"}}
	badCSRF := url.Values{"csrf": {"x" + w.csrf[1:]}, "decision": {"approve"}}
	for _, c := range []struct {
		name    string
		form    url.Values
		headers map[string]string
	}{
		{"no CSRF token", noCSRF, map[string]string{"Origin": w.base}},
		{"a wrong CSRF token", badCSRF, map[string]string{"Origin": w.base}},
		{"another origin", good, map[string]string{"Origin": "http://attacker.example"}},
		{"the null origin", good, map[string]string{"Origin": "null"}},
		{"no origin or referer", good, nil},
		{"another site's referer", good, map[string]string{"Referer": "http://attacker.example/x"}},
	} {
		if code := post(c.form, c.headers); code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", c.name, code)
		}
	}
	if ch, _ := w.st.GetChange(context.Background(), w.cr); ch.Status != store.ChangeOpen {
		t.Fatalf("a refused POST reviewed: %s", ch.Status)
	}
	resp, err := c.Get(w.base + "/crs/" + w.cr + "/review")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: %d", resp.StatusCode)
	}
	if code := post(good, map[string]string{"Referer": w.base + "/crs/" + w.cr}); code != http.StatusSeeOther {
		t.Fatalf("a same-origin POST with the token: %d", code)
	}
	ch, _ := w.st.GetChange(context.Background(), w.cr)
	if ch.Status != store.ChangeApproved || len(ch.Reviews) != 1 || ch.Reviews[0].Reviewer != "tester" || ch.Reviews[0].Note != "ok" {
		t.Fatalf("after approving: %+v", ch)
	}
}

// The review form's three decisions call the service `cr review` calls:
// request changes is a rejection whose note says which, and needs one.
func TestReviewDecisions(t *testing.T) {
	w := newWorld(t)
	c := noRedirect(w.client())
	post := func(path string, form url.Values) (int, string) {
		form.Set("csrf", w.csrf)
		req, _ := http.NewRequest("POST", w.base+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", w.base)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	path := "/crs/" + w.cr + "/review"
	if code, body := post(path, url.Values{"decision": {"request-changes"}}); code != http.StatusBadRequest || !strings.Contains(body, "needs a note") {
		t.Errorf("request changes without a note: %d %s", code, body)
	}
	if code, _ := post(path, url.Values{"decision": {"merge"}}); code != http.StatusBadRequest {
		t.Errorf("an unknown decision: %d", code)
	}
	if code, _ := post(path, url.Values{"decision": {"request-changes"}, "note": {"add a test"}}); code != http.StatusSeeOther {
		t.Errorf("request changes: %d", code)
	}
	if code, _ := post(path, url.Values{"decision": {"reject"}, "note": {"no"}}); code != http.StatusSeeOther {
		t.Errorf("reject: %d", code)
	}
	ch, _ := w.st.GetChange(context.Background(), w.cr)
	if ch.Status != store.ChangeRejected || len(ch.Reviews) != 2 || ch.Reviews[0].Decision != store.ChangeChangesRequested || ch.Reviews[0].Note != "add a test" || ch.Reviews[1].Note != "no" {
		t.Fatalf("reviews: %+v", ch.Reviews)
	}
	resp, err := c.Get(w.base + "/crs/" + w.cr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !contains2(string(b), "changes requested</span>", "add a test") {
		t.Errorf("the page does not show the request for changes")
	}

	// A package that fails verification cannot be approved, here as in
	// `cr review`.
	p, _ := w.cs.Open(context.Background(), w.cr)
	f, err := os.OpenFile(filepath.Join(p.Dir, "change.patch"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\n")
	f.Close()
	if code, body := post(path, url.Values{"decision": {"approve"}}); code == http.StatusSeeOther || !strings.Contains(body, "fails verification") {
		t.Errorf("approving a tampered package: %d %s", code, body)
	}
}

// Export makes the branch `cr export` makes; stop and extend do what
// `sandbox stop` and `sandbox extend` do.
func TestExportStopExtend(t *testing.T) {
	w := newWorld(t)
	c := noRedirect(w.client())
	post := func(path string, form url.Values) (int, string) {
		form.Set("csrf", w.csrf)
		req, _ := http.NewRequest("POST", w.base+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", w.base)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := post("/crs/"+w.cr+"/export", url.Values{"repo": {w.repo}, "branch": {"review/one"}}); code != http.StatusOK || !strings.Contains(body, "review/one") {
		t.Fatalf("export: %d %s", code, body)
	}
	if _, body := post("/crs/"+w.cr+"/export", url.Values{"repo": {w.repo}, "branch": {"review/two"}}); !strings.Contains(body, `id="export-warning"`) || !strings.Contains(body, "not reviewed yet") {
		t.Errorf("exporting an unreviewed change request does not warn: %s", body)
	}
	if got := gittest.Git(t, w.repo, "show", "review/one:main.go"); got != "package main\n\nfunc main() {}" {
		t.Errorf("the exported branch's main.go: %q", got)
	}
	if code, _ := post("/crs/"+w.cr+"/export", url.Values{"repo": {w.repo}, "branch": {"review/one"}}); code != http.StatusConflict {
		t.Errorf("exporting to a branch that exists: %d, want 409 (refused)", code)
	}

	before, _ := w.st.Get(context.Background(), w.sess.ID)
	if code, body := post("/sessions/"+w.sess.ID+"/extend", url.Values{"ttl": {"soon"}}); code != http.StatusBadRequest {
		t.Errorf("extend by a bad duration: %d %s", code, body)
	}
	if code, _ := post("/sessions/"+w.sess.ID+"/extend", url.Values{"ttl": {"3h"}}); code != http.StatusSeeOther {
		t.Errorf("extend: %d", code)
	}
	after, _ := w.st.Get(context.Background(), w.sess.ID)
	if !after.ExpiresAt.After(before.ExpiresAt) || time.Until(after.ExpiresAt) < 2*time.Hour {
		t.Errorf("extend: expiry %v → %v", before.ExpiresAt, after.ExpiresAt)
	}
	if code, _ := post("/sessions/"+w.sess.ID+"/stop", url.Values{}); code != http.StatusSeeOther {
		t.Errorf("stop: %d", code)
	}
	if s, _ := w.st.Get(context.Background(), w.sess.ID); s.Status != store.StatusDestroyed {
		t.Errorf("stop: %s", s.Status)
	}
	if _, err := os.Stat(w.worktree(w.sess)); !os.IsNotExist(err) {
		t.Errorf("stop left the worktree: %v", err)
	}
}

// IDs and numbers from the URL are checked, never used as paths: what is
// not well formed is not found, and nothing outside the storage root is
// read.
func TestURLsAreNotPaths(t *testing.T) {
	w := newWorld(t)
	c := w.client()
	secret := filepath.Join(w.dir, "secret.txt")
	write(t, secret, "TOP SECRET")
	for _, path := range []string{
		"/runs/run_..%2F..%2F..%2Fsecret.txt", "/runs/..%2F" + w.sess.RunID, "/runs/" + w.sess.RunID + "x",
		"/runs/" + w.sess.RunID + "/steps/0", "/runs/" + w.sess.RunID + "/steps/-1", "/runs/" + w.sess.RunID + "/steps/99",
		"/runs/" + w.sess.RunID + "/steps/1?stream=../../secret.txt", "/crs/cr_zzzzzzzz", "/crs/..%2Fsecret.txt",
		"/sessions/sbx_..%2F..", "/machines/..%2F..%2Fsecret.txt", "/machines/.hidden", "/cloud/sbx_zzzzzzzz",
		"/runs/" + w.sess.RunID + "/steps/1?from=-5", "/crs/" + w.cr + "?file=-1",
	} {
		resp, err := c.Get(w.base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 404 or 400", path, resp.StatusCode)
		}
		if strings.Contains(string(b), "TOP SECRET") {
			t.Errorf("%s read a file outside the storage root", path)
		}
	}
}

// A log larger than a page is paged, never sent whole: the run page shows
// its end, the step page a page at a time with links to the others.
func TestLargeLogIsPaged(t *testing.T) {
	f := newFixture(t)
	s := f.session()
	// 1 MB of numbered lines, and a marker at the very end.
	f.exec(s, "sh", "-c", `i=0; while [ $i -lt 20000 ]; do printf 'line %05d of the big log, padded to fifty bytes..\n' $i; i=$((i+1)); done; printf '%s-%s\n' THE END`)
	c := f.client()
	get := func(path string) string {
		resp, err := c.Get(f.base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		return string(b)
	}
	run := get("/runs/" + s.RunID)
	if !strings.Contains(run, "THE-END") || strings.Contains(run, "line 00000 ") || len(run) > 64<<10 {
		t.Errorf("run page: %d bytes, end shown %v, start shown %v", len(run), strings.Contains(run, "THE-END"), strings.Contains(run, "line 00000 "))
	}
	first := get("/runs/" + s.RunID + "/steps/1?stream=stdout")
	if !strings.Contains(first, "line 00000 ") || strings.Contains(first, "THE-END") || len(first) > logPage+32<<10 ||
		!strings.Contains(first, "?stream=stdout&amp;from=262144") {
		t.Errorf("first page: %d bytes, later link %v", len(first), strings.Contains(first, "from=262144"))
	}
	last := get("/runs/" + s.RunID + "/steps/1?stream=stdout&from=786432")
	if !strings.Contains(last, "THE-END") || strings.Contains(last, "line 00000 ") || !strings.Contains(last, "earlier") {
		t.Errorf("last page: end %v", strings.Contains(last, "THE-END"))
	}
}

// A running step's output reaches a live stream as the step writes it,
// line by line, and the stream ends with the step's end.
func TestLiveStream(t *testing.T) {
	f := newFixture(t)
	s := f.session()
	gate := fifo(t, f.dir, "gate")
	done := make(chan int, 1)
	go func() {
		done <- f.exec(s, "sh", "-c", `for i in 1 2 3; do until read x < `+gate+`; do :; done; printf '\033[32mline %s\033[0m\n' $i; done; exit 3`)
	}()
	var runID = s.RunID
	waitFor(t, "the step to start", 20*time.Second, func() bool {
		st, err := f.st.Steps(context.Background(), runID)
		return err == nil && len(st) == 1
	})
	c := f.client()
	req, _ := http.NewRequest("GET", f.base+"/runs/"+runID+"/steps/1/live?stream=stdout&from=0", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan [2]string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var ev, data string
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "event: "):
				ev = l[7:]
			case strings.HasPrefix(l, "data: "):
				data = l[6:]
			case l == "" && ev != "":
				events <- [2]string{ev, data}
				ev, data = "", ""
			}
		}
		close(events)
	}()
	states := 0
	next := func() [2]string {
		for {
			select {
			case e := <-events:
				if e[0] == "state" {
					var st liveState
					if json.Unmarshal([]byte(e[1]), &st) != nil || st.Exit != "running" || st.Class != "run" || st.Duration == "" ||
						st.Timeline == nil || len(st.Timeline.Rows) != 1 || st.Timeline.Rows[0].Seq != 1 {
						t.Fatalf("a state event: %s", e[1])
					}
					states++
					continue
				}
				return e
			case <-time.After(20 * time.Second):
				t.Fatal("no event came")
			}
		}
	}
	for i := 1; i <= 3; i++ {
		start := time.Now()
		release(t, gate)
		e := next()
		var segs []seg
		if e[0] != "out" || json.Unmarshal([]byte(e[1]), &segs) != nil || len(segs) == 0 ||
			joinSegs(segs) != fmt.Sprintf("<f2>line %d\n", i) {
			t.Fatalf("event %d: %v", i, e)
		}
		t.Logf("line %d reached the stream %v after it was released", i, time.Since(start).Round(time.Millisecond))
	}
	if code := <-done; code != 3 {
		t.Fatalf("step: %d", code)
	}
	// The end carries the counters as they ended, not as they were.
	e := next()
	var end liveState
	if e[0] != "end" || json.Unmarshal([]byte(e[1]), &end) != nil {
		t.Fatalf("not an end event: %v", e)
	}
	row, _ := f.st.Step(context.Background(), runID, 1)
	if end.Exit != "exit 3" || end.Class != "fail" || end.Bytes != int64(3*len("\x1b[32mline 1\x1b[0m\n")) ||
		end.Duration != humanize.Duration(row.FinishedAt.Sub(row.StartedAt)) || end.Timeline == nil || end.Timeline.Rows[0].Class != "fail" {
		t.Errorf("end: %s", e[1])
	}
	if states == 0 {
		t.Error("no state event while the step ran")
	}
}

// The pages and the extend form read the time of day from the sandbox
// service's Clock, as the commands do (cmd's clock()): a session made
// under a clock three days ahead shows its own lifetime left, not three
// days more, and extend counts from that clock.
func TestPagesReadTheServiceClock(t *testing.T) {
	f := newFixture(t)
	ahead := time.Now().Add(72 * time.Hour)
	f.svc.Clock = func() time.Time { return ahead }
	s := f.session()
	if got := s.ExpiresAt.Sub(ahead); got <= 0 || got > 24*time.Hour {
		t.Fatalf("the session's lifetime under the clock: %v", got)
	}
	c := f.client()
	resp, err := c.Get(f.base + "/sessions/" + s.ID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := humanize.Span(s.ExpiresAt.Sub(ahead)) + " left"
	if !strings.Contains(string(body), want) {
		t.Errorf("the session page does not say %q", want)
	}
	form := url.Values{"ttl": {"30m"}, "csrf": {f.csrf}}
	req, _ := http.NewRequest("POST", f.base+"/sessions/"+s.ID+"/extend", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.base)
	if resp, err = noRedirect(c).Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("extend: %v %v", resp, err)
	}
	resp.Body.Close()
	after, _ := f.st.Get(context.Background(), s.ID)
	if d := after.ExpiresAt.Sub(ahead.Add(30 * time.Minute)); d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("extend by 30m under the clock: expires %v, want %v", after.ExpiresAt, ahead.Add(30*time.Minute))
	}
}
