package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/xmode/xmode/internal/redact"
)

// goproxy's sharp edges, and what newProxy does about each:
//   - its default transport and CONNECT dialer follow the proxy process's
//     own HTTP(S)_PROXY: every dial here is the sandbox's state.dial;
//   - inside a MITM tunnel it sends a request to the host the request's own
//     Host header names, not the CONNECT target's: handleRequest refuses a
//     request for any other host than the tunnel's (a credential must not
//     go where the sandbox points it);
//   - it answers a plain-text request inside a MITM tunnel as http://:
//     refused, a credential only travels over TLS;
//   - its built-in CA's key is public: every certificate here is signed by
//     the sandbox's own CA;
//   - it logs hosts a client sent to stderr: its logger is silenced, the
//     network log says what happened;
//   - net/http drops the Host header of an absolute-form request before a
//     handler sees it: headConn keeps the head of each connection (one
//     request per connection) so that a forged Host can be refused.
func (sb *sandbox) newProxy() *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = quietLogger{}
	gp.Verbose = false
	gp.KeepAcceptEncoding = true
	gp.Tr = &http.Transport{Proxy: nil, DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("egress: no request leaves without the sandbox's policy")
	}}
	gp.ConnectDial = nil
	gp.ConnectDialWithReq = func(*http.Request, string, string) (net.Conn, error) {
		return nil, errors.New("egress: no tunnel opens without the sandbox's policy")
	}
	gp.CertStore = sb.certs
	gp.NonproxyHandler = http.HandlerFunc(sb.nonProxy)
	gp.OnRequest().HandleConnectFunc(sb.handleConnect)
	gp.OnRequest().DoFunc(sb.handleRequest)
	gp.OnResponse().DoFunc(sb.handleResponse)
	return gp
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// tunnel is a CONNECT a credential host got: the proxy ends its TLS and
// sees its requests.
type tunnel struct {
	host   string
	port   int
	client string
	sni    atomic.Pointer[string]
}

// exchange is one request through the proxy, from its decision to the end
// of its response body: one record.
type exchange struct {
	sb    *sandbox
	rec   Record
	start time.Time
	up    atomic.Int64
	mask  *redact.Set // the secrets this request carries, kept out of its response
	once  sync.Once

	finished atomic.Bool
}

// failed records a request the policy refused on its way out (a name
// resolving to a blocked address) or whose upstream failed, and is the
// answer the client gets.
func (x *exchange) failed(req *http.Request, err error) *http.Response {
	var de *deniedError
	if errors.As(err, &de) {
		x.finish(Denied, de.d, de.d.Reason, 0)
		return refuse(req, http.StatusForbidden, de.d.Reason)
	}
	msg := "the upstream could not be reached"
	if err != nil {
		msg = upstreamError(err)
	}
	x.finish(Failed, Decision{Rule: x.rec.Rule, Source: x.rec.Source}, msg, 0)
	return refuse(req, http.StatusBadGateway, msg)
}

func (x *exchange) finish(verdict string, d Decision, reason string, down int64) {
	x.once.Do(func() {
		x.finished.Store(true)
		x.rec.Verdict, x.rec.Rule, x.rec.Source = verdict, d.Rule, d.Source
		if reason != "" {
			x.rec.Reason = reason
		}
		x.rec.BytesUp, x.rec.BytesDown = x.up.Load(), down
		x.rec.DurationMS = float64(x.sb.srv.opts.Now().Sub(x.start).Microseconds()) / 1000
		x.sb.write(x.rec)
	})
}

// allowedMethods are the plain HTTP methods the proxy forwards; anything
// else (TRACE, a WebDAV verb, an upgrade) is refused.
var allowedMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true}

func refuse(req *http.Request, status int, msg string) *http.Response {
	return goproxy.NewResponse(req, goproxy.ContentTypeText, status, "xmode egress: "+msg+"\n")
}

// handleConnect decides a CONNECT by its target: refused, a tunnel whose
// TLS SNI must then name the target, or — for a credential host — a
// tunnel whose TLS the proxy ends.
func (sb *sandbox) handleConnect(target string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	start := sb.srv.opts.Now()
	st := sb.state.Load()
	rec := Record{Time: start.UTC(), Kind: "connect", Client: ctx.Req.RemoteAddr, Method: http.MethodConnect}
	host, port, err := splitHostPort(target, 0)
	rec.Host, rec.Port = host, port
	var d Decision
	if err != nil {
		d = deny("no rule", "", "a CONNECT names host:port: "+err.Error())
	} else {
		d = st.p.CheckTarget(host, port, sb.srv.opts.Config.Block)
	}
	if !d.Allowed {
		rec.Verdict, rec.Rule, rec.Source, rec.Reason = Denied, d.Rule, d.Source, d.Reason
		sb.write(rec)
		ctx.Resp = refuse(ctx.Req, http.StatusForbidden, d.Reason)
		return goproxy.RejectConnect, target
	}
	if name, ok := canonicalName(host); ok && st.hasCredential(name) {
		t := &tunnel{host: name, port: port, client: ctx.Req.RemoteAddr}
		ctx.UserData = t
		return &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: sb.mitmConfig(t, rec)}, target
	}
	return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: func(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
		sb.tunnel(client, st, rec, d, start)
	}}, target
}

func (st *state) hasCredential(host string) bool {
	for _, c := range st.p.Credentials {
		if c.Host == host {
			return true
		}
	}
	return false
}

// mitmConfig is the TLS the proxy shows a credential host's client: a
// certificate for the host from the sandbox's CA, and a ClientHello whose
// SNI must name the CONNECT target.
func (sb *sandbox) mitmConfig(t *tunnel, rec Record) func(string, *goproxy.ProxyCtx) (*tls.Config, error) {
	sign := goproxy.TLSConfigFromCA(sb.ca)
	return func(host string, ctx *goproxy.ProxyCtx) (*tls.Config, error) {
		cfg, err := sign(t.host, ctx)
		if err != nil {
			return nil, err
		}
		cfg.MinVersion = tls.VersionTLS12
		cfg.InsecureSkipVerify = false
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni := h.ServerName
			t.sni.Store(&sni)
			if strings.ToLower(strings.TrimSuffix(sni, ".")) != t.host {
				r := rec
				r.SNI, r.Verdict, r.Rule = sni, Denied, "sni"
				r.Reason = fmt.Sprintf("the TLS SNI %q does not name the CONNECT target %s (no domain fronting)", clip(sni), t.host)
				sb.write(r)
				return nil, errors.New("egress: SNI does not match the CONNECT target")
			}
			return nil, nil
		}
		return cfg, nil
	}
}

// handleRequest decides one HTTP request: plain HTTP by its host (the
// absolute URI's, which the Host header must agree with), or a request
// inside a credential host's tunnel, which must be for that host and
// gets the credential.
func (sb *sandbox) handleRequest(req *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	st := sb.state.Load()
	x := &exchange{sb: sb, start: sb.srv.opts.Now()}
	x.rec = Record{Time: x.start.UTC(), Kind: "http", Client: req.RemoteAddr, Method: req.Method}
	t, inTunnel := ctx.UserData.(*tunnel)
	ctx.UserData = x
	no := func(status int, d Decision, reason string) (*http.Request, *http.Response) {
		x.finish(Denied, d, reason, 0)
		return req, refuse(req, status, reason)
	}

	host, port, err := splitHostPort(req.URL.Host, defaultPort(req.URL.Scheme))
	x.rec.Host, x.rec.Port, x.rec.HostHeader = host, port, req.Host
	if inTunnel {
		x.rec.Kind, x.rec.Client = "https", t.client
		if s := t.sni.Load(); s != nil {
			x.rec.SNI = *s
		}
		switch {
		case req.URL.Scheme != "https":
			return no(http.StatusForbidden, deny("no rule", "", ""), "a credential host is reached over TLS only")
		case err != nil || !sameHost(host, port, t.host, t.port) || !sameHostHeader(req.Host, t.host, t.port, 443):
			return no(http.StatusForbidden, deny("no rule", "", ""),
				fmt.Sprintf("a request for %s inside the tunnel to %s:%d is refused", clip(req.Host), t.host, t.port))
		}
		host, port = t.host, t.port
	} else {
		switch {
		case req.URL.Scheme != "http":
			return no(http.StatusBadRequest, deny("no rule", "", ""), "send https:// through CONNECT (HTTPS_PROXY), not as a plain request")
		case err != nil:
			return no(http.StatusBadRequest, deny("no rule", "", ""), err.Error())
		}
		hh, ok := sentHost(req.Context())
		x.rec.HostHeader = hh
		if !ok || (hh != "" && !sameHostHeader(hh, host, port, 80)) {
			return no(http.StatusForbidden, deny("no rule", "", ""),
				fmt.Sprintf("the Host header %q does not name the request's host %s:%d", clip(hh), clip(host), port))
		}
	}
	if !allowedMethods[req.Method] {
		return no(http.StatusMethodNotAllowed, deny("no rule", "", ""), "method "+clip(req.Method)+" is not forwarded")
	}
	if req.Header.Get("Upgrade") != "" {
		return no(http.StatusForbidden, deny("no rule", "", ""), "protocol upgrades (WebSocket, h2c) are not forwarded")
	}
	d := st.p.CheckTarget(host, port, sb.srv.opts.Config.Block)
	if !d.Allowed {
		return no(http.StatusForbidden, d, d.Reason)
	}
	x.rec.Rule, x.rec.Source = d.Rule, d.Source
	if inTunnel {
		x.mask = st.addCredentials(req, host, &x.rec)
	}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &countingBody{ReadCloser: req.Body, n: &x.up}
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { x.rec.Address = info.Conn.RemoteAddr().String() },
	}))
	ctx.RoundTripper = goproxy.RoundTripperFunc(func(r *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
		resp, err := st.tr.RoundTrip(r)
		if err != nil {
			// goproxy drops a MITM'd client's connection without a word
			// when a round trip fails: answer it here instead.
			return x.failed(r, err), nil
		}
		return resp, nil
	})
	x.rec.Verdict = Allowed
	return req, nil
}

// addCredentials puts the secrets of host's credentials in req — where the
// placeholder stands in the header, or as the header when it is absent —
// and returns them, to be kept out of the response.
func (st *state) addCredentials(req *http.Request, host string, rec *Record) *redact.Set {
	var set *redact.Set
	for i, c := range st.p.Credentials {
		if c.Host != host {
			continue
		}
		secret := st.secrets[i]
		vals := req.Header.Values(c.Header)
		if len(vals) == 0 {
			req.Header.Set(c.Header, secret)
		} else {
			out := make([]string, len(vals))
			for j, v := range vals {
				out[j] = strings.ReplaceAll(v, c.Placeholder, secret)
			}
			req.Header[c.Header] = out
		}
		if rec.Credential != "" {
			rec.Credential += ", "
		}
		rec.Credential += c.Header + " from " + c.From()
		if set == nil {
			set = redact.NewSet()
		}
		set.Add(secret)
	}
	return set
}

// handleResponse records the end of an exchange: a refusal the dialer
// made, an upstream that failed, or the response once its body is read.
func (sb *sandbox) handleResponse(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	x, ok := ctx.UserData.(*exchange)
	if !ok {
		return resp
	}
	if resp == nil {
		return x.failed(ctx.Req, ctx.Error)
	}
	if x.finished.Load() {
		return resp // a refusal, already recorded
	}
	x.rec.Status = resp.StatusCode
	if x.mask != nil {
		for k, vs := range resp.Header {
			resp.Header[k] = x.mask.Strings(vs)
		}
		if resp.Body != nil && resp.Body != http.NoBody {
			resp.Body = newMaskedBody(resp.Body, x.mask)
		}
	}
	body := resp.Body
	if body == nil {
		body = http.NoBody
	}
	resp.Body = &recordedBody{ReadCloser: body, x: x}
	return resp
}

// upstreamError says why an allowed request failed: an upstream
// certificate that is not trusted, a refused connection.
func upstreamError(err error) string {
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return "the upstream's TLS certificate is not trusted: " + cv.Err.Error()
	}
	return "the upstream failed: " + err.Error()
}

func defaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}

func sameHost(host string, port int, want string, wantPort int) bool {
	n, ok := canonicalName(host)
	return ok && n == want && port == wantPort
}

// sameHostHeader: a Host header names host:port (its port def when it
// has none).
func sameHostHeader(hh, host string, port, def int) bool {
	h, p, err := splitHostPort(hh, def)
	if err != nil {
		return false
	}
	if n, ok := canonicalName(h); ok {
		h = n
	}
	if n, ok := canonicalName(host); ok {
		host = n
	}
	return h == strings.Trim(host, "[]") && p == port
}

// nonProxy refuses a request that is not for the proxy (a relative path:
// a client that took the proxy for the server).
func (sb *sandbox) nonProxy(w http.ResponseWriter, req *http.Request) {
	sb.write(Record{Time: sb.srv.opts.Now().UTC(), Kind: "http", Client: req.RemoteAddr, Method: req.Method,
		Host: req.Host, HostHeader: req.Host, Verdict: Denied, Rule: "no rule",
		Reason: "not a proxy request: send absolute-form requests (http://host/path) or CONNECT"})
	http.Error(w, "xmode egress: this is the sandbox's egress proxy: set HTTP_PROXY/HTTPS_PROXY to it", http.StatusBadRequest)
}

// countingBody counts the bytes read through it.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// recordedBody is a response body that records its exchange when it is
// closed (goproxy closes every body it copies).
type recordedBody struct {
	io.ReadCloser
	x    *exchange
	down int64
}

func (b *recordedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.down += int64(n)
	return n, err
}

func (b *recordedBody) Close() error {
	err := b.ReadCloser.Close()
	b.x.finish(Allowed, Decision{Rule: b.x.rec.Rule, Source: b.x.rec.Source}, "", b.down)
	return err
}

// maskedBody keeps a request's secrets out of its response (an upstream
// echoing a header back): they read as redact.Mask.
type maskedBody struct {
	src io.ReadCloser
	out bytes.Buffer
	w   io.Writer
	buf []byte
	err error
}

func newMaskedBody(src io.ReadCloser, set *redact.Set) *maskedBody {
	m := &maskedBody{src: src, buf: make([]byte, 32<<10)}
	m.w = redact.NewWriter(&m.out, set)
	return m
}

func (m *maskedBody) Read(p []byte) (int, error) {
	for m.out.Len() == 0 && m.err == nil {
		n, err := m.src.Read(m.buf)
		_, _ = m.w.Write(m.buf[:n])
		if err != nil {
			redact.Flush(m.w)
			m.err = err
		}
	}
	if m.out.Len() > 0 {
		return m.out.Read(p)
	}
	return 0, m.err
}

func (m *maskedBody) Close() error { return m.src.Close() }

// maxHead bounds a request head the proxy reads (and keeps, headConn).
const maxHead = 32 << 10

type headKey struct{}

// headListener hands out headConns.
type headListener struct{ net.Listener }

func (l *headListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headConn{Conn: c}, nil
}

// headConn keeps the bytes of its connection up to the end of the first
// request's head: the Host header as the client sent it.
type headConn struct {
	net.Conn
	mu   sync.Mutex
	head []byte
	done atomic.Bool
	over bool // the head was longer than maxHead
}

func (c *headConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.done.Load() {
		c.mu.Lock()
		c.head = append(c.head, p[:n]...)
		if i := bytes.Index(c.head, []byte("\r\n\r\n")); i >= 0 {
			c.head = c.head[:i+4]
			c.done.Store(true)
		} else if len(c.head) > maxHead {
			c.head, c.over = nil, true
			c.done.Store(true)
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *headConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// sentHost is the Host header the client sent on this connection ("" for
// none); ok is false when it cannot be told (more than one, a head too
// long).
func sentHost(ctx context.Context) (string, bool) {
	c, _ := ctx.Value(headKey{}).(*headConn)
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	head, over := c.head, c.over
	c.mu.Unlock()
	if over || !c.done.Load() {
		return "", false
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return "", false
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return "", false
	}
	switch v := h.Values("Host"); len(v) {
	case 0:
		return "", true
	case 1:
		return v[0], true
	}
	return "", false
}

// certCache keeps the certificates signed for a sandbox's credential hosts
// (goproxy.CertStorage).
type certCache struct {
	mu sync.Mutex
	m  map[string]*tls.Certificate
}

func (c *certCache) Fetch(host string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cert, ok := c.m[host]; ok {
		return cert, nil
	}
	cert, err := gen()
	if err != nil {
		return nil, err
	}
	if len(c.m) >= 256 {
		clear(c.m)
	}
	c.m[host] = cert
	return cert, nil
}

// statusLine is a whole response written on a raw connection.
func statusLine(status int, msg string) string {
	body := "xmode egress: " + msg + "\n"
	return "HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
}
