package docker

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/relay"
)

// A sandbox's port is reached from the host straight at the container's
// address when the host routes to it (a bridge, with the daemon on this
// machine), else through its relay (docs/network.md, "Ports";
// docs/docker.md): a container of xmode's own image,
// xmode-relay-<session>, that joins the sandbox container's network
// namespace and nothing else — no mount, no capability, another user, its
// own processes — and idles. Each connection through it is an exec in it
// of `xmode __relay 127.0.0.1:PORT` (internal/relay), its standard streams
// the connection's bytes. So a port is reached whatever the sandbox's
// network: none (loopback is all it has), its egress network (the host has
// no address on it), a bridge, or a daemon on another machine; and the
// sandbox's own processes never see the relay, which opens no listener.

// RolePortRelay labels a sandbox's port relay (LabelRole).
const RolePortRelay = "port-relay"

// RelayName is the port relay of a session's sandbox.
func RelayName(sessionID string) string { return "xmode-relay-" + sessionID }

// relayIdle is what the relay container runs: nothing but waiting.
var relayIdle = []string{"/xmode", "__relay", "--idle"}

// DialPort connects to port of the sandbox's container through its relay
// (engine.PortDialer), making the relay first if it has none. A port
// nothing listens on is an error that says so.
func (p *Provider) DialPort(ctx context.Context, sb engine.Sandbox, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fail.Usagef("port %d: a port is 1 to 65535", port)
	}
	if c := p.dialDirect(ctx, sb, port); c != nil {
		return c, nil
	}
	id, err := p.ensureRelay(ctx, sb)
	if err != nil {
		return nil, err
	}
	cctx, cancel := p.call(ctx)
	created, err := p.cli.ContainerExecCreate(cctx, id, container.ExecOptions{
		Cmd:         []string{"/xmode", "__relay", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))},
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	cancel()
	if err != nil {
		return nil, p.wrap(err, "start a relay to port "+strconv.Itoa(port))
	}
	actx, acancel := p.call(ctx)
	hr, err := p.execAttach(actx, created.ID, false)
	acancel()
	if err != nil {
		return nil, p.wrap(err, "attach to a relay to port "+strconv.Itoa(port))
	}
	pr, pw := io.Pipe()
	stderr := &headBuffer{limit: 4 << 10}
	go func() {
		_, err := stdcopy.StdCopy(pw, stderr, hr.Reader)
		pw.CloseWithError(err)
	}()
	first := make([]byte, 1)
	if _, err := io.ReadFull(pr, first); err != nil || first[0] != relay.Ready {
		hr.Close()
		_ = pr.Close()
		why := strings.TrimSpace(stderr.String())
		if why == "" && err != nil {
			why = err.Error()
		}
		return nil, fail.Failedf("port %d of sandbox %s cannot be reached: %s (does something listen on it?)", port, sb.SessionID, why)
	}
	return &relayConn{hr: hr, r: pr}, nil
}

// directTimeout bounds a connection straight to a container's address:
// one the host routes answers (or refuses) at once.
const directTimeout = 300 * time.Millisecond

// dialDirect connects straight to the container's address on a network
// the host reaches (docker's bridge, a user-defined bridge), as docker's
// own published ports do — a connection there costs a millisecond where a
// relay's exec costs a hundred: with the daemon on this machine (bind
// mode) only, never on a sandbox's egress network (internal, the host has
// no address on it) or network none. nil when it cannot, for the relay.
func (p *Provider) dialDirect(ctx context.Context, sb engine.Sandbox, port int) net.Conn {
	if p.MountMode() != MountBind || sb.ContainerID == "" || checkRef("container", sb.ContainerID) != nil {
		return nil
	}
	cctx, cancel := p.call(ctx)
	ci, err := p.cli.ContainerInspect(cctx, sb.ContainerID)
	cancel()
	if err != nil || ci.Config == nil || checkOwned(ci.Config.Labels, sb.SessionID) != nil || ci.NetworkSettings == nil {
		return nil
	}
	for name, n := range ci.NetworkSettings.Networks {
		if n == nil || n.IPAddress == "" || name == "none" || name == EgressNetworkName(sb.SessionID) {
			continue
		}
		d := net.Dialer{Timeout: directTimeout}
		if c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(n.IPAddress, strconv.Itoa(port))); err == nil {
			return c
		}
	}
	return nil
}

// relayConn is one connection through a relay exec.
type relayConn struct {
	hr types.HijackedResponse
	r  *io.PipeReader
}

func (c *relayConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c *relayConn) Write(b []byte) (int, error) { return c.hr.Conn.Write(b) }

// CloseWrite ends what goes to the sandbox's port (the relay closes its
// write side in turn).
func (c *relayConn) CloseWrite() error { return c.hr.CloseWrite() }

func (c *relayConn) Close() error {
	c.hr.Close()
	return c.r.Close()
}
func (c *relayConn) LocalAddr() net.Addr                { return c.hr.Conn.LocalAddr() }
func (c *relayConn) RemoteAddr() net.Addr               { return c.hr.Conn.RemoteAddr() }
func (c *relayConn) SetDeadline(t time.Time) error      { return c.hr.Conn.SetDeadline(t) }
func (c *relayConn) SetReadDeadline(t time.Time) error  { return c.hr.Conn.SetReadDeadline(t) }
func (c *relayConn) SetWriteDeadline(t time.Time) error { return c.hr.Conn.SetWriteDeadline(t) }

// ensureRelay returns the running relay of sb's container, making (or
// making again, for a container made anew) and starting it as needed.
func (p *Provider) ensureRelay(ctx context.Context, sb engine.Sandbox) (string, error) {
	if sb.ContainerID == "" {
		return "", fail.Refusedf("sandbox %s has no container: its ports cannot be reached", sb.SessionID)
	}
	if err := checkRef("container", sb.ContainerID); err != nil {
		return "", err
	}
	name := RelayName(sb.SessionID)
	if err := checkRef("container", name); err != nil {
		return "", err
	}
	for attempt := 0; attempt < 3; attempt++ {
		cctx, cancel := p.call(ctx)
		sandbox, err := p.cli.ContainerInspect(cctx, sb.ContainerID)
		cancel()
		if err != nil {
			return "", p.wrap(err, "inspect the sandbox's container "+shortID(sb.ContainerID))
		}
		if sandbox.State == nil || !sandbox.State.Running || sandbox.Config == nil {
			return "", fail.Refusedf("the container of sandbox %s is not running: its ports cannot be reached", sb.SessionID)
		}
		if err := checkOwned(sandbox.Config.Labels, sb.SessionID); err != nil {
			return "", fail.Refusedf("container %s is not sandbox %s's: %v", shortID(sb.ContainerID), sb.SessionID, err)
		}
		want := container.NetworkMode("container:" + sandbox.ID)
		cctx, cancel = p.call(ctx)
		ci, err := p.cli.ContainerInspect(cctx, name)
		cancel()
		switch {
		case cerrdefs.IsNotFound(err):
			id, err := p.createRelay(ctx, name, sandbox)
			if cerrdefs.IsConflict(err) {
				continue // another connection made it meanwhile
			}
			return id, err
		case err != nil:
			return "", p.wrap(err, "inspect the port relay "+name)
		case ci.Config == nil || ci.HostConfig == nil || checkOwned(ci.Config.Labels, sb.SessionID) != nil:
			return "", fail.Refusedf("container %s is not sandbox %s's port relay: refusing to use it", name, sb.SessionID)
		case ci.HostConfig.NetworkMode != want:
			// The sandbox's container was made again: a relay of the old one.
			if err := p.removeContainer(ctx, ci.ID, sb.SessionID); err != nil {
				return "", err
			}
			continue
		case ci.State != nil && ci.State.Running:
			return ci.ID, nil
		}
		cctx, cancel = p.call(ctx)
		err = p.cli.ContainerStart(cctx, ci.ID, container.StartOptions{})
		cancel()
		if err != nil {
			return "", p.wrap(err, "start the port relay "+name)
		}
		return ci.ID, nil
	}
	return "", fail.Failedf("the port relay %s of sandbox %s kept changing under xmode: try again", name, sb.SessionID)
}

// createRelay makes and starts the relay of a sandbox's container.
func (p *Provider) createRelay(ctx context.Context, name string, sandbox container.InspectResponse) (string, error) {
	img, _, err := p.egressImage(ctx)
	if err != nil {
		return "", err
	}
	labels := map[string]string{LabelRole: RolePortRelay}
	for _, k := range []string{LabelManaged, LabelSession, LabelRun, LabelInstance} {
		labels[k] = sandbox.Config.Labels[k]
	}
	pids := int64(64)
	cc := &container.Config{
		Image: img, User: "65534:65534", Entrypoint: relayIdle, Labels: labels,
	}
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode("container:" + sandbox.ID),
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		IpcMode:        container.IPCModePrivate,
		Resources:      container.Resources{Memory: 64 << 20, MemorySwap: 64 << 20, PidsLimit: &pids},
		LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	created, err := p.cli.ContainerCreate(cctx, cc, hc, nil, nil, name)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return "", err
		}
		return "", p.wrap(err, "create the port relay "+name)
	}
	if err := p.cli.ContainerStart(cctx, created.ID, container.StartOptions{}); err != nil {
		_ = p.removeContainer(context.WithoutCancel(ctx), created.ID, sandbox.Config.Labels[LabelSession])
		return "", p.wrap(err, "start the port relay "+name)
	}
	return created.ID, nil
}

// removeRelay removes a session's port relay, if it has one.
func (p *Provider) removeRelay(ctx context.Context, sessionID string) error {
	if sessionID == "" {
		return nil
	}
	if err := p.removeContainer(ctx, RelayName(sessionID), sessionID); err != nil {
		return fmt.Errorf("remove the port relay of %s: %w", sessionID, err)
	}
	return nil
}
