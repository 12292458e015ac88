package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// helloTimeout bounds how long a tunnel waits for the client's TLS
// ClientHello after the 200.
const helloTimeout = 10 * time.Second

// tunnel serves a CONNECT the policy allowed by its target: dial (the
// target's addresses meet the block list and deny rules), 200, then the
// client's TLS ClientHello, whose SNI must name the target — no domain
// fronting, and nothing but TLS — then bytes both ways, counted.
func (sb *sandbox) tunnel(client net.Conn, st *state, rec Record, d Decision, start time.Time) {
	defer client.Close()
	rec.Rule, rec.Source = d.Rule, d.Source
	end := func(verdict, reason string) {
		rec.Verdict, rec.Reason = verdict, reason
		rec.DurationMS = float64(sb.srv.opts.Now().Sub(start).Microseconds()) / 1000
		sb.write(rec)
	}
	// The policy decides before the 200 (a refusal can still be said); the
	// connection to the upstream is made while the client sends its
	// ClientHello, which takes a connection setup off the first byte.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addrs, dd, err := st.resolve(ctx, rec.Host, rec.Port)
	switch {
	case err == nil && !dd.Allowed:
		rec.Rule, rec.Source = dd.Rule, dd.Source
		_, _ = io.WriteString(client, statusLine(http.StatusForbidden, dd.Reason))
		end(Denied, dd.Reason)
		return
	case err != nil:
		msg := "the upstream could not be reached: " + err.Error()
		_, _ = io.WriteString(client, statusLine(http.StatusBadGateway, msg))
		end(Failed, msg)
		return
	}
	type dialed struct {
		c   net.Conn
		err error
	}
	upc := make(chan dialed, 1)
	go func() {
		c, err := dialAny(ctx, addrs, rec.Port)
		upc <- dialed{c, err}
	}()
	var up net.Conn
	got := false
	defer func() {
		if !got {
			cancel()
			if d := <-upc; d.c != nil {
				d.c.Close()
			}
		}
		if up != nil {
			up.Close()
		}
	}()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		end(Failed, "the client went away")
		return
	}
	sni, raw, err := peekClientHello(client)
	if err != nil {
		rec.Rule, rec.Source = "tls", ""
		end(Denied, "a tunnel carries TLS only: "+err.Error())
		return
	}
	rec.SNI = sni
	if problem := sniProblem(sni, rec.Host); problem != "" {
		rec.Rule, rec.Source = "sni", ""
		end(Denied, problem)
		return
	}
	res := <-upc
	got = true
	if res.err != nil {
		end(Failed, "the upstream could not be reached: "+res.err.Error())
		return
	}
	up = res.c
	rec.Address = up.RemoteAddr().String()
	if _, err := up.Write(raw); err != nil {
		end(Failed, "the upstream went away")
		return
	}
	rec.BytesUp, rec.BytesDown = pipe(client, up)
	rec.BytesUp += int64(len(raw))
	end(Allowed, "")
}

// sniProblem says why a ClientHello's SNI may not go to target, or "".
// A name target needs its own name; an address target, no name at all.
func sniProblem(sni, target string) string {
	if _, ok := canonicalName(target); !ok {
		if sni != "" {
			return fmt.Sprintf("the TLS SNI %q names a host, but the CONNECT target is the address %s (no domain fronting)", clip(sni), target)
		}
		return ""
	}
	if sni == "" {
		return "the TLS ClientHello names no host (SNI), so the target cannot be checked"
	}
	n, _ := canonicalName(target)
	if strings.ToLower(strings.TrimSuffix(sni, ".")) != n {
		return fmt.Sprintf("the TLS SNI %q does not name the CONNECT target %s (no domain fronting)", clip(sni), n)
	}
	return ""
}

var errPeeked = errors.New("peeked")

// peekClientHello reads the client's ClientHello (crypto/tls parses it)
// and returns its SNI and every byte read, to be sent on unchanged.
func peekClientHello(c net.Conn) (string, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	defer c.SetReadDeadline(time.Time{})
	rc := &recordingConn{Conn: c, r: io.LimitReader(c, 80<<10)}
	var hello *tls.ClientHelloInfo
	err := tls.Server(rc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = h
		return nil, errPeeked
	}}).Handshake()
	if hello == nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "", nil, fmt.Errorf("no TLS ClientHello within %s", helloTimeout)
		}
		return "", nil, fmt.Errorf("no TLS ClientHello (%v)", err)
	}
	return hello.ServerName, rc.raw.Bytes(), nil
}

// recordingConn keeps what is read through it and swallows what is
// written: the alert crypto/tls sends after the peek never reaches the
// client.
type recordingConn struct {
	net.Conn
	r   io.Reader
	raw bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.raw.Write(p[:n])
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) { return len(p), nil }

// halfIdle bounds how long one direction of a tunnel stays open once the
// other has ended.
const halfIdle = 60 * time.Second

// pipe copies both ways until both end, and counts each way. Between two
// plain TCP connections io.Copy splices in the kernel: the client's
// connection goes in unwrapped (its head was read long before).
func pipe(client, up net.Conn) (toUp, toClient int64) {
	if h, ok := client.(*headConn); ok {
		client = h.Conn
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		toUp, _ = io.Copy(up, client)
		closeWrite(up)
		_ = client.SetReadDeadline(time.Now().Add(halfIdle))
		_ = up.SetReadDeadline(time.Now().Add(halfIdle))
	}()
	toClient, _ = io.Copy(client, up)
	closeWrite(client)
	_ = client.SetReadDeadline(time.Now().Add(halfIdle))
	wg.Wait()
	return toUp, toClient
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
