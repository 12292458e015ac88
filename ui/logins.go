package ui

import (
	"crypto/sha256"
	"net/http"
	"sync"
	"time"
)

// A login is what opening the URL's token gives one browser: a random
// session kept on the server (never derived from the token, so each login
// is its own and ends on its own), the CSRF token of its forms, and its
// expiry. The cookie carries the session only; the server keeps its
// SHA-256, so what it holds cannot be replayed.
type login struct {
	key     [sha256.Size]byte
	csrf    string
	expires time.Time
}

// Logins: one per opening of the URL, each good for loginTTL, at most
// maxLogins kept (the oldest goes first).
const (
	cookieName = "xmode_ui"
	loginTTL   = 12 * time.Hour
	maxLogins  = 256
)

type logins struct {
	mu  sync.Mutex
	m   map[[sha256.Size]byte]*login
	now func() time.Time // wall time: a login's life is not the service's test clock
}

func newLogins() *logins {
	return &logins{m: map[[sha256.Size]byte]*login{}, now: time.Now}
}

// add makes a login and returns its cookie: host-only (no Domain), for
// every path, unreadable from script, sent on no request another site
// starts, and gone from the browser when the login ends on the server.
// Not Secure (so not __Host-): the server speaks plain HTTP, over which
// browsers other than Chromium drop a Secure cookie even on *.localhost.
func (ls *logins) add() *http.Cookie {
	session := randomHex(32)
	l := &login{key: sha256.Sum256([]byte(session)), csrf: randomHex(32), expires: ls.now().Add(loginTTL)}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := ls.now()
	var oldest *login
	for k, v := range ls.m {
		if !now.Before(v.expires) {
			delete(ls.m, k)
		} else if oldest == nil || v.expires.Before(oldest.expires) {
			oldest = v
		}
	}
	if len(ls.m) >= maxLogins && oldest != nil {
		delete(ls.m, oldest.key)
	}
	ls.m[l.key] = l
	return &http.Cookie{Name: cookieName, Value: session, Path: "/", MaxAge: int(loginTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode}
}

// find is the live login whose session the request's cookie carries.
func (ls *logins) find(r *http.Request) *login {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return nil
	}
	key := sha256.Sum256([]byte(c.Value))
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[key]
	if l == nil {
		return nil
	}
	if !ls.now().Before(l.expires) {
		delete(ls.m, key)
		return nil
	}
	return l
}

// live reports whether l has not ended (logged out or expired).
func (ls *logins) live(l *login) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.m[l.key] == l && ls.now().Before(l.expires)
}

// remove ends l.
func (ls *logins) remove(l *login) {
	if l == nil {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(ls.m, l.key)
}

type loginKey struct{}

// loginOf is the login ServeHTTP found for r (nil before it).
func loginOf(r *http.Request) *login {
	l, _ := r.Context().Value(loginKey{}).(*login)
	return l
}
