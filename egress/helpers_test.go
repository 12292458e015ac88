package egress

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every test host is a server this test starts on a loopback address;
// every name is one the proxy resolves through the policy's Resolve
// (Config.ResolveOnly: no system resolver, no name leaves the machine).

// testCA is a certificate authority of the test's own, for its upstreams.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf is a server certificate for names, signed by the CA.
func (ca *testCA) leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) file(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// upstream is a test host: an HTTP server on a loopback address that
// remembers what it received.
type upstream struct {
	ln   net.Listener
	srv  *http.Server
	port int

	mu   sync.Mutex
	reqs []*http.Request
}

// newUpstream serves on addr (127.0.0.1, 127.0.0.2, …), with TLS when cert
// is given. "/echo" answers with the request's headers, "/big?n=N" with N
// bytes.
func newUpstream(t testing.TB, addr string, cert *tls.Certificate) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serve), ErrorLog: log.New(io.Discard, "", 0)}
	if cert != nil {
		u.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}}
		go u.srv.ServeTLS(ln, "", "")
	} else {
		go u.srv.Serve(ln)
	}
	t.Cleanup(func() { u.srv.Close() })
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.reqs = append(u.reqs, r)
	u.mu.Unlock()
	_, _ = io.Copy(io.Discard, r.Body)
	switch r.URL.Path {
	case "/echo":
		w.Header().Set("X-Echo-Api-Key", r.Header.Get("X-Api-Key"))
		_ = r.Header.Write(w)
	case "/big":
		var n int
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		buf := make([]byte, 32<<10)
		for n > 0 {
			k := min(n, len(buf))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	default:
		fmt.Fprintf(w, "hello from %s\n", r.Host)
	}
}

func (u *upstream) received() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.reqs...)
}

// proxyClient is an HTTP client that goes through the proxy at addr and
// trusts roots (the test's CA, the sandbox's CA).
func proxyClient(t testing.TB, addr string, roots ...[]byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	for _, r := range roots {
		if !pool.AppendCertsFromPEM(r) {
			t.Fatal("bad root")
		}
	}
	pu, _ := url.Parse("http://" + addr)
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
	}}
}

func get(c *http.Client, u string, hdr ...string) (int, string, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return 0, "", err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// records reads a network log.
func records(t testing.TB, path string) []Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// waitRecord waits for a log line that match accepts (a record is written
// when its connection ends, which may be just after the client is done).
func waitRecord(t testing.TB, path string, what string, match func(Record) bool) Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, r := range records(t, path) {
			if match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(path)
			t.Fatalf("no log line %s in:\n%s", what, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawConnect opens a CONNECT tunnel by hand and returns the connection and
// the proxy's status.
func rawConnect(t testing.TB, proxy, target string) (net.Conn, int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	req, _ := http.NewRequest("CONNECT", "http://"+target, nil)
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return c, resp.StatusCode, string(body)
	}
	return c, 200, ""
}

// rawRequest sends head (with \r\n line ends added) to the proxy and reads
// the status and body of its answer.
func rawRequest(t testing.TB, proxy string, lines ...string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	io.WriteString(c, strings.Join(lines, "\r\n")+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", lines[0], err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
