package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const testSecret = "sk-test-0123456789abcdef-SECRET"

// fixture is a proxy serving one sandbox, and the test hosts it may or may
// not reach: allowed.test (127.0.0.1) and denied.test (127.0.0.2), plain
// and TLS; cred.test and other.test (127.0.0.1, TLS) for credentials;
// badcert.test, whose certificate no one trusts.
type fixture struct {
	ca                    *testCA
	plain, plainDenied    *upstream
	tlsUp, tlsDenied, bad *upstream
	srv                   *Server
	dir                   string
	p                     Policy
	l                     Listening
	sandboxCA             []byte
	env                   map[string]string
	log                   string
}

func newFixture(t *testing.T, edit func(*Policy)) *fixture {
	t.Helper()
	f := &fixture{ca: newTestCA(t, "test upstream CA"), dir: t.TempDir(), env: map[string]string{"TEST_API_KEY": testSecret}}
	f.plain = newUpstream(t, "127.0.0.1", nil)
	f.plainDenied = newUpstream(t, "127.0.0.2", nil)
	leaf := f.ca.leaf(t, "allowed.test", "cred.test", "other.test")
	f.tlsUp = newUpstream(t, "127.0.0.1", &leaf)
	dleaf := f.ca.leaf(t, "denied.test")
	f.tlsDenied = newUpstream(t, "127.0.0.2", &dleaf)
	untrusted := newTestCA(t, "nobody trusts me").leaf(t, "badcert.test")
	f.bad = newUpstream(t, "127.0.0.1", &untrusted)

	p, err := Merge("sbx_test", ModeAllow,
		Source{Name: "--allow", Allow: []string{"allowed.test", "other.test", "lo2.test", "meta.test", "nat64.test", "127.0.0.1/32"}},
		// The test hosts' ports are not 443, which a credential allows.
		Source{Name: "--allow", Allow: []string{"cred.test", "badcert.test"}},
		Source{Name: "--credential", Credentials: []string{"cred.test=x-api-key:TEST_API_KEY", "badcert.test=x-api-key:TEST_API_KEY"}},
		Source{Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{
			"allowed.test=127.0.0.1", "cred.test=127.0.0.1", "other.test=127.0.0.1", "badcert.test=127.0.0.1",
			"denied.test=127.0.0.2", "lo2.test=127.0.0.2", "meta.test=169.254.169.254", "nat64.test=64:ff9b::a9fe:a9fe"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	p.Listen, p.DNS = "127.0.0.1:0", "127.0.0.1:0"
	if edit != nil {
		edit(&p)
	}
	f.p = p
	f.srv, err = NewServer(Options{Dir: f.dir, Config: Config{ResolveOnly: true, ExtraCAFile: f.ca.file(t)},
		Getenv: func(k string) string { return f.env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.srv.Close)
	if f.l, err = f.srv.Apply(p); err != nil {
		t.Fatal(err)
	}
	if f.sandboxCA, err = os.ReadFile(filepath.Join(CADir(f.dir, p.Sandbox), CACertFile)); err != nil {
		t.Fatal(err)
	}
	f.log = LogPath(f.dir, p.Sandbox)
	return f
}

func (f *fixture) client(t *testing.T) *http.Client {
	return proxyClient(t, f.l.Proxy, f.ca.pem, f.sandboxCA)
}

func (f *fixture) url(scheme, host string, u *upstream, path string) string {
	return fmt.Sprintf("%s://%s:%d%s", scheme, host, u.port, path)
}

func TestTunnelToAnAllowedHost(t *testing.T) {
	f := newFixture(t, nil)
	code, body, err := get(f.client(t), f.url("https", "allowed.test", f.tlsUp, "/"))
	if err != nil || code != 200 || !strings.Contains(body, "hello from allowed.test") {
		t.Fatalf("GET https://allowed.test through the proxy: %d %q %v", code, body, err)
	}
	r := waitRecord(t, f.log, "allowed connect", func(r Record) bool { return r.Kind == "connect" && r.Verdict == Allowed })
	if r.Host != "allowed.test" || r.Port != f.tlsUp.port || r.SNI != "allowed.test" || r.Rule != "allowed.test" || r.Source != "--allow" ||
		r.Address != "127.0.0.1:"+strconv.Itoa(f.tlsUp.port) || r.BytesUp < 100 || r.BytesDown < 100 || r.Sandbox != "sbx_test" || r.Client == "" {
		t.Fatalf("record: %+v", r)
	}
}

func TestTunnelRefusals(t *testing.T) {
	f := newFixture(t, nil)
	// A name no rule names: refused before any connection.
	if _, _, err := get(f.client(t), f.url("https", "denied.test", f.tlsDenied, "/")); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("denied.test: %v", err)
	}
	r := waitRecord(t, f.log, "denied.test", func(r Record) bool { return r.Host == "denied.test" })
	if r.Verdict != Denied || r.Rule != "no rule" || !strings.Contains(r.Reason, "no allow rule names denied.test") {
		t.Fatalf("record: %+v", r)
	}

	// The denied host's address, directly: loopback, and no CIDR rule lifts 127.0.0.2.
	_, code, msg := rawConnect(t, f.l.Proxy, "127.0.0.2:"+strconv.Itoa(f.tlsDenied.port))
	if code != 403 || !strings.Contains(msg, "loopback") {
		t.Fatalf("CONNECT 127.0.0.2: %d %q", code, msg)
	}
	// A name allowed by a rule that resolves to a blocked address: refused
	// before a connection (the metadata address is never dialled).
	for _, host := range []string{"lo2.test", "meta.test", "nat64.test"} {
		_, code, msg := rawConnect(t, f.l.Proxy, host+":443")
		if code != 403 || !strings.Contains(msg, "resolves to a refused address") {
			t.Fatalf("CONNECT %s: %d %q", host, code, msg)
		}
	}
	r = waitRecord(t, f.log, "meta.test", func(r Record) bool { return r.Host == "meta.test" })
	if r.Verdict != Denied || r.Rule != "block list" || !strings.Contains(r.Reason, "169.254.169.254 is blocked: link-local") {
		t.Fatalf("meta.test record: %+v", r)
	}
	if len(f.tlsDenied.received()) != 0 || len(f.plainDenied.received()) != 0 {
		t.Fatal("the denied host received requests")
	}
}

// The CONNECT target and the TLS SNI must agree: no domain fronting.
func TestTunnelChecksTheSNI(t *testing.T) {
	f := newFixture(t, nil)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.ca.pem)
	for _, c := range []struct{ target, sni, says string }{
		{"allowed.test", "denied.test", `SNI "denied.test" does not name the CONNECT target allowed.test`},
		{"allowed.test", "", "names no host"},
		{"127.0.0.1", "denied.test", "the CONNECT target is the address"},
	} {
		conn, code, _ := rawConnect(t, f.l.Proxy, c.target+":"+strconv.Itoa(f.tlsUp.port))
		if code != 200 {
			t.Fatalf("CONNECT %s: %d", c.target, code)
		}
		tc := tls.Client(conn, &tls.Config{ServerName: c.sni, RootCAs: roots, InsecureSkipVerify: c.sni == ""})
		if err := tc.Handshake(); err == nil {
			t.Fatalf("CONNECT %s with SNI %q: the handshake went through", c.target, c.sni)
		}
		r := waitRecord(t, f.log, c.says, func(r Record) bool { return strings.Contains(r.Reason, c.says) })
		if r.Verdict != Denied || r.Rule != "sni" || r.SNI != c.sni {
			t.Fatalf("record: %+v", r)
		}
	}
	// An address named by a CIDR rule, with no SNI: allowed.
	conn, code, _ := rawConnect(t, f.l.Proxy, "127.0.0.1:"+strconv.Itoa(f.tlsUp.port))
	if code != 200 {
		t.Fatalf("CONNECT 127.0.0.1: %d", code)
	}
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("CONNECT to an allowed address: %v", err)
	}
	tc.Close()
	// Anything but TLS in a tunnel is refused.
	conn, _, _ = rawConnect(t, f.l.Proxy, "allowed.test:"+strconv.Itoa(f.plain.port))
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if b, _ := io.ReadAll(conn); len(b) != 0 {
		t.Fatalf("plain text through a tunnel got %q", b)
	}
	waitRecord(t, f.log, "not TLS", func(r Record) bool { return strings.Contains(r.Reason, "a tunnel carries TLS only") })
	if len(f.plain.received()) != 0 {
		t.Fatal("plain text reached the upstream through a tunnel")
	}
}

func TestPlainHTTP(t *testing.T) {
	f := newFixture(t, nil)
	code, body, err := get(f.client(t), f.url("http", "allowed.test", f.plain, "/"))
	if err != nil || code != 200 || !strings.Contains(body, "hello from allowed.test") {
		t.Fatalf("GET http://allowed.test: %d %q %v", code, body, err)
	}
	r := waitRecord(t, f.log, "http allowed", func(r Record) bool { return r.Kind == "http" && r.Verdict == Allowed })
	if r.Host != "allowed.test" || r.Method != "GET" || r.Status != 200 || r.BytesDown != int64(len(body)) || r.Rule != "allowed.test" ||
		r.Address != "127.0.0.1:"+strconv.Itoa(f.plain.port) {
		t.Fatalf("record: %+v", r)
	}
	code, _, _ = get(f.client(t), f.url("http", "denied.test", f.plainDenied, "/"))
	if code != 403 {
		t.Fatalf("GET http://denied.test: %d", code)
	}

	port := strconv.Itoa(f.plain.port)
	for _, c := range []struct {
		lines []string
		code  int
		says  string
	}{
		// A forged Host: the URI says allowed.test, the header denied.test.
		{[]string{"GET http://allowed.test:" + port + "/ HTTP/1.1", "Host: denied.test:" + port}, 403, "does not name the request's host"},
		{[]string{"GET http://allowed.test:" + port + "/ HTTP/1.1", "Host: allowed.test"}, 403, "does not name the request's host"}, // another port
		{[]string{"TRACE http://allowed.test:" + port + "/ HTTP/1.1", "Host: allowed.test:" + port}, 405, "not forwarded"},
		{[]string{"GET / HTTP/1.1", "Host: allowed.test:" + port}, 400, "egress proxy"},
		{[]string{"GET https://allowed.test:" + port + "/ HTTP/1.1", "Host: allowed.test:" + port}, 400, "through CONNECT"},
		{[]string{"GET http://allowed.test:" + port + "/ HTTP/1.1", "Host: allowed.test:" + port, "Connection: Upgrade", "Upgrade: websocket"}, 403, "upgrades"},
		{[]string{"GET http://127.0.0.2:" + strconv.Itoa(f.plainDenied.port) + "/ HTTP/1.1", "Host: 127.0.0.2:" + strconv.Itoa(f.plainDenied.port)}, 403, "loopback"},
	} {
		code, body := rawRequest(t, f.l.Proxy, c.lines...)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%q: %d %q, want %d saying %q", c.lines, code, body, c.code, c.says)
		}
	}
	if n := len(f.plain.received()); n != 1 {
		t.Fatalf("allowed.test received %d requests, want the one allowed", n)
	}
	if len(f.plainDenied.received()) != 0 {
		t.Fatal("denied.test received a request")
	}
	r = waitRecord(t, f.log, "forged host", func(r Record) bool { return r.HostHeader == "denied.test:"+port })
	if r.Verdict != Denied || r.Host != "allowed.test" {
		t.Fatalf("forged Host record: %+v", r)
	}
}

func TestDenyRuleWins(t *testing.T) {
	f := newFixture(t, func(p *Policy) {
		r, _ := ParseRule("*.test", "plan build", false)
		p.Allow = append(p.Allow, r)
		d, _ := ParseRule("other.test", "XMODE_SANDBOX_DENY", true)
		p.Deny = append(p.Deny, d)
	})
	if code, _, err := get(f.client(t), f.url("https", "other.test", f.tlsUp, "/")); err == nil {
		t.Fatalf("other.test: %d", code)
	}
	r := waitRecord(t, f.log, "other.test", func(r Record) bool { return r.Host == "other.test" })
	if r.Verdict != Denied || r.Rule != "other.test" || r.Source != "XMODE_SANDBOX_DENY" {
		t.Fatalf("record: %+v", r)
	}
}

// A policy change holds for the next connection, with no restart.
func TestPolicyChangeTakesEffectAtOnce(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client(t)
	u := f.url("https", "allowed.test", f.tlsUp, "/")
	if code, _, err := get(c, u); err != nil || code != 200 {
		t.Fatalf("before: %d %v", code, err)
	}
	p := f.p
	d, _ := ParseRule("allowed.test", "sandbox network --deny", true)
	p.Deny = append(p.Deny, d)
	if l, err := f.srv.Apply(p); err != nil || l.Proxy != f.l.Proxy {
		t.Fatalf("Apply: %v %v", l, err)
	}
	if _, _, err := get(c, u); err == nil {
		t.Fatal("allowed.test still reachable after a deny rule was added")
	}
	r := waitRecord(t, f.log, "denied by the new rule", func(r Record) bool { return r.Source == "sandbox network --deny" })
	if r.Verdict != Denied {
		t.Fatalf("record: %+v", r)
	}
	p.Deny = nil
	if _, err := f.srv.Apply(p); err != nil {
		t.Fatal(err)
	}
	if code, _, err := get(c, u); err != nil || code != 200 {
		t.Fatalf("after lifting it: %d %v", code, err)
	}
}

// One process serves several sandboxes, each known by its listener.
func TestSandboxesApart(t *testing.T) {
	f := newFixture(t, nil)
	q, err := Merge("sbx_other", ModeAllow, Source{Name: "--allow", Allow: []string{"other.test", "127.0.0.1/32"}},
		Source{Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{"other.test=127.0.0.1", "allowed.test=127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	q.Listen = "127.0.0.1:0"
	lq, err := f.srv.Apply(q)
	if err != nil {
		t.Fatal(err)
	}
	cq := proxyClient(t, lq.Proxy, f.ca.pem)
	if _, _, err := get(cq, f.url("https", "allowed.test", f.tlsUp, "/")); err == nil {
		t.Fatal("sbx_other reached allowed.test, which only sbx_test may")
	}
	if code, _, err := get(cq, f.url("https", "other.test", f.tlsUp, "/")); err != nil || code != 200 {
		t.Fatalf("sbx_other to other.test: %d %v", code, err)
	}
	if code, _, err := get(f.client(t), f.url("https", "allowed.test", f.tlsUp, "/")); err != nil || code != 200 {
		t.Fatalf("sbx_test to allowed.test: %d %v", code, err)
	}
	waitRecord(t, LogPath(f.dir, "sbx_other"), "sbx_other's own", func(r Record) bool { return r.Host == "other.test" && r.Sandbox == "sbx_other" })
	for _, r := range records(t, f.log) {
		if r.Sandbox != "sbx_test" || r.Host == "other.test" {
			t.Fatalf("sbx_test's log holds %+v", r)
		}
	}
	f.srv.Remove("sbx_other")
	if _, _, err := get(cq, f.url("https", "other.test", f.tlsUp, "/")); err == nil {
		t.Fatal("a removed sandbox's listener still answers")
	}
}

// Credentials: the secret reaches the credential host's upstream in the
// header, never the sandbox, the log, or any other host.
func TestCredentialAddedAtTheEdge(t *testing.T) {
	f := newFixture(t, nil)
	ph := f.p.Credentials[0].Placeholder
	c := f.client(t)

	// The placeholder in the header becomes the secret.
	code, body, err := get(c, f.url("https", "cred.test", f.tlsUp, "/echo"), "X-Api-Key", ph)
	if err != nil || code != 200 {
		t.Fatalf("cred.test: %d %v", code, err)
	}
	reqs := f.tlsUp.received()
	if got := reqs[len(reqs)-1].Header.Get("X-Api-Key"); got != testSecret {
		t.Fatalf("the upstream received X-Api-Key %q, want the secret", got)
	}
	// It echoed the header back: the sandbox reads it masked.
	if strings.Contains(body, testSecret) || !strings.Contains(body, "***") {
		t.Fatalf("the response carried the secret back to the sandbox: %q", body)
	}
	// Without the header, the proxy adds it.
	if code, _, err := get(c, f.url("https", "cred.test", f.tlsUp, "/echo")); err != nil || code != 200 {
		t.Fatalf("cred.test without the header: %d %v", code, err)
	}
	reqs = f.tlsUp.received()
	if got := reqs[len(reqs)-1].Header.Get("X-Api-Key"); got != testSecret {
		t.Fatalf("the proxy did not add the header: %q", got)
	}
	// Another host gets the placeholder as the sandbox sent it.
	if code, _, err := get(c, f.url("https", "other.test", f.tlsUp, "/echo"), "X-Api-Key", ph); err != nil || code != 200 {
		t.Fatalf("other.test: %d %v", code, err)
	}
	reqs = f.tlsUp.received()
	if r := reqs[len(reqs)-1]; r.Host != "other.test:"+strconv.Itoa(f.tlsUp.port) || r.Header.Get("X-Api-Key") != ph {
		t.Fatalf("other.test received %s X-Api-Key %q, want the placeholder", r.Host, r.Header.Get("X-Api-Key"))
	}
	rec := waitRecord(t, f.log, "https to cred.test", func(r Record) bool { return r.Kind == "https" && r.Host == "cred.test" })
	if rec.Verdict != Allowed || rec.Credential != "X-Api-Key from TEST_API_KEY" || rec.SNI != "cred.test" || rec.Status != 200 || rec.Rule != "cred.test" || rec.Address == "" {
		t.Fatalf("record: %+v", rec)
	}

	// An upstream whose certificate the proxy cannot verify: refused.
	code, body, err = get(c, f.url("https", "badcert.test", f.bad, "/echo"), "X-Api-Key", ph)
	if err != nil || code != 502 || !strings.Contains(body, "not trusted") {
		t.Fatalf("badcert.test: %d %q %v", code, body, err)
	}
	if len(f.bad.received()) != 0 {
		t.Fatal("the untrusted upstream received a request (and the secret)")
	}
	waitRecord(t, f.log, "badcert error", func(r Record) bool { return r.Host == "badcert.test" && r.Verdict == Failed })

	// Inside the credential host's tunnel, a request for another host is
	// refused: the secret must not follow a forged Host.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.sandboxCA)
	conn, code, _ := rawConnect(t, f.l.Proxy, "cred.test:"+strconv.Itoa(f.tlsUp.port))
	if code != 200 {
		t.Fatalf("CONNECT cred.test: %d", code)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: "cred.test", RootCAs: roots})
	n := len(f.tlsUp.received())
	fmt.Fprintf(tc, "GET /echo HTTP/1.1\r\nHost: other.test:%d\r\nX-Api-Key: %s\r\n\r\n", f.tlsUp.port, ph)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("a forged Host inside the tunnel: %v %v", resp, err)
	}
	if len(f.tlsUp.received()) != n {
		t.Fatal("a request for another host went out of the credential host's tunnel")
	}

	// A fronted SNI on the credential host's tunnel: the handshake fails.
	conn, _, _ = rawConnect(t, f.l.Proxy, "cred.test:"+strconv.Itoa(f.tlsUp.port))
	if err := tls.Client(conn, &tls.Config{ServerName: "other.test", RootCAs: roots}).Handshake(); err == nil {
		t.Fatal("a fronted SNI passed the credential host's tunnel")
	}
	waitRecord(t, f.log, "fronted SNI on cred.test", func(r Record) bool { return r.Host == "cred.test" && r.Rule == "sni" })

	// Plain text inside the credential host's tunnel: refused.
	conn, _, _ = rawConnect(t, f.l.Proxy, "cred.test:"+strconv.Itoa(f.tlsUp.port))
	fmt.Fprintf(conn, "GET /echo HTTP/1.1\r\nHost: cred.test:%d\r\n\r\n", f.tlsUp.port)
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("plain text in the credential tunnel: %v %v", resp, err)
	}

	// The secret is in no log line.
	f.srv.Close()
	b, _ := os.ReadFile(f.log)
	if strings.Contains(string(b), testSecret) {
		t.Fatalf("the log holds the secret:\n%s", b)
	}
	if !strings.Contains(string(b), "X-Api-Key from TEST_API_KEY") {
		t.Fatalf("the log does not say which credential was added:\n%s", b)
	}
}

// A credential whose secret cannot be read fails the policy: nothing is
// served half-configured.
func TestCredentialWithoutItsSecret(t *testing.T) {
	f := newFixture(t, nil)
	p := f.p
	p.Sandbox = "sbx_nokey"
	p.Credentials = append([]Credential(nil), p.Credentials...)
	p.Credentials[0].Env = "UNSET_KEY"
	if _, err := f.srv.Apply(p); err == nil || !strings.Contains(err.Error(), "UNSET_KEY is empty or unset") {
		t.Fatalf("Apply: %v", err)
	}
	p.Credentials[0].Env, p.Credentials[0].File = "", filepath.Join(t.TempDir(), "key")
	os.WriteFile(p.Credentials[0].File, []byte("line\nbreak\n"), 0o600)
	if _, err := f.srv.Apply(p); err == nil || !strings.Contains(err.Error(), "cannot be sent in a header") {
		t.Fatalf("Apply: %v", err)
	}
	os.WriteFile(p.Credentials[0].File, []byte(testSecret+"\n"), 0o600)
	if _, err := f.srv.Apply(p); err != nil {
		t.Fatalf("Apply with a secret file: %v", err)
	}
}

func TestPlainDownloadCounts(t *testing.T) {
	f := newFixture(t, nil)
	const n = 3 << 20
	code, body, err := get(f.client(t), f.url("https", "allowed.test", f.tlsUp, "/big?n="+strconv.Itoa(n)))
	if err != nil || code != 200 || len(body) != n {
		t.Fatalf("download: %d %d %v", code, len(body), err)
	}
	r := waitRecord(t, f.log, "download", func(r Record) bool { return r.Kind == "connect" && r.Verdict == Allowed })
	if r.BytesDown < n || r.DurationMS <= 0 {
		t.Fatalf("record: %+v", r)
	}
	s, err := SummarizeFile(f.log, time.Time{}, time.Time{})
	if err != nil || s.Connections != 1 || s.BytesDown != r.BytesDown || s.Hosts[0].Host != "allowed.test" {
		t.Fatalf("summary %+v %v", s, err)
	}
}
