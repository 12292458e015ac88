package ui

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli/gittest"
	"github.com/xmode/xmode/internal/httpserve"
	_ "github.com/xmode/xmode/providers/local" // the host engine
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// fixture is a storage root with a real store, a real repository made by
// the git binary, the services the commands use, and the UI serving them
// on a loopback port, as `xmode ui` does.
type fixture struct {
	t    testing.TB
	dir  string
	root string
	repo string
	cfg  *config.Config
	st   *store.Store
	svc  *sandbox.Service
	cs   *changes.Service
	srv  *Server
	base string // http://xmode-PORT.localhost:PORT
	csrf string // the CSRF token of client's last login
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureWith(t, nil)
}

// newFixtureWith is newFixture with more configuration (an agent's
// template).
func newFixtureWith(t testing.TB, more map[string]string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, dir: dir, root: filepath.Join(dir, "root"), repo: filepath.Join(dir, "repo")}
	vars := map[string]string{"XMODE_STORAGE_ROOT": f.root, "XMODE_USER": "tester", "XMODE_SANDBOX_MAX_OPEN": "0",
		"XMODE_SANDBOX_ENGINE": "host", "HOME": dir, "PATH": os.Getenv("PATH")}
	for k, v := range more {
		vars[k] = v
	}
	cfg, err := config.Load(func(k string) string { return vars[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	if f.st, err = store.Open(context.Background(), f.root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.st.Close() })
	g := fsguard.Guard{Root: f.root}
	f.svc = &sandbox.Service{Cfg: cfg, Store: f.st, Guard: g}
	f.cs = &changes.Service{Store: f.st, Guard: g, MaxBytes: cfg.CRMaxBytes, User: cfg.User, Cfg: cfg}
	f.makeRepo()
	f.serve()
	return f
}

func (f *fixture) makeRepo() {
	gittest.Git(f.t, f.dir, "init", "-q", "-b", "main", f.repo)
	write(f.t, filepath.Join(f.repo, "main.go"), "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n")
	write(f.t, filepath.Join(f.repo, "README.md"), "# demo\n")
	gittest.Git(f.t, f.repo, "add", "-A")
	gittest.Git(f.t, f.repo, "commit", "-qm", "base")
}

func write(t testing.TB, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// serve starts the UI on a loopback port, as cmd's runUI does.
func (f *fixture) serve() {
	ln, err := httpserve.Listen("127.0.0.1:0", false)
	if err != nil {
		f.t.Fatal(err)
	}
	srv, err := New(Options{Svc: f.svc, Changes: f.cs, Addr: ln.Addr().String()})
	if err != nil {
		f.t.Fatal(err)
	}
	f.srv, f.base = srv, "http://"+srv.Name()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- httpserve.Serve(ctx, ln, srv, httpserve.Options{Base: ctx}) }()
	f.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// localTransport resolves *.localhost to loopback, as browsers and curl
// do (Go's resolver asks DNS, which does not know them).
func localTransport() *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, ".localhost") {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return d.DialContext(ctx, network, addr)
	}}
}

// session makes a session of the repository on the host engine.
func (f *fixture) session() *store.Session {
	f.t.Helper()
	s, err := f.svc.Create(context.Background(), sandbox.CreateOptions{Repo: f.repo})
	if err != nil {
		f.t.Fatalf("create: %v", err)
	}
	return s
}

// exec runs argv as one step of the session and returns its exit code.
func (f *fixture) exec(s *store.Session, argv ...string) int {
	f.t.Helper()
	var out bytes.Buffer
	res, err := f.svc.Exec(context.Background(), s, sandbox.ExecOptions{Argv: argv, LiveStdout: &out, LiveStderr: &out})
	if err != nil {
		f.t.Fatalf("step %q: %v\n%s", argv, err, out.String())
	}
	return res.ExitCode
}

func (f *fixture) worktree(s *store.Session) string {
	return filepath.Join(f.root, "runs", s.RunID, "worktree")
}

// changeRequest writes files into the session's worktree and freezes
// them into a change request.
func (f *fixture) changeRequest(s *store.Session, title string, files map[string]string) *changes.Package {
	f.t.Helper()
	for p, body := range files {
		write(f.t, filepath.Join(f.worktree(s), p), body)
	}
	p, err := f.cs.Create(context.Background(), s, changes.CreateOptions{Title: title})
	if err != nil {
		f.t.Fatalf("cr create: %v", err)
	}
	return p
}

// client is a browser-like HTTP client logged in with the token; f.csrf
// is its login's CSRF token, as its pages carry it.
func (f *fixture) client() *http.Client {
	f.t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: localTransport()}
	resp, err := c.Get(f.base + "/?token=" + f.srv.Token())
	if err != nil {
		f.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.RawQuery != "" {
		f.t.Fatalf("log in: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	m := csrfField.FindSubmatch(b)
	if m == nil {
		f.t.Fatalf("the page after logging in has no CSRF token")
	}
	f.csrf = string(m[1])
	return c
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// noRedirect is a client that shows redirects instead of following them.
func noRedirect(c *http.Client) *http.Client {
	n := *c
	n.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fifo makes a named pipe a step can wait on: it goes on when the test
// writes a line to it.
func fifo(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := mkfifo(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// release writes a line to a FIFO a step reads (blocking until it does).
// The step reads with `until read x < FIFO; do :; done`: a reader that
// opens the FIFO while the last release still holds it open meets its end
// of file, not a line, and must open it again.
func release(t testing.TB, p string) {
	t.Helper()
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString("go\n"); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Fatal(err)
	}
}

func contains2(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
