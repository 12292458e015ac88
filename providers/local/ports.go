package local

import (
	"context"
	"net"
	"strconv"

	"github.com/xmode/xmode/engine"
)

// DialPort reaches a host step's server (engine.PortDialer): it listens on
// this machine already, on loopback or on every address; the forwarder of
// `sandbox port --host-port` dials it here.
func (*Provider) DialPort(ctx context.Context, _ engine.Sandbox, port int) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if c6, err6 := d.DialContext(ctx, "tcp", net.JoinHostPort("::1", strconv.Itoa(port))); err6 == nil {
			return c6, nil
		}
		return nil, err
	}
	return c, nil
}
