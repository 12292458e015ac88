package ui

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// A published sandbox port (`sandbox port`, docs/network.md "Ports") opened
// through the UI, behind its login (docs/ui.md, "Ports"). The sandbox's
// server is hostile: served on the UI's own name, its pages' scripts would
// act with the UI's login (approve a change request). So each port has a
// name of its own, p<port>-<session>.xmode-PORT.localhost:PORT — another
// origin, to which the UI's cookie (host-only) is never sent — and a login
// of its own there: the session page's link (behind the UI's login) makes a
// one-time ticket, which the port's name trades for a cookie of that name
// only. Requests with it are proxied to the port's forwarder, that cookie
// taken out; a cookie the server sets for a wider domain is kept to its
// own name.

const (
	portCookie    = "xmode_port"
	portLoginPath = "/.xmode/port-login"
	ticketTTL     = time.Minute
	maxPortLogins = 256
)

// portKey is a port of a session.
type portKey struct {
	session string
	port    int
}

// portLogins are the one-time tickets the UI's links make and the logins
// the port names trade them for.
type portLogins struct {
	mu      sync.Mutex
	tickets map[[sha256.Size]byte]portGrant
	logins  map[[sha256.Size]byte]portGrant
}

type portGrant struct {
	portKey
	expires time.Time
}

func newPortLogins() *portLogins {
	return &portLogins{tickets: map[[sha256.Size]byte]portGrant{}, logins: map[[sha256.Size]byte]portGrant{}}
}

// issue makes a value for m, good for ttl, dropping what has expired (and
// the oldest past the cap).
func (pl *portLogins) issue(m map[[sha256.Size]byte]portGrant, k portKey, ttl time.Duration) string {
	v := randomHex(32)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now := time.Now()
	var oldest [sha256.Size]byte
	var oldestAt time.Time
	for h, g := range m {
		if !now.Before(g.expires) {
			delete(m, h)
		} else if oldestAt.IsZero() || g.expires.Before(oldestAt) {
			oldest, oldestAt = h, g.expires
		}
	}
	if len(m) >= maxPortLogins {
		delete(m, oldest)
	}
	m[sha256.Sum256([]byte(v))] = portGrant{k, now.Add(ttl)}
	return v
}

// check reports whether v is a live value of m for k; once drops it.
func (pl *portLogins) check(m map[[sha256.Size]byte]portGrant, v string, k portKey, once bool) bool {
	if v == "" {
		return false
	}
	h := sha256.Sum256([]byte(v))
	pl.mu.Lock()
	defer pl.mu.Unlock()
	g, ok := m[h]
	if !ok {
		return false
	}
	if once || !time.Now().Before(g.expires) {
		delete(m, h)
	}
	return time.Now().Before(g.expires) && subtle.ConstantTimeCompare([]byte(g.session), []byte(k.session)) == 1 && g.port == k.port
}

// portHostRE is a port's name: p<port>-<the session's ID after "sbx_">;
// compiled on first use (every command pays for what is built at start).
var portHostRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^p([0-9]{1,5})-([a-z0-9]{1,40})\.`) })

// portHost is the name of a session's port, on this server's.
func (s *Server) portHost(k portKey) string {
	return "p" + strconv.Itoa(k.port) + "-" + strings.TrimPrefix(k.session, "sbx_") + "." + s.name
}

// portOf is the port a request's Host names, if it names one of this
// server's port names.
func (s *Server) portOf(host string) (portKey, bool) {
	if s.o.Remote || !strings.HasSuffix(host, "."+s.name) {
		return portKey{}, false
	}
	m := portHostRE().FindStringSubmatch(host)
	if m == nil || host != m[0]+s.name {
		return portKey{}, false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 || n > 65535 || !fsguard.ValidID("sbx_", "sbx_"+m[2]) {
		return portKey{}, false
	}
	return portKey{session: "sbx_" + m[2], port: n}, true
}

// openPort is the session page's link to a published port (behind the
// UI's login): a one-time ticket for the port's own name.
func (s *Server) openPort(w http.ResponseWriter, r *http.Request) {
	if s.o.Remote {
		s.refuse(w, http.StatusNotFound, "ports open through a UI on loopback only (this one listens beyond it): use the port's own address, `xmode sandbox port ID` lists it")
		return
	}
	sess, err := s.loadSession(r)
	if err != nil {
		s.refuse(w, http.StatusNotFound, err.Error())
		return
	}
	n, err := strconv.Atoi(r.PathValue("port"))
	k := portKey{session: sess.ID, port: n}
	if err != nil || s.published(r, k) == nil {
		s.refuse(w, http.StatusNotFound, "session "+sess.ID+" publishes no such port: publish it with `xmode sandbox port "+sess.ID+" PORT`")
		return
	}
	t := s.ports.issue(s.ports.tickets, k, ticketTTL)
	to := url.URL{Scheme: "http", Host: s.portHost(k), Path: portLoginPath, RawQuery: url.Values{"ticket": {t}}.Encode()}
	http.Redirect(w, r, to.String(), http.StatusSeeOther)
}

// published is the open row of a session's port, nil when there is none.
func (s *Server) published(r *http.Request, k portKey) *store.Port {
	ps, err := s.o.Svc.Store.Ports(r.Context(), k.session, false)
	if err != nil {
		return nil
	}
	for i := range ps {
		if ps[i].Port == k.port {
			return &ps[i]
		}
	}
	return nil
}

// servePort answers a request to a port's name: its ticket traded for a
// login there, or, with that login, the port's server through its
// forwarder. Nothing of the UI is served on that name.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, k portKey) {
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == portLoginPath {
		if r.Method != http.MethodGet || !s.ports.check(s.ports.tickets, r.URL.Query().Get("ticket"), k, true) {
			s.refuse(w, http.StatusUnauthorized, "this link has expired or was used: open the port again from the session's page in xmode ui")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: portCookie, Value: s.ports.issue(s.ports.logins, k, loginTTL), Path: "/",
			MaxAge: int(loginTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteLaxMode})
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	c, err := r.Cookie(portCookie)
	if err != nil || !s.ports.check(s.ports.logins, c.Value, k, false) {
		s.refuse(w, http.StatusUnauthorized, "open this port from its session's page in xmode ui: it needs the UI's login")
		return
	}
	p := s.published(r, k)
	if p == nil {
		s.refuse(w, http.StatusBadGateway, "port "+strconv.Itoa(k.port)+" of "+k.session+" is no longer published (the sandbox ended, or it was closed)")
		return
	}
	host, port, err := net.SplitHostPort(p.HostAddr)
	if err != nil {
		s.refuse(w, http.StatusBadGateway, "the port's address "+p.HostAddr+" is not one")
		return
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	target := net.JoinHostPort(host, port)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", target, target
			dropCookie(pr.Out, portCookie)
			pr.Out.Header.Del("X-Forwarded-For")
		},
		ModifyResponse: func(resp *http.Response) error {
			hostOnlyCookies(resp.Header)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			s.refuse(w, http.StatusBadGateway, "the sandbox's server did not answer on port "+strconv.Itoa(k.port)+": "+err.Error())
		},
	}
	rp.ServeHTTP(w, r)
}

// dropCookie takes one cookie out of a request's Cookie headers.
func dropCookie(r *http.Request, name string) {
	cs := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cs {
		if c.Name != name {
			r.AddCookie(c)
		}
	}
}

// hostOnlyCookies drops the Domain of every cookie a proxied server sets:
// a port's page may set cookies for its own name, never for the UI's.
func hostOnlyCookies(h http.Header) {
	set := h.Values("Set-Cookie")
	if len(set) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range set {
		var kept []string
		for _, part := range strings.Split(line, ";") {
			if k, _, _ := strings.Cut(strings.TrimSpace(part), "="); strings.EqualFold(k, "domain") {
				continue
			}
			kept = append(kept, part)
		}
		h.Add("Set-Cookie", strings.Join(kept, ";"))
	}
}
