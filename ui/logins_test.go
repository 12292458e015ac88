package ui

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/store"
)

// postAs posts form to path with c's cookie, from the server's own origin;
// the test fails with the answer's text when it is not want, which it
// returns.
func (w *world) postAs(c *http.Client, path string, form url.Values, want int) string {
	w.t.Helper()
	req, _ := http.NewRequest("POST", w.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", w.base)
	resp, err := noRedirect(c).Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		w.t.Errorf("POST %s: %d, want %d: %s", path, resp.StatusCode, want, b)
	}
	return string(b)
}

func (w *world) status(c *http.Client, path string) int {
	w.t.Helper()
	resp, err := noRedirect(c).Get(w.base + path)
	if err != nil {
		w.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Each opening of the URL is a login of its own: its own random session in
// the cookie, its own CSRF token, bound to each other — session A's token
// with session B's cookie is refused, and changes nothing.
func TestLoginsAreTheirOwn(t *testing.T) {
	w := newWorld(t)
	a := w.client()
	csrfA := w.csrf
	b := w.client()
	csrfB := w.csrf
	u, _ := url.Parse(w.base)
	ca, cb := a.Jar.Cookies(u), b.Jar.Cookies(u)
	if len(ca) != 1 || len(cb) != 1 || ca[0].Value == cb[0].Value || csrfA == csrfB {
		t.Fatalf("two logins share a session or a CSRF token: %v %v %s %s", ca, cb, csrfA, csrfB)
	}
	if strings.Contains(ca[0].Value, w.srv.Token()) || strings.Contains(csrfA, ca[0].Value) || strings.Contains(ca[0].Value, csrfA) {
		t.Fatal("the session, the token and the CSRF token are not independent")
	}
	approve := url.Values{"decision": {"approve"}, "note": {"ok"}}
	approve.Set("csrf", csrfA)
	w.postAs(b, "/crs/"+w.cr+"/review", approve, http.StatusForbidden) // B's cookie, A's CSRF token
	if ch, _ := w.st.GetChange(context.Background(), w.cr); ch.Status != store.ChangeOpen {
		t.Fatalf("a refused POST reviewed: %s", ch.Status)
	}
	approve.Set("csrf", csrfB)
	w.postAs(b, "/crs/"+w.cr+"/review", approve, http.StatusSeeOther)
}

// Log out ends the login on the server: its cookie, sent again, opens
// nothing and its CSRF token posts nothing; another login goes on.
func TestLogoutRevokes(t *testing.T) {
	w := newWorld(t)
	a := w.client()
	csrfA := w.csrf
	b := w.client()
	u, _ := url.Parse(w.base)
	stolen := a.Jar.Cookies(u)[0] // what a copy of the cookie would replay
	wrong := "0" + csrfA[1:]
	if wrong == csrfA {
		wrong = "1" + csrfA[1:]
	}
	w.postAs(a, "/logout", url.Values{"csrf": {wrong}}, http.StatusForbidden)
	w.postAs(a, "/logout", url.Values{"csrf": {csrfA}}, http.StatusOK)
	replay := &http.Client{Transport: localTransport(), Timeout: 10 * time.Second}
	req, _ := http.NewRequest("GET", w.base+"/runs", nil)
	req.AddCookie(stolen)
	resp, err := replay.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the logged-out cookie, replayed: %d, want 401", resp.StatusCode)
	}
	if code := w.status(a, "/runs"); code != http.StatusUnauthorized {
		t.Errorf("the logged-out browser: %d, want 401", code)
	}
	req, _ = http.NewRequest("POST", w.base+"/sessions/"+w.sess.ID+"/stop", strings.NewReader(url.Values{"csrf": {csrfA}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", w.base)
	req.AddCookie(stolen)
	if resp, err = replay.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s, _ := w.st.Get(context.Background(), w.sess.ID); resp.StatusCode != http.StatusUnauthorized || s.Status != store.StatusOpen {
		t.Errorf("a stop with the logged-out cookie and its CSRF token: %d, session %s", resp.StatusCode, s.Status)
	}
	if code := w.status(b, "/runs"); code != http.StatusOK {
		t.Errorf("the other login after a log out: %d, want 200", code)
	}
}

// A login ends on the server after loginTTL, whatever the browser keeps.
func TestLoginExpires(t *testing.T) {
	w := newWorld(t)
	c := w.client()
	later := time.Now().Add(loginTTL + time.Minute)
	w.srv.logins.mu.Lock()
	w.srv.logins.now = func() time.Time { return later }
	w.srv.logins.mu.Unlock()
	if code := w.status(c, "/runs"); code != http.StatusUnauthorized {
		t.Errorf("a login past its expiry: %d, want 401", code)
	}
}

// The server answers to a name of its own, and the cookie is that name's
// alone: the loopback spellings of its address are sent to it (with the
// token, which logs in there) and are given no cookie; a cookie jar sends
// the login's cookie to no other server on 127.0.0.1 or localhost.
func TestServedOnANameOfItsOwn(t *testing.T) {
	w := newWorld(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(w.base, "http://"))
	if w.base != "http://xmode-"+port+".localhost:"+port || w.srv.URL() != w.base+"/?token="+w.srv.Token() {
		t.Fatalf("the server's name: %s, URL %s", w.base, w.srv.URL())
	}
	plain := &http.Client{Transport: localTransport(), Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		resp, err := plain.Get("http://" + host + "/crs?token=" + w.srv.Token())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != w.base+"/crs?token="+w.srv.Token() || resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("%s: %d to %q, cookie %q", host, resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Set-Cookie"))
		}
		req, _ := http.NewRequest("POST", "http://"+host+"/crs/"+w.cr+"/review", nil)
		if resp, err = plain.Do(req); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("a POST to %s: %d, want 421", host, resp.StatusCode)
		}
	}
	c := w.client()
	for _, other := range []string{"http://127.0.0.1:1", "http://localhost:1", "http://127.0.0.1:" + port, "http://xmode-1.localhost:1"} {
		u, _ := url.Parse(other)
		if got := c.Jar.Cookies(u); len(got) != 0 {
			t.Errorf("the login's cookie goes to %s: %v", other, got)
		}
	}
}
