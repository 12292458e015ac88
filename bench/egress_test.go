package bench

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/egress"
)

// The egress proxy (`xmode __egress`, docs/network.md) against going
// direct, side by side: time to first byte of a fresh HTTPS connection, a
// 100 MB download's throughput, and the process's memory with 20
// sandboxes holding 50 connections each. Every host is a server on
// loopback the benchmark starts; names resolve through the policy.

// egressUpstream is an HTTPS test host on 127.0.0.1 for up.test: "/" says
// hello, "/big?n=N" sends N bytes. It returns its port and its CA.
func egressUpstream(b *testing.B) (int, *x509.CertPool) {
	b.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "up.test"}, DNSNames: []string{"up.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256<<10)
	srv := &http.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			if n == 0 {
				io.WriteString(w, "hello\n")
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(n))
			for n > 0 {
				k := min(n, len(buf))
				if _, err := w.Write(buf[:k]); err != nil {
					return
				}
				n -= k
			}
		})}
	go srv.ServeTLS(ln, "", "")
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port, pool
}

// egressProcess starts `xmode __egress` serving n sandboxes that may reach
// up.test, and returns the process and each sandbox's proxy address.
func egressProcess(b *testing.B, n int) (*exec.Cmd, []string) {
	b.Helper()
	dir := b.TempDir()
	if err := egress.WriteConfig(dir, egress.Config{ResolveOnly: true}); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		p, err := egress.Merge(fmt.Sprintf("sbx_%02d", i), egress.ModeAllow,
			egress.Source{Name: "bench", Allow: []string{"up.test", "127.0.0.1/32"}, Resolve: []string{"up.test=127.0.0.1"}})
		if err != nil {
			b.Fatal(err)
		}
		p.Listen, p.DNS = "127.0.0.1:0", "127.0.0.1:0"
		if _, err := egress.WritePolicy(dir, p); err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command(xmodeBin(b), "__egress", "--dir", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	addrs := make([]string, n)
	deadline := time.Now().Add(20 * time.Second)
	for i := range n {
		for {
			st, err := egress.ReadState(dir, fmt.Sprintf("sbx_%02d", i))
			if err == nil && st.Proxy != "" {
				addrs[i] = st.Proxy
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the proxy did not start sandbox %d: %v", i, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return cmd, addrs
}

func egressClient(proxy string, roots *x509.CertPool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}
	if proxy != "" {
		pu, _ := url.Parse("http://" + proxy)
		tr.Proxy = http.ProxyURL(pu)
	} else {
		// Direct: up.test is this loopback host, as the proxy resolves it.
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, "127.0.0.1:"+port)
		}
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// firstByte is the time from a fresh connection to the first byte of the
// response body.
func firstByte(b *testing.B, c *http.Client, u string) time.Duration {
	start := time.Now()
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadByte(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkEgressFirstByte: a fresh HTTPS request's time to first byte
// through the proxy and direct, and through a bare CONNECT relay (the
// floor of any proxy: the hop alone). Target: ≤ 1.5× direct.
func BenchmarkEgressFirstByte(b *testing.B) {
	port, roots := egressUpstream(b)
	cmd, addrs := egressProcess(b, 1)
	relay, relayAddr := startBareRelay(b)
	u := "https://up.test:" + strconv.Itoa(port) + "/"
	via, direct, bare := egressClient(addrs[0], roots), egressClient("", roots), egressClient(relayAddr, roots)
	firstByte(b, via, u)
	firstByte(b, direct, u)
	firstByte(b, bare, u)
	cpu0, rcpu0 := procCPU(b, cmd.Process.Pid), procCPU(b, relay.Process.Pid)
	b.ResetTimer()
	med := sideBySide(rounds(b), func() { firstByte(b, direct, u) }, func() { firstByte(b, via, u) }, func() { firstByte(b, bare, u) })
	b.ReportMetric(ms(procCPU(b, cmd.Process.Pid)-cpu0)/float64(rounds(b)), "proxy-cpu-ms/req")
	b.ReportMetric(ms(procCPU(b, relay.Process.Pid)-rcpu0)/float64(rounds(b)), "relay-cpu-ms/req")
	b.ReportMetric(ms(med[0]), "direct-ms")
	b.ReportMetric(ms(med[1]), "proxy-ms")
	b.ReportMetric(ms(med[2]), "relay-ms")
	b.ReportMetric(float64(med[1])/float64(med[0]), "proxy/direct")
	b.ReportMetric(float64(med[2])/float64(med[0]), "relay/direct")
}

// bareRelayEnv makes the test binary a bare CONNECT relay (TestMain): a
// helper process of the test, not a setting of xmode.
const bareRelayEnv = "GO_WANT_BARE_RELAY"

// startBareRelay runs the bare relay in a process of its own, as the proxy
// is, and returns it and its address.
func startBareRelay(b *testing.B) (*exec.Cmd, string) {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), bareRelayEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the bare relay did not start: %v", err)
	}
	return cmd, strings.TrimSpace(addr)
}

// bareRelay is the least a CONNECT proxy does, and nothing else: read the
// CONNECT, dial its port on loopback (where up.test is), say 200, copy
// both ways — no policy, no name check, no TLS peek, no log. It prints its
// address and serves until killed.
func bareRelay() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			req, err := http.ReadRequest(bufio.NewReader(c)) // the client sends nothing more before the 200
			if err != nil || req.Method != http.MethodConnect {
				return
			}
			_, port, _ := net.SplitHostPort(req.Host)
			up, err := net.Dial("tcp", "127.0.0.1:"+port)
			if err != nil {
				return
			}
			defer up.Close()
			io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
			go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
			io.Copy(c, up)
		}()
	}
}

// BenchmarkEgressThroughput: a 100 MB HTTPS download through the proxy
// and direct. Target: ≥ 0.8× direct.
func BenchmarkEgressThroughput(b *testing.B) {
	const size = 100 << 20
	port, roots := egressUpstream(b)
	cmd, addrs := egressProcess(b, 1)
	u := "https://up.test:" + strconv.Itoa(port) + "/big?n=" + strconv.Itoa(size)
	via, direct := egressClient(addrs[0], roots), egressClient("", roots)
	fetch := func(c *http.Client) {
		resp, err := c.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
	cpu0 := procCPU(b, cmd.Process.Pid)
	b.ResetTimer()
	med := sideBySide(rounds(b), func() { fetch(direct) }, func() { fetch(via) })
	mbps := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
	b.ReportMetric(ms(procCPU(b, cmd.Process.Pid)-cpu0)/float64(rounds(b)), "proxy-cpu-ms/100MB")
	b.ReportMetric(mbps(med[0]), "direct-MB/s")
	b.ReportMetric(mbps(med[1]), "proxy-MB/s")
	b.ReportMetric(float64(med[0])/float64(med[1]), "proxy/direct-throughput")
}

// BenchmarkEgressRSS: the proxy's resident memory serving 20 sandboxes,
// idle, then with 50 open HTTPS connections through each (1,000 tunnels).
func BenchmarkEgressRSS(b *testing.B) {
	const sandboxes, conns = 20, 50
	port, roots := egressUpstream(b)
	cmd, addrs := egressProcess(b, sandboxes)
	time.Sleep(200 * time.Millisecond)
	b.ResetTimer()
	idle := procStatusMB(b, cmd.Process.Pid, "VmRSS:")
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for _, a := range addrs {
		for range conns {
			c, err := net.Dial("tcp", a)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("CONNECT: %v %v", resp, err)
			}
			tc := tls.Client(c, &tls.Config{ServerName: "up.test", RootCAs: roots})
			fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: up.test\r\n\r\n")
			if _, err := http.ReadResponse(bufio.NewReader(tc), nil); err != nil {
				b.Fatal(err)
			}
			open = append(open, tc)
		}
	}
	for range rounds(b) {
		_ = procStatusMB(b, cmd.Process.Pid, "VmRSS:")
	}
	b.ReportMetric(idle, "idle-rss-MB")
	b.ReportMetric(procStatusMB(b, cmd.Process.Pid, "VmRSS:"), "busy-rss-MB")
	b.ReportMetric(procStatusMB(b, cmd.Process.Pid, "VmHWM:"), "peak-rss-MB")
}
