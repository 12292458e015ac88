package ui

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/loop"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// Tests in a real browser: Debian's headless Chromium driven over the
// DevTools protocol (chromedp), against the UI on a loopback port and a
// real storage root. When one fails, a screenshot of its page is kept in
// $XMODE_TEST_ARTIFACTS, else in a directory the test log names.

var docsShot = flag.String("screenshot", "", "write a screenshot of a change request under review to this PNG (docs/ui-review.png)")

// chromiumPath is Debian's chromium (.ci/run installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	testenv.Skip(t, "no chromium: apt-get install -y chromium")
	return ""
}

// browser is one headless Chromium with a tab, and what the tab saw: the
// dialogs that opened, every request it made, the exceptions thrown.
type browser struct {
	t          *testing.T
	ctx        context.Context
	mu         sync.Mutex
	dialogs    []string
	requests   []string
	exceptions []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	// As the machine notes say Chromium runs here as root: no sandbox, no
	// GPU, and nothing of its own on the network.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-extensions", true),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	b := &browser{t: t, ctx: ctx}
	t.Cleanup(func() {
		if t.Failed() {
			b.keepScreenshot()
		}
		cancel()
		cancelAlloc()
	})
	// Subscribe before anything loads: the streams buffer.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	requests := chromedp.Events(ctx, network.RequestWillBeSent)
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, ev.Type.String()+": "+ev.Message)
			b.mu.Unlock()
			// Close it, or the page would hang on it.
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	go func() {
		for ev, err := range requests {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.requests = append(b.requests, ev.Request.URL)
			b.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.exceptions = append(b.exceptions, (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs actions with a deadline.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JS expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS polls a JS condition in the page until it holds.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(25*time.Millisecond))); err != nil {
		b.t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// keepScreenshot saves the page as it is, for a failed test.
func (b *browser) keepScreenshot() {
	dir := os.Getenv("XMODE_TEST_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "xmode-ui-artifacts-"); err != nil {
			b.t.Logf("no screenshot: %v", err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("no screenshot: %v", err)
		return
	}
	name := filepath.Join(dir, strings.ReplaceAll(b.t.Name(), "/", "_")+".png")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		if err := os.WriteFile(name, png, 0o644); err == nil {
			b.t.Logf("screenshot of the failed page: %s", name)
		}
	}
}

// runLoop runs `xmode run` with a plan file in the background.
func (f *fixture) runLoop(objective, plan string) <-chan *loop.Result {
	planFile := filepath.Join(f.dir, fmt.Sprintf("plan-%d.yaml", time.Now().UnixNano()))
	write(f.t, planFile, plan)
	l := &loop.Loop{Svc: f.svc, Plans: &plans.Runner{Svc: f.svc, Agents: &agents.Runner{Svc: f.svc}}, Changes: f.cs}
	done := make(chan *loop.Result, 1)
	go func() {
		res, err := l.Run(context.Background(), loop.Options{Create: sandbox.CreateOptions{Repo: f.repo}, Objective: objective, PlanFile: planFile})
		if err != nil {
			f.t.Errorf("run: %v", err)
		}
		done <- res
	}()
	return done
}

// The review in a browser, end to end: the runs page with the token, a
// run whose step is running, its output growing live as the step writes
// it, the change request the run made, approved with the form — and the
// store says approved.
func TestBrowserReview(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t)
	gate := fifo(t, f.dir, "gate")
	done := f.runLoop("Greet in colour", `steps:
  - name: build
    run: |
      for i in 1 2 3; do
        until read x < `+gate+`; do :; done
        printf '\033[32mline %s\033[0m\n' "$i"
      done
      printf 'package main\n\nfunc main() {\n\tprintln("hello")\n}\n' > main.go
`)
	var run *store.RunSummary
	waitFor(t, "the run's step to start", 30*time.Second, func() bool {
		runs, _, err := f.st.RunsPage(context.Background(), store.RunQuery{})
		if err != nil || len(runs) != 1 {
			return false
		}
		steps, err := f.st.Steps(context.Background(), runs[0].ID)
		run = runs[0]
		return err == nil && len(steps) == 1
	})

	// Without the token, the browser gets nothing: every page is refused.
	for _, path := range []string{"/runs", "/runs/" + run.ID, "/runs/" + run.ID + "/steps/1?stream=stdout", "/crs", "/sessions", "/static/app.js"} {
		resp, err := chromedp.Run(b.ctx, chromedp.NavigateResponse(f.base+path))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if text := eval[string](b, "document.body.innerText"); resp.Status != 401 || strings.Contains(text, "Greet in colour") || strings.Contains(text, run.ID) {
			t.Errorf("%s without the token: %d %q", path, resp.Status, text)
		}
	}
	b.do("open the runs page with the wrong token", chromedp.Navigate(f.base+"/?token=0123"))
	if text := eval[string](b, "document.body.innerText"); strings.Contains(text, run.ID) || !strings.Contains(text, "wrong token") {
		t.Errorf("with a wrong token: %q", text)
	}
	b.do("open the runs page with the token", chromedp.Navigate(f.base+"/?token="+f.srv.Token()),
		chromedp.WaitVisible(`a[href="/runs/`+run.ID+`"]`))
	if u := eval[string](b, "location.href"); u != f.base+"/runs" {
		t.Errorf("after the token: %s, want the runs page without it", u)
	}
	if got := eval[string](b, "document.cookie"); got != "" {
		t.Errorf("the session cookie is readable from script: %q", got)
	}
	b.do("open the run", chromedp.Click(`a[href="/runs/`+run.ID+`"]`), chromedp.WaitVisible(`#step-1 pre.log[data-live]`))
	const logText = `document.querySelector('#step-1 pre.log').textContent`
	for i := 1; i <= 3; i++ {
		if strings.Contains(eval[string](b, logText), fmt.Sprintf("line %d", i)) {
			t.Fatalf("line %d is on the page before the step wrote it", i)
		}
		release(t, gate)
		b.waitJS(fmt.Sprintf("line %d to reach the page", i), fmt.Sprintf(`%s.includes('line %d')`, logText, i))
	}
	if cls := eval[string](b, `document.querySelector('#step-1 pre.log span.f2').className`); cls != "f2" {
		t.Errorf("the live line's colour: class %q", cls)
	}
	res := <-done
	if res == nil || res.CR == "" {
		t.Fatalf("the run made no change request: %+v", res)
	}
	b.waitJS("the step's end to reach the page", `document.getElementById('state-1').textContent === 'exit 0'`)

	b.do("open its change request", chromedp.Navigate(f.base+"/runs/"+run.ID), chromedp.Click(`a[href="/crs/`+res.CR+`"]`),
		chromedp.WaitVisible(`button[value="approve"]`))
	if !strings.Contains(eval[string](b, "document.body.innerText"), `println("hello")`) {
		t.Errorf("the change request's page does not show the diff")
	}
	if *docsShot != "" {
		shot, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
		if err != nil || os.WriteFile(*docsShot, shot, 0o644) != nil {
			t.Errorf("screenshot: %v", err)
		}
	}
	b.do("approve it", chromedp.SendKeys(`#note`, "read the diff and the evidence"), chromedp.Click(`button[value="approve"]`),
		chromedp.WaitVisible(`p.flash`))
	c, err := f.st.GetChange(context.Background(), res.CR)
	if err != nil || c.Status != store.ChangeApproved || len(c.Reviews) != 1 || c.Reviews[0].Note != "read the diff and the evidence" {
		t.Fatalf("the store after approving in the browser: %+v %v", c, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 || len(b.exceptions) > 0 {
		t.Errorf("dialogs %q, exceptions %q", b.dialogs, b.exceptions)
	}
}

// What a sandbox, an agent or the cloud wrote renders inert in a browser:
// markup, script, javascript: URLs, ANSI and OSC sequences, bidi
// overrides in file names, diffs, logs, commit messages, objectives,
// titles and transcripts open no dialog, run no script, send no request
// anywhere but the UI's own origin, and show as text.
func TestBrowserHostileTextIsInert(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t)
	const (
		script = `<script>window.__pwned=1;alert(1)</script>`
		img    = `<img src=x onerror="window.__pwned=2;alert(2)">`
		svg    = `"><svg onload=alert(3)>`
		js     = `javascript:alert(4)`
		remote = `<img src="http://evil.example/beacon.png">`
		link   = `<a href="javascript:alert(5)">click</a>`
		style  = `<style>body{display:none}</style><div style="display:none">`
		ansi   = "\x1b[2J\x1b]52;c;cHduZWQ=\x07\x1b]8;;javascript:alert(6)\x1b\\osc8\x1b]8;;\x1b\\"
		bidi   = "\u202e\u2066evil\u2069"
	)
	all := script + img + svg + js + remote + link + style + ansi + bidi
	hostile := filepath.Join(f.dir, "hostile.txt")
	write(t, hostile, all)
	gate := fifo(t, f.dir, "gate")
	// The run: a hostile objective; a step printing all of it, waiting (so
	// the live stream carries the rest), then making files with hostile
	// names and an agent commit with a hostile author, subject and body.
	done := f.runLoop("objective "+all, `steps:
  - name: hostile
    run: |
      cat `+hostile+`; echo
      until read x < `+gate+`; do :; done
      cat `+hostile+` >&2; echo >&2
      printf 'x\n' > 'img<img src=x onerror=alert(7)>.txt'
      printf 'y\n' > "$(printf 'bidi\342\200\256txt.exe')"
      printf 'z\n' > 'svg"><svg onload=alert(8)>.md'
      cat `+hostile+` >> README.md
      git add -A
      git -c user.name="agent $(cat `+hostile+`)" -c user.email=a@example.com commit -qm "subject $(cat `+hostile+`)" -m "body $(cat `+hostile+`)"
`)
	var runID string
	waitFor(t, "the hostile step to start", 30*time.Second, func() bool {
		runs, _, err := f.st.RunsPage(context.Background(), store.RunQuery{})
		if err != nil || len(runs) != 1 {
			return false
		}
		runID = runs[0].ID
		steps, _ := f.st.Steps(context.Background(), runID)
		return len(steps) == 1
	})

	// A cloud task with a hostile title, URL, environment and transcript,
	// recorded as `cloud submit` and `cloud poll` record them.
	ctx := context.Background()
	cs := f.session()
	never := func(string, time.Time) bool { return false }
	if _, err := f.st.ClaimSubmit(ctx, cs.ID, "test", time.Now(), never); err != nil {
		t.Fatal(err)
	}
	if err := f.st.RecordSubmitted(ctx, &store.CloudTask{TaskID: "task_" + "1", SessionID: cs.ID, URL: js, EnvID: "env " + all,
		Branch: "main", Attempts: 1, Title: "title " + all, SubmittedAt: time.Now()}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.ClaimDueCloudTasks(ctx, "poller", time.Now().Add(time.Second), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.RecordPoll(ctx, "task_1", "poller", store.PollUpdate{Now: time.Now(), Polled: true, State: store.TaskRunning,
		Summary: "summary " + all, Transcript: []string{"transcript " + all, "second " + js}, Err: "error " + all, ErrClass: store.ErrTransient,
		Release: true}); err != nil {
		t.Fatal(err)
	}

	// check looks at the page as the browser built it: no script but the
	// app's, no event handler, style, javascript: link or frame anywhere,
	// nothing the corpus would have set, and the corpus shown as text.
	check := func(what string, visible ...string) {
		t.Helper()
		problems := eval[[]string](b, `(() => {
			const p = [];
			if (window.__pwned !== undefined) p.push('window.__pwned = ' + window.__pwned);
			for (const s of document.scripts) if (!s.src.endsWith('/static/app.js')) p.push('script ' + s.outerHTML.slice(0, 80));
			if (document.scripts.length !== 1) p.push(document.scripts.length + ' scripts');
			for (const el of document.querySelectorAll('*')) {
				for (const a of el.attributes) {
					if (/^on/i.test(a.name)) p.push('handler ' + el.tagName + ' ' + a.name);
					if (a.name === 'style') p.push('style attribute on ' + el.tagName);
					if (/^\s*javascript:/i.test(a.value)) p.push('javascript: in ' + el.tagName + ' ' + a.name);
				}
			}
			for (const t of ['style', 'iframe', 'object', 'embed', 'base', 'meta[http-equiv]', 'svg svg', 'img', 'form:not([action^="/"])'])
				if (document.querySelector(t)) p.push('element ' + t);
			for (const a of document.links) if (a.protocol !== 'http:' || a.host !== location.host) p.push('link to ' + a.href);
			return p;
		})()`)
		if len(problems) > 0 {
			t.Errorf("%s is not inert: %q", what, problems)
		}
		text := eval[string](b, "document.body.innerText")
		for _, v := range visible {
			if !strings.Contains(text, v) {
				t.Errorf("%s does not show %q as text", what, v)
			}
		}
		if strings.ContainsAny(text, "\x1b\x07\u202e\u2066") {
			t.Errorf("%s: a raw control or bidi override is on the page", what)
		}
	}
	// inert opens a page and checks it, and its Content-Security-Policy.
	inert := func(path string, visible ...string) {
		t.Helper()
		resp, err := chromedp.Run(b.ctx, chromedp.NavigateResponse(f.base+path))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if resp.Status != 200 {
			t.Errorf("%s: %d", path, resp.Status)
		}
		if csp, _ := resp.Headers["Content-Security-Policy"].(string); csp != wantCSP {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		check(path, visible...)
	}

	b.do("log in", chromedp.Navigate(f.base+"/?token="+f.srv.Token()), chromedp.WaitVisible(`table.runs`))
	inert("/runs", "objective "+script)
	inert("/runs/"+runID, script, img, `\x1b]52;c;cHduZWQ=\x07`, `\u202e`)
	// The rest of the output arrives on the live stream.
	release(t, gate)
	b.waitJS("the live stderr", `document.querySelectorAll('#step-1 pre.log')[1] !== undefined &&
		document.querySelectorAll('#step-1 pre.log')[1].textContent.includes('<script>window.__pwned=1')`)
	res := <-done
	if res == nil || res.CR == "" {
		t.Fatalf("the run made no change request: %+v", res)
	}
	check("the run page after the live stream", script, img)
	inert("/runs/"+runID, script, img, `osc8`)
	inert("/runs/"+runID+"/steps/1?stream=stderr", script, `\x1b]8;;javascript:alert(6)`)
	inert("/crs", "objective "+script)
	inert("/crs/"+res.CR, "objective "+script, "img<img src=x onerror=alert(7)>.txt", `bidi\u202etxt.exe`, `svg"><svg onload=alert(8)>.md`, "+"+script, "subject "+script, "body "+script)
	inert("/crs/"+res.CR+"?view=split", "img<img src=x onerror=alert(7)>.txt", script)
	inert("/sessions?all=1", "")
	inert("/sessions/"+cs.ID, "")
	inert("/cloud", "title "+script)
	inert("/cloud/"+cs.ID, "title "+script, js, "transcript "+script, "summary "+script, "error "+script)

	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 {
		t.Errorf("dialogs opened: %q", b.dialogs)
	}
	for _, u := range b.requests {
		if !strings.HasPrefix(u, f.base+"/") {
			t.Errorf("a request left for another origin: %s", u)
		}
	}
	if len(b.exceptions) > 0 {
		t.Errorf("exceptions: %q", b.exceptions)
	}
}
