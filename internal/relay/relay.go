// Package relay is the far end of a published sandbox port (docs/network.md,
// "Ports"): a process in the sandbox's network namespace — the docker
// engine runs it as `xmode __relay ADDR`, an exec in a companion container
// of xmode's own image that shares the sandbox's network and nothing else —
// that connects to the sandbox's port and copies bytes between that
// connection and its standard input and output. One relay is one
// connection. Before any byte of the connection it says on standard output
// whether it connected (Ready), so the side that started it can tell a
// refused port from an empty answer.
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Ready is the byte a relay writes once it has connected; a relay that
// could not connect writes nothing on standard output, says why on
// standard error and exits 1.
const Ready = 'K'

// dialTimeout bounds the connection to the sandbox's port.
const dialTimeout = 10 * time.Second

// Serve connects to addr and copies stdin to the connection (closing its
// write side at EOF) and the connection to stdout (after Ready), until
// both directions are done.
func Serve(ctx context.Context, addr string, stdin io.Reader, stdout io.Writer) error {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connect to %s in the sandbox: %w", addr, err)
	}
	defer c.Close()
	if _, err := stdout.Write([]byte{Ready}); err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(c, stdin)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stdout, c)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	// The sandbox's side ended: what the client still sends goes nowhere.
	return err
}
