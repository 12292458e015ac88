// Command egressprobe is the egress tests' test host and client, built
// static by the tests and imported into their image (docs/network.md, "The
// bypasses tested"). As a test host (serve) it answers HTTP on :80, HTTPS
// on :443 (the certificate in PROBE_CERT/PROBE_KEY), raw TCP on :7000 and
// UDP on :7001, and prints one JSON line per hit on stdout, which the test
// reads back from the container's log. As a client it makes one kind of
// connection and says on stdout what came of it: exit 0 when it got
// through, 1 when it did not.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: egressprobe serve|get|tcp|udp|dns|front|hold|ttfb|download …")
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"serve": serve, "get": get, "tcp": tcpProbe, "udp": udpProbe, "dns": dnsProbe,
		"front": front, "hold": hold, "ttfb": ttfb, "download": download,
	}
	f, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
	if err := f(os.Args[2:]); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
}

var out sync.Mutex

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	out.Lock()
	os.Stdout.Write(append(b, '\n'))
	out.Unlock()
}

// serve is the test host.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	name := fs.String("name", "host", "the name it answers with")
	fs.Parse(args)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := map[string]string{}
		for k, v := range r.Header {
			hdr[k] = strings.Join(v, ", ")
		}
		emit(map[string]any{"kind": "http", "tls": r.TLS != nil, "host": r.Host, "path": r.URL.Path, "headers": hdr, "from": r.RemoteAddr})
		if n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64); err == nil {
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			buf := make([]byte, 256<<10)
			for n > 0 {
				k := min(n, int64(len(buf)))
				if _, err := w.Write(buf[:k]); err != nil {
					return
				}
				n -= k
			}
			return
		}
		if r.URL.Path == "/echo" {
			json.NewEncoder(w).Encode(hdr)
			return
		}
		fmt.Fprintf(w, "hello from %s\n", *name)
	})
	errc := make(chan error, 4)
	go func() { errc <- http.ListenAndServe(":80", h) }()
	if cert, key := os.Getenv("PROBE_CERT"), os.Getenv("PROBE_KEY"); cert != "" {
		c, err := tls.X509KeyPair([]byte(cert), []byte(key))
		if err != nil {
			return err
		}
		ln, err := tls.Listen("tcp", ":443", &tls.Config{Certificates: []tls.Certificate{c}})
		if err != nil {
			return err
		}
		go func() { errc <- http.Serve(ln, h) }()
	}
	go func() {
		ln, err := net.Listen("tcp", ":7000")
		if err != nil {
			errc <- err
			return
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			emit(map[string]any{"kind": "tcp", "from": c.RemoteAddr().String()})
			c.Write([]byte("hello from " + *name + "\n"))
			c.Close()
		}
	}()
	go func() {
		pc, err := net.ListenPacket("udp", ":7001")
		if err != nil {
			errc <- err
			return
		}
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				errc <- err
				return
			}
			emit(map[string]any{"kind": "udp", "from": from.String(), "data": string(buf[:n])})
			pc.WriteTo(buf[:n], from)
		}
	}()
	emit(map[string]any{"kind": "ready"})
	return <-errc
}

// client flags shared by get, ttfb and download.
type clientFlags struct {
	proxy, cacert, host, resolve string
	noProxy, insecure            bool
	headers                      headerList
	timeout                      time.Duration
}

type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.proxy, "proxy", "", "the proxy (default: HTTP(S)_PROXY from the environment)")
	fs.BoolVar(&c.noProxy, "noproxy", false, "connect directly, whatever the environment says")
	fs.StringVar(&c.cacert, "cacert", "", "PEM roots (default: the system's, which SSL_CERT_FILE replaces)")
	fs.BoolVar(&c.insecure, "insecure", false, "do not verify the server")
	fs.StringVar(&c.host, "host", "", "the Host header to send instead of the URL's")
	fs.StringVar(&c.resolve, "resolve", "", "name=address: dial address for name (curl's --resolve)")
	fs.Var(&c.headers, "H", "a header, Name: value (repeatable)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "")
}

func (c *clientFlags) client(keepAlive bool) (*http.Client, error) {
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: !keepAlive, ForceAttemptHTTP2: false}
	switch {
	case c.noProxy:
		tr.Proxy = nil
	case c.proxy != "":
		u, err := url.Parse(c.proxy)
		if err != nil {
			return nil, err
		}
		tr.Proxy = http.ProxyURL(u)
	}
	tlsc := &tls.Config{InsecureSkipVerify: c.insecure}
	if c.cacert != "" {
		pem, err := os.ReadFile(c.cacert)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tlsc.RootCAs = pool
	}
	tr.TLSClientConfig = tlsc
	d := &net.Dialer{Timeout: c.timeout}
	tr.DialContext = d.DialContext
	if name, addr, ok := strings.Cut(c.resolve, "="); ok {
		tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
			if h, p, err := net.SplitHostPort(a); err == nil && h == name {
				a = net.JoinHostPort(addr, p)
			}
			return d.DialContext(ctx, network, a)
		}
	}
	return &http.Client{Transport: tr, Timeout: c.timeout}, nil
}

func (c *clientFlags) request(u string) (*http.Request, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return nil, err
	}
	if c.host != "" {
		req.Host = c.host
	}
	for _, h := range c.headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return req, nil
}

// get: one request; prints its status and body.
func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ExitOnError)
	var c clientFlags
	c.register(fs)
	fs.Parse(args)
	cl, err := c.client(false)
	if err != nil {
		return err
	}
	req, err := c.request(fs.Arg(0))
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Printf("STATUS %d\n%s", resp.StatusCode, body)
	if resp.StatusCode != 200 {
		os.Exit(3) // an answer, but not the upstream's
	}
	return nil
}

func tcpProbe(args []string) error {
	c, err := net.DialTimeout("tcp", args[0], 4*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	fmt.Printf("CONNECTED %q %v\n", line, err)
	return nil
}

func udpProbe(args []string) error {
	c, err := net.Dial("udp", args[0])
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("probe")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	fmt.Printf("ECHO %q\n", buf[:n])
	return nil
}

// dns: one question; exit 0 only for an answer with records.
func dnsProbe(args []string) error {
	fs := flag.NewFlagSet("dns", flag.ExitOnError)
	server := fs.String("server", "", "address:port")
	qtype := fs.String("type", "A", "")
	tcp := fs.Bool("tcp", false, "")
	fs.Parse(args)
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(fs.Arg(0)), dns.StringToType[strings.ToUpper(*qtype)])
	cl := &dns.Client{Timeout: 3 * time.Second}
	if *tcp {
		cl.Net = "tcp"
	}
	r, _, err := cl.Exchange(m, *server)
	if err != nil {
		return err
	}
	fmt.Printf("RCODE %s ANSWERS %d\n", dns.RcodeToString[r.Rcode], len(r.Answer))
	for _, a := range r.Answer {
		fmt.Println(a.String())
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return fmt.Errorf("no answer: %s", dns.RcodeToString[r.Rcode])
	}
	return nil
}

// connectTunnel asks proxy for a CONNECT to target and returns the tunnel.
func connectTunnel(proxy, target string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxy, 4*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %d %s", target, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// front: a CONNECT to one host with another name in the TLS SNI.
func front(args []string) error {
	proxy, target, sni := args[0], args[1], args[2]
	c, err := connectTunnel(proxy, target)
	if err != nil {
		return err
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("TLS through the tunnel: %w", err)
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("STATUS %d\n%s", resp.StatusCode, b)
	return nil
}

// hold opens n TLS tunnels through proxy to target and keeps them open.
func hold(args []string) error {
	proxy, target := args[0], args[1]
	n, _ := strconv.Atoi(args[2])
	host, _, _ := net.SplitHostPort(target)
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := connectTunnel(proxy, target)
		if err != nil {
			return err
		}
		tc := tls.Client(c, &tls.Config{ServerName: host, InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			return err
		}
		conns = append(conns, tc)
	}
	fmt.Println("HELD", len(conns))
	// Until ended (a bare select{} would be a deadlock the runtime ends).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return nil
}

// ttfb: n requests, each on a fresh connection; prints the median time to
// the first byte of the answer, in microseconds.
func ttfb(args []string) error {
	fs := flag.NewFlagSet("ttfb", flag.ExitOnError)
	var c clientFlags
	c.register(fs)
	n := fs.Int("n", 20, "")
	fs.Parse(args)
	cl, err := c.client(false)
	if err != nil {
		return err
	}
	var ds []float64
	for i := 0; i < *n; i++ {
		req, _ := c.request(fs.Arg(0))
		start := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		ds = append(ds, float64(time.Since(start).Microseconds()))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return errors.New(resp.Status)
		}
	}
	sort.Float64s(ds)
	fmt.Printf("TTFB_US %.0f\n", ds[len(ds)/2])
	return nil
}

// download: one GET, the body discarded; prints bytes and seconds.
func download(args []string) error {
	fs := flag.NewFlagSet("download", flag.ExitOnError)
	var c clientFlags
	c.register(fs)
	fs.Parse(args)
	c.timeout = 5 * time.Minute
	cl, err := c.client(false)
	if err != nil {
		return err
	}
	req, _ := c.request(fs.Arg(0))
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	fmt.Printf("BYTES %d SECONDS %.6f\n", n, time.Since(start).Seconds())
	return nil
}
