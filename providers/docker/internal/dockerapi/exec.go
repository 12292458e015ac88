package dockerapi

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ExecCreate creates an exec (a process to start in a running container)
// and returns its id.
func (c *Client) ExecCreate(ctx context.Context, container string, cfg ExecConfig) (string, error) {
	container, err := segment("container", container, false)
	if err != nil {
		return "", err
	}
	var out struct {
		ID string `json:"Id"`
	}
	if err := c.call(ctx, http.MethodPost, "/containers/"+container+"/exec", nil, cfg, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// ExecInspect returns an exec's state.
func (c *Client) ExecInspect(ctx context.Context, id string) (ExecInspect, error) {
	var out ExecInspect
	id, err := segment("exec", id, false)
	if err != nil {
		return out, err
	}
	err = c.call(ctx, http.MethodGet, "/exec/"+id+"/json", nil, nil, &out)
	return out, err
}

// HijackedConn is the connection of a started exec, taken over from HTTP:
// reads return the exec's multiplexed output (Demux splits it), writes go
// to its stdin, CloseWrite ends its stdin.
type HijackedConn struct {
	conn net.Conn
	r    *bufio.Reader // may hold output read along with the HTTP answer
}

func (h *HijackedConn) Read(p []byte) (int, error)  { return h.r.Read(p) }
func (h *HijackedConn) Write(p []byte) (int, error) { return h.conn.Write(p) }

// CloseWrite half-closes the connection: the exec's stdin sees EOF, its
// output keeps coming.
func (h *HijackedConn) CloseWrite() error {
	if cw, ok := h.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("the connection to the daemon cannot be half-closed")
}

// Close closes the connection.
func (h *HijackedConn) Close() error { return h.conn.Close() }

// ExecStart starts an exec attached to its streams. The request is written
// on a connection of its own, asking to upgrade it (Connection: Upgrade,
// Upgrade: tcp); after the daemon's answer (101, or 200 from old daemons)
// the connection carries the exec's streams. ctx bounds only the start:
// the streams stay open until Close, whatever ctx does afterwards.
func (c *Client) ExecStart(ctx context.Context, id string) (*HijackedConn, error) {
	id, err := segment("exec", id, false)
	if err != nil {
		return nil, err
	}
	full, err := c.apiPath(ctx, "/exec/"+id+"/start")
	if err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, http.MethodPost, full, nil,
		struct {
			Detach bool `json:"Detach"`
			Tty    bool `json:"Tty"`
		}{}, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"tcp"}})
	if err != nil {
		return nil, err
	}
	conn, err := c.dial(ctx, "", "")
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("start exec: %w", ctx.Err())
		}
		return nil, &ConnError{Host: c.host, Err: err}
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		// A step may print nothing for a long time; keep-alives keep
		// middleboxes from dropping the idle connection.
		_ = tc.SetKeepAlive(true)
		_ = tc.SetKeepAlivePeriod(30 * time.Second)
	}
	// Until the answer is in, ctx ends the wait by expiring the deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	resp, br, conn, err := c.upgrade(ctx, conn, req)
	if !stop() {
		conn.Close()
		return nil, fmt.Errorf("start exec: %w", ctx.Err())
	}
	if err != nil {
		conn.Close()
		var de *Error
		if errors.As(err, &de) {
			return nil, err
		}
		return nil, &ConnError{Host: c.host, Err: err}
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		err := responseError(resp, http.MethodPost, full)
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return &HijackedConn{conn: conn, r: br}, nil
}

// upgrade writes req on conn (after a TLS handshake for https) and reads
// the answer's head.
func (c *Client) upgrade(ctx context.Context, conn net.Conn, req *http.Request) (*http.Response, *bufio.Reader, net.Conn, error) {
	if c.scheme == "https" {
		cfg := c.tls.Clone()
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(c.addr)
			if err != nil {
				host = c.addr
			}
			cfg.ServerName = host
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, conn, err
		}
		conn = tc
	}
	if err := req.Write(conn); err != nil {
		return nil, nil, conn, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, nil, conn, err
	}
	if resp.StatusCode >= http.StatusBadRequest {
		return nil, nil, conn, responseError(resp, req.Method, req.URL.Path)
	}
	return resp, br, conn, nil
}

// Stream numbers in the multiplexed output of an exec without a TTY.
const (
	streamStdin  = 0
	streamStdout = 1
	streamStderr = 2
	streamSystem = 3 // the daemon's own error
)

// demuxBuffer is the size of the pieces output is copied in.
const demuxBuffer = 32 << 10

// Demux splits the multiplexed output of an exec (or attach) without a TTY
// into stdout and stderr. Each frame is an 8-byte header — the stream (1
// stdout, 2 stderr, 3 the daemon's error), three zero bytes, the payload
// size as a big-endian uint32 — and the payload. It returns at the end of
// the stream (nil), on a broken stream, a writer's error, or the daemon's
// error frame. Memory stays bounded whatever the frame sizes.
func Demux(stdout, stderr io.Writer, r io.Reader) (written int64, err error) {
	var head [8]byte
	buf := make([]byte, demuxBuffer)
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			if err == io.EOF {
				return written, nil
			}
			return written, fmt.Errorf("read the exec's output: %w", err)
		}
		size := int64(binary.BigEndian.Uint32(head[4:]))
		var w io.Writer
		switch head[0] {
		case streamStdin, streamStdout:
			w = stdout
		case streamStderr:
			w = stderr
		case streamSystem:
			msg, err := io.ReadAll(io.LimitReader(r, min(size, 64<<10)))
			if err != nil {
				return written, fmt.Errorf("read the daemon's error: %w", err)
			}
			return written, fmt.Errorf("error from the daemon in the exec's stream: %s", msg)
		default:
			return written, fmt.Errorf("exec output: unknown stream %d in a frame header (not a multiplexed stream?)", head[0])
		}
		for size > 0 {
			n, err := io.ReadFull(r, buf[:min(size, int64(len(buf)))])
			if n > 0 {
				m, werr := w.Write(buf[:n])
				written += int64(m)
				if werr != nil {
					return written, werr
				}
			}
			if err != nil {
				return written, fmt.Errorf("read the exec's output: %w", err)
			}
			size -= int64(n)
		}
	}
}
