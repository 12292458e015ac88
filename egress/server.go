package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"
)

// Config is the proxy process's own configuration (egress.json in its
// directory): what every sandbox it serves shares.
type Config struct {
	Block       []Block // refused besides DefaultBlock: the engine's bridge gateway, the proxy's own networks
	ExtraCAFile string  // PEM certificates trusted for upstreams besides the system's (an internal mirror's)
	LogMaxBytes int64   // each sandbox's log is capped at this (XMODE_EVIDENCE_MAX_BYTES); 0: 256 MiB
	ResolveOnly bool    // resolve only the names a policy's Resolve lists: no system resolver
	DNSRate     float64 // DNS questions per second per sandbox; 0: 20
	DNSBurst    int     // and the burst; 0: 100
}

// LookupFunc resolves a host name to addresses (net.DefaultResolver's
// LookupNetIP by default).
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// Options make a Server.
type Options struct {
	Dir    string // the configuration directory: ca/<sandbox>/, logs/<sandbox>.jsonl
	Config Config
	Lookup LookupFunc          // nil: the system resolver
	Getenv func(string) string // where credentials' variables are read; nil: os.Getenv
	Now    func() time.Time    // nil: time.Now
}

// Server is one proxy process's sandboxes: for each, a proxy listener
// and a DNS listener, its policy (swapped whole on a change, so a new
// connection always meets the latest), its log and its CA.
type Server struct {
	opts  Options
	roots *x509.CertPool

	mu  sync.Mutex
	sbs map[string]*sandbox
}

// NewServer checks the configuration and reads the upstream roots.
func NewServer(o Options) (*Server, error) {
	if o.Lookup == nil {
		o.Lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Config.LogMaxBytes <= 0 {
		o.Config.LogMaxBytes = 256 << 20
	}
	if o.Config.DNSRate <= 0 {
		o.Config.DNSRate = 20
	}
	if o.Config.DNSBurst <= 0 {
		o.Config.DNSBurst = 100
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if f := o.Config.ExtraCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("extra CA file: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("extra CA file %s: no PEM certificate in it", f)
		}
	}
	for _, d := range []string{"ca", "logs"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("egress directory: %w", err)
		}
	}
	return &Server{opts: o, roots: roots, sbs: map[string]*sandbox{}}, nil
}

// Listening is where a sandbox's proxy and resolver listen.
type Listening struct {
	Proxy string `json:"proxy"`
	DNS   string `json:"dns,omitempty"`
}

// Apply serves p: a new sandbox gets its listeners, log and CA; a known
// one gets the new policy for every connection from now on (and new
// listeners if their addresses changed). A secret a credential names that
// cannot be read fails it, and the sandbox keeps what it had.
func (s *Server) Apply(p Policy) (Listening, error) {
	if err := checkSandboxID(p.Sandbox); err != nil {
		return Listening{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sbs[p.Sandbox]
	fresh := sb == nil
	if fresh {
		var err error
		if sb, err = s.newSandbox(p.Sandbox); err != nil {
			return Listening{}, err
		}
	}
	st, err := s.newState(&p)
	if err != nil {
		if fresh {
			sb.close()
		}
		return Listening{}, fmt.Errorf("sandbox %s: %w", p.Sandbox, err)
	}
	// The state goes in before a new listener accepts anything.
	old := sb.state.Swap(st)
	if err := sb.listen(p); err != nil {
		if fresh {
			sb.close()
		} else {
			sb.state.Store(old)
		}
		return Listening{}, fmt.Errorf("sandbox %s: %w", p.Sandbox, err)
	}
	if old != nil {
		old.tr.CloseIdleConnections()
	}
	s.sbs[p.Sandbox] = sb
	return sb.listening(), nil
}

// Refuse puts a sandbox's proxy in mode none (its listeners stay, every
// connection is refused): what a policy that can no longer be read gets.
func (s *Server) Refuse(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sbs[id]; sb != nil && sb.state.Load() != nil {
		p := *sb.state.Load().p
		p.Mode, p.Credentials = ModeNone, nil
		st, _ := s.newState(&p)
		if old := sb.state.Swap(st); old != nil {
			old.tr.CloseIdleConnections()
		}
	}
}

// Remove stops serving a sandbox: its listeners close, its log is
// flushed. Tunnels already open end when either side closes.
func (s *Server) Remove(id string) {
	s.mu.Lock()
	sb := s.sbs[id]
	delete(s.sbs, id)
	s.mu.Unlock()
	if sb != nil {
		sb.close()
	}
}

// Close removes every sandbox.
func (s *Server) Close() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.sbs))
	for id := range s.sbs {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.Remove(id)
	}
}

// LogPath is where a sandbox's network log is, under dir.
func LogPath(dir, sandbox string) string { return filepath.Join(dir, "logs", sandbox+".jsonl") }

// CADir is where a sandbox's CA is, under dir.
func CADir(dir, sandbox string) string { return filepath.Join(dir, "ca", sandbox) }

// sandbox is one sandbox's share of the process.
type sandbox struct {
	srv   *Server
	id    string
	state atomic.Pointer[state]
	log   *Log
	ca    *tls.Certificate
	certs *certCache
	proxy *goproxy.ProxyHttpServer

	ln      net.Listener
	http    *http.Server
	dns     *dnsServer
	addr    string // Policy.Listen as served
	dnsAddr string // Policy.DNS as served
}

// state is one policy as served: a new one for each change, so that a
// connection sees one policy from its start to its end.
type state struct {
	p       *Policy
	secrets []string // Credentials' values, by index
	tr      *http.Transport
	srv     *Server
}

func (s *Server) newSandbox(id string) (*sandbox, error) {
	lg, err := OpenLog(LogPath(s.opts.Dir, id), s.opts.Config.LogMaxBytes, s.opts.Now)
	if err != nil {
		return nil, err
	}
	caDir := CADir(s.opts.Dir, id)
	if _, err := EnsureCA(caDir, id, s.opts.Now()); err != nil {
		lg.Close()
		return nil, err
	}
	ca, err := loadCA(caDir)
	if err != nil {
		lg.Close()
		return nil, err
	}
	sb := &sandbox{srv: s, id: id, log: lg, ca: ca, certs: &certCache{m: map[string]*tls.Certificate{}}}
	sb.proxy = sb.newProxy()
	return sb, nil
}

func (s *Server) newState(p *Policy) (*state, error) {
	st := &state{p: p, srv: s}
	for _, c := range p.Credentials {
		v, err := c.Secret(s.opts.Getenv)
		if err != nil {
			return nil, err
		}
		st.secrets = append(st.secrets, v)
	}
	st.tr = &http.Transport{
		Proxy:                 nil, // never the proxy's own HTTP_PROXY
		DialContext:           st.dialContext,
		TLSClientConfig:       &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   15 * time.Second,
		DisableCompression:    true, // pass bodies as they come
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       60 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return st, nil
}

// listen opens the listeners p names, or moves them when their addresses
// changed.
func (sb *sandbox) listen(p Policy) error {
	if sb.http == nil || p.Listen != sb.addr {
		ln, err := net.Listen("tcp", p.Listen)
		if err != nil {
			return fmt.Errorf("proxy listener: %w", err)
		}
		if sb.http != nil {
			sb.http.Close()
		}
		sb.ln, sb.addr = &headListener{Listener: ln}, p.Listen
		sb.http = &http.Server{
			Handler:           sb.proxy,
			ReadHeaderTimeout: 15 * time.Second,
			MaxHeaderBytes:    maxHead,
			ErrorLog:          log.New(io.Discard, "", 0),
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				return context.WithValue(ctx, headKey{}, c)
			},
		}
		// One request per connection: the Host header a client sent is then
		// the one at the head of its connection (headConn).
		sb.http.SetKeepAlivesEnabled(false)
		go sb.http.Serve(sb.ln)
	}
	if p.DNS != sb.dnsAddr || (p.DNS != "" && sb.dns == nil) {
		if sb.dns != nil {
			sb.dns.close()
			sb.dns = nil
		}
		sb.dnsAddr = p.DNS
		if p.DNS != "" {
			d, err := sb.newDNS(p.DNS)
			if err != nil {
				sb.dnsAddr = ""
				return fmt.Errorf("DNS listener: %w", err)
			}
			sb.dns = d
		}
	}
	return nil
}

func (sb *sandbox) listening() Listening {
	l := Listening{Proxy: sb.ln.Addr().String()}
	if sb.dns != nil {
		l.DNS = sb.dns.addr()
	}
	return l
}

func (sb *sandbox) close() {
	if sb.http != nil {
		sb.http.Close()
	}
	if sb.dns != nil {
		sb.dns.close()
	}
	if st := sb.state.Load(); st != nil {
		st.tr.CloseIdleConnections()
	}
	sb.log.Close()
}

// write logs a record, stamped with the sandbox.
func (sb *sandbox) write(r Record) {
	r.Sandbox = sb.id
	r.Host, r.SNI, r.HostHeader = clip(r.Host), clip(r.SNI), clip(r.HostHeader)
	sb.log.Write(r)
}

// deniedError is a connection the policy refused after the request was
// read: a name resolving to a blocked address, say.
type deniedError struct{ d Decision }

func (e *deniedError) Error() string { return "refused by the egress policy: " + e.d.Reason }

// resolve is the addresses a connection to host:port may use, or the
// decision that refuses it: the target first, then every address it
// resolves to (one blocked address refuses the name: a rebinding answer
// does not get its good half used).
func (st *state) resolve(ctx context.Context, host string, port int) ([]netip.Addr, Decision, error) {
	d := st.p.CheckTarget(host, port, st.srv.opts.Config.Block)
	if !d.Allowed {
		return nil, d, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, d, nil
	}
	name, _ := canonicalName(host)
	addrs, err := st.lookup(ctx, name)
	if err != nil {
		return nil, d, err
	}
	if ad := st.checkResolved(name, addrs, port); !ad.Allowed {
		return nil, ad, nil
	}
	return addrs, d, nil
}

// lookup is a name's addresses: the policy's Resolve, else the system's
// resolver (unless Config.ResolveOnly).
func (st *state) lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	if addrs, ok := st.p.resolveOverride(name); ok {
		return addrs, nil
	}
	if st.srv.opts.Config.ResolveOnly {
		return nil, fmt.Errorf("%s: no address for it (this proxy resolves only the names it is given)", name)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := st.srv.opts.Lookup(lctx, name)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", name, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no address", name)
	}
	return addrs, nil
}

// checkResolved refuses a name when any address it resolves to is denied
// or blocked: a rebinding answer does not get its good half used.
func (st *state) checkResolved(name string, addrs []netip.Addr, port int) Decision {
	for _, a := range addrs {
		if d := st.p.CheckAddr(a, port, st.srv.opts.Config.Block, false); !d.Allowed {
			d.Reason = fmt.Sprintf("%s resolves to a refused address: %s", name, d.Reason)
			return d
		}
	}
	return Decision{Allowed: true}
}

// dial connects to host:port as the policy allows, trying each address.
func (st *state) dial(ctx context.Context, host string, port int) (net.Conn, Decision, error) {
	addrs, d, err := st.resolve(ctx, host, port)
	if err != nil || !d.Allowed {
		return nil, d, err
	}
	c, err := dialAny(ctx, addrs, port)
	return c, d, err
}

// dialAny connects to the first of addrs that answers on port.
func dialAny(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	dl := net.Dialer{Timeout: 10 * time.Second}
	var last error
	for _, a := range addrs {
		c, err := dl.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// dialContext is the transport's dialer: requests meet the policy again
// on the way out.
func (st *state) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := splitHostPort(addr, 0)
	if err != nil {
		return nil, err
	}
	c, d, err := st.dial(ctx, host, port)
	if err != nil {
		return nil, err
	}
	if !d.Allowed {
		return nil, &deniedError{d}
	}
	return c, nil
}

// splitHostPort reads host[:port] (port def when there is none), the
// host without brackets.
func splitHostPort(hostport string, def int) (string, int, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		if def == 0 {
			return "", 0, fmt.Errorf("%q: want host:port", clip(hostport))
		}
		return trimBrackets(hostport), def, nil
	}
	port, perr := parsePort(p, p)
	if perr != "" {
		return "", 0, fmt.Errorf("%q: %s", clip(hostport), perr)
	}
	return host, port, nil
}

func trimBrackets(h string) string {
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	return h
}

// isClosed: an error from a connection that was closed under it.
func isClosed(err error) bool {
	return err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
