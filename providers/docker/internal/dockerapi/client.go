// Package dockerapi is a small client of the Docker Engine API over
// net/http: exactly the calls the docker provider makes, with its own
// minimal JSON types (only the fields xmode reads or sets, named as in the
// Engine API reference).
//
// It exists so that the xmode binary does not link the Docker SDK: the
// SDK's client and its api/types packages pull in distribution/reference,
// go-digest, image-spec and OpenTelemetry, whose package initialisation and
// ~10 MB of code cost every xmode command — even `xmode --version` — several
// milliseconds of start-up. The SDK stays in the tests, as an independent
// check of what this client did.
//
// Like the SDK with API-version negotiation, a Client pings the daemon
// before its first versioned call (GET /_ping, the API-Version header) and
// then speaks the lower of the daemon's version and DefaultVersion;
// DOCKER_API_VERSION pins the version instead.
package dockerapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
)

const (
	// DefaultVersion is the newest API version this client speaks: Engine
	// 28.5's (the SDK v28.5.2 the provider was first written against).
	DefaultVersion = "1.51"
	// MinVersion is the oldest daemon API version accepted. 1.24 is also
	// what a daemon that sends no API-Version header is taken to speak.
	MinVersion = "1.24"
	// DefaultHost is the daemon endpoint when none is configured.
	DefaultHost = "unix:///var/run/docker.sock"

	// dummyHost is the HTTP Host of requests over a unix socket, where
	// there is no host name to send (what the docker CLI sends as well).
	dummyHost = "api.moby.localhost"
	// dialTimeout bounds connecting when the caller's context does not.
	dialTimeout = 32 * time.Second
	// maxErrorBody bounds how much of an error response is read.
	maxErrorBody = 1 << 20
)

// Config says how to reach the daemon. ConfigFromEnv fills it from the
// environment the docker CLI uses.
type Config struct {
	// Host is the endpoint: unix:///path, tcp://host:port[/base], or
	// http:// / https://host:port. Empty: DefaultHost.
	Host string
	// TLS, when set, is used for tcp:// and https:// endpoints.
	TLS *tls.Config
	// Version pins the API version (DOCKER_API_VERSION); empty: negotiate.
	Version string
}

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	host     string // as configured, for messages
	network  string // "unix" or "tcp"
	addr     string // socket path or host:port
	scheme   string // "http" or "https"
	urlHost  string // the HTTP Host of requests
	basePath string // a tcp:// endpoint's path prefix
	tls      *tls.Config
	http     *http.Client

	mu       sync.Mutex
	version  string // the version requests use, once known
	pinned   bool   // Config.Version was given: never negotiate
	daemonAV string // the daemon's API version from the last ping
}

// New returns a client for cfg. It does not contact the daemon.
func New(cfg Config) (*Client, error) {
	host := cfg.Host
	if host == "" {
		host = DefaultHost
	}
	proto, addr, ok := strings.Cut(host, "://")
	if !ok || addr == "" {
		return nil, fmt.Errorf("unable to parse docker host %q: want unix:///path or tcp://host:port", host)
	}
	c := &Client{host: host, scheme: "http"}
	switch proto {
	case "unix":
		c.network, c.addr, c.urlHost = "unix", addr, dummyHost
	case "tcp", "http", "https":
		u, err := url.Parse("tcp://" + addr)
		if err != nil {
			return nil, fmt.Errorf("docker host %q: %w", host, err)
		}
		if u.Port() == "" {
			return nil, fmt.Errorf("docker host %q has no port", host)
		}
		c.network, c.addr, c.urlHost, c.basePath = "tcp", u.Host, u.Host, strings.TrimSuffix(u.Path, "/")
		c.tls = cfg.TLS
		if proto == "https" && c.tls == nil {
			c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if c.tls != nil {
			c.scheme = "https"
		}
	default:
		return nil, fmt.Errorf("docker host %q: unsupported protocol %q (unix://, tcp://, http:// or https://)", host, proto)
	}
	if cfg.Version != "" {
		c.version, c.pinned = strings.TrimPrefix(cfg.Version, "v"), true
	}
	tr := &http.Transport{
		DialContext: c.dial,
		// Long-lived processes (the reaper) must not keep idle
		// connections forever.
		MaxIdleConns:       6,
		IdleConnTimeout:    30 * time.Second,
		DisableCompression: c.network == "unix",
		TLSClientConfig:    c.tls,
	}
	if c.network == "tcp" {
		tr.Proxy = http.ProxyFromEnvironment
	}
	c.http = &http.Client{
		Transport: tr,
		// The daemon never redirects; a redirect means something else
		// answers at the endpoint.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// dial connects to the daemon, plain: net/http (or the hijack) adds TLS.
func (c *Client) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	return d.DialContext(ctx, c.network, c.addr)
}

// Host is the endpoint as configured (DefaultHost when none was).
func (c *Client) Host() string { return c.host }

// Version is the API version requests use: the negotiated one after Ping,
// the pinned one, or DefaultVersion before any negotiation.
func (c *Client) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version == "" {
		return DefaultVersion
	}
	return c.version
}

// Close releases idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// Ping is what GET /_ping says about the daemon.
type Ping struct {
	APIVersion string // the daemon's newest API version
	OSType     string
}

// Ping asks the daemon for its API version and negotiates the version this
// client speaks: the lower of the daemon's and DefaultVersion, unless
// pinned. A daemon older than MinVersion is an error (*VersionError).
func (c *Client) Ping(ctx context.Context) (Ping, error) {
	// Unversioned: the version is what is being found out.
	resp, err := c.send(ctx, http.MethodGet, c.basePath+"/_ping", nil, nil, nil)
	if err != nil {
		return Ping{}, err
	}
	drain(resp)
	ping := Ping{APIVersion: resp.Header.Get("API-Version"), OSType: resp.Header.Get("OSType")}
	if ping.APIVersion == "" {
		ping.APIVersion = MinVersion
	}
	if compareVersions(ping.APIVersion, MinVersion) < 0 {
		return ping, &VersionError{Host: c.host, Daemon: ping.APIVersion}
	}
	c.mu.Lock()
	c.daemonAV = ping.APIVersion
	if !c.pinned {
		c.version = minVersion(ping.APIVersion, DefaultVersion)
	}
	c.mu.Unlock()
	return ping, nil
}

// negotiated returns the API version for a request, pinging first when it
// is not known yet.
func (c *Client) negotiated(ctx context.Context) (string, error) {
	c.mu.Lock()
	v := c.version
	c.mu.Unlock()
	if v != "" {
		return v, nil
	}
	if _, err := c.Ping(ctx); err != nil {
		return "", err
	}
	return c.Version(), nil
}

// versionAtLeast reports whether the negotiated version is at least v.
func (c *Client) versionAtLeast(ctx context.Context, v string) (bool, error) {
	cur, err := c.negotiated(ctx)
	if err != nil {
		return false, err
	}
	return compareVersions(cur, v) >= 0, nil
}

// apiPath is p under the endpoint's base path and the negotiated version.
func (c *Client) apiPath(ctx context.Context, p string) (string, error) {
	v, err := c.negotiated(ctx)
	if err != nil {
		return "", err
	}
	return path.Join(c.basePath+"/", "v"+v, p), nil
}

// newRequest builds a request to the daemon; p is a full path (unescaped).
func (c *Client) newRequest(ctx context.Context, method, p string, query url.Values, body any, header http.Header) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, p, err)
		}
		r = bytes.NewReader(b)
	}
	u := url.URL{Scheme: c.scheme, Host: c.urlHost, Path: p, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "xmode")
	return req, nil
}

// send makes one request with an already versioned path and returns the
// response when its status is below 400, else the daemon's error (*Error).
func (c *Client) send(ctx context.Context, method, p string, query url.Values, body any, header http.Header) (*http.Response, error) {
	req, err := c.newRequest(ctx, method, p, query, body, header)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			// The caller gave up (or its deadline passed): not a
			// connection failure; net/http's *url.Error says which.
			return nil, err
		}
		return nil, &ConnError{Host: c.host, Err: err}
	}
	if resp.StatusCode >= http.StatusBadRequest {
		defer drain(resp)
		return nil, responseError(resp, method, p)
	}
	return resp, nil
}

// do is send with the API version in front of the path.
func (c *Client) do(ctx context.Context, method, p string, query url.Values, body any) (*http.Response, error) {
	full, err := c.apiPath(ctx, p)
	if err != nil {
		return nil, err
	}
	return c.send(ctx, method, full, query, body, nil)
}

// call makes a request and decodes the JSON answer into out (nil: discard).
func (c *Client) call(ctx context.Context, method, p string, query url.Values, body, out any) error {
	resp, err := c.do(ctx, method, p, query, body)
	if err != nil {
		return err
	}
	defer drain(resp)
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode the answer to %s %s: %w", method, p, err)
	}
	return nil
}

// drain reads what is left of a (small) body and closes it, so that the
// connection can be reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

// responseError turns an error response into *Error, with the daemon's
// message: {"message": "..."} from JSON answers, the text otherwise.
func responseError(resp *http.Response, method, p string) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{StatusCode: resp.StatusCode, Method: method, Path: p}
	switch {
	case err != nil:
		e.Message = fmt.Sprintf("%s (reading the error: %v)", resp.Status, err)
	case strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json"):
		var m struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &m) == nil && m.Message != "" {
			e.Message = strings.TrimSpace(m.Message)
		}
	default:
		e.Message = strings.TrimSpace(string(b))
	}
	if e.Message == "" {
		e.Message = fmt.Sprintf("API returned %s for %s %s without a message: check that the daemon supports API %s", resp.Status, method, p, path.Base(path.Dir(p)))
	}
	return e
}

// segment is a name or an id as one segment of a request path. An empty
// one would address the collection instead, "." and ".." another path, and
// a "/" (allowed in image names only, which the daemon routes as such)
// another endpoint: those are refused before anything is sent.
func segment(kind, id string, slashOK bool) (string, error) {
	if strings.TrimSpace(id) == "" {
		return "", &Error{StatusCode: http.StatusNotFound, Message: fmt.Sprintf("No such %s: (empty name)", kind)}
	}
	if id == "." || id == ".." || (!slashOK && strings.Contains(id, "/")) {
		return "", fmt.Errorf("invalid %s name %q", kind, id)
	}
	return id, nil
}
