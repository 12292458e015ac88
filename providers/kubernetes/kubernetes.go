// Package kubernetes is the engine provider that runs a cloud_worker
// session in a pod of its own on a Kubernetes cluster (docs/kubernetes.md),
// through k8s.io/client-go: a kubeconfig (KUBECONFIG, XMODE_KUBE_CONTEXT)
// or, inside a pod, its service account; XMODE_KUBE_NAMESPACE.
//
// One pod per session, named xmode-sbx-<id>, hardened to the Pod Security
// Standard "restricted"; its keep-alive is a dead-man switch that ends the
// pod once the session's deadline (an annotation, moved by Extend) has
// passed. The worktree travels as in docker's sync mode: copied into the
// pod's workspace at Provision (tar over exec), brought back by SyncBack
// with the same hostile-archive checks (providers/internal/archive). Every
// step is a pods/exec (WebSocket, SPDY as the fallback) running the shell
// docker runs around a step (providers/internal/stepshell).
//
// It links only the API groups it uses (core, networking, authorization)
// through client-go's REST client rather than the generated clientset,
// whose scheme registers every group of the API when xmode starts
// (docs/dependencies.md, "The libraries").
package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// Name is the engine name the provider registers under.
const Name = "kubernetes"

// Defaults for the Provider's timeouts.
const (
	DefaultPingTimeout = 5 * time.Second
	DefaultCallTimeout = 60 * time.Second
	DefaultSyncTimeout = 30 * time.Minute
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

// The capabilities the kubernetes provider has; a dropped method fails the
// build instead of turning a capability off.
var (
	_ engine.Provider        = (*Provider)(nil)
	_ engine.OrphanLister    = (*Provider)(nil)
	_ engine.LivenessChecker = (*Provider)(nil)
	_ engine.HealthChecker   = (*Provider)(nil)
	_ engine.WorktreeSyncer  = (*Provider)(nil)
	_ engine.WorktreePusher  = (*Provider)(nil)
	_ engine.PathChecker     = (*Provider)(nil)
	_ engine.StepContainer   = (*Provider)(nil)
	_ engine.MountModer      = (*Provider)(nil)
	_ engine.WorktreeMounter = (*Provider)(nil)
	_ engine.Networker       = (*Provider)(nil)
	_ engine.ImageRunner     = (*Provider)(nil)
	_ engine.StepSignaler    = (*Provider)(nil)
	_ engine.Extender        = (*Provider)(nil)
	_ engine.Shaper          = (*Provider)(nil)
	_ engine.Mover           = (*Provider)(nil)
	_ engine.Claimer         = (*Provider)(nil)
	_ engine.WarmPooler      = (*Provider)(nil)
	_ engine.EgressEnforcer  = (*Provider)(nil)
	_ io.Closer              = (*Provider)(nil)
)

// Provider is the kubernetes engine provider. Its exported fields may be set
// after New and before the first call; a Provider is safe for concurrent use.
type Provider struct {
	cfg   *config.Config
	guard fsguard.Guard

	// Warnings receives what an operator must not miss (the apiserver's
	// warnings, a sync back that left entries out). nil: os.Stderr.
	Warnings io.Writer

	// PingTimeout bounds each "is the cluster there" check.
	PingTimeout time.Duration
	// CallTimeout bounds each short API call.
	CallTimeout time.Duration
	// SyncTimeout bounds one copy of a worktree either way.
	SyncTimeout time.Duration

	// copyOutOverride replaces SyncBack's command in the pod (tests only:
	// a hostile copy, sent through the real exec).
	copyOutOverride string

	apiState apiState // XMODE_KUBE_API, resolved
	seen     seenPods // the pods Alive read, for Claim

	once   sync.Once
	cl     *client
	clErr  error
	source string // where the credentials came from, for doctor and messages
}

// New builds the provider from the configuration. It reads no kubeconfig
// and contacts no cluster: the first operation does (so that `xmode doctor`
// and commands that never use the engine do not fail on it).
func New(cfg *config.Config) (*Provider, error) {
	if cfg == nil {
		return nil, errors.New("kubernetes provider: no configuration")
	}
	return &Provider{cfg: cfg, guard: fsguard.Guard{Root: cfg.StorageRoot}}, nil
}

// Name implements engine.Provider.
func (p *Provider) Name() string { return Name }

// Close releases the client's idle connections.
func (p *Provider) Close() error {
	if p.cl != nil {
		p.cl.close()
	}
	return nil
}

// SetWarnings sets Warnings.
func (p *Provider) SetWarnings(w io.Writer) { p.Warnings = w }

// client is the cluster's client, made on first use from the kubeconfig or
// the pod's service account; an error is fail.Enginef (exit 5).
func (p *Provider) client() (*client, error) {
	p.once.Do(func() {
		p.cl, p.source, p.clErr = newClient(p.cfg, p.warnf)
	})
	return p.cl, p.clErr
}

// Namespace is where the sandboxes go: XMODE_KUBE_NAMESPACE, else the
// kubeconfig context's namespace (in a pod: its own), else "default".
func (p *Provider) Namespace() (string, error) {
	c, err := p.client()
	if err != nil {
		return "", err
	}
	return c.ns, nil
}

func (p *Provider) pingTimeout() time.Duration { return cmp.Or(p.PingTimeout, DefaultPingTimeout) }
func (p *Provider) callTimeout() time.Duration { return cmp.Or(p.CallTimeout, DefaultCallTimeout) }
func (p *Provider) syncTimeout() time.Duration { return cmp.Or(p.SyncTimeout, DefaultSyncTimeout) }

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

// wrap classifies an error of the API: an unreachable cluster, an expired
// credential or a missing permission is fail.Enginef (exit 5) with what to
// do; anything else keeps its cause, prefixed with what xmode was doing.
func (p *Provider) wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	var fe *fail.Error
	if errors.As(err, &fe) {
		return err
	}
	c, _ := p.client()
	return classify(c, err, what)
}
