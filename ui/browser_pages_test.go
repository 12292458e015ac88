package ui

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/store"
)

// withinViewport is a script that lists what of the page lies beyond the
// window's right edge at its width (1280 px): the page itself scrolling
// sideways, and each element sel matches.
func withinViewport(sel string) string {
	return `(() => {
		const p = [];
		if (document.documentElement.scrollWidth > window.innerWidth)
			p.push('the page is ' + document.documentElement.scrollWidth + ' px wide');
		const els = document.querySelectorAll(` + "`" + sel + "`" + `);
		if (els.length === 0) p.push('nothing matches ` + sel + `');
		for (const el of els) {
			const r = el.getBoundingClientRect();
			if (r.right > window.innerWidth) p.push(el.tagName + ' ' + el.textContent.slice(0, 20) + ' ends at ' + r.right);
		}
		return p;
	})()`
}

// At 1280 px a command line thousands of characters long, without a space,
// wraps: the evidence's RESULT and DURATION columns, the step's duration
// and the session's steps stay on the screen.
func TestBrowserLongCommandsWrap(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t)
	s := f.session()
	long := strings.Repeat("averyveryverylongargument", 120)
	f.exec(s, "sh", "-c", "true", long)
	f.exec(s, "sh", "-c", "echo short")
	p := f.changeRequest(s, "long commands", map[string]string{"README.md": "# changed\n"})
	b.do("log in", chromedp.Navigate(f.srv.URL()), chromedp.WaitVisible(`table.runs`))
	for _, c := range []struct{ path, sel string }{
		{"/crs/" + p.ID, "table.list th"},
		{"/runs/" + s.RunID, "#dur-1, #dur-2, #state-1"},
		{"/sessions/" + s.ID, "table.list th"},
	} {
		b.do("open "+c.path, chromedp.Navigate(f.base+c.path), chromedp.WaitVisible(`header.top`))
		if got := eval[[]string](b, withinViewport(c.sel)); len(got) > 0 {
			t.Errorf("%s at 1280 px: %q", c.path, got)
		}
	}
}

// A live log follows its end while the reader is at it, and the step's
// counters (duration, bytes, badge, timeline bar) move while it runs and
// are the step's own when it has ended.
func TestBrowserLiveLogFollowsAndCounts(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t)
	s := f.session()
	gate := fifo(t, f.dir, "gate")
	done := make(chan int, 1)
	go func() {
		done <- f.exec(s, "sh", "-c", `i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo "line $i"; done
until read x < `+gate+`; do :; done
i=60; while [ $i -lt 120 ]; do i=$((i+1)); echo "line $i"; sleep 0.01; done
until read x < `+gate+`; do :; done`)
	}()
	waitFor(t, "the step's first lines", 20*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(f.root, "runs", s.RunID, "steps", "0001-sh-c-i-0-while-i-lt-60-do-i-i-1-echo", "stdout.log"))
		return strings.Contains(string(b), "line 60\n")
	})
	b.do("log in", chromedp.Navigate(f.srv.URL()), chromedp.WaitVisible(`table.runs`))
	b.do("open the run", chromedp.Navigate(f.base+"/runs/"+s.RunID), chromedp.WaitVisible(`#step-1 pre.log[data-live]`))
	const pre = `document.querySelector('#step-1 pre.log')`
	const atEnd = `(() => { const p = ` + pre + `; return p.scrollHeight > p.clientHeight && p.scrollTop + p.clientHeight >= p.scrollHeight - 4; })()`
	if !eval[bool](b, atEnd) {
		t.Error("the page opens a running step's log away from its end")
	}
	dur1 := eval[string](b, `document.getElementById('dur-1').textContent`)
	release(t, gate)
	b.waitJS("line 120", pre+`.textContent.includes('line 120')`)
	if !eval[bool](b, atEnd) {
		t.Error("the log does not follow its end as lines come")
	}
	b.waitJS("the duration to move", `document.getElementById('dur-1').textContent !== '`+dur1+`'`)
	release(t, gate)
	if code := <-done; code != 0 {
		t.Fatalf("the step: %d", code)
	}
	// Each log's stream ends with its own end event; the stdout one moves
	// the timeline.
	b.waitJS("the step's end on both streams", `[...document.querySelectorAll('#step-1 pre.log')].every(p => p.classList.contains('ended'))`)
	row, err := f.st.Step(context.Background(), s.RunID, 1)
	if err != nil || row.State != store.StateFinished {
		t.Fatalf("the step's row: %+v %v", row, err)
	}
	size := len("line 1\n")*9 + len("line 10\n")*90 + len("line 100\n")*21
	want := map[string]string{
		`document.getElementById('dur-1').textContent`:                               humanize.Duration(row.FinishedAt.Sub(row.StartedAt)),
		`document.getElementById('bytes-1-stdout').textContent`:                      fmt.Sprint(size),
		`document.getElementById('state-1').className`:                               "badge pass",
		`document.querySelector('#tl-1 rect').getAttribute('class')`:                 "pass",
		`document.querySelector('#tl-1 text.info').textContent.startsWith('exit 0')`: "",
	}
	for expr, w := range want {
		if w == "" {
			if !eval[bool](b, expr) {
				t.Errorf("after the end: %s is false", expr)
			}
			continue
		}
		if got := eval[string](b, expr); got != w {
			t.Errorf("after the end: %s = %q, want %q", expr, got, w)
		}
	}
}

// Stop asks first: the button shows what a stop does and a second button
// that does it; until that one is pressed the session is open.
func TestBrowserStopAsksFirst(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t)
	s := f.session()
	b.do("log in", chromedp.Navigate(f.srv.URL()), chromedp.WaitVisible(`table.runs`))
	b.do("open the session", chromedp.Navigate(f.base+"/sessions/"+s.ID), chromedp.WaitVisible(`details.stop summary`))
	if eval[bool](b, `document.getElementById('stop-confirm').checkVisibility()`) {
		t.Fatal("the stop that acts is on the page before Stop… is pressed")
	}
	b.do("press Stop…", chromedp.Click(`details.stop summary`), chromedp.WaitVisible(`#stop-confirm`))
	if got, _ := f.st.Get(context.Background(), s.ID); got.Status != store.StatusOpen {
		t.Fatalf("the session after Stop… alone: %s", got.Status)
	}
	b.do("confirm", chromedp.Click(`#stop-confirm`), chromedp.WaitVisible(`p.flash`))
	if got, _ := f.st.Get(context.Background(), s.ID); got.Status == store.StatusOpen {
		t.Fatalf("the session after the confirmation: %s", got.Status)
	}
}
