package main

import (
	"net"
	"net/http"
	"net/http/cgi"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// gitHTTPServer serves the repositories under dir over git's smart HTTP
// (git http-backend) on loopback, counting the requests it gets.
func gitHTTPServer(t *testing.T, dir string) (url string, requests *atomic.Int64) {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + dir, "GIT_HTTP_EXPORT_ALL=1"}}
	requests = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		backend.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), requests
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// sandbox_create names only repositories the user allowed: a repository
// served over HTTP on loopback, a closed port and a host path outside the
// client's roots and the server's directory are refused alike — one
// message whatever is underneath, the host's git never reaching them —
// and, once XMODE_MCP_REPOS allows them, the served one and the path work
// while the closed port, allowed, still gets that one message (git's
// reason in the server's log only).
func TestMCPRepositoryAllowList(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	served := filepath.Join(r.dir, "served")
	if out, err := exec.Command("git", "clone", "-q", "--bare", r.repo, filepath.Join(served, "repo.git")).CombinedOutput(); err != nil {
		t.Fatalf("git clone --bare: %v\n%s", err, out)
	}
	base, requests := gitHTTPServer(t, served)
	outside := filepath.Join(r.dir, "outside")
	if err := makeRepo(outside); err != nil {
		t.Fatal(err)
	}
	dead := "http://" + closedPort(t) + "/repo.git"
	live := base + "/repo.git"

	// The one message, with what the client named taken out.
	refusal := func(cs *mcp.ClientSession, repo string) string {
		t.Helper()
		res, _ := call(t, cs, "sandbox_create", map[string]any{"repository": repo})
		if !res.IsError {
			t.Fatalf("sandbox_create of %s: not refused", repo)
		}
		return strings.ReplaceAll(text(res), repo, "REPO")
	}
	cs := r.stdio(nil, nil)
	want := refusal(cs, live)
	if !strings.HasPrefix(want, "refused: repository \"REPO\" cannot be used") {
		t.Fatalf("the refusal: %s", want)
	}
	for _, repo := range []string{dead, outside, "file://" + outside, filepath.Join(r.repo, "..", "outside"), base + "/x/../repo.git"} {
		if got := refusal(cs, repo); got != want {
			t.Errorf("%s: %q; want the one refusal %q", repo, got, want)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("the host's git reached the loopback server %d times for repositories it refused", n)
	}

	// Allowed: the served repository and the path work; the closed port
	// fails with the same message. A pattern of paths takes what is under
	// it; a URL pattern, the repositories it matches.
	al := r.stdio(nil, []string{"XMODE_MCP_REPOS=http://127.0.0.1:*/*.git, " + r.dir + "/out*"})
	if made := ok(t, al, "sandbox_create", map[string]any{"repository": live}); str(made, "session", "repository") != live {
		t.Fatalf("an allowed URL: %v", made)
	}
	if requests.Load() == 0 {
		t.Fatal("the allowed repository was not fetched from the loopback server")
	}
	if made := ok(t, al, "sandbox_create", map[string]any{"repository": outside}); str(made, "session", "repository") != outside {
		t.Fatalf("an allowed path: %v", made)
	}
	if got := refusal(al, dead); got != want {
		t.Errorf("an allowed repository that cannot be read: %q; want the one refusal %q", got, want)
	}
	if got := refusal(al, base+"/x/../repo.git"); got != want {
		t.Errorf("an allowed URL with ..: %q", got)
	}
	// The server's directory is allowed as it is; a client's root and
	// what is under it.
	if made := ok(t, cs, "sandbox_create", nil); str(made, "session", "repository") != r.repo {
		t.Fatalf("the server's directory: %v", made)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "rooted", Version: "1"}, nil)
	client.AddRoots(&mcp.Root{URI: "file://" + r.dir})
	c := r.cli(nil, "mcp")
	c.Stderr = &testLog{t: t, prefix: "server: "}
	rooted, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rooted.Close() })
	if made := ok(t, rooted, "sandbox_create", map[string]any{"repository": "outside"}); str(made, "session", "repository") != outside {
		t.Fatalf("a path in the client's root: %v", made)
	}
	if got := refusal(rooted, served); got != want {
		t.Errorf("a directory in the root that is no repository: %q", got)
	}
}
