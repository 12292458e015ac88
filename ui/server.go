// Package ui is `xmode ui`: a local web app for reviewing an agent's work —
// runs, their plans and steps with live output, change requests with their
// diff, evidence and review form, sessions, project machines and pools,
// cloud tasks (docs/ui.md). It has no state of its own: its handlers call
// the services the commands call (sandbox, changes, pool, the store), and
// its assets and templates are embedded. Everything it shows that a
// sandbox, an agent or the cloud wrote is hostile (text.go).
package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/internal/httpserve"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

//go:embed assets templates
var embedded embed.FS

// Options configure a Server.
type Options struct {
	Svc     *sandbox.Service
	Changes *changes.Service
	// Addr is the host:port the server listens on. On loopback it answers
	// to a name of its own, xmode-PORT.localhost:PORT (browsers resolve
	// *.localhost to loopback themselves), so its cookie goes to no other
	// server on this machine; a request to 127.0.0.1:PORT or
	// localhost:PORT is sent there, and one naming any other host (a page
	// of another site that rebinds a name to 127.0.0.1) is refused.
	Addr string
	// Remote: it listens beyond loopback (--allow-remote), reached by
	// names the server cannot know; the Host check is off.
	Remote bool
	// Token is what the URL carries to log in; "" makes a random one.
	Token string
}

// Server is the web app's handler.
type Server struct {
	o      Options
	token  string
	name   string          // the host:port the server answers to
	alias  map[string]bool // hosts sent to name (loopback spellings of it)
	logins *logins
	ports  *portLogins // the logins of published ports' own names (ports.go)
	mux    *http.ServeMux
	hl     highlighter

	tmplOnce sync.Once
	tmpl     map[string]*template.Template
	tmplErr  error
}

// New makes a server for o.
func New(o Options) (*Server, error) {
	s := &Server{o: o, token: o.Token, logins: newLogins(), ports: newPortLogins()}
	if s.token == "" {
		s.token = randomHex(24)
	}
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("ui address %q: %w", o.Addr, err)
	}
	s.name = o.Addr
	if !o.Remote {
		s.name = "xmode-" + port + ".localhost:" + port
		s.alias = map[string]bool{o.Addr: true, "localhost:" + port: true, "127.0.0.1:" + port: true, "[::1]:" + port: true}
		if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
			s.alias["["+host+"]:"+port] = true
		}
	}
	s.routes()
	return s, nil
}

// now is the time of day the sandbox service reads (its Clock: the
// tests' clock under test), so ages and expiries agree with the commands.
func (s *Server) now() time.Time { return s.o.Svc.Now() }

// Token is the token of the URL `xmode ui` prints.
func (s *Server) Token() string { return s.token }

// URL is the address to open: the server's own name, with the token.
func (s *Server) URL() string { return "http://" + s.name + "/?token=" + s.token }

// Name is the host:port the server answers to.
func (s *Server) Name() string { return s.name }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// The page's Content-Security-Policy: only the app's own script and
// stylesheet, no inline script or style, no plugin, no frame, no form
// that posts elsewhere, no <base> (docs/ui.md, "Security").
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; " +
	"base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// ServeHTTP checks every request — the Host, the token or the login's
// cookie, and for a POST its origin and the login's CSRF token — before
// any handler sees it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A published port's own name: its server, behind a login of that
	// name (ports.go), none of the UI's headers or pages.
	if k, ok := s.portOf(r.Host); ok {
		s.servePort(w, r, k)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if !s.o.Remote && r.Host != s.name {
		if s.alias[r.Host] && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			// Its own name, so that no cookie is ever set for 127.0.0.1,
			// which every other server on this machine would be sent.
			to := url.URL{Scheme: "http", Host: s.name, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
			http.Redirect(w, r, to.String(), http.StatusTemporaryRedirect)
			return
		}
		s.refuse(w, http.StatusMisdirectedRequest, "this server answers to http://"+s.name+" only")
		return
	}
	if tok := r.URL.Query().Get("token"); tok != "" || r.URL.Query().Has("token") {
		s.login(w, r, tok)
		return
	}
	l := s.logins.find(r)
	if l == nil {
		s.refuse(w, http.StatusUnauthorized, "open the URL `xmode ui` printed: it carries the token this server needs (a login ends after "+loginTTL.String()+", and with Log out)")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodPost:
		if err := s.checkPost(r, l); err != nil {
			s.refuse(w, http.StatusForbidden, err.Error())
			return
		}
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		s.refuse(w, http.StatusMethodNotAllowed, r.Method+" is not a method this server takes")
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), loginKey{}, l)))
}

// login trades the URL's token for a login of its own — a fresh random
// session, kept on the server with its CSRF token and an expiry — then
// sends the browser to the same page without the token, so that it leaves
// the address bar and is in no Referer.
func (s *Server) login(w http.ResponseWriter, r *http.Request, tok string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.refuse(w, http.StatusMethodNotAllowed, "the token is given with GET")
		return
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) != 1 {
		s.refuse(w, http.StatusUnauthorized, "wrong token: open the URL `xmode ui` printed")
		return
	}
	http.SetCookie(w, s.logins.add())
	q := r.URL.Query()
	q.Del("token")
	to := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	if to.Path == "" || !strings.HasPrefix(to.Path, "/") || strings.HasPrefix(to.Path, "//") {
		to.Path = "/"
	}
	http.Redirect(w, r, to.String(), http.StatusSeeOther)
}

// logout ends the request's login on the server: its cookie and its CSRF
// token are good for nothing from then on.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	s.logins.remove(loginOf(r))
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	s.render(w, r, http.StatusOK, &view{tmpl: "loggedout.html", title: "Logged out"})
}

// checkPost refuses a state-changing request from another origin, or
// without the CSRF token of the request's login.
func (s *Server) checkPost(r *http.Request, l *login) error {
	self := "http://" + r.Host
	switch origin := r.Header.Get("Origin"); {
	case origin != "":
		if origin != self {
			return fmt.Errorf("a request from %s, not from this page (%s): refused", origin, self)
		}
	default:
		ref, err := url.Parse(r.Header.Get("Referer"))
		if err != nil || ref.Scheme+"://"+ref.Host != self {
			return errors.New("a request that names no origin (Origin or Referer): refused")
		}
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("the form does not parse: %v", err)
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(l.csrf)) != 1 {
		return errors.New("the form's CSRF token is missing or wrong: reload the page and try again")
	}
	return nil
}

// refuse answers a request the checks refused: a short page, no data, and
// the connection closed.
func (s *Server) refuse(w http.ResponseWriter, code int, why string) {
	httpserve.Refuse(w, code, "xmode ui: "+why)
}

// routes: GET pages and POST actions; an action never answers GET.
func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /static/app.css", s.asset("assets/app.css", "text/css; charset=utf-8"))
	m.HandleFunc("GET /static/app.js", s.asset("assets/app.js", "text/javascript; charset=utf-8"))
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/runs", http.StatusSeeOther) })
	m.HandleFunc("GET /runs", s.page(s.runsPage))
	m.HandleFunc("GET /runs/{run}", s.page(s.runPage))
	m.HandleFunc("GET /runs/{run}/compare", s.page(s.comparePage))
	m.HandleFunc("GET /runs/{run}/steps/{seq}", s.page(s.stepPage))
	m.HandleFunc("GET /runs/{run}/steps/{seq}/live", s.live)
	m.HandleFunc("GET /crs", s.page(s.crsPage))
	m.HandleFunc("GET /crs/{cr}", s.page(s.crPage))
	m.HandleFunc("GET /crs/{cr}/patch", s.patchFile)
	m.HandleFunc("POST /crs/{cr}/review", s.page(s.review))
	m.HandleFunc("POST /crs/{cr}/export", s.page(s.export))
	m.HandleFunc("GET /sessions", s.page(s.sessionsPage))
	m.HandleFunc("GET /sessions/{session}", s.page(s.sessionPage))
	m.HandleFunc("POST /sessions/{session}/stop", s.page(s.stopSession))
	m.HandleFunc("POST /sessions/{session}/extend", s.page(s.extendSession))
	m.HandleFunc("GET /sessions/{session}/ports/{port}", s.openPort)
	m.HandleFunc("GET /machines", s.page(s.machinesPage))
	m.HandleFunc("GET /machines/{project}", s.page(s.machinePage))
	m.HandleFunc("GET /cloud", s.page(s.cloudPage))
	m.HandleFunc("GET /cloud/{session}", s.page(s.cloudTaskPage))
	m.HandleFunc("POST /logout", s.logout)
	s.mux = m
}

// Routes lists every route (method and pattern), for the tests that check
// each one refuses a request without the token.
func Routes() []string {
	return []string{
		"GET /", "GET /static/app.css", "GET /static/app.js", "GET /runs", "GET /runs/{run}",
		"GET /runs/{run}/steps/{seq}", "GET /runs/{run}/steps/{seq}/live", "GET /crs", "GET /crs/{cr}",
		"GET /crs/{cr}/patch", "POST /crs/{cr}/review", "POST /crs/{cr}/export", "GET /sessions",
		"GET /sessions/{session}", "POST /sessions/{session}/stop", "POST /sessions/{session}/extend", "GET /sessions/{session}/ports/{port}",
		"GET /machines", "GET /machines/{project}", "GET /cloud", "GET /cloud/{session}", "POST /logout",
	}
}

// asset serves one embedded file.
func (s *Server) asset(name, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := embedded.ReadFile(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "private, max-age=300")
		w.Write(b)
	}
}

// view is what a page handler returns: its template and its data, or a
// redirect after an action.
type view struct {
	tmpl     string
	title    string
	nav      string
	data     any
	redirect string
}

// page adapts a page handler: it renders the view in the layout, or the
// error with the status its kind says.
func (s *Server) page(fn func(r *http.Request) (*view, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := fn(r)
		if err != nil {
			s.errorPage(w, r, err)
			return
		}
		if v.redirect != "" {
			http.Redirect(w, r, v.redirect, http.StatusSeeOther)
			return
		}
		s.render(w, r, http.StatusOK, v)
	}
}

// layoutData is what every page's template gets: CSRF is the token of
// the request's login ("" when logged out).
type layoutData struct {
	Title string
	Nav   string
	CSRF  string
	Data  any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, code int, v *view) {
	t, err := s.template(v.tmpl)
	if err != nil {
		s.refuse(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	// An error half way through a page (the client went away) has nowhere
	// to go but the page itself, which is cut.
	csrf := ""
	if l := loginOf(r); l != nil && s.logins.live(l) {
		csrf = l.csrf
	}
	_ = t.ExecuteTemplate(w, "layout", layoutData{Title: v.title, Nav: v.nav, CSRF: csrf, Data: v.data})
}

// errorPage shows an error in the layout with the HTTP status of its
// kind, and a link back: to the page the failed request came from or
// belongs to (an action's item, a sub-page's item), else to its list.
func (s *Server) errorPage(w http.ResponseWriter, r *http.Request, err error) {
	code := fail.KindOf(err).HTTPStatus()
	back, to := backLink(r)
	s.render(w, r, code, &view{tmpl: "error.html", title: http.StatusText(code), data: errorData{errorParts(err), back, to}})
}

type errorData struct {
	Parts        []errorPart
	Back, BackTo string
}

// errorPart is a piece of an error's message: text, or the form field an
// input it names is given in (Field, a fragment of the page Back leads to).
type errorPart struct {
	Text, Field string
}

// formFields are the UI's words for the inputs a service's error names:
// the id of the field that gives it on the page the error leads back to,
// and what the field is called there.
var formFields = map[fail.Input]struct{ id, label string }{
	fail.Repo:        {"export-repo", "the export's repository"},
	fail.Branch:      {"export-branch", "the export's branch"},
	fail.Note:        {"note", "the review's note"},
	fail.Comment:     {"comments", "the review's comments on lines"},
	fail.CloseOthers: {"close-others", "\"close the run's other attempts\""},
	fail.TTL:         {"ttl", "the session's \"expires in\""},
	fail.Force:       {"force", "\"even while a step runs\""},
}

// errorParts is err's message in the UI's words: an input the page has a
// field for is a link to it, any other by its neutral name.
func errorParts(err error) []errorPart {
	var parts []errorPart
	for _, p := range fail.Parts(err) {
		switch f, ok := formFields[p.Input]; {
		case p.Input == "":
			parts = append(parts, errorPart{Text: p.Text})
		case ok:
			parts = append(parts, errorPart{Text: f.label, Field: f.id})
		default:
			parts = append(parts, errorPart{Text: string(p.Input)})
		}
	}
	return parts
}

// backLink is where an error page leads back to, made from the request's
// path pieces that are well-formed IDs only: a page of one thing (a run, a
// change request, a session) after an action on it or on a page below it,
// else the list it is in.
func backLink(r *http.Request) (path, name string) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	lists := map[string]string{"runs": "Runs", "crs": "Change requests", "sessions": "Sessions", "machines": "Machines", "cloud": "Cloud tasks"}
	prefix := map[string]string{"runs": "run_", "crs": "cr_", "sessions": "sbx_"}
	list, ok := lists[parts[0]]
	if !ok {
		return "/runs", "Runs"
	}
	if p := prefix[parts[0]]; p != "" && len(parts) > 1 && fsguard.ValidID(p, parts[1]) && (len(parts) > 2 || r.Method == http.MethodPost) {
		return "/" + parts[0] + "/" + parts[1], parts[1]
	}
	return "/" + parts[0], list
}

// template parses the templates once, the first time a page is shown (not
// when xmode starts: every command links this package).
func (s *Server) template(name string) (*template.Template, error) {
	s.tmplOnce.Do(func() {
		s.tmpl = map[string]*template.Template{}
		base, err := template.New("").Funcs(funcs).Funcs(template.FuncMap{"ago": func(t time.Time) string { return ago(t, s.now()) }}).ParseFS(embedded, "templates/layout.html")
		if err != nil {
			s.tmplErr = err
			return
		}
		pages, _ := fs.Glob(embedded, "templates/*.html")
		for _, p := range pages {
			name := strings.TrimPrefix(p, "templates/")
			if name == "layout.html" {
				continue
			}
			t, err := template.Must(base.Clone()).ParseFS(embedded, p)
			if err != nil {
				s.tmplErr = err
				return
			}
			s.tmpl[name] = t
		}
	})
	if s.tmplErr != nil {
		return nil, s.tmplErr
	}
	t := s.tmpl[name]
	if t == nil {
		return nil, fmt.Errorf("no template %s", name)
	}
	return t, nil
}

// funcs are the templates' functions: hostile text, times, numbers.
var funcs = template.FuncMap{
	"hostile":     hostile,
	"tryWords":    kindWords,
	"hostileText": hostileText,
	"first":       func(s string) template.HTML { return hostile(truncate(firstLine(s), 120)) },
	"when":        func(t time.Time) string { return t.Local().Format(time.DateTime) },
	"whenp": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.Local().Format(time.DateTime)
	},
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
	"dur": humanize.Duration,
	"add": func(a, b int) int { return a + b },
	// diffOf and commentsOf hand the shared diff templates (layout.html)
	// what they show.
	"diffOf": func(files []*diffFile, c commenter, split bool) diffView {
		return diffView{Files: files, C: c, Split: split}
	},
	"commentsOf": func(c commenter, path string, old, new, span int) lineComments {
		return lineComments{Comments: c.CommentsAt(path, old, new), Span: span}
	},
	"deref": func(b *bool) bool { return b != nil && *b },
}

// commenter is what a page's diff asks of its page: whether its lines take
// comments, and the comments that stand under a line.
type commenter interface {
	Commentable() bool
	CommentsAt(path string, old, new int) []store.Comment
}

// noComments: a diff whose lines take no comments (the compare page).
type noComments struct{}

func (noComments) Commentable() bool                           { return false }
func (noComments) CommentsAt(string, int, int) []store.Comment { return nil }

// diffView is the files of a page of a diff, for the "difffiles" template.
type diffView struct {
	Files []*diffFile
	C     commenter
	Split bool
}

// lineComments are the comments under one line, across span columns.
type lineComments struct {
	Comments []store.Comment
	Span     int
}

// ago says how long ago t was: 5s, 3m, 2h, 4d.
func ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}
