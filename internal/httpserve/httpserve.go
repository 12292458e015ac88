// Package httpserve is how xmode serves HTTP: `xmode ui` and `xmode mcp
// --listen` alike. It holds the one listen policy (loopback unless
// --allow-remote), bounds what a connection without credentials can cost
// (deadlines on reading a request, on each write of a response, and on an
// idle connection; a cap on connections), and closes the connection after
// a refusal. Responses that stream — the UI's live output, MCP's
// streamable HTTP — keep working: once a request is read, reading has no
// deadline (net/http lifts it), and each write has its own.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/xmode/xmode/fail"
)

// Defaults of Options.
const (
	// DefaultReadHeaderTimeout: a request's line and headers arrive within
	// this, or the connection is closed (a slow-loris client).
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout: a whole request, its body included, arrives
	// within this (MCP's largest messages, 64 MiB, over a slow link).
	DefaultReadTimeout = 2 * time.Minute
	// DefaultWriteTimeout: each write of a response (a page, an event) is
	// taken by the client within this, or the connection is closed.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout: a kept-alive connection waits this long for its
	// next request.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxConns: connections served at once; more wait in the
	// kernel's backlog until one ends. A browser opens six per host, and a
	// page holds one more per live log.
	DefaultMaxConns = 64
	// DefaultShutdownGrace: what requests in flight get to finish when the
	// server stops.
	DefaultShutdownGrace = 5 * time.Second
)

// Options tune a server; a zero field takes its default.
type Options struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxConns                                                  int
	ShutdownGrace                                             time.Duration
	// Base is the context requests are made from: its end ends them (the
	// UI's live streams when `xmode ui` is stopped). Nil: requests end
	// with their connection only.
	Base context.Context
	// ErrorLog takes what net/http logs (a TLS handshake from a browser
	// that guessed https, a connection that broke); nil: the standard
	// logger (stderr).
	ErrorLog io.Writer
}

func (o Options) withDefaults() Options {
	or := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	or(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	or(&o.ReadTimeout, DefaultReadTimeout)
	or(&o.WriteTimeout, DefaultWriteTimeout)
	or(&o.IdleTimeout, DefaultIdleTimeout)
	or(&o.ShutdownGrace, DefaultShutdownGrace)
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	return o
}

// CheckListen is the listen policy of every xmode server: HOST:PORT with a
// host — an empty one would listen on every interface, which is rarely
// what `:8765` was meant to say — and a loopback address (127.0.0.1, ::1,
// localhost) unless allowRemote, for whoever reaches the server with its
// token acts as the user who started it.
func CheckListen(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fail.Usagef("--listen %q: give HOST:PORT, e.g. 127.0.0.1:8765", addr)
	}
	if host == "" {
		return fail.Usagef("--listen %q listens on every interface: give 127.0.0.1:%s for this machine (or an explicit address, e.g. 0.0.0.0:%s, with --allow-remote)", addr, port, port)
	}
	if !Loopback(host) && !allowRemote {
		return fail.Usagef("--listen %s is reachable from other machines, and whoever reaches it with the token acts as you: add --allow-remote if that is what you want (with a firewall, and TLS in front), or listen on 127.0.0.1:%s", addr, port)
	}
	return nil
}

// Loopback reports whether host (of HOST:PORT) names this machine only.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen checks addr against the policy and listens on it.
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	if err := CheckListen(addr, allowRemote); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fail.Failedf("listen on %s: %v", addr, err)
	}
	return ln, nil
}

// Serve serves h on ln until ctx ends, then shuts down: no new
// connections, and the requests in flight get ShutdownGrace to finish.
// It returns nil after a shutdown, else why serving stopped.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, o Options) error {
	o = o.withDefaults()
	hs := &http.Server{
		Handler:           deadlines(h, o.WriteTimeout, o.ReadTimeout),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		IdleTimeout:       o.IdleTimeout,
		// No WriteTimeout: it would cut a stream; each write has its own
		// deadline instead (deadlines).
		ErrorLog: logTo(o.ErrorLog),
	}
	if o.Base != nil {
		hs.BaseContext = func(net.Listener) context.Context { return o.Base }
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(netutil.LimitListener(ln, o.MaxConns)) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// Refuse answers a request the server will not serve — no credentials,
// the wrong origin — with code and a line of text, and closes the
// connection: a client that was refused keeps no connection open.
func Refuse(w http.ResponseWriter, code int, text string) {
	h := w.Header()
	h.Set("Connection", "close")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, text)
}

// deadlines gives each write of a response a deadline of its own, so a
// client that stops reading is dropped without cutting a stream that
// flows (the server's WriteTimeout would cut it: it counts from the
// request).
func deadlines(h http.Handler, write, read time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		r = r.WithContext(context.WithValue(r.Context(), readFromNowKey{}, func() {
			_ = rc.SetReadDeadline(time.Now().Add(read))
		}))
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: rc, d: write}, r)
		// What the handler left buffered is written after it returns.
		_ = rc.SetWriteDeadline(time.Now().Add(write))
	})
}

type readFromNowKey struct{}

// ReadFromNow gives the rest of r's body the server's whole ReadTimeout
// from now: for a handler that made the request wait before reading its
// body (MCP's budget of bytes in flight), so the wait does not use up the
// time the client has to send it. A request not served by Serve is left
// as it is.
func ReadFromNow(r *http.Request) {
	if f, ok := r.Context().Value(readFromNowKey{}).(func()); ok {
		f()
	}
}

// deadlineWriter sets a write deadline before each write and flush.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.ResponseWriter.Write(p)
}

// FlushError flushes with a fresh deadline (http.ResponseController and
// the Flusher below find it).
func (w *deadlineWriter) FlushError() error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.rc.Flush()
}

func (w *deadlineWriter) Flush() { _ = w.FlushError() }

// Unwrap lets http.ResponseController reach the connection.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logTo is net/http's error log: w, or the standard logger's when nil.
func logTo(w io.Writer) *log.Logger {
	if w == nil {
		return nil
	}
	return log.New(w, "", 0)
}
