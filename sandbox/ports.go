package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/proc"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// Ports on demand (docs/network.md, "Ports"): `sandbox port ID 8080`
// publishes a port of the sandbox on a port of the host. A forwarder —
// this xmode started again as `xmode __forward SESSION`, in a session of
// its own, as a background step's supervisor is — listens there and, for
// each connection, asks the engine for one to the sandbox's port
// (engine.PortDialer: the docker engine through a relay in the sandbox's
// network, whatever that network is). It outlives the command that started
// it, records itself on the port's row (its owner) and ends with the
// sandbox: `sandbox stop` and the reaper end it (reaper), and it ends
// itself once its session is over or its row closed. A host step's server
// listens on this machine already: publishing its port records it and
// prints its URL, and forwards only to another host port or address.

// ForwarderCommand is the hidden command a port's forwarder runs as; cmd
// registers it and calls Forward.
const ForwarderCommand = "__forward"

// forwarderStartWait bounds how long PublishPort waits for its forwarder
// to listen.
const forwarderStartWait = time.Minute

// forwarderPoll is how often a forwarder looks at its session and its row.
const forwarderPoll = time.Second

// PortOptions say which sandbox port to publish, and where.
type PortOptions struct {
	Port int
	// HostPort is where on the host: "" (a free loopback port), a port
	// ("9000") or an address and a port ("127.0.0.2:9000").
	HostPort string
	// ExposeRemote lets it listen on an address other machines reach (all
	// of the host's, without an address in HostPort).
	ExposeRemote bool
}

// listenAddr is where a port's forwarder listens.
func (o PortOptions) listenAddr() (string, error) {
	host := "127.0.0.1"
	if o.ExposeRemote {
		host = "0.0.0.0"
	}
	port := "0"
	if o.HostPort != "" {
		h, p, err := net.SplitHostPort(o.HostPort)
		if err != nil {
			h, p = "", o.HostPort
		}
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			return "", fail.Usagef("%s %q: give a port (9000) or an address and a port (127.0.0.1:9000)", fail.HostPort, o.HostPort)
		}
		port = p
		if h != "" {
			if h == "localhost" {
				h = "127.0.0.1"
			}
			a, err := netip.ParseAddr(h)
			if err != nil {
				return "", fail.Usagef("%s %q: %q is not an IP address of this host", fail.HostPort, o.HostPort, h)
			}
			if !a.IsLoopback() && !o.ExposeRemote {
				return "", fail.Usagef("%s %s is not a loopback address: other machines could reach the sandbox's port there; add %s to mean it", fail.HostPort, h, fail.ExposeRemote)
			}
			host = h
		}
	}
	return net.JoinHostPort(host, port), nil
}

// PublishPort publishes a port of the session's sandbox on the host and
// returns its row (HostAddr, URL). A port the session publishes already is
// refused (4).
func (s *Service) PublishPort(ctx context.Context, sess *store.Session, o PortOptions) (*store.Port, error) {
	if o.Port < 1 || o.Port > 65535 {
		return nil, fail.Usagef("port %d: a port is 1 to 65535", o.Port)
	}
	listen, err := o.listenAddr()
	if err != nil {
		return nil, err
	}
	if err := store.CheckOpen(sess, s.Now()); err != nil {
		return nil, err
	}
	if sess.Engine == engine.Cloud {
		return nil, fail.Refusedf("session %s runs in the Codex cloud: nothing of it runs here to publish", sess.ID)
	}
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return nil, err
	}
	onHost := engine.OnHost(provider)
	_, dials := engine.Ports(provider)
	engine.Close(provider)
	now := s.Now()
	if onHost && o.HostPort == "" && !o.ExposeRemote {
		// The step's server is on this machine already: its own port is
		// the URL, and nothing needs forwarding.
		p := store.Port{SessionID: sess.ID, Port: o.Port, HostAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port)), OpenedAt: now}
		if err := s.Store.OpenPort(ctx, p); err != nil {
			return nil, err
		}
		return s.port(ctx, sess.ID, o.Port)
	}
	if !dials {
		return nil, fail.Refusedf("the %s engine cannot reach a sandbox's port from this host", sess.Engine)
	}
	if err := s.Store.OpenPort(ctx, store.Port{SessionID: sess.ID, Port: o.Port, HostAddr: listen, OpenedAt: now}); err != nil {
		return nil, err
	}
	if err := startForwarder(ctx, forwardHandover{Cfg: s.Cfg, SessionID: sess.ID, Port: o.Port, Listen: listen}); err != nil {
		_ = s.Store.ClosePort(context.WithoutCancel(ctx), sess.ID, o.Port, s.Now(), err.Error())
		return nil, err
	}
	return s.port(ctx, sess.ID, o.Port)
}

// port is the open row of a session's port.
func (s *Service) port(ctx context.Context, sessionID string, port int) (*store.Port, error) {
	ps, err := s.Store.Ports(ctx, sessionID, false)
	if err != nil {
		return nil, err
	}
	for i := range ps {
		if ps[i].Port == port {
			return &ps[i], nil
		}
	}
	return nil, fail.NotFoundf("session %s publishes no port %d", sessionID, port)
}

// Ports lists a session's published ports (all with closed ones).
func (s *Service) Ports(ctx context.Context, sess *store.Session, all bool) ([]store.Port, error) {
	ps, err := s.Store.Ports(ctx, sess.ID, all)
	if ps == nil {
		ps = []store.Port{}
	}
	return ps, err
}

// ClosePort stops publishing a session's port: its forwarder ends.
func (s *Service) ClosePort(ctx context.Context, sess *store.Session, port int) error {
	p, err := s.port(ctx, sess.ID, port)
	if err != nil {
		return err
	}
	return reaper.ClosePorts(ctx, s.Store, []store.Port{*p}, s.Now(), "")
}

// forwardHandover is what PublishPort gives its forwarder (fd 3).
type forwardHandover struct {
	Cfg       *config.Config `json:"cfg"`
	SessionID string         `json:"session_id"`
	Port      int            `json:"port"`
	Listen    string         `json:"listen"`
}

// forwardReport is what a forwarder says back (fd 4): where it listens, or
// why it does not.
type forwardReport struct {
	Addr  string    `json:"addr,omitempty"`
	Error string    `json:"error,omitempty"`
	Kind  fail.Kind `json:"kind,omitempty"`
}

// startForwarder starts a port's forwarder and waits until it listens.
func startForwarder(ctx context.Context, h forwardHandover) error {
	handR, handW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start a port forwarder: %w", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		closeFiles(handR, handW)
		return fmt.Errorf("start a port forwarder: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		closeFiles(handR, handW, repR, repW)
		return fmt.Errorf("start a port forwarder: %w", err)
	}
	cmd := &exec.Cmd{
		Path: supervisorPath, Args: []string{os.Args[0], ForwarderCommand, h.SessionID, strconv.Itoa(h.Port)},
		Env: os.Environ(), Dir: "/",
		Stdin: null, Stdout: null, Stderr: null,
		ExtraFiles:  []*os.File{handR, repW},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	closeFiles(handR, repW, null)
	if err != nil {
		closeFiles(handW, repR)
		return fmt.Errorf("start a port forwarder (%s): %w", supervisorPath, err)
	}
	go func() { _ = cmd.Wait() }() // reaped by a caller that outlives it
	go func() {
		_ = json.NewEncoder(handW).Encode(h)
		handW.Close()
	}()
	got := make(chan forwardReport, 1)
	go func() {
		defer repR.Close()
		var r forwardReport
		if err := json.NewDecoder(repR).Decode(&r); err != nil {
			r = forwardReport{Error: "the port's forwarder ended before it listened", Kind: fail.Failed}
		}
		got <- r
	}()
	timer := time.NewTimer(forwarderStartWait)
	defer timer.Stop()
	select {
	case r := <-got:
		if r.Error != "" {
			return fail.As(r.Kind, errors.New(r.Error))
		}
		return nil
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return ctx.Err()
	case <-timer.C:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return fail.Failedf("the port's forwarder did not listen within %s; it was told to end", forwarderStartWait)
	}
}

// ForwarderFiles are the two pipes a forwarder inherits from PublishPort:
// the handover (fd 3) and the report (fd 4), close-on-exec at once.
func ForwarderFiles() (handover io.ReadCloser, report io.WriteCloser) {
	return SupervisorFiles()
}

// Forward is a port's forwarder (the hidden command ForwarderCommand): it
// reads the port PublishPort handed over, listens, says where on report,
// and forwards each connection to the sandbox's port until ctx ends (a
// signal), its session is over or its row is closed; then it closes its
// row.
func Forward(ctx context.Context, handoverR io.ReadCloser, report io.WriteCloser, now func() time.Time) (err error) {
	if now == nil {
		now = time.Now
	}
	reported := false
	say := func(r forwardReport) {
		if !reported {
			reported = true
			_ = json.NewEncoder(report).Encode(r)
			report.Close()
		}
	}
	defer func() {
		if err != nil {
			say(forwardReport{Error: err.Error(), Kind: fail.KindOf(err)})
		}
		say(forwardReport{Error: "the forwarder ended before it listened", Kind: fail.Failed})
	}()
	var h forwardHandover
	err = json.NewDecoder(handoverR).Decode(&h)
	handoverR.Close()
	if err != nil || h.Cfg == nil {
		return fmt.Errorf("read the port to forward: %v", err)
	}
	st, err := store.Open(ctx, h.Cfg.StorageRoot)
	if err != nil {
		return err
	}
	defer st.Close()
	sess, err := st.Get(ctx, h.SessionID)
	if err != nil {
		return err
	}
	provider, err := engine.Open(sess.Engine, h.Cfg)
	if err != nil {
		return err
	}
	defer engine.Close(provider)
	dialer, ok := engine.Ports(provider)
	if !ok {
		return fail.Refusedf("the %s engine cannot reach a sandbox's port", sess.Engine)
	}
	ln, err := net.Listen("tcp", h.Listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fail.Refusedf("%s is in use on this host: choose another with %s", h.Listen, fail.HostPort)
		}
		return fmt.Errorf("listen on %s: %w", h.Listen, err)
	}
	why := ""
	defer func() {
		ln.Close()
		_ = st.ClosePort(context.WithoutCancel(ctx), h.SessionID, h.Port, now(), why)
	}()
	if err := st.SetPortServing(ctx, h.SessionID, h.Port, ln.Addr().String(), proc.Self()); err != nil {
		return err
	}
	say(forwardReport{Addr: ln.Addr().String()})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go func() {
		t := time.NewTicker(forwarderPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur, err := st.Get(ctx, h.SessionID)
			if err == nil && store.CheckOpen(cur, now()) != nil {
				why = "its sandbox ended"
				cancel()
				return
			}
			ps, err := st.Ports(ctx, h.SessionID, false)
			if err == nil && !hasPort(ps, h.Port) {
				cancel()
				return
			}
		}
	}()
	sb := sess.Sandbox()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on %s: %w", ln.Addr(), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			forwardConn(ctx, c, func() (net.Conn, error) { return dialer.DialPort(ctx, sb, h.Port) })
		}()
	}
}

func hasPort(ps []store.Port, port int) bool {
	for _, p := range ps {
		if p.Port == port {
			return true
		}
	}
	return false
}

// forwardConn copies one client connection to a connection to the
// sandbox's port and back, each direction's end passed on, until both are
// done or ctx ends.
func forwardConn(ctx context.Context, client net.Conn, dial func() (net.Conn, error)) {
	defer client.Close()
	up, err := dial()
	if err != nil {
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { client.Close(); up.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, client)
		closeWrite(up)
		close(done)
	}()
	_, _ = io.Copy(client, up)
	closeWrite(client)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// PortURL is a published port's URL, for a person.
func PortURL(p store.Port) string {
	host, port, err := net.SplitHostPort(p.HostAddr)
	if err != nil {
		return p.URL
	}
	if host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1" // where this host reaches it; other machines use its address
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}
