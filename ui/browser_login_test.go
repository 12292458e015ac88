package ui

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// In a real browser, the login's cookie stays with the UI: Chromium
// resolves the UI's own name (xmode-PORT.localhost) to loopback, keeps the
// cookie for that host alone, and sends it to no other server on
// 127.0.0.1 or localhost — whatever its port, the UI's own included. Log
// out ends the login: the page that follows, and every page after it, is
// refused.
func TestBrowserLoginStaysHome(t *testing.T) {
	b := newBrowser(t)
	f := newFixture(t)

	// Another local service, as a developer's machine has several: it
	// records the cookies each request brings.
	var mu sync.Mutex
	var seen []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+r.URL.Path+" "+r.Header.Get("Cookie"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<!doctype html><title>other</title><p>another service"))
	})}
	go other.Serve(ln)
	t.Cleanup(func() { other.Close() })
	_, otherPort, _ := net.SplitHostPort(ln.Addr().String())
	_, uiPort, _ := net.SplitHostPort(strings.TrimPrefix(f.base, "http://"))

	b.do("log in", chromedp.Navigate(f.srv.URL()), chromedp.WaitVisible(`form.logout button`))
	if u := eval[string](b, "location.href"); u != f.base+"/runs" {
		t.Fatalf("after logging in: %s", u)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	got, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{f.base + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	cookies := got.Cookies
	if len(cookies) != 1 || cookies[0].Name != cookieName || cookies[0].Domain != "xmode-"+uiPort+".localhost" ||
		!cookies[0].HTTPOnly || cookies[0].SameSite != network.CookieSameSiteStrict || cookies[0].Path != "/" {
		t.Fatalf("the browser's cookie for the UI: %+v", cookies)
	}
	for _, u := range []string{"http://127.0.0.1:" + otherPort + "/", "http://localhost:" + otherPort + "/"} {
		b.do("visit "+u, chromedp.Navigate(u), chromedp.WaitVisible(`p`))
	}
	// The UI's own port, by its loopback address: sent to the UI's name,
	// without a cookie on the way.
	b.do("visit the UI by its address", chromedp.Navigate("http://127.0.0.1:"+uiPort+"/runs"), chromedp.WaitVisible(`table, p.note`))
	if u := eval[string](b, "location.href"); u != f.base+"/runs" {
		t.Errorf("the UI by its address ends at %s, want its own name", u)
	}
	mu.Lock()
	if len(seen) < 2 { // the pages, and the favicons the browser asked for
		t.Errorf("the other service saw %d requests: %q", len(seen), seen)
	}
	for _, s := range seen {
		if strings.Contains(s, cookieName) {
			t.Errorf("the UI's cookie went to another service: %q", s)
		}
	}
	mu.Unlock()

	b.do("log out", chromedp.Click(`form.logout button`), chromedp.WaitVisible(`#logged-out`))
	resp, err := chromedp.Run(b.ctx, chromedp.NavigateResponse(f.base+"/runs"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusUnauthorized {
		t.Errorf("the runs page after logging out: %d, want 401", resp.Status)
	}
}
