// Package mcpserver is `xmode mcp`: a Model Context Protocol server whose
// tools (register.go, then a file a toolset) are a thin adapter over the
// services the CLI uses — sandbox.Service for sessions, steps and file
// steps, changes.Service for diffs and change requests, the store for what
// was recorded — so that an interactive agent (Claude Code, Codex CLI,
// Cursor…) runs every command in an xmode sandbox, leaves evidence of every
// tool call, and ends its work in a change request a person reviews
// (docs/mcp.md). It serves one client over stdio, or many over streamable
// HTTP behind a bearer token.
package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/semaphore"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/httpserve"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// Options are a server's services and settings.
type Options struct {
	Sandbox *sandbox.Service
	Changes *changes.Service
	// AllSessions widens the server's scope from the sessions MCP clients
	// made for its user to all of that user's sessions (--all-sessions).
	AllSessions bool
	// AllowNetworkChanges lets a client widen a sandbox's egress policy
	// (an allow rule, a wider mode, a deny rule taken out), at its create
	// and later (--allow-network-changes); narrowing is always allowed.
	AllowNetworkChanges bool
	Version             string
	// WorkDir is the repository sandbox_create uses when the client names
	// none and has no root: the server's working directory.
	WorkDir string
	// LookupEnv gives the values of the variables sandbox_exec's env names
	// (the server's environment).
	LookupEnv func(string) (string, bool)
	// Log receives one line per tool call; nil for none.
	Log io.Writer
	// ProgressEvery is how often a running step reports progress to a
	// client that asked for it (default: every second).
	ProgressEvery time.Duration
	// StorageRootArg is --storage-root for the commands a person is given
	// to follow along, when the server's storage root is not the default.
	StorageRootArg string
	// LoadConfig loads the server's configuration with overrides (with
	// ConfigDefaults): sandbox_create's image is one.
	LoadConfig func(overrides map[string]config.Flag) (*config.Config, error)
}

// Server is one xmode MCP server: its tools, and the calls in flight.
type Server struct {
	o        Options
	mcp      *mcp.Server
	inflight sync.WaitGroup
	logMu    sync.Mutex
	// budget bounds the bytes of messages in flight (bodies.go).
	budget *semaphore.Weighted
}

// New makes a server with every tool.
func New(o Options) *Server {
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = time.Second
	}
	s := &Server{o: o, budget: newBudget()}
	ttl := 2 * time.Hour // XMODE_SANDBOX_TTL's default, for a server without a service
	if o.Sandbox != nil && o.Sandbox.Cfg != nil {
		ttl = o.Sandbox.Cfg.TTL
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "xmode", Title: "xmode sandboxes", Version: o.Version}, &mcp.ServerOptions{
		Instructions: Instructions(ttl),
		// Tools only: no logging, prompts or resources.
		Capabilities: &mcp.ServerCapabilities{},
	})
	s.addTools()
	return s
}

// Instructions is what the server tells the agent at initialize (the MCP
// "instructions"): how to work through xmode, sessions living ttl
// (XMODE_SANDBOX_TTL as the user configured it).
func Instructions(ttl time.Duration) string {
	return `xmode gives you a sandbox: a checkout of the user's repository in which every command you run and every file you change is recorded as evidence, and whose work ends in a change request that the user reviews. Work like this:

1. Start with sandbox_create for the repository you are asked to work on (leave "repository" empty for the project the user has open; the user allows which others you may name). Keep the session ID it returns and use it for every later call. If a sandbox for this work already exists (sandbox_list shows yours), use it instead of creating another.
2. Right after creating it, tell the user the follow_along commands it returned, so they can watch and review as you work: xmode sandbox logs ID --follow, xmode sandbox diff ID, xmode sandbox shell ID. If it returned warnings (uncommitted changes the sandbox does not have, what the sandbox lacks: limits, network isolation, hardening, isolation of any kind), tell the user those too.
3. Do all the work through the sandbox: run builds, tests and git with sandbox_exec; read, list, write, edit and delete files with file_read, file_list, file_write, file_edit and file_delete. Do not change the user's own checkout with other tools: it is not the sandbox, and nothing done there reaches the change request. Give long commands a timeout_seconds; a step's full output stays in its logs (step_logs) when the reply cuts it short. Start what must keep running (a dev server, a watcher) with sandbox_exec's background set: later steps reach it on localhost, step_status and step_logs read it, step_kill ends it.
4. When the work is done and the checks pass, look at it with sandbox_diff, then call cr_create with a title and a message that says what you changed and why. Give the user the change request's ID and the review commands it returned. You cannot approve your own change request: the user reviews it.
5. Call sandbox_stop only when the user no longer needs the sandbox; the change request and the evidence stay after it.

A sandbox lives ` + humanTTL(ttl) + ` from its creation (XMODE_SANDBOX_TTL, as the user configured it), then expires and is stopped: what you had not put in a change request goes with it. When the work will take longer, or its expires_at (sandbox_show) is near, call sandbox_extend — do not create a new sandbox instead, which starts from the repository again without your uncommitted work. Only when a tool says the session expired or was not found, create a new one and tell the user.`
}

// humanTTL is d as a person writes it: 2h, 90m → 1h30m, 45s.
func humanTTL(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ServeStdio serves one client over r and w (newline-delimited JSON-RPC)
// until the client goes away or ctx ends; then it waits for the calls in
// flight, whose steps a cancelled context has ended, to record their end.
func (s *Server) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	err := s.mcp.Run(ctx, &lineTransport{r: r, w: w, budget: s.budget, release: s.release})
	s.drain()
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// drain waits, for at most a minute, for the tool calls in flight.
func (s *Server) drain() {
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
	}
}

// HTTPHandler is the streamable HTTP endpoint, every request of which must
// carry token as a bearer token (401 otherwise).
func (s *Server) HTTPHandler(token string) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		MaxRequestBodyBytes: MaxMessageBytes,
		SessionTimeout:      time.Hour,
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.limitBodies(h))
	return RequireToken(token, mux)
}

// ServeHTTP serves HTTPHandler on ln until ctx ends, then shuts down: no
// new requests, and the calls in flight (their steps ended) get a few
// seconds to answer. Deadlines, the connection cap and the shutdown are
// httpserve's, as for `xmode ui`.
func (s *Server) ServeHTTP(ctx context.Context, ln net.Listener, token string) error {
	err := httpserve.Serve(ctx, ln, s.HTTPHandler(token), httpserve.Options{ShutdownGrace: 10 * time.Second})
	if ctx.Err() != nil {
		s.drain()
	}
	return err
}

// RequireToken lets a request through to next only with "Authorization:
// Bearer TOKEN"; the comparison takes the same time whatever the token
// given (of SHA-256 digests, so not even its length shows).
func RequireToken(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(strings.TrimSpace(given)))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="xmode mcp"`)
			httpserve.Refuse(w, http.StatusUnauthorized, "xmode mcp: this server needs its bearer token: send Authorization: Bearer <token> (the token is XMODE_MCP_TOKEN of the server, or the one it printed when it started)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// NewToken is a token for a server started without XMODE_MCP_TOKEN: 32
// random bytes, base64url.
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// toolError is the message a failed tool call gives the model: what went
// wrong, in xmode's words, after what kind of failure it is, so that the
// model knows whether to change its input, its approach, or tell the user.
func toolError(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(fail.KindOf(err).ToolMessage(mcpWords(fail.Words{Input: parameter, Action: toolAction}.Render(err))))
}

// parameter is MCP's word for an input a service names: the tool
// parameter (or the setting) that gives it (toolParams).
func parameter(in fail.Input) string {
	if p, ok := toolParams[string(in)]; ok {
		return p
	}
	return string(in)
}

// scoped is the session id names, if this server may act on it: the
// user's, made through MCP (or any of the user's, with AllSessions). Any
// other is "not found", as if it did not exist.
func (s *Server) scoped(ctx context.Context, id string) (*store.Session, error) {
	if id == "" {
		return nil, fail.Usagef("give the sandbox's session ID (sandbox_create returns it; sandbox_list lists yours)")
	}
	sess, err := s.o.Sandbox.Store.Get(ctx, id)
	if err == nil && s.inScope(sess) {
		return sess, nil
	}
	if err != nil && fail.KindOf(err) != fail.NotFound {
		return nil, err
	}
	hint := ""
	if !s.o.AllSessions {
		hint = " (this server acts on the sandboxes MCP clients made; one made with the xmode CLI is reached only if the user starts the server with --all-sessions)"
	}
	return nil, fail.NotFoundf("no sandbox %q among yours: sandbox_list lists them; give the whole ID%s", id, hint)
}

func (s *Server) inScope(sess *store.Session) bool {
	return sess.User == s.o.Sandbox.Cfg.User && (s.o.AllSessions || sess.Origin == store.OriginMCP)
}

// logf writes one line to the log, made inert for a terminal (it quotes
// what a client sent).
func (s *Server) logf(format string, args ...any) {
	if s.o.Log == nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintln(s.o.Log, "xmode mcp: "+termsafe.EscapeText(fmt.Sprintf(format, args...)))
}

// clientOf is the client's name and version, as it gave them at
// initialize, cut to 120 bytes and made printable.
func clientOf(ss *mcp.ServerSession) string {
	if ss == nil {
		return ""
	}
	p := ss.InitializeParams()
	if p == nil || p.ClientInfo == nil {
		return ""
	}
	c := strings.TrimSpace(p.ClientInfo.Name + " " + p.ClientInfo.Version)
	c = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, c)
	if len(c) > 120 {
		c = strings.ToValidUTF8(c[:120], "")
	}
	return c
}
