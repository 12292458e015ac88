package cmd

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xmode/xmode/internal/httpserve"
)

// lockedBuffer is a buffer a running command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// `xmode ui` prints a loopback URL with its token, serves the storage
// root's runs to a client that opened it (and to none without it), and
// stops, exit 0, when it is interrupted.
func TestUIServesAndStops(t *testing.T) {
	c := newTestCLI(t)
	sid := strings.TrimSpace(c.ok("sandbox", "create", "--repo", testRepo(t), "-q"))
	var out, errOut lockedBuffer
	app := &App{In: strings.NewReader(""), Out: &out, Err: &errOut, Env: func(k string) string { return c.env[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- app.Run(ctx, []string{"ui"}) }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "\n") {
		if time.Now().After(deadline) {
			t.Fatalf("no URL: stdout %q, stderr %q", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	url := strings.TrimSpace(out.String())
	if !strings.HasPrefix(url, "http://xmode-") || !strings.Contains(url, ".localhost:") || !strings.Contains(url, "/?token=") {
		t.Fatalf("URL %q", url)
	}
	base, _, _ := strings.Cut(url, "/?token=")
	resp, err := localClient(nil).Get(base + "/sessions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %d", resp.StatusCode)
	}
	jar, _ := cookiejar.New(nil)
	client := localClient(jar)
	if resp, err = client.Get(url); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = client.Get(base + "/sessions")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), sid) {
		t.Errorf("with the token: %d, session shown %v", resp.StatusCode, strings.Contains(string(b), sid))
	}
	cancel()
	select {
	case got := <-code:
		if got != 0 {
			t.Errorf("exit %d after the interrupt: %s", got, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("xmode ui did not stop")
	}
}

// localClient reaches *.localhost on loopback, as browsers and curl do
// (Go's resolver asks DNS, which does not know them).
func localClient(jar http.CookieJar) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if host, port, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, ".localhost") {
				addr = net.JoinHostPort("127.0.0.1", port)
			}
			return d.DialContext(ctx, network, addr)
		}}}
}

// serveBriefly runs a serving command until it has said where it serves
// (or ended), then interrupts it: its exit code and what it wrote.
func serveBriefly(t *testing.T, c *testCLI, args ...string) (int, string) {
	t.Helper()
	var out, errOut lockedBuffer
	app := &App{In: strings.NewReader(""), Out: &out, Err: &errOut, Env: func(k string) string { return c.env[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() { code <- app.Run(ctx, args) }()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case got := <-code:
			return got, errOut.String()
		case <-deadline:
			t.Fatalf("xmode %s neither served nor ended: %q %q", strings.Join(args, " "), out.String(), errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
		if strings.Contains(errOut.String(), "serving") {
			cancel()
			return <-code, errOut.String()
		}
	}
}

// xmode ui and xmode mcp --listen answer alike for the same --listen:
// loopback, or another address with --allow-remote; an empty host (every
// interface) never; a bad address is a usage error, a port that cannot be
// had a failure — with the same words.
func TestListenPolicyIsOne(t *testing.T) {
	c := newTestCLI(t)
	c.env["XMODE_MCP_TOKEN"] = strings.Repeat("t", 32)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0"}, 0, "serving"},
		{[]string{"--listen", "127.0.0.1:0", "--allow-remote"}, 0, "serving"},
		{[]string{"--listen", "localhost:0"}, 0, "serving"},
		{[]string{"--listen", "0.0.0.0:0"}, 2, "--listen 0.0.0.0:0 is reachable from other machines"},
		{[]string{"--listen", "0.0.0.0:0", "--allow-remote"}, 0, "serving"},
		{[]string{"--listen", ":0"}, 2, `--listen ":0" listens on every interface`},
		{[]string{"--listen", ":0", "--allow-remote"}, 2, `--listen ":0" listens on every interface`},
		{[]string{"--listen", "localhost"}, 2, "give HOST:PORT"},
		{[]string{"--listen", "127.0.0.1:99999"}, 1, "listen on 127.0.0.1:99999"},
	} {
		var said [2]string
		for i, cmd := range []string{"ui", "mcp"} {
			code, stderr := serveBriefly(t, c, append([]string{cmd}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("xmode %s %s: exit %d, want %d saying %q:\n%s", cmd, strings.Join(tc.args, " "), code, tc.code, tc.want, stderr)
			}
			if code != 0 {
				said[i] = strings.ReplaceAll(stderr, "xmode "+cmd, "xmode CMD")
			}
		}
		if said[0] != said[1] {
			t.Errorf("%s: xmode ui and xmode mcp say it differently:\n%s\n%s", strings.Join(tc.args, " "), said[0], said[1])
		}
	}
}

// --open hands xdg-open a file (mode 0600) that redirects to the URL, so
// the token is on no command line; the file goes when xmode ui stops.
// --allow-remote serves on an address that is not loopback.
func TestUIOpenAndAllowRemote(t *testing.T) {
	c := newTestCLI(t)
	bin := t.TempDir()
	got := filepath.Join(bin, "opened")
	script := "#!/bin/sh\n{ printf '%s\\n' \"$#\" \"$1\"; stat -c %a \"$1\"; cat \"$1\"; } > " + got + ".tmp && mv " + got + ".tmp " + got + "\n"
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, args := range [][]string{{"ui", "--open"}, {"ui", "--listen", "0.0.0.0:0", "--allow-remote"}} {
		os.Remove(got)
		var out, errOut lockedBuffer
		app := &App{In: strings.NewReader(""), Out: &out, Err: &errOut, Env: func(k string) string { return c.env[k] }}
		ctx, cancel := context.WithCancel(context.Background())
		code := make(chan int, 1)
		go func() { code <- app.Run(ctx, args) }()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(out.String(), "\n") {
			if time.Now().After(deadline) {
				t.Fatalf("%v: no URL: stdout %q, stderr %q", args, out.String(), errOut.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		url := strings.TrimSpace(out.String())
		_, port, _ := strings.Cut(strings.TrimPrefix(url, "http://"), ":")
		port, _, _ = strings.Cut(port, "/")
		if args[1] == "--open" {
			for {
				if _, err := os.Stat(got); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("xdg-open was not run: stderr %q", errOut.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			b, _ := os.ReadFile(got)
			lines := strings.SplitN(string(b), "\n", 4)
			if len(lines) < 4 || lines[0] != "1" || lines[2] != "600" || !strings.Contains(lines[3], `content="0;url=`+url+`"`) {
				t.Errorf("what xdg-open got: %q", b)
			}
			defer func(page string) {
				if _, err := os.Stat(page); !os.IsNotExist(err) {
					t.Errorf("the page for xdg-open is still there after xmode ui stopped: %v", err)
				}
			}(lines[1])
		} else {
			// Reached by the loopback address though it listens on all.
			resp, err := localClient(nil).Get("http://127.0.0.1:" + port + "/runs")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("--allow-remote without the token: %d", resp.StatusCode)
			}
		}
		cancel()
		select {
		case n := <-code:
			if n != 0 {
				t.Errorf("%v: exit %d: %s", args, n, errOut.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%v: xmode ui did not stop", args)
		}
	}
}

// startServing runs a serving command until the test ends and returns the
// loopback address it listens on, read from what it printed.
func startServing(t *testing.T, c *testCLI, addrIn func(out, errOut string) string, args ...string) string {
	t.Helper()
	var out, errOut lockedBuffer
	app := &App{In: strings.NewReader(""), Out: &out, Err: &errOut, Env: func(k string) string { return c.env[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- app.Run(ctx, args) }()
	t.Cleanup(func() { cancel(); <-code })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if addr := addrIn(out.String(), errOut.String()); addr != "" {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("xmode %s did not start: %q %q", strings.Join(args, " "), out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var servedPort = regexp.MustCompile(`http://[^/\s]*:(\d+)/`)

// Both servers hold connections without credentials only so long: with
// httpserve.DefaultMaxConns silent connections open, the next request
// waits (the cap holds), and once the silent ones are dropped at the
// read-header deadline it is answered — with a refusal that closes its
// connection.
func TestServersBoundConnections(t *testing.T) {
	c := newTestCLI(t)
	c.env["XMODE_MCP_TOKEN"] = strings.Repeat("t", 32)
	port := func(out, errOut string) string {
		if m := servedPort.FindStringSubmatch(out + errOut); m != nil {
			return "127.0.0.1:" + m[1]
		}
		return ""
	}
	// Started one after the other (App.Run sets globals), checked at once.
	type server struct{ name, addr, host string }
	var servers []server
	for _, args := range [][]string{{"ui"}, {"mcp", "--listen", "127.0.0.1:0"}} {
		addr := startServing(t, c, port, args...)
		host := addr
		if args[0] == "ui" {
			_, p, _ := net.SplitHostPort(addr)
			host = "xmode-" + p + ".localhost:" + p
		}
		servers = append(servers, server{args[0], addr, host})
	}
	for _, srv := range servers {
		addr := srv.addr
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			var silent []net.Conn
			for range httpserve.DefaultMaxConns {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				silent = append(silent, conn)
			}
			start := time.Now()
			asker, err := net.Dial("tcp", addr) // the kernel takes it; the server does not yet
			if err != nil {
				t.Fatal(err)
			}
			defer asker.Close()
			io.WriteString(asker, "GET /mcp HTTP/1.1\r\nHost: "+srv.host+"\r\n\r\n")
			asker.SetReadDeadline(time.Now().Add(2 * time.Second))
			if n, err := asker.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Fatalf("a request over the cap was answered at once (%d bytes, %v)", n, err)
			}
			silent[0].SetReadDeadline(time.Now().Add(httpserve.DefaultReadHeaderTimeout + 10*time.Second))
			if _, err := io.Copy(io.Discard, silent[0]); err != nil {
				t.Fatalf("a silent connection was not dropped: %v", err)
			}
			if took := time.Since(start); took > httpserve.DefaultReadHeaderTimeout+5*time.Second {
				t.Errorf("a silent connection was dropped after %v", took)
			}
			asker.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(asker), nil)
			if err != nil {
				t.Fatalf("the request over the cap, once the silent ones were dropped: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusMisdirectedRequest || !resp.Close {
				t.Errorf("the request without credentials: %d, close %v", resp.StatusCode, resp.Close)
			}
		})
	}
}
