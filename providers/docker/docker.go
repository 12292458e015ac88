// Package docker is the design's DockerEngine: the engine provider that runs a
// cloud_worker session in its own container on a Docker daemon, through the
// Docker SDK (github.com/docker/docker/client) with API-version negotiation,
// so Engine 20.10 (API 1.41) and newer daemons both work, on a unix socket
// or over TCP with TLS.
//
// One container per session, named xmode-<session>, started by Provision with
// an init process (HostConfig.Init) and a keep-alive command; every step is
// an exec in it. The mount models, the hardening and the isolation between
// sandboxes are described in docs/docker.md. Where the SDK does not give a
// behaviour xmode relies on, client.go wraps it (and says why).
package docker

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// Name is the engine name the provider registers under.
const Name = "docker"

// Defaults for the Provider's timeouts.
const (
	DefaultPingTimeout = 5 * time.Second
	DefaultCallTimeout = 60 * time.Second
	DefaultPullTimeout = 30 * time.Minute
)

func init() {
	engine.Register(Name, func(cfg *config.Config) (engine.Provider, error) {
		p, err := New(cfg)
		if err != nil {
			return nil, err
		}
		return p, nil
	})
}

// The capabilities the docker provider has: every one of them, so that
// dropping a method fails the build rather than turning a capability off
// (callers find them with a type assertion).
var (
	_ engine.Provider        = (*Provider)(nil)
	_ engine.OrphanLister    = (*Provider)(nil)
	_ engine.LivenessChecker = (*Provider)(nil)
	_ engine.HealthChecker   = (*Provider)(nil)
	_ engine.ProgressSink    = (*Provider)(nil)
	_ engine.VolumeRemover   = (*Provider)(nil)
	_ engine.WorktreeSyncer  = (*Provider)(nil)
	_ engine.WorktreePusher  = (*Provider)(nil)
	_ engine.PathChecker     = (*Provider)(nil)
	_ engine.StepContainer   = (*Provider)(nil)
	_ engine.MountModer      = (*Provider)(nil)
	_ engine.WorktreeMounter = (*Provider)(nil)
	_ engine.Networker       = (*Provider)(nil)
	_ engine.ImageRunner     = (*Provider)(nil)
	_ engine.StepSignaler    = (*Provider)(nil)
	_ engine.EgressEnforcer  = (*Provider)(nil)
	_ engine.PortDialer      = (*Provider)(nil)
	_ io.Closer              = (*Provider)(nil) // engine.Close
)

// Provider is the docker engine provider. Its exported fields may be set
// after New and before the first call; a Provider is safe for concurrent use.
type Provider struct {
	cfg   *config.Config
	ep    endpoint
	cli   *client.Client
	guard fsguard.Guard

	// Progress receives image pull progress, rendered like `docker run`
	// renders it (with cursor movement when it is a terminal). nil: silent.
	Progress io.Writer
	// Warnings receives what an operator must not miss: volume mode falling
	// back to mounting the whole storage volume, a container restarted
	// because a step's processes could not be ended with an exec, daemon
	// warnings on create. nil: os.Stderr.
	Warnings io.Writer

	// PingTimeout bounds each "is the daemon there" check (DefaultPingTimeout).
	PingTimeout time.Duration
	// CallTimeout bounds each short API call (DefaultCallTimeout).
	CallTimeout time.Duration
	// PullTimeout bounds an image pull (DefaultPullTimeout).
	PullTimeout time.Duration
	// SyncTimeout bounds one copy of a worktree in sync mode
	// (DefaultSyncTimeout).
	SyncTimeout time.Duration

	// isolationOverride forces an isolation method (tests only).
	isolationOverride string
	// keepAliveOverride replaces KeepAlive (tests only).
	keepAliveOverride []string
	// egressResolveOnly makes the proxy resolve only the names policies
	// give it (tests only: no name of theirs reaches a real resolver).
	egressResolveOnly bool
	// topUnsupported is set once the daemon's `top` (ps on the daemon host)
	// failed: leftover detection then always uses an exec.
	topUnsupported atomic.Bool
}

// New builds the provider from the configuration: the endpoint
// (XMODE_SANDBOX_DOCKER_HOST, else DOCKER_HOST, else the local socket), TLS
// (XMODE_SANDBOX_DOCKER_CERT_PATH, DOCKER_TLS_VERIFY) and DOCKER_API_VERSION.
// An endpoint it cannot use is an error here, so only commands that use the
// docker engine fail on it. It does not contact the daemon: the first
// operation does, bounded by PingTimeout.
func New(cfg *config.Config) (*Provider, error) {
	if cfg == nil {
		return nil, errors.New("docker provider: no configuration")
	}
	ep, err := parseEndpoint(cfg)
	if err != nil {
		return nil, err
	}
	cli, err := newClient(ep, cfg.DockerAPIVersion)
	if err != nil {
		return nil, fail.Usagef("docker endpoint %s (%s): %v", ep.host, ep.variable, err)
	}
	return &Provider{cfg: cfg, ep: ep, cli: cli, guard: fsguard.Guard{Root: cfg.StorageRoot}}, nil
}

// SetProgress sets Progress (engine.ProgressSink: callers holding an
// engine.Provider use engine.SetProgress). Call it before the first Provision.
func (p *Provider) SetProgress(w io.Writer) { p.Progress = w }

// SetWarnings sets Warnings, like SetProgress.
func (p *Provider) SetWarnings(w io.Writer) { p.Warnings = w }

// Name implements engine.Provider.
func (p *Provider) Name() string { return Name }

// Host is the daemon endpoint the provider talks to.
func (p *Provider) Host() string { return p.ep.host }

// Close releases the client's connections.
func (p *Provider) Close() error { return p.cli.Close() }

// Ping checks that the daemon answers within PingTimeout and returns the
// daemon's API version; the client then speaks the lower of that and its
// own. Any failure is fail.Enginef (exit 5).
func (p *Provider) Ping(ctx context.Context) (string, error) {
	pctx, cancel := context.WithTimeout(ctx, p.pingTimeout())
	defer cancel()
	ping, err := p.cli.Ping(pctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", p.unreachable(err)
	}
	if ping.APIVersion != "" && versions.LessThan(ping.APIVersion, MinAPIVersion) {
		return "", fail.Enginef("the docker daemon at %s speaks Engine API %s; xmode needs API %s or newer: upgrade the daemon, or point XMODE_SANDBOX_DOCKER_HOST or DOCKER_HOST at a newer one", p.Host(), ping.APIVersion, MinAPIVersion)
	}
	// Negotiated here, from this answer: the first versioned call does not
	// ping again.
	p.cli.NegotiateAPIVersionPing(ping)
	return ping.APIVersion, nil
}

// APIVersion is the API version the client speaks after negotiation (the
// lower of the daemon's and the SDK's). Call Ping first.
func (p *Provider) APIVersion() string { return p.cli.ClientVersion() }

// ImagePresent reports whether the image is in the daemon's image store.
func (p *Provider) ImagePresent(ctx context.Context, ref string) (bool, error) {
	if err := checkImage(ref); err != nil {
		return false, err
	}
	return p.present(ctx, "image "+ref, func(ctx context.Context) error {
		_, err := p.cli.ImageInspect(ctx, ref)
		return err
	})
}

// VolumePresent reports whether the named volume exists on the daemon.
func (p *Provider) VolumePresent(ctx context.Context, name string) (bool, error) {
	if err := checkRef("volume", name); err != nil {
		return false, err
	}
	return p.present(ctx, "volume "+name, func(ctx context.Context) error {
		_, err := p.cli.VolumeInspect(ctx, name)
		return err
	})
}

// checkImage refuses what is not an image reference before it reaches the
// SDK, which puts it into a request path.
func checkImage(ref string) error {
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return fail.Usagef("image %q is not a valid image reference (XMODE_SANDBOX_IMAGE or %s): %v", ref, fail.Image, err)
	}
	return nil
}

// present pings the daemon, then inspects what: not found is false, any
// other failure an error.
func (p *Provider) present(ctx context.Context, what string, inspect func(context.Context) error) (bool, error) {
	if _, err := p.Ping(ctx); err != nil {
		return false, err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	switch err := inspect(cctx); {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	default:
		return false, p.wrap(err, "inspect "+what)
	}
}

func (p *Provider) pingTimeout() time.Duration { return cmp.Or(p.PingTimeout, DefaultPingTimeout) }

func (p *Provider) callTimeout() time.Duration { return cmp.Or(p.CallTimeout, DefaultCallTimeout) }

func (p *Provider) pullTimeout() time.Duration { return cmp.Or(p.PullTimeout, DefaultPullTimeout) }

// call bounds one short API call.
func (p *Provider) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.callTimeout())
}

func (p *Provider) warnf(format string, args ...any) {
	w := p.Warnings
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, "xmode: warning: "+format+"\n", args...)
}

// unreachable is the one message for "cannot talk to the daemon", with
// what TLS said when it was TLS that failed.
func (p *Provider) unreachable(err error) error {
	if e := p.tlsFailure(err); e != nil {
		return e
	}
	why := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		why = fmt.Sprintf("no answer within %s", p.pingTimeout())
	}
	if strings.Contains(why, "HTTP request to an HTTPS server") || strings.Contains(why, "TLS-enabled daemon without TLS") {
		return fail.Enginef("the docker daemon at %s speaks TLS and xmode spoke plain HTTP to it: set XMODE_SANDBOX_DOCKER_CERT_PATH to a directory with ca.pem, cert.pem and key.pem (and DOCKER_TLS_VERIFY=1)", p.Host())
	}
	return fail.Enginef("docker daemon at %s is unreachable (%s): check that dockerd is running (`docker info`), that %s points at it, and that this user may use its socket", p.Host(), why, hostVars(p.ep))
}

// tlsFailure explains a failed TLS handshake; nil when err is not one.
func (p *Provider) tlsFailure(err error) error {
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	where := fmt.Sprintf("the docker daemon at %s", p.Host())
	certs := "XMODE_SANDBOX_DOCKER_CERT_PATH (" + p.ep.certDir + ")"
	switch {
	case errors.As(err, &unknown):
		return fail.Enginef("TLS: %s presented a certificate that the CA in %s did not sign (%v): put the CA that signed the daemon's certificate in ca.pem there, or point XMODE_SANDBOX_DOCKER_CERT_PATH at the right directory", where, certs, err)
	case errors.As(err, &hostname):
		return fail.Enginef("TLS: %s presented a certificate for another name (%v): use the name or address the certificate was made for in XMODE_SANDBOX_DOCKER_HOST", where, hostname)
	case errors.As(err, &invalid), errors.As(err, &verify):
		return fail.Enginef("TLS: the certificate of %s does not verify (%v): check the daemon's certificate and %s", where, err, certs)
	case errors.As(err, &alert), strings.Contains(err.Error(), "remote error: tls"):
		return fail.Enginef("TLS: %s refused the connection (%v): it wants a client certificate its CA signed — put cert.pem and key.pem in %s", where, err, certs)
	}
	return nil
}

// hostVars names the variable that set the endpoint, for messages.
func hostVars(ep endpoint) string {
	if ep.variable == "DOCKER_HOST" {
		return "DOCKER_HOST (or XMODE_SANDBOX_DOCKER_HOST)"
	}
	return "XMODE_SANDBOX_DOCKER_HOST or DOCKER_HOST"
}

// wrap classifies an error of the SDK: connection failures and unanswered
// calls are fail.Enginef (exit 5); anything else keeps its cause, prefixed
// with what xmode was doing.
func (p *Provider) wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	var fe *fail.Error
	if errors.As(err, &fe) {
		return err
	}
	if e := p.tlsFailure(err); e != nil {
		return e
	}
	if client.IsErrConnectionFailed(err) || isNetErr(err) {
		return fail.Enginef("%s: docker daemon at %s is unreachable (%v): check that dockerd is running (`docker info`) and that %s points at it", what, p.Host(), err, hostVars(p.ep))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fail.Enginef("%s: docker daemon at %s did not answer in time: check `docker info` on the daemon host", what, p.Host())
	}
	return fmt.Errorf("%s: %w", what, err)
}

func isNetErr(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, io.ErrUnexpectedEOF)
}
