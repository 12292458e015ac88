package dockertest

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// SocketProxy is a docker socket that can go away and come back: the daemon
// as a client sees it when dockerd stops and starts, without stopping the
// daemon other tests share.
type SocketProxy struct {
	Path   string // the proxy's socket: use "unix://"+Path as the docker host
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

// NewSocketProxy starts a proxy to the test daemon's unix socket; it skips
// the test when the daemon is not on a unix socket.
func NewSocketProxy(t testing.TB) *SocketProxy {
	t.Helper()
	host := Host()
	if !strings.HasPrefix(host, "unix://") {
		t.Skipf("SKIP: the proxy needs the test daemon on a unix socket; it is at %s", host)
	}
	dir, err := os.MkdirTemp("", "xmode-px") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &SocketProxy{Path: filepath.Join(dir, "d.sock"), target: strings.TrimPrefix(host, "unix://"), conns: map[net.Conn]bool{}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// Start (re)opens the proxy's socket: the daemon is back.
func (p *SocketProxy) Start() error {
	ln, err := net.Listen("unix", p.Path)
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
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
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
	os.Remove(p.Path)
}
