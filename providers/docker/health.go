package docker

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
)

// Health is the docker engine's part of `xmode doctor`
// (engine.HealthChecker): the connection (TLS, or why it is not secure),
// the daemon and its API version, the image, the runtime, and the mount
// model with what it needs (the storage volume and the isolation method in
// volume mode), and whether the worktrees' filesystem honours setuid bits. What fails is a CheckFail line with a fix; the caller
// decides how much that matters (a warning when the docker engine is not
// the configured one).
func (p *Provider) Health(ctx context.Context) []engine.Check {
	var out []engine.Check
	add := func(name, status, detail, fix string) {
		out = append(out, engine.Check{Name: name, Status: status, Detail: detail, Fix: fix})
	}
	if p.ep.insecure != "" {
		add("docker tls", engine.CheckWarn, p.ep.insecure, "use TLS with a verified daemon: XMODE_SANDBOX_DOCKER_CERT_PATH with ca.pem, cert.pem and key.pem, and unset XMODE_SANDBOX_DOCKER_INSECURE")
	}
	api, err := p.Ping(ctx)
	if err != nil {
		add("docker daemon", engine.CheckFail, err.Error(), "start dockerd, or point XMODE_SANDBOX_DOCKER_HOST at a reachable daemon")
		return out
	}
	add("docker daemon", engine.CheckOK, fmt.Sprintf("%s answers, API %s (negotiated %s)", p.Host(), api, p.APIVersion()), "")
	if p.ep.tls != nil && p.ep.insecure == "" {
		client := "no client certificate"
		if len(p.ep.tls.Certificates) > 0 {
			client = "client certificate " + filepath.Join(p.ep.certDir, "cert.pem")
		}
		roots := "the system's CAs"
		if p.ep.tls.RootCAs != nil {
			roots = filepath.Join(p.ep.certDir, "ca.pem")
		}
		add("docker tls", engine.CheckOK, fmt.Sprintf("TLS, the daemon's certificate verified against %s, %s", roots, client), "")
	}

	if ok, err := p.ImagePresent(ctx, p.cfg.Image); err != nil {
		add("image", engine.CheckFail, err.Error(), "")
	} else if !ok {
		add("image", engine.CheckWarn, p.cfg.Image+" is not present on the daemon: sandbox create will pull it", "docker pull "+p.cfg.Image+" (or set XMODE_SANDBOX_IMAGE to an image the daemon has)")
	} else {
		add("image", engine.CheckOK, p.cfg.Image+" is present", "")
	}
	out = append(out, p.runtimeCheck(ctx))
	if c, ok := p.egressCheck(ctx); ok {
		out = append(out, c)
	}

	switch p.MountMode() {
	case MountBind:
		add("mount model", engine.CheckOK, "bind mode: <worktree>:"+BindWorkspace+" (XMODE_SANDBOX_STORAGE_VOLUME unset, the daemon is on this machine)", "")
		if c, ok := p.setuidCheck(); ok {
			out = append(out, c)
		}
		return out
	case MountSync:
		add("mount model", engine.CheckOK, "sync mode: the daemon is remote (XMODE_SANDBOX_DOCKER_REMOTE="+p.cfg.DockerRemote+"); each sandbox works on a copy of its worktree in a volume of its own, copied back before a diff or change request", "")
		return out
	}
	if ok, err := p.VolumePresent(ctx, p.cfg.StorageVolume); err != nil || !ok {
		msg := fmt.Sprintf("storage volume %s does not exist", p.cfg.StorageVolume)
		if err != nil {
			msg = err.Error()
		}
		add("storage volume", engine.CheckFail, msg, "docker volume create "+p.cfg.StorageVolume+" and mount it at "+p.cfg.StorageMount+" where xmode runs")
		return out
	}
	add("storage volume", engine.CheckOK, fmt.Sprintf("%s present, mounted in sandboxes at %s", p.cfg.StorageVolume, p.cfg.StorageMount), "")
	if c, ok := p.setuidCheck(); ok {
		out = append(out, c)
	}
	if p.cfg.StorageMount != p.cfg.StorageRoot && !strings.HasPrefix(p.cfg.StorageRoot, filepath.Clean(p.cfg.StorageMount)+"/") {
		add("storage mount", engine.CheckWarn, fmt.Sprintf("the storage root %s is not the volume's mount %s: sandboxes will not see the worktrees xmode writes unless the volume is mounted at the storage root here", p.cfg.StorageRoot, p.cfg.StorageMount), "set XMODE_SANDBOX_STORAGE_MOUNT to the storage root")
	}
	method, detail, err := p.IsolationMethod(ctx)
	switch {
	case err != nil:
		add("isolation", engine.CheckFail, err.Error(), "")
	case method == IsolationWholeVolume:
		add("isolation", engine.CheckWarn, detail, "Engine 26+ (API 1.45) mounts volume subpaths; a local-driver volume allows the mountpoint bind")
	default:
		add("isolation", engine.CheckOK, method+": "+detail, "")
	}
	return out
}

// setuidCheck warns when docker steps write worktrees on a filesystem of
// this host that honours setuid bits: a step (another uid, or root in bind
// mode) can leave a setuid file there that gives whoever runs it that
// user's rights until xmode clears the bits when the step ends. Only for
// the configured engine: without docker sessions no such file exists (a
// host step's files are the user's own), and in sync mode the worktree
// comes back without the bits.
func (p *Provider) setuidCheck() (engine.Check, bool) {
	if p.cfg.Engine != Name {
		return engine.Check{}, false
	}
	suid, err := fsguard.AllowsSetuid(p.cfg.StorageRoot)
	if err != nil || !suid {
		return engine.Check{}, false
	}
	return engine.Check{Name: "setuid", Status: engine.CheckWarn,
		Detail: "the storage root's filesystem (" + p.cfg.StorageRoot + ") honours setuid bits: a setuid file a docker step leaves in a worktree would run with the sandbox user's rights (root's, if it runs as root) on this host until xmode clears the bits when the step ends",
		Fix:    "mount the storage root's filesystem nosuid (mount -o remount,nosuid …, or nosuid in /etc/fstab)"}, true
}

// runtimeCheck says which OCI runtime sandboxes get, and whether the
// daemon has the one XMODE_SANDBOX_RUNTIME names.
func (p *Provider) runtimeCheck(ctx context.Context) engine.Check {
	c := engine.Check{Name: "runtime"}
	rts, def, err := p.Runtimes(ctx)
	if err != nil {
		c.Status, c.Detail = engine.CheckFail, err.Error()
		return c
	}
	want := p.cfg.Runtime
	if want == "" {
		c.Status, c.Detail = engine.CheckOK, fmt.Sprintf("the daemon's default, %s (XMODE_SANDBOX_RUNTIME unset; the daemon has %s)", def, strings.Join(rts, ", "))
		return c
	}
	for _, r := range rts {
		if r == want {
			c.Status, c.Detail = engine.CheckOK, fmt.Sprintf("%s is registered with the daemon (XMODE_SANDBOX_RUNTIME)", want)
			return c
		}
	}
	c.Status = engine.CheckFail
	c.Detail = fmt.Sprintf("%s (XMODE_SANDBOX_RUNTIME) is not registered with the daemon at %s, which has %s: sandbox create will fail", want, p.Host(), strings.Join(rts, ", "))
	c.Fix = fmt.Sprintf(`install it on the daemon host and register it in daemon.json ("runtimes": {"%s": {"path": "…"}}), then restart dockerd; or unset XMODE_SANDBOX_RUNTIME`, want)
	return c
}

// Runtimes lists the OCI runtimes the daemon has registered, sorted, and
// its default.
func (p *Provider) Runtimes(ctx context.Context) ([]string, string, error) {
	if _, err := p.Ping(ctx); err != nil {
		return nil, "", err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	info, err := p.cli.Info(cctx)
	if err != nil {
		return nil, "", p.wrap(err, "ask the daemon for its runtimes")
	}
	var names []string
	for n := range info.Runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, info.DefaultRuntime, nil
}

// egressCheck is doctor's "egress proxy" line when the configuration asks
// for egress policies: what a create needs to make the proxy — a static
// binary for its image, an egress network that reaches out, a daemon on
// this machine.
func (p *Provider) egressCheck(ctx context.Context) (engine.Check, bool) {
	mode, proxied := p.cfg.EgressMode()
	if !proxied {
		return engine.Check{}, false
	}
	c := engine.Check{Name: "egress proxy", Status: engine.CheckFail}
	if p.MountMode() == MountSync {
		c.Detail = "XMODE_SANDBOX_NETWORK=" + string(mode) + " cannot be enforced with a daemon on another machine (sync mode) yet"
		c.Fix = "use a docker daemon on this machine, or XMODE_SANDBOX_NETWORK=none"
		return c, true
	}
	bin, err := p.egressBinary()
	if err == nil {
		err = checkStatic(bin)
	}
	if err != nil {
		c.Detail = err.Error()
		c.Fix = "point XMODE_SANDBOX_EGRESS_BINARY at a static xmode (CGO_ENABLED=0; `make` builds one)"
		return c, true
	}
	if _, err := p.proxyConfig(ctx); err != nil {
		c.Detail = err.Error()
		c.Fix = "create the network, or unset XMODE_SANDBOX_EGRESS_NETWORK for docker's bridge"
		return c, true
	}
	c.Status = engine.CheckOK
	c.Detail = fmt.Sprintf("network %s: each sandbox on an internal network of its own in %s, out through %s only, by the proxy made from %s", mode, p.cfg.EgressSubnets, p.cfg.EgressNetwork, bin)
	return c, true
}
