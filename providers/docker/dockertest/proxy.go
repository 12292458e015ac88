package dockertest

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/xmode/xmode/internal/testenv"
)

// SocketProxy is a docker endpoint that can go away and come back: the
// daemon as a client sees it when dockerd stops and starts, without
// stopping the daemon other tests share. It listens on a unix socket
// (NewSocketProxy) or on loopback TCP (NewTCPProxy), in front of the test
// daemon's unix socket.
type SocketProxy struct {
	Path    string // the unix proxy's socket: use "unix://"+Path as the docker host
	network string // "unix" or "tcp"
	addr    string // where it listens
	target  string
	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]bool
}

// NewSocketProxy starts a proxy on a unix socket to the test daemon's unix
// socket; it skips the test when the daemon is not on a unix socket.
func NewSocketProxy(t testing.TB) *SocketProxy {
	t.Helper()
	target := unixTarget(t)
	dir, err := os.MkdirTemp("", "xmode-px") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "d.sock")
	return startProxy(t, &SocketProxy{Path: path, network: "unix", addr: path, target: target})
}

// NewTCPProxy starts a proxy on 127.0.0.1 (a free port) to the test
// daemon's unix socket, for tcp:// endpoints: use Host(). It skips the test
// when the daemon is not on a unix socket.
func NewTCPProxy(t testing.TB) *SocketProxy {
	t.Helper()
	target := unixTarget(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return startProxy(t, &SocketProxy{network: "tcp", addr: addr, target: target})
}

func unixTarget(t testing.TB) string {
	t.Helper()
	host := Host()
	if !strings.HasPrefix(host, "unix://") {
		testenv.Skip(t, "the proxy needs the test daemon on a unix socket; it is at %s", host)
	}
	return strings.TrimPrefix(host, "unix://")
}

func startProxy(t testing.TB, p *SocketProxy) *SocketProxy {
	t.Helper()
	p.conns = map[net.Conn]bool{}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// Host is the docker host of the proxy: unix:///… or tcp://127.0.0.1:port.
func (p *SocketProxy) Host() string {
	if p.network == "tcp" {
		return "tcp://" + p.addr
	}
	return "unix://" + p.Path
}

// Start (re)opens the proxy's socket: the daemon is back.
func (p *SocketProxy) Start() error {
	ln, err := net.Listen(p.network, p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			// Each direction is half-closed when it ends (an exec's stdin
			// closing must not cut its output); the connection is closed
			// once both have.
			var wg sync.WaitGroup
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				} else {
					dst.Close()
				}
			}
			go pipe(up, c)
			go pipe(c, up)
			go func() {
				wg.Wait()
				c.Close()
				up.Close()
				p.mu.Lock()
				delete(p.conns, c)
				delete(p.conns, up)
				p.mu.Unlock()
			}()
		}
	}()
	return nil
}

// Stop closes the socket and every connection through it: the daemon is gone.
func (p *SocketProxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
	if p.network == "unix" {
		os.Remove(p.Path)
	}
}
