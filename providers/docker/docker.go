// Package docker is the design's DockerEngine: the engine adapter that runs a
// cloud_worker session in its own container on a Docker daemon, reached over
// the Engine API (unix:// or tcp://) with API-version negotiation, so Engine
// 20.10 (API 1.41) and newer daemons both work.
//
// The API is spoken over net/http by the small client in
// internal/dockerapi, not by the Docker SDK: linking the SDK's client (and
// even its api/types) costs every xmode command 5–9 ms of start-up — package
// initialisation of distribution/reference, go-digest and OpenTelemetry, and
// ~10 MB of binary — for calls that are a few lines of HTTP each. The tests
// use the SDK as an independent check of what the provider did.
//
// One container per session, named xmode-<session>, started by Provision with
// an init process (HostConfig.Init) and a keep-alive command; every step is
// an exec in it. The mount models, the hardening and the isolation between
// sandboxes are described in docs/docker.md.
package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/docker/internal/dockerapi"
	"github.com/xmode/xmode/storage"
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
	engine.Register(Name, func(cfg *config.Config) (engine.Adapter, error) {
		p, err := New(cfg)
		if err != nil {
			return nil, err
		}
		return p, nil
	})
}

// Provider is the docker engine adapter. Its exported fields may be set
// after New and before the first call; a Provider is safe for concurrent use.
type Provider struct {
	cfg   *config.Config
	cli   *dockerapi.Client
	guard storage.Guard

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

	// isolationOverride forces an isolation method (tests only).
	isolationOverride string
	// topUnsupported is set once the daemon's `top` (ps on the daemon host)
	// failed: leftover detection then always uses an exec.
	topUnsupported atomic.Bool
}

// New builds the provider from the configuration. It does not contact the
// daemon: the first operation does, bounded by PingTimeout.
func New(cfg *config.Config) (*Provider, error) {
	if cfg == nil {
		return nil, errors.New("docker provider: no configuration")
	}
	// DOCKER_HOST, DOCKER_API_VERSION and the TLS variables as the docker
	// CLI reads them; XMODE_SANDBOX_DOCKER_HOST wins over DOCKER_HOST.
	dc, err := dockerapi.ConfigFromEnv(os.Getenv)
	if err == nil && cfg.DockerHost != "" {
		dc.Host = cfg.DockerHost
	}
	var cli *dockerapi.Client
	if err == nil {
		cli, err = dockerapi.New(dc)
	}
	if err != nil {
		return nil, fail.Enginef("docker endpoint %s: %v: check XMODE_SANDBOX_DOCKER_HOST / DOCKER_HOST (unix:///var/run/docker.sock or tcp://host:port) and DOCKER_CERT_PATH / DOCKER_TLS_VERIFY", hostOrDefault(cfg.DockerHost), err)
	}
	return &Provider{cfg: cfg, cli: cli, guard: storage.Guard{Root: cfg.StorageRoot}}, nil
}

// SetProgress sets Progress; callers that hold an engine.Adapter use it
// through `interface{ SetProgress(io.Writer) }`, without importing this
// package. Call it before the first Provision.
func (p *Provider) SetProgress(w io.Writer) { p.Progress = w }

// SetWarnings sets Warnings, like SetProgress.
func (p *Provider) SetWarnings(w io.Writer) { p.Warnings = w }

// Name implements engine.Adapter.
func (p *Provider) Name() string { return Name }

// Host is the daemon endpoint the provider talks to.
func (p *Provider) Host() string { return p.cli.Host() }

// Close releases the client's connections.
func (p *Provider) Close() error { return p.cli.Close() }

// Ping checks that the daemon answers within PingTimeout and returns the
// daemon's API version. Any failure is fail.Enginef (exit 5).
func (p *Provider) Ping(ctx context.Context) (string, error) {
	pctx, cancel := context.WithTimeout(ctx, p.pingTimeout())
	defer cancel()
	ping, err := p.cli.Ping(pctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		var ve *dockerapi.VersionError
		if errors.As(err, &ve) {
			return "", fail.Enginef("%v: upgrade the daemon, or point XMODE_SANDBOX_DOCKER_HOST or DOCKER_HOST at a newer one", err)
		}
		return "", p.unreachable(err)
	}
	return ping.APIVersion, nil
}

// APIVersion is the API version the client speaks after negotiation (the
// lower of the daemon's and dockerapi.DefaultVersion). Call Ping first.
func (p *Provider) APIVersion() string { return p.cli.Version() }

// ImagePresent reports whether the image is in the daemon's image store.
func (p *Provider) ImagePresent(ctx context.Context, ref string) (bool, error) {
	return p.present(ctx, "image "+ref, func(ctx context.Context) error {
		_, err := p.cli.ImageInspect(ctx, ref)
		return err
	})
}

// VolumePresent reports whether the named volume exists on the daemon.
func (p *Provider) VolumePresent(ctx context.Context, name string) (bool, error) {
	return p.present(ctx, "volume "+name, func(ctx context.Context) error {
		_, err := p.cli.VolumeInspect(ctx, name)
		return err
	})
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
	case dockerapi.IsNotFound(err):
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

// unreachable is the one message for "cannot talk to the daemon".
func (p *Provider) unreachable(err error) error {
	why := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		why = fmt.Sprintf("no answer within %s", p.pingTimeout())
	}
	return fail.Enginef("docker daemon at %s is unreachable (%s): check that dockerd is running (`docker info`), that XMODE_SANDBOX_DOCKER_HOST or DOCKER_HOST points at it, and that this user may use its socket", p.Host(), why)
}

// wrap classifies an error of the API client: connection failures and unanswered calls are
// fail.Enginef (exit 5); anything else keeps its cause, prefixed with what
// xmode was doing.
func (p *Provider) wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	var fe *fail.Error
	if errors.As(err, &fe) {
		return err
	}
	if dockerapi.IsConnectionFailed(err) || isNetErr(err) {
		return fail.Enginef("%s: docker daemon at %s is unreachable (%v): check that dockerd is running (`docker info`) and that XMODE_SANDBOX_DOCKER_HOST or DOCKER_HOST points at it", what, p.Host(), err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fail.Enginef("%s: docker daemon at %s did not answer in time: check `docker info` on the daemon host", what, p.Host())
	}
	return fmt.Errorf("%s: %w", what, err)
}

func isNetErr(err error) bool {
	var ue *url.Error
	var oe *net.OpError
	return errors.As(err, &ue) || errors.As(err, &oe) || errors.Is(err, io.ErrUnexpectedEOF)
}

func hostOrDefault(h string) string {
	if h == "" {
		return dockerapi.DefaultHost
	}
	return h
}
