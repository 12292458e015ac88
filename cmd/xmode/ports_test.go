package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPortsOnHost: a host step's server listens on this machine already:
// `sandbox port` records its port and prints its URL, forwarding nothing;
// with --host-port it forwards from another host port, through a
// forwarder that outlives the command, until the sandbox stops.
func TestPortsOnHost(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	t.Cleanup(func() { xmode(t, root, "sandbox", "stop", id).Run() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	must := func(args ...string) run {
		t.Helper()
		r := runCmd(t, xmode(t, root, args...))
		if r.code != 0 {
			t.Fatalf("xmode %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		return r
	}
	must("sandbox", "exec", id, "--", "sh", "-c", "mkdir -p www && echo hello from the host > www/index.html")
	must("sandbox", "exec", id, "--detach", "--", "busybox", "httpd", "-f", "-p", "127.0.0.1:"+port, "-h", "www")
	r := must("sandbox", "port", id, port)
	url := strings.TrimSpace(r.stdout)
	if url != "http://127.0.0.1:"+port+"/" || !strings.Contains(r.stderr, "listens on this machine already") {
		t.Fatalf("sandbox port of a host step's server: %q\n%s", url, r.stderr)
	}
	httpGet(t, url, "hello from the host")
	must("sandbox", "port", id, port, "--close")
	fwd := strings.TrimSpace(must("sandbox", "port", id, port, "--host-port", "0").stdout)
	if fwd == url || !strings.HasPrefix(fwd, "http://127.0.0.1:") {
		t.Fatalf("--host-port 0 printed %q", fwd)
	}
	httpGet(t, fwd, "hello from the host")
	must("sandbox", "stop", id)
	addr := strings.TrimSuffix(strings.TrimPrefix(fwd, "http://"), "/")
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("the forwarder at %s outlived sandbox stop", addr)
	}
}
