package cmd

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.Contains(url, "/?token=") {
		t.Fatalf("URL %q", url)
	}
	base, _, _ := strings.Cut(url, "/?token=")
	resp, err := http.Get(base + "/sessions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %d", resp.StatusCode)
	}
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
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

// Only loopback, unless --allow-remote; a bad address is a usage error.
func TestUIListen(t *testing.T) {
	c := newTestCLI(t)
	c.fails(2, "is not a loopback address", "ui", "--listen", "0.0.0.0:0")
	c.fails(2, "is not a loopback address", "ui", "--listen", ":8080")
	c.fails(2, "give HOST:PORT", "ui", "--listen", "localhost")
	c.fails(1, "listen on 127.0.0.1:99999", "ui", "--listen", "127.0.0.1:99999")
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
			resp, err := http.Get("http://127.0.0.1:" + port + "/runs")
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
