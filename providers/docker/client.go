package docker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
)

// DefaultHost is the daemon endpoint when none is configured.
const DefaultHost = "unix:///var/run/docker.sock"

// MinAPIVersion is the oldest Engine API accepted: what a daemon that sends
// no API-Version header is taken to speak (Engine 1.12).
const MinAPIVersion = "1.24"

// endpoint is how to reach the daemon: where, and over TLS or not.
type endpoint struct {
	host     string      // as configured (DefaultHost when none was)
	variable string      // the variable that named it, for messages
	network  string      // "unix" or "tcp"
	addr     string      // socket path, or host:port
	basePath string      // a tcp:// endpoint's path prefix
	tls      *tls.Config // nil: plain
	certDir  string      // where the TLS files came from
	loopback bool        // a tcp:// endpoint on this machine's loopback
	insecure string      // why the connection is not secure ("" when it is)
	remote   bool        // sandboxes work on a copy of the worktree (sync mode)
}

// parseEndpoint checks the configured endpoint and builds its TLS settings.
// A value the engine cannot use is a usage error naming its variable; a
// connection xmode will not make (plain TCP off this machine, unless
// XMODE_SANDBOX_DOCKER_INSECURE=1) is fail.Enginef.
func parseEndpoint(cfg *config.Config) (endpoint, error) {
	ep := endpoint{host: cfg.DockerHost, variable: sourceOf(cfg, "XMODE_SANDBOX_DOCKER_HOST")}
	if ep.host == "" {
		ep.host, ep.variable = DefaultHost, "XMODE_SANDBOX_DOCKER_HOST"
	}
	proto, addr, ok := strings.Cut(ep.host, "://")
	if !ok || addr == "" {
		return ep, fail.Usagef("%s=%q is not a docker endpoint: use unix:///path/to/docker.sock or tcp://HOST:PORT", ep.variable, ep.host)
	}
	useTLS := false
	switch proto {
	case "unix":
		ep.network, ep.addr = "unix", addr
	case "tcp", "http", "https":
		u, err := url.Parse("tcp://" + addr)
		if err != nil || u.Hostname() == "" || u.Port() == "" || u.User != nil || u.RawQuery != "" {
			return ep, fail.Usagef("%s=%q is not a docker endpoint: use tcp://HOST:PORT (2376 is TLS's usual port)", ep.variable, ep.host)
		}
		ep.network, ep.addr, ep.basePath = "tcp", u.Host, strings.TrimSuffix(u.Path, "/")
		ep.loopback = isLoopback(u.Hostname())
		useTLS = proto == "https" || (proto == "tcp" && (cfg.DockerCertPath != "" || cfg.DockerTLSVerify))
	case "ssh":
		return ep, fail.Usagef("%s=%q: xmode talks to the Engine API itself and has no ssh transport (the docker CLI runs ssh for it): forward the daemon's socket (`ssh -NL /tmp/sandbox-docker.sock:/var/run/docker.sock HOST`, then unix:///tmp/sandbox-docker.sock with XMODE_SANDBOX_DOCKER_REMOTE=1, since that daemon cannot see this machine's files) or expose it over TLS (tcp://HOST:2376)", ep.variable, ep.host)
	default:
		return ep, fail.Usagef("%s=%q: unsupported protocol %q; use unix://, tcp:// (TLS with a cert path), http:// or https://", ep.variable, ep.host, proto)
	}
	if v := cfg.DockerAPIVersion; v != "" && !apiVersionRE().MatchString(v) {
		return ep, fail.Usagef("DOCKER_API_VERSION=%q is not an API version such as 1.41", v)
	}
	if useTLS {
		serverName, _, _ := net.SplitHostPort(ep.addr)
		t, dir, err := tlsConfig(cfg, serverName)
		if err != nil {
			return ep, err
		}
		ep.tls, ep.certDir = t, dir
		if ep.tls.InsecureSkipVerify {
			ep.insecure = fmt.Sprintf("TLS to %s without verifying the daemon's certificate (XMODE_SANDBOX_DOCKER_INSECURE=1): anyone on the path can pose as the daemon", ep.addr)
		}
	} else if ep.network == "tcp" && !ep.loopback {
		if !cfg.DockerInsecure {
			return ep, fail.Enginef("refusing plain TCP to the docker daemon at %s (%s): whoever can reach that port or sits on the path controls the daemon, and every sandbox with it; use TLS (tcp://HOST:2376 with XMODE_SANDBOX_DOCKER_CERT_PATH holding ca.pem, cert.pem and key.pem, and DOCKER_TLS_VERIFY=1), or set XMODE_SANDBOX_DOCKER_INSECURE=1 on a network you trust", ep.host, ep.variable)
		}
		ep.insecure = fmt.Sprintf("plain TCP to %s (XMODE_SANDBOX_DOCKER_INSECURE=1): the connection is neither encrypted nor authenticated", ep.addr)
	}
	switch cfg.DockerRemote {
	case "on":
		ep.remote = true
	case "off":
		ep.remote = false
	default:
		// A daemon behind TCP, even on loopback (an ssh tunnel), may not
		// see this machine's files: it gets a copy.
		ep.remote = ep.network == "tcp"
	}
	return ep, nil
}

// Compiled on first use, as the other expressions here: a package-level
// regexp.MustCompile runs at every start of xmode, docker or not.
var apiVersionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]+\.[0-9]+$`) })

// sourceOf is the variable a setting came from ("DOCKER_HOST" for the
// fallback), for messages.
func sourceOf(cfg *config.Config, name string) string {
	for _, v := range cfg.Values {
		if v.Name == name {
			if src, ok := strings.CutPrefix(v.Source, "env "); ok {
				return strings.TrimSuffix(src, " (fallback)")
			}
		}
	}
	return name
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tlsConfig builds TLS for a tcp:// daemon from XMODE_SANDBOX_DOCKER_CERT_PATH
// (else DOCKER_CERT_PATH, else ~/.docker, as the docker CLI): ca.pem to
// verify the daemon (the system's roots without it), cert.pem and key.pem as
// the client certificate when present. Unlike the docker CLI, the daemon's
// certificate is verified whether DOCKER_TLS_VERIFY is set or not, unless
// XMODE_SANDBOX_DOCKER_INSECURE=1: an unverified daemon could be anyone. The
// SDK's client.FromEnv cannot say this (it skips verification without
// DOCKER_TLS_VERIFY and requires the client certificate).
func tlsConfig(cfg *config.Config, serverName string) (*tls.Config, string, error) {
	dir, variable := cfg.DockerCertPath, sourceOf(cfg, "XMODE_SANDBOX_DOCKER_CERT_PATH")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir, variable = filepath.Join(home, ".docker"), "XMODE_SANDBOX_DOCKER_CERT_PATH"
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: cfg.DockerInsecure} //nolint:gosec // only when XMODE_SANDBOX_DOCKER_INSECURE=1, with a warning in doctor
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	switch {
	case err == nil:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, dir, fail.Usagef("%s: %s holds no PEM certificate", variable, filepath.Join(dir, "ca.pem"))
		}
		t.RootCAs = pool
	case !errors.Is(err, os.ErrNotExist):
		return nil, dir, fail.Usagef("%s: %v", variable, err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_, cerr := os.Stat(certFile)
	_, kerr := os.Stat(keyFile)
	if cerr == nil || kerr == nil {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, dir, fail.Usagef("%s: the client certificate (cert.pem, key.pem): %v", variable, err)
		}
		t.Certificates = []tls.Certificate{pair}
	}
	return t, dir, nil
}

// newClient builds the SDK client for the endpoint. Not client.FromEnv:
// config.Load is the one reader of the environment, and the connection is
// made by dial, which does the TLS itself (see there).
func newClient(ep endpoint, apiVersion string) (*client.Client, error) {
	tr := &http.Transport{
		DialContext: ep.dial,
		// Long-lived processes (the reaper) must not keep idle
		// connections forever (the SDK's own defaults).
		MaxIdleConns:       6,
		IdleConnTimeout:    30 * time.Second,
		DisableCompression: ep.network == "unix",
	}
	host := "unix://" + ep.addr
	if ep.network == "tcp" {
		host = "tcp://" + ep.addr + ep.basePath
	}
	opts := []client.Opt{
		client.WithHost(host),
		// After WithHost, which would configure its own transport: this one
		// has no proxy (the SDK's exec attach never used one either).
		client.WithHTTPClient(&http.Client{Transport: tr, CheckRedirect: client.CheckRedirect}),
		client.WithAPIVersionNegotiation(),
		client.WithUserAgent("xmode"),
	}
	if apiVersion != "" {
		opts = append(opts, client.WithVersion(apiVersion))
	}
	return client.NewClientWithOpts(opts...)
}

// dial connects to the daemon, TLS included. The SDK dials its exec attach
// with tls.Dial, without the context and without a timeout; handing it this
// dialer (with no TLS config on the transport, so it uses it) keeps both
// bounded, for requests and attaches alike.
func (ep endpoint) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, ep.network, ep.addr)
	if err != nil {
		return nil, err
	}
	if g, ok := ctx.Value(attachKey{}).(*attachGuard); ok {
		g.watch(ctx, conn)
	}
	if ep.tls != nil {
		tc := tls.Client(conn, ep.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		return tc, nil
	}
	return conn, nil
}

// attachKey marks the context of an exec attach for dial.
type attachKey struct{}

// attachGuard bounds an exec attach's handshake: the SDK (v28.5.2) writes
// the request and reads the daemon's answer on the hijacked connection
// without looking at the context, so a daemon that accepts and never
// answers would hang the step. The connection carries the context's
// deadline, and is cut when the context ends, until the answer is in.
type attachGuard struct {
	mu    sync.Mutex
	stops []func() bool
}

func (g *attachGuard) watch(ctx context.Context, conn net.Conn) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	g.mu.Lock()
	g.stops = append(g.stops, stop)
	g.mu.Unlock()
}

// release stops watching; false when the context ended first.
func (g *attachGuard) release() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ok := true
	for _, stop := range g.stops {
		ok = stop() && ok
	}
	return ok
}

// execAttach starts an exec attached to its streams, the handshake bounded
// by ctx (see attachGuard); the streams then stay open until closed,
// whatever ctx does.
func (p *Provider) execAttach(ctx context.Context, execID string, tty bool) (types.HijackedResponse, error) {
	if err := checkRef("exec", execID); err != nil {
		return types.HijackedResponse{}, err
	}
	g := &attachGuard{}
	// The daemon multiplexes the streams unless the start asks for the TTY.
	hr, err := p.cli.ContainerExecAttach(context.WithValue(ctx, attachKey{}, g), execID, container.ExecAttachOptions{Tty: tty})
	intime := g.release()
	if err != nil {
		if ctx.Err() != nil {
			return hr, fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return hr, err
	}
	if !intime {
		hr.Close()
		return types.HijackedResponse{}, ctx.Err()
	}
	_ = hr.Conn.SetDeadline(time.Time{})
	return hr, nil
}

// refRE is what a container ID or name, an exec ID and a volume name look
// like: the daemon's own name rule. Nothing with a "/" or a leading "." gets
// through, so no ID can turn into another API path.
var refRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`) })

// checkRef refuses an ID or a name that is not one. The SDK puts them into
// request paths unchecked, and the path is cleaned after: a container ID
// "../volumes/X" read from a tampered session row would remove volume X.
// Every ID and name is checked here before it reaches the SDK.
func checkRef(kind, ref string) error {
	if len(ref) > 255 || !refRE().MatchString(ref) {
		return fail.Refusedf("%s %q is not a docker %s ID or name: refusing to send it to the daemon", kind, ref, kind)
	}
	return nil
}
