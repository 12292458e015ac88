package ui

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/sandbox"
)

// A published port opens through the UI behind its login, on a name of
// its own (another origin than the UI's): the session page's link makes a
// one-time ticket the port's name trades for a cookie of that name only;
// the sandbox's server gets neither the UI's cookie nor the port's, and a
// cookie it sets for a wider domain is kept to its own name. Without the
// UI's login, without the port's, or once the port is closed, nothing of
// the server is reached. The host engine's server listens on this machine
// already, so the port is published without a forwarder here.
func TestPortThroughTheUI(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.session()
	saw := make(chan *http.Request, 16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw <- r
		http.SetCookie(w, &http.Cookie{Name: "app", Value: "1", Path: "/", Domain: strings.Split(f.srv.Name(), ":")[0]})
		fmt.Fprintf(w, "hello from the sandbox's server at %s", r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	if _, err := f.svc.PublishPort(ctx, s, sandbox.PortOptions{Port: port}); err != nil {
		t.Fatal(err)
	}
	open := fmt.Sprintf("%s/sessions/%s/ports/%d", f.base, s.ID, port)

	anon := &http.Client{Transport: localTransport(), Timeout: 10 * time.Second}
	if code, _ := get(t, anon, open); code != http.StatusUnauthorized {
		t.Errorf("the port's link without the UI's login: %d", code)
	}
	c := f.client()
	var hops []string
	c.CheckRedirect = func(r *http.Request, _ []*http.Request) error { hops = append(hops, r.URL.String()); return nil }
	resp, err := c.Get(open)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hello from the sandbox's server at /" {
		t.Fatalf("the port through the UI: %d %q (hops %v)", resp.StatusCode, body, hops)
	}
	portHost := fmt.Sprintf("p%d-%s.%s", port, strings.TrimPrefix(s.ID, "sbx_"), f.srv.Name())
	if resp.Request.URL.Host != portHost {
		t.Errorf("served on %s, want the port's own name %s", resp.Request.URL.Host, portHost)
	}
	if sc := resp.Header.Get("Set-Cookie"); !strings.HasPrefix(sc, "app=1") || strings.Contains(strings.ToLower(sc), "domain") {
		t.Errorf("a cookie the server set for the UI's domain: %q", sc)
	}
	if got := (<-saw).Header.Get("Cookie"); got != "" {
		t.Errorf("the sandbox's server got cookies %q", got)
	}
	// Any path on the port's name is the server's, never the UI's.
	code, b := get(t, c, "http://"+portHost+"/runs")
	if code != http.StatusOK || b != "hello from the sandbox's server at /runs" {
		t.Errorf("/runs on the port's name: %d %q", code, b)
	}
	if r := <-saw; strings.Contains(r.Header.Get("Cookie"), "xmode_") {
		t.Errorf("the sandbox's server got xmode's cookies: %q", r.Header.Get("Cookie"))
	}
	// The ticket is good once; the port's name takes no UI login.
	if len(hops) < 2 || !strings.Contains(hops[0], portLoginPath) {
		t.Fatalf("hops: %v", hops)
	}
	jar, _ := cookiejar.New(nil)
	other := &http.Client{Transport: localTransport(), Jar: jar, Timeout: 10 * time.Second}
	if code, _ := get(t, other, hops[0]); code != http.StatusUnauthorized {
		t.Errorf("the ticket used a second time: %d", code)
	}
	if code, _ := get(t, anon, "http://"+portHost+"/"); code != http.StatusUnauthorized {
		t.Errorf("the port's name without its login: %d", code)
	}
	if err := f.svc.ClosePort(ctx, s, port); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, c, "http://"+portHost+"/"); code != http.StatusBadGateway {
		t.Errorf("a closed port: %d", code)
	}
}
