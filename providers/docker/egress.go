package docker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// Egress enforcement (docs/network.md, docs/docker.md "Egress"): a sandbox
// whose network is proxied (XMODE_SANDBOX_NETWORK=allow or open) is the
// only container on an internal network of its own, xmode-net-<session>,
// whose other member is the install's egress proxy, xmode-egress-<instance>:
// `xmode __egress` in a container of an image made from this very binary.
// The network is internal (no route out through the host) and the host has
// no address on its bridge (inhibit_ipv4), so the sandbox reaches nothing
// but the proxy's listeners; the proxy, on the egress network as well,
// decides every connection by the sandbox's policy and writes it down.

// Labels and names of the egress objects (docs/reference.md, "Docker
// objects and labels").
const (
	// LabelRole tells the egress proxy and the sandboxes' networks apart
	// from a session's container and volumes.
	LabelRole          = "xmode.role"
	RoleEgressProxy    = "egress-proxy"
	RoleEgressNetwork  = "egress-network"
	LabelEgressVersion = "xmode.egress.version"
	// EgressImageRepo is the proxy's image: xmode-egress:<version>, one per
	// binary.
	EgressImageRepo = "xmode-egress"
	// EgressProxyPort and EgressDNSPort are where the proxy listens on each
	// sandbox's network: HTTP(S)_PROXY, and the sandbox's resolv.conf.
	EgressProxyPort = 3128
	EgressDNSPort   = 53
	// egressDirIn is the proxy's configuration directory in its container.
	egressDirIn = "/egress"
	// egressSubnetBits is each sandbox network's size: the network, the
	// (unassigned) gateway, the proxy, the sandbox and the broadcast.
	egressSubnetBits = 29
)

// EgressNetworkName is a proxied sandbox's own network.
func EgressNetworkName(sessionID string) string { return "xmode-net-" + sessionID }

// EgressProxyName is the install's egress proxy container.
func EgressProxyName(instance string) string { return "xmode-egress-" + instance }

// proxyAddr and sandboxAddr are the two members of a sandbox network.
func proxyAddr(subnet netip.Prefix) netip.Addr   { return subnet.Addr().Next().Next() }
func sandboxAddr(subnet netip.Prefix) netip.Addr { return proxyAddr(subnet).Next() }

// egressSetup is what a proxied sandbox's container needs: its network,
// the proxy's address on it, its resolver's file, and the CA it trusts when
// its policy carries credentials.
type egressSetup struct {
	network string
	subnet  netip.Prefix
	proxy   netip.Addr
	env     []string      // HTTP(S)_PROXY, NO_PROXY, placeholders, CA variables
	resolv  []mount.Mount // /etc/resolv.conf naming the proxy, read-only; nil: set by an exec
	creds   bool
	caPEM   []byte // the sandbox's CA, once served; nil without credentials
	caDir   string // where it goes in the sandbox
	served  chan error
	unlock  func()
}

// checkEgressSpec refuses a proxied network without a policy, and a policy
// this provider cannot enforce where it runs.
func (p *Provider) checkEgressSpec(spec engine.Spec, mode string) error {
	m, proxied := p.cfg.EgressMode()
	switch {
	case spec.Egress == nil && proxied:
		return fmt.Errorf("provision %s: network %s needs the sandbox's egress policy (engine.Spec.Egress)", spec.SessionID, m)
	case spec.Egress == nil:
		return nil
	case spec.Egress.Sandbox != spec.SessionID:
		return fmt.Errorf("provision %s: the egress policy is sandbox %s's", spec.SessionID, spec.Egress.Sandbox)
	case mode == MountSync:
		// The proxy's directory would be on the daemon's machine, out of
		// this host's reach for the policy files and the log.
		return fail.Refusedf("network %s is not available with a docker daemon on another machine (sync mode) yet: the egress proxy runs beside the daemon, where xmode cannot write its policies or read its log; use a daemon on this machine, or XMODE_SANDBOX_NETWORK=none", spec.Egress.Mode)
	}
	return nil
}

// prepareEgress makes a sandbox's network and, while the caller makes the
// sandbox's container on it, connects the proxy to it and has the proxy
// serve the sandbox's policy (wait for it with served): the sandbox's first
// step already meets the policy. What it made stays on failure; Destroy
// (destroyEgress) removes it, found by the session.
func (p *Provider) prepareEgress(ctx context.Context, spec engine.Spec) (*egressSetup, error) {
	instance := spec.Labels[LabelInstance]
	if err := checkRef("instance", instance); err != nil {
		return nil, err
	}
	unlock, err := p.lockEgress(false)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			unlock()
		}
	}()
	proxyID, err := p.ensureProxy(ctx, instance, spec.Labels)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{LabelRole: RoleEgressNetwork}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	name := EgressNetworkName(spec.SessionID)
	subnet, err := p.createEgressNetwork(ctx, name, labels)
	if err != nil {
		return nil, err
	}
	eg := &egressSetup{network: name, subnet: subnet, proxy: proxyAddr(subnet), creds: len(spec.Egress.Credentials) > 0, served: make(chan error, 1), unlock: unlock}
	proxyURL := "http://" + netip.AddrPortFrom(eg.proxy, EgressProxyPort).String()
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		eg.env = append(eg.env, k+"="+proxyURL)
	}
	eg.env = append(eg.env, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	for _, c := range spec.Egress.Credentials {
		if c.Env != "" {
			eg.env = append(eg.env, c.Env+"="+c.Placeholder)
		}
	}
	if eg.creds {
		eg.caDir = p.caDirIn()
		bundle, ca := path.Join(eg.caDir, "ca-bundle.pem"), path.Join(eg.caDir, "egress-ca.pem")
		eg.env = append(eg.env, "SSL_CERT_FILE="+bundle, "REQUESTS_CA_BUNDLE="+bundle, "CURL_CA_BUNDLE="+bundle,
			"GIT_SSL_CAINFO="+bundle, "NODE_EXTRA_CA_CERTS="+ca)
	}
	if eg.resolv, err = p.resolvMount(ctx, spec.SessionID, eg.proxy); err != nil {
		return nil, err
	}
	pol := *spec.Egress
	ok = true
	go func() {
		err := p.connectProxy(ctx, proxyID, name, subnet)
		if err == nil {
			_, err = p.servePolicy(ctx, proxyID, &pol, spec.Getenv)
		}
		if err == nil && eg.creds {
			eg.caPEM, err = p.readEgressCA(spec.SessionID)
		}
		eg.served <- err
	}()
	return eg, nil
}

// wait is the proxy's answer for the sandbox's policy (once), with the lock
// released.
func (eg *egressSetup) wait() error {
	err, ok := <-eg.served
	if ok {
		close(eg.served)
		eg.unlock()
	}
	return err
}

// resolvConf is a proxied sandbox's /etc/resolv.conf: the proxy's resolver
// and nothing else.
func resolvConf(proxy netip.Addr) []byte {
	return []byte("# xmode: the sandbox's resolver is its egress proxy (docs/network.md)\nnameserver " + proxy.String() + "\noptions ndots:0 attempts:2 timeout:2\n")
}

// resolvMount writes a sandbox's resolv.conf into the proxy's directory
// and mounts it read-only over /etc/resolv.conf (docker then leaves that
// file alone, and no step can point it elsewhere): where the storage root
// can be mounted file by file (bind mode, a volume's mountpoint); nil
// elsewhere, where an exec writes it after the start.
func (p *Provider) resolvMount(ctx context.Context, sessionID string, proxy netip.Addr) ([]mount.Mount, error) {
	rel := path.Join(fsguard.EgressDirName, "resolv", sessionID+".conf")
	method := IsolationBind
	var vol volume.Volume
	if p.MountMode() != MountBind {
		var err error
		if method, _, vol, err = p.isolation(ctx); err != nil {
			return nil, err
		}
		if method != IsolationMountpoint {
			return nil, nil
		}
	}
	if err := writeEgressFile(filepath.Join(p.cfg.StorageRoot, filepath.FromSlash(rel)), resolvConf(proxy), 0o644); err != nil {
		return nil, fmt.Errorf("the sandbox's resolv.conf: %w", err)
	}
	return p.storageMount(method, vol, rel, "/etc/resolv.conf", true), nil
}

// caDirIn is where a sandbox gets its CA: /etc/xmode, or under its tmpfs
// when its root filesystem is read-only.
func (p *Provider) caDirIn() string {
	if p.cfg.ReadonlyRoot && p.cfg.TmpfsPath != "" {
		return path.Join(filepath.ToSlash(p.cfg.TmpfsPath), ".xmode-egress")
	}
	return "/etc/xmode"
}

// applyEgress puts a sandbox's container on its network, with its
// address, the proxy for its resolver in docker's embedded DNS, the proxy
// variables, and no raw sockets (with CAP_NET_RAW a step could craft
// frames to addresses its routes do not reach).
func applyEgress(cc *container.Config, hc *container.HostConfig, eg *egressSetup) *network.NetworkingConfig {
	hc.NetworkMode = container.NetworkMode(eg.network)
	hc.DNS = []string{eg.proxy.String()}
	hc.DNSOptions = []string{"ndots:0"}
	if !hasCap(hc.CapDrop, "ALL") {
		hc.CapDrop = append(hc.CapDrop, "NET_RAW", "NET_ADMIN")
	}
	if hc.Sysctls == nil {
		hc.Sysctls = map[string]string{}
	}
	hc.Sysctls["net.ipv6.conf.all.disable_ipv6"] = "1"
	hc.Sysctls["net.ipv6.conf.default.disable_ipv6"] = "1"
	cc.Env = append(cc.Env, eg.env...)
	hc.Mounts = append(hc.Mounts, eg.resolv...)
	return &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		eg.network: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: sandboxAddr(eg.subnet).String()}},
	}}
}

func hasCap(caps []string, c string) bool {
	for _, x := range caps {
		if strings.EqualFold(x, c) {
			return true
		}
	}
	return false
}

// insideScript points the sandbox's resolver at the proxy and, given a CA,
// installs it: its own file, a bundle of the system's roots and it (what
// SSL_CERT_FILE and the like name), and the system stores that are
// writable. It runs as root in the sandbox before any step.
const insideScript = `proxy=$1 ca=$2 dir=$3
if [ -n "$proxy" ]; then
	printf 'nameserver %s\noptions ndots:0 attempts:2 timeout:2\n' "$proxy" > /etc/resolv.conf || echo "resolv.conf is not writable: names resolve only through the proxy" >&2
fi
[ -n "$ca" ] || exit 0
mkdir -p "$dir" || exit 1
printf '%s\n' "$ca" > "$dir/egress-ca.pem" || exit 1
chmod 0644 "$dir/egress-ca.pem"
b=
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem /etc/ssl/ca-bundle.pem; do
	if [ -z "$b" ] && [ -f "$f" ]; then b=$f; fi
done
{ if [ -n "$b" ]; then grep -v '^# xmode egress CA' "$b"; fi; cat "$dir/egress-ca.pem"; } > "$dir/ca-bundle.pem" || exit 1
chmod 0644 "$dir/ca-bundle.pem"
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem /etc/ssl/ca-bundle.pem; do
	if [ -f "$f" ] && [ -w "$f" ] && ! grep -q '^# xmode egress CA' "$f"; then cat "$dir/egress-ca.pem" >> "$f"; fi
done
for d in /usr/local/share/ca-certificates /etc/pki/ca-trust/source/anchors; do
	if [ -d "$d" ] && [ -w "$d" ]; then cp "$dir/egress-ca.pem" "$d/xmode-egress-ca.crt"; fi
done
exit 0`

// setupInside runs insideScript in a started sandbox: its resolver when
// resolv.conf could not be mounted (resolv), its CA when it has one.
func (p *Provider) setupInside(ctx context.Context, containerID string, proxy netip.Addr, resolv bool, caPEM []byte, caDir string) error {
	if !resolv && caPEM == nil {
		return nil
	}
	ip := ""
	if resolv {
		ip = proxy.String()
	}
	ca := ""
	if caPEM != nil {
		ca = "# xmode egress CA\n" + strings.TrimSpace(string(caPEM))
	}
	code, out, err := p.runHelperAs(ctx, containerID, "0:0", []string{"/bin/sh", "-c", insideScript, "xmode-egress", ip, ca, caDir}, 30*time.Second)
	if err != nil {
		return fmt.Errorf("set the sandbox's resolver and CA: %w", err)
	}
	if code != 0 {
		return fmt.Errorf("set the sandbox's resolver and CA: exit %d: %s", code, strings.TrimSpace(out))
	}
	if strings.TrimSpace(out) != "" {
		p.warnf("%s", strings.TrimSpace(out))
	}
	return nil
}

// reapplyInside sets a restarted sandbox's resolver (docker wrote its
// resolv.conf again) and its CA (a tmpfs lost it) back: a container of a
// proxied network, on the way to a step.
func (p *Provider) reapplyInside(ctx context.Context, sb engine.Sandbox, ci container.InspectResponse) error {
	if ci.HostConfig == nil || string(ci.HostConfig.NetworkMode) != EgressNetworkName(sb.SessionID) {
		return nil
	}
	subnet, err := p.egressSubnet(ctx, EgressNetworkName(sb.SessionID))
	if err != nil {
		return err
	}
	ca, err := p.readEgressCA(sb.SessionID)
	if err != nil {
		ca = nil // no credentials: the proxy made no CA worth installing
	}
	if !p.hasCredentials(sb.SessionID) {
		ca = nil
	}
	resolvMounted := false
	for _, m := range ci.Mounts {
		resolvMounted = resolvMounted || m.Destination == "/etc/resolv.conf"
	}
	return p.setupInside(ctx, ci.ID, proxyAddr(subnet), !resolvMounted, ca, p.caDirIn())
}

// --- the proxy's directory ----------------------------------------------

// egressDir is the proxy's configuration directory on this host.
func (p *Provider) egressDir() string { return p.guard.EgressDir() }

// proxyUser is who the proxy runs as: xmode's own user, so that the files
// each of them writes are the other's to read; 65532 (never root) when
// xmode is root, with what xmode writes given to it.
func proxyUser() (int, int) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), os.Getegid()
	}
	return parseUser(config.NonRootUser)
}

// writeEgressFile writes a file of the proxy's directory whole (a temporary
// file renamed into place: the proxy, scanning, never reads half of one),
// owned by the proxy's user.
func writeEgressFile(p string, data []byte, mode os.FileMode) error {
	if err := mkdirEgress(filepath.Dir(p)); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil && os.Geteuid() == 0 {
		uid, gid := proxyUser()
		err = tmp.Chown(uid, gid)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// mkdirEgress makes a directory of the proxy's, and those above it up to
// the egress directory, owned by the proxy's user.
func mkdirEgress(dir string) error {
	if _, err := os.Lstat(dir); err == nil {
		return nil
	}
	if err := mkdirEgress(filepath.Dir(dir)); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if os.Geteuid() == 0 {
		uid, gid := proxyUser()
		return os.Lchown(dir, uid, gid)
	}
	return nil
}

// lockEgress holds <root>/egress/lock: shared while a create or a policy
// change uses the proxy, exclusive while the reaper removes an idle one,
// so it never removes the proxy a create just connected to.
func (p *Provider) lockEgress(exclusive bool) (func(), error) {
	dir := p.egressDir()
	if err := os.MkdirAll(p.cfg.StorageRoot, 0o755); err != nil {
		return nil, err
	}
	if err := mkdirEgress(dir); err != nil {
		return nil, fmt.Errorf("egress directory %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("egress lock: %w", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("egress lock %s: %w", f.Name(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// servePolicy completes pol for the proxy (where it listens on the
// sandbox's network; each credential's secret in a file only the proxy
// reads), writes it and waits until the proxy serves it. It returns the
// sandbox's variables for the credentials: their placeholders.
func (p *Provider) servePolicy(ctx context.Context, proxyID string, pol *egress.Policy, getenv func(string) string) ([]string, error) {
	subnet, err := p.egressSubnet(ctx, EgressNetworkName(pol.Sandbox))
	if err != nil {
		return nil, err
	}
	pol.Listen = netip.AddrPortFrom(proxyAddr(subnet), EgressProxyPort).String()
	pol.DNS = netip.AddrPortFrom(proxyAddr(subnet), EgressDNSPort).String()
	if getenv == nil {
		getenv = os.Getenv
	}
	dir := p.egressDir()
	secrets := filepath.Join(dir, "secrets", pol.Sandbox)
	var env []string
	creds := make([]egress.Credential, 0, len(pol.Credentials))
	for i, c := range pol.Credentials {
		secret, err := c.Secret(getenv)
		if err != nil {
			return nil, fail.Usagef("%v: set it where xmode runs (the sandbox gets a placeholder, the proxy the value)", err)
		}
		file := strconv.Itoa(i)
		if c.Env != "" {
			env = append(env, c.Env+"="+c.Placeholder)
			file += "-" + c.Env
		}
		if err := writeEgressFile(filepath.Join(secrets, file), []byte(secret), 0o600); err != nil {
			return nil, fmt.Errorf("credential for %s: %w", c.Host, err)
		}
		c.Env, c.File = "", path.Join(egressDirIn, "secrets", pol.Sandbox, file)
		creds = append(creds, c)
	}
	pol.Credentials = creds
	b, err := egress.EncodePolicy(*pol)
	if err != nil {
		return nil, err
	}
	if err := writeEgressFile(filepath.Join(dir, egress.PoliciesDir, pol.Sandbox+".json"), b, 0o600); err != nil {
		return nil, fmt.Errorf("egress policy of %s: %w", pol.Sandbox, err)
	}
	return env, p.waitServed(ctx, proxyID, pol.Sandbox, egress.PolicyHash(b))
}

// serveTimeout bounds the wait for the proxy to serve a policy: a proxy
// made again (it was removed) starts, joins every sandbox network of the
// install and reads every policy first, which on a loaded machine took
// longer than 15 s.
const serveTimeout = 30 * time.Second

// waitServed signals the proxy to read its policies now and waits until its
// state file says it serves hash (or why it cannot).
func (p *Provider) waitServed(ctx context.Context, proxyID, sandbox, hash string) error {
	deadline := time.Now().Add(serveTimeout)
	signalled := time.Time{}
	for {
		if time.Since(signalled) > time.Second {
			// Again now and then: a signal that came while the proxy was
			// starting is lost, and its polls may be a second apart.
			cctx, cancel := p.call(ctx)
			err := p.cli.ContainerKill(cctx, proxyID, "USR1")
			cancel()
			if err != nil && !cerrdefs.IsConflict(err) {
				return p.wrap(err, "signal the egress proxy")
			}
			signalled = time.Now()
		}
		st, err := egress.ReadState(p.egressDir(), sandbox)
		if err == nil && st.Policy == hash {
			if st.Error != "" {
				return fail.Failedf("the egress proxy refuses sandbox %s's policy: %s", sandbox, st.Error)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fail.Enginef("the egress proxy (container %s) did not serve sandbox %s's policy within %v: see `docker logs %s`", shortID(proxyID), sandbox, serveTimeout, shortID(proxyID))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Millisecond):
		}
	}
}

// readEgressCA reads the CA the proxy made for a sandbox (its certificate:
// the key stays in the proxy's directory).
func (p *Provider) readEgressCA(sandbox string) ([]byte, error) {
	b, err := readBounded(filepath.Join(egress.CADir(p.egressDir(), sandbox), egress.CACertFile), 64<<10)
	if err != nil {
		return nil, fmt.Errorf("the egress CA of %s: %w", sandbox, err)
	}
	return b, nil
}

// hasCredentials reports whether the policy a sandbox is served carries
// credentials (its secrets directory is not empty).
func (p *Provider) hasCredentials(sandbox string) bool {
	es, err := os.ReadDir(filepath.Join(p.egressDir(), "secrets", sandbox))
	return err == nil && len(es) > 0
}

// readBounded reads a regular file of at most max bytes, following no
// final link: the proxy's directory is written by a process that serves
// hostile clients.
func readBounded(name string, max int64) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s is larger than %d bytes", name, max)
	}
	return b, err
}

// --- the sandbox's network ----------------------------------------------

// createEgressNetwork creates a sandbox's internal network in a free /29
// of XMODE_SANDBOX_EGRESS_SUBNETS, or finds the one an interrupted create
// left; it returns its subnet.
func (p *Provider) createEgressNetwork(ctx context.Context, name string, labels map[string]string) (netip.Prefix, error) {
	if err := checkRef("network", name); err != nil {
		return netip.Prefix{}, err
	}
	if subnet, err := p.egressSubnet(ctx, name); err == nil {
		return subnet, nil
	} else if !cerrdefs.IsNotFound(errors.Unwrap(err)) && !cerrdefs.IsNotFound(err) {
		return netip.Prefix{}, err
	}
	// A /29 at random: the daemon refuses one that overlaps another
	// network, and then the next is tried (no list of every network first).
	cctx, cancel := p.call(ctx)
	defer cancel()
	var used []netip.Prefix
	pool := p.cfg.EgressSubnets
	slots := 1 << (egressSubnetBits - pool.Bits())
	start := int(randomUint32() % uint32(slots))
	no := false
	for i, tries := 0, 0; i < slots && tries < 64; i++ {
		subnet := nthSubnet(pool, (start+i)%slots)
		if overlaps(subnet, used) {
			continue
		}
		tries++
		_, err := p.cli.NetworkCreate(cctx, name, network.CreateOptions{
			Driver:     "bridge",
			Internal:   true,
			EnableIPv6: &no,
			IPAM:       &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet.String()}}},
			Options: map[string]string{
				// The host gets no address on the bridge: nothing of its
				// is reachable from the sandbox's network.
				"com.docker.network.bridge.inhibit_ipv4":         "true",
				"com.docker.network.bridge.enable_ip_masquerade": "false",
			},
			Labels: labels,
		})
		switch {
		case err == nil:
			return subnet, nil
		case cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "already exists"):
			// Another create of this very session: take what it made.
			return p.egressSubnet(ctx, name)
		case strings.Contains(err.Error(), "overlap"):
			used = append(used, subnet) // taken meanwhile
			continue
		default:
			return netip.Prefix{}, p.wrap(err, "create network "+name)
		}
	}
	return netip.Prefix{}, fail.Enginef("no free /%d for network %s in XMODE_SANDBOX_EGRESS_SUBNETS=%s (each proxied sandbox takes one): widen it, or end sandboxes", egressSubnetBits, name, pool)
}

// egressSubnet is the subnet of a sandbox's network, checked to be one of
// xmode's.
func (p *Provider) egressSubnet(ctx context.Context, name string) (netip.Prefix, error) {
	if err := checkRef("network", name); err != nil {
		return netip.Prefix{}, err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	n, err := p.cli.NetworkInspect(cctx, name, network.InspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return netip.Prefix{}, fmt.Errorf("network %s: %w", name, err)
		}
		return netip.Prefix{}, p.wrap(err, "inspect network "+name)
	}
	if n.Labels[LabelManaged] != "true" || n.Labels[LabelRole] != RoleEgressNetwork || !n.Internal {
		return netip.Prefix{}, fail.Refusedf("network %s exists but is not one of xmode's sandbox networks (labels %v, internal %t): remove it (`docker network rm %s`)", name, n.Labels, n.Internal, name)
	}
	for _, c := range n.IPAM.Config {
		if pfx, err := netip.ParsePrefix(c.Subnet); err == nil && pfx.Addr().Is4() && pfx.Bits() == egressSubnetBits {
			return pfx, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("network %s has no /%d subnet", name, egressSubnetBits)
}

func nthSubnet(pool netip.Prefix, i int) netip.Prefix {
	b := pool.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(i) << (32 - egressSubnetBits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), egressSubnetBits)
}

func overlaps(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

// connectProxy connects the proxy to a sandbox's network at its fixed
// address (kept when the proxy restarts).
func (p *Provider) connectProxy(ctx context.Context, proxyID, name string, subnet netip.Prefix) error {
	cctx, cancel := p.call(ctx)
	defer cancel()
	err := p.cli.NetworkConnect(cctx, name, proxyID, &network.EndpointSettings{
		IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: proxyAddr(subnet).String()},
	})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return p.wrap(err, "connect the egress proxy to network "+name)
	}
	return nil
}

// --- the proxy ------------------------------------------------------------

// ensureProxy returns the install's running egress proxy, starting it
// again, or making it (and its image) when there is none: connected to the
// egress network and to every sandbox network of the install.
func (p *Provider) ensureProxy(ctx context.Context, instance string, labels map[string]string) (string, error) {
	name := EgressProxyName(instance)
	for attempt := 0; ; attempt++ {
		cctx, cancel := p.call(ctx)
		ci, err := p.cli.ContainerInspect(cctx, name)
		cancel()
		switch {
		case err == nil:
			id, err := p.startProxy(ctx, ci, instance)
			if err == nil || attempt > 0 {
				return id, err
			}
			p.warnf("the egress proxy %s could not start (%v): making it again", name, err)
			if err := p.removeProxyContainer(ctx, ci.ID); err != nil {
				return "", err
			}
			continue
		case !cerrdefs.IsNotFound(err):
			return "", p.wrap(err, "inspect the egress proxy "+name)
		}
		id, err := p.createProxy(ctx, name, instance, labels)
		if err == nil || !cerrdefs.IsConflict(err) || attempt > 0 {
			return id, err
		}
		// Another create made it meanwhile: use theirs.
	}
}

// startProxy checks an existing proxy is this install's, and makes sure it
// runs.
func (p *Provider) startProxy(ctx context.Context, ci container.InspectResponse, instance string) (string, error) {
	if ci.Config == nil || ci.State == nil {
		return "", fmt.Errorf("inspect the egress proxy: the daemon's answer lacks its config")
	}
	l := ci.Config.Labels
	if l[LabelManaged] != "true" || l[LabelInstance] != instance || l[LabelRole] != RoleEgressProxy {
		return "", fail.Refusedf("container %s exists but is not this install's egress proxy (labels %v): remove it (`docker rm -f %s`)", strings.TrimPrefix(ci.Name, "/"), l, strings.TrimPrefix(ci.Name, "/"))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		switch {
		case ci.State.Running && !ci.State.Restarting && !ci.State.Paused:
			return ci.ID, nil
		case ci.State.Paused:
			return "", fail.Failedf("the egress proxy %s is paused: `docker unpause %s`", shortID(ci.ID), shortID(ci.ID))
		case !ci.State.Restarting:
			cctx, cancel := p.call(ctx)
			err := p.cli.ContainerStart(cctx, ci.ID, container.StartOptions{})
			cancel()
			if err != nil {
				return "", p.wrap(err, "start the egress proxy")
			}
		}
		if time.Now().After(deadline) {
			return "", fail.Enginef("the egress proxy %s does not stay up (%s): see `docker logs %s`", shortID(ci.ID), ci.State.Status, shortID(ci.ID))
		}
		time.Sleep(50 * time.Millisecond)
		cctx, cancel := p.call(ctx)
		var err error
		ci, err = p.cli.ContainerInspect(cctx, ci.ID)
		cancel()
		if err != nil {
			return "", p.wrap(err, "inspect the egress proxy")
		}
	}
}

// createProxy makes the install's proxy: its configuration (what it never
// connects to), its container from the image of this binary, hardened as a
// sandbox is and restarted by the daemon whenever it dies (while it is
// down, its sandboxes reach nothing at all), connected to every sandbox
// network of the install, and started.
func (p *Provider) createProxy(ctx context.Context, name, instance string, labels map[string]string) (string, error) {
	img, version, err := p.egressImage(ctx)
	if err != nil {
		return "", err
	}
	cfg, err := p.proxyConfig(ctx)
	if err != nil {
		return "", err
	}
	if err := egress.WriteConfig(p.egressDir(), cfg); err != nil {
		return "", fmt.Errorf("egress configuration: %w", err)
	}
	// What a previous proxy said it served is not this one's: a writer
	// waiting for its policy must wait for the new process.
	if old, err := os.ReadDir(filepath.Join(p.egressDir(), egress.StateDir)); err == nil {
		for _, e := range old {
			_ = os.Remove(filepath.Join(p.egressDir(), egress.StateDir, e.Name()))
		}
	}
	if os.Geteuid() == 0 {
		uid, gid := proxyUser()
		if err := os.Chown(filepath.Join(p.egressDir(), egress.ConfigFile), uid, gid); err != nil {
			return "", fmt.Errorf("egress configuration: %w", err)
		}
	}
	mounts, dirIn, err := p.egressMounts(ctx)
	if err != nil {
		return "", err
	}
	l := map[string]string{LabelRole: RoleEgressProxy, LabelEgressVersion: version}
	for k, v := range labels {
		if k != LabelSession && k != LabelRun {
			l[k] = v
		}
	}
	l[LabelManaged], l[LabelInstance] = "true", instance
	uid, gid := proxyUser()
	yes := true
	pids := int64(512)
	cc := &container.Config{
		Image:      img,
		User:       fmt.Sprintf("%d:%d", uid, gid),
		Entrypoint: []string{"/xmode", "__egress", "--dir", dirIn, "--keep-going"},
		Labels:     l,
	}
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode(p.cfg.EgressNetwork),
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
		Init:           &yes,
		Mounts:         mounts,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		IpcMode:        container.IPCModePrivate,
		Sysctls: map[string]string{
			// A container's network namespace inherits the host's
			// forwarding: the proxy must never route a sandbox's packets.
			"net.ipv4.ip_forward":                 "0",
			"net.ipv4.conf.all.forwarding":        "0",
			"net.ipv6.conf.all.disable_ipv6":      "1",
			"net.ipv4.ip_unprivileged_port_start": "0", // port 53 without a capability
		},
		// Its open files are the daemon's default: a raised limit needs a
		// capability the daemon may not have.
		Resources: container.Resources{Memory: 512 << 20, MemorySwap: 512 << 20, PidsLimit: &pids},
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "2"}},
	}
	if err := p.checkNoSocket(mounts); err != nil {
		return "", err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	created, err := p.cli.ContainerCreate(cctx, cc, hc, nil, nil, name)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return "", err
		}
		return "", p.wrap(err, "create the egress proxy "+name)
	}
	// Every sandbox network of the install: a proxy made again (removed by
	// hand, or replaced) serves the sandboxes that are there.
	nets, err := p.cli.NetworkList(cctx, network.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelInstance+"="+instance),
		filters.Arg("label", LabelRole+"="+RoleEgressNetwork))})
	if err != nil {
		_ = p.removeProxyContainer(ctx, created.ID)
		return "", p.wrap(err, "list the sandbox networks")
	}
	for _, n := range nets {
		subnet, err := p.egressSubnet(ctx, n.Name)
		if err != nil {
			continue
		}
		if err := p.connectProxy(ctx, created.ID, n.Name, subnet); err != nil {
			p.warnf("%v", err)
		}
	}
	if err := p.cli.ContainerStart(cctx, created.ID, container.StartOptions{}); err != nil {
		_ = p.removeProxyContainer(ctx, created.ID)
		return "", p.wrap(err, "start the egress proxy "+name)
	}
	return created.ID, nil
}

// egressMounts mounts the proxy's directory: <root>/egress from this host
// in bind mode, that directory of the storage volume in volume mode.
func (p *Provider) egressMounts(ctx context.Context) ([]mount.Mount, string, error) {
	dir := p.egressDir()
	if err := mkdirEgress(dir); err != nil {
		return nil, "", fmt.Errorf("egress directory %s: %w", dir, err)
	}
	if p.MountMode() == MountBind {
		return []mount.Mount{{Type: mount.TypeBind, Source: dir, Target: egressDirIn}}, egressDirIn, nil
	}
	method, _, vol, err := p.isolation(ctx)
	if err != nil {
		return nil, "", err
	}
	if method == IsolationWholeVolume {
		return []mount.Mount{{Type: mount.TypeVolume, Source: vol.Name, Target: p.cfg.StorageMount, VolumeOptions: &mount.VolumeOptions{NoCopy: true}}},
			path.Join(filepath.ToSlash(p.cfg.StorageMount), fsguard.EgressDirName), nil
	}
	return p.storageMount(method, vol, fsguard.EgressDirName, egressDirIn, false), egressDirIn, nil
}

// proxyConfig is the proxy's egress.json: what it never connects to, besides
// the block list every policy has — every sandbox network (other
// sandboxes), the egress network's subnets and its gateway (the docker
// host's address there), and the addresses of this machine; the last two
// only through a CIDR rule that names them (an internal mirror beside the
// daemon).
func (p *Provider) proxyConfig(ctx context.Context) (egress.Config, error) {
	cfg := egress.Config{
		LogMaxBytes: p.cfg.EvidenceMaxBytes,
		ResolveOnly: p.egressResolveOnly,
		Block:       []egress.Block{{Prefix: p.cfg.EgressSubnets, Reason: "the sandboxes' own networks (XMODE_SANDBOX_EGRESS_SUBNETS)"}},
	}
	if p.cfg.EgressCA != "" {
		pem, err := readBounded(p.cfg.EgressCA, 16<<20)
		if err != nil {
			return cfg, fail.Usagef("XMODE_SANDBOX_EGRESS_CA: %v", err)
		}
		if err := writeEgressFile(filepath.Join(p.egressDir(), "extra-ca.pem"), pem, 0o644); err != nil {
			return cfg, err
		}
		dirIn := egressDirIn
		if p.MountMode() != MountBind {
			if method, _, _, err := p.isolation(ctx); err == nil && method == IsolationWholeVolume {
				dirIn = path.Join(filepath.ToSlash(p.cfg.StorageMount), fsguard.EgressDirName)
			}
		}
		cfg.ExtraCAFile = path.Join(dirIn, "extra-ca.pem")
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	n, err := p.cli.NetworkInspect(cctx, p.cfg.EgressNetwork, network.InspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return cfg, fail.Usagef("XMODE_SANDBOX_EGRESS_NETWORK: network %q does not exist on the docker daemon at %s: create it, or leave the variable unset for docker's bridge", p.cfg.EgressNetwork, p.Host())
		}
		return cfg, p.wrap(err, "inspect the egress network "+p.cfg.EgressNetwork)
	}
	if n.Internal {
		return cfg, fail.Usagef("XMODE_SANDBOX_EGRESS_NETWORK: network %q is internal: the egress proxy could reach nothing through it", p.cfg.EgressNetwork)
	}
	for _, c := range n.IPAM.Config {
		if pfx, err := netip.ParsePrefix(c.Subnet); err == nil {
			cfg.Block = append(cfg.Block, egress.Block{Prefix: pfx.Masked(), Reason: "the egress proxy's own network " + p.cfg.EgressNetwork + " (other containers)", Liftable: true})
		}
		if gw, err := netip.ParseAddr(c.Gateway); err == nil {
			cfg.Block = append(cfg.Block, egress.Block{Prefix: netip.PrefixFrom(gw, gw.BitLen()), Reason: "the docker host (the gateway of " + p.cfg.EgressNetwork + ")", Liftable: true})
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					ip = ip.Unmap()
					if ip.IsLoopback() || ip.IsLinkLocalUnicast() {
						continue
					}
					cfg.Block = append(cfg.Block, egress.Block{Prefix: netip.PrefixFrom(ip, ip.BitLen()), Reason: "an address of the machine xmode runs on", Liftable: true})
				}
			}
		}
	}
	return cfg, nil
}

// removeProxyContainer removes a proxy container (one of xmode's).
func (p *Provider) removeProxyContainer(ctx context.Context, id string) error {
	cctx, cancel := p.call(context.WithoutCancel(ctx))
	defer cancel()
	if err := p.cli.ContainerRemove(cctx, id, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return p.wrap(err, "remove the egress proxy "+shortID(id))
	}
	return nil
}

// proxyIdle reports whether a proxy container serves no sandbox network.
func proxyIdle(nets map[string]*network.EndpointSettings) bool {
	for name := range nets {
		if strings.HasPrefix(name, "xmode-net-") {
			return false
		}
	}
	return true
}

// removeIdleProxy removes the install's proxy if it serves no sandbox
// (the reaper's orphan sweep), holding the egress lock so that no create
// connects to it meanwhile, and then its image unless another install's
// proxy runs it.
func (p *Provider) removeIdleProxy(ctx context.Context, o engine.Object) error {
	unlock, err := p.lockEgress(true)
	if err != nil {
		return err
	}
	defer unlock()
	cctx, cancel := p.call(ctx)
	defer cancel()
	ci, err := p.cli.ContainerInspect(cctx, o.ID)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return p.wrap(err, "inspect the egress proxy")
	}
	if ci.Config == nil || ci.Config.Labels[LabelManaged] != "true" || ci.Config.Labels[LabelRole] != RoleEgressProxy || ci.Config.Labels[LabelInstance] != o.Instance {
		return fail.Refusedf("will not remove container %s: it is not this install's egress proxy", shortID(o.ID))
	}
	if ci.NetworkSettings != nil && !proxyIdle(ci.NetworkSettings.Networks) {
		return nil // a sandbox came meanwhile
	}
	if err := p.removeProxyContainer(ctx, ci.ID); err != nil {
		return err
	}
	if ci.Image != "" {
		_, _ = p.cli.ImageRemove(cctx, ci.Image, imageRemoveOptions())
	}
	return nil
}

// --- teardown -------------------------------------------------------------

// destroyEgress removes what prepareEgress made for a session — its policy
// and secrets, its network — after keeping its network log in the run's
// evidence (runs/<run>/network/<session>.jsonl). The session's container
// must be gone first (its connections then end, and their lines are
// written). Nothing there is success; a log it could not keep stops it, so
// that the next teardown tries again and the log is never lost.
func (p *Provider) destroyEgress(ctx context.Context, sessionID, runID string) error {
	if !fsguard.ValidID("sbx_", sessionID) {
		return nil
	}
	dir := p.egressDir()
	name := EgressNetworkName(sessionID)
	cctx, cancel := p.call(ctx)
	defer cancel()
	n, nerr := p.cli.NetworkInspect(cctx, name, network.InspectOptions{})
	switch {
	case cerrdefs.IsNotFound(nerr):
	case nerr != nil:
		return p.wrap(nerr, "inspect network "+name)
	case n.Labels[LabelManaged] != "true" || n.Labels[LabelSession] != sessionID:
		return fail.Refusedf("will not remove network %s: it is not session %s's (labels %v)", name, sessionID, n.Labels)
	default:
		if runID == "" {
			runID = n.Labels[LabelRun]
		}
	}
	policy := filepath.Join(dir, egress.PoliciesDir, sessionID+".json")
	_, perr := os.Lstat(policy)
	live := egress.LogPath(dir, sessionID)
	_, lerr := os.Lstat(live)
	_, rerr := os.Lstat(filepath.Join(dir, "resolv", sessionID+".conf"))
	if cerrdefs.IsNotFound(nerr) && errors.Is(perr, os.ErrNotExist) && errors.Is(lerr, os.ErrNotExist) && errors.Is(rerr, os.ErrNotExist) {
		return nil // never proxied, or already gone
	}
	if err := os.Remove(policy); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the egress policy of %s: %w", sessionID, err)
	}
	_ = os.RemoveAll(filepath.Join(dir, "secrets", sessionID))
	_ = os.Remove(filepath.Join(dir, "resolv", sessionID+".conf"))
	// The proxy closes the sandbox's listeners and log when it sees the
	// policy gone, and then removes its state file.
	if id := p.runningProxy(ctx, n.Labels[LabelInstance]); id != "" {
		_ = p.cli.ContainerKill(cctx, id, "USR1")
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Lstat(filepath.Join(dir, egress.StateDir, sessionID+".json")); errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := p.keepNetworkLog(runID, sessionID); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, egress.StateDir, sessionID+".json"))
	_ = os.RemoveAll(egress.CADir(dir, sessionID))
	if nerr == nil {
		for id := range n.Containers {
			if err := p.cli.NetworkDisconnect(cctx, n.ID, id, true); err != nil && !cerrdefs.IsNotFound(err) {
				return p.wrap(err, "disconnect "+shortID(id)+" from network "+name)
			}
		}
		if err := p.cli.NetworkRemove(cctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			return p.wrap(err, "remove network "+name)
		}
	}
	return nil
}

// runningProxy is the ID of the install's proxy when it runs, else "".
func (p *Provider) runningProxy(ctx context.Context, instance string) string {
	if checkRef("instance", instance) != nil {
		return ""
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	ci, err := p.cli.ContainerInspect(cctx, EgressProxyName(instance))
	if err != nil || ci.State == nil || !ci.State.Running || ci.Config == nil || ci.Config.Labels[LabelRole] != RoleEgressProxy {
		return ""
	}
	return ci.ID
}

// keepNetworkLog moves a session's network log (and the count of the lines
// its cap dropped) from the proxy's directory into the run's evidence.
func (p *Provider) keepNetworkLog(runID, sessionID string) error {
	live := egress.LogPath(p.egressDir(), sessionID)
	if _, err := os.Lstat(live); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	dst, err := p.guard.NetworkLog(runID, sessionID)
	if err != nil {
		return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
	}
	runDir, _ := p.guard.RunDir(runID)
	root, err := os.OpenRoot(runDir)
	if err != nil {
		return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
	}
	defer root.Close()
	if err := root.Mkdir(fsguard.NetworkDirName, fsguard.EvidenceDirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
	}
	for _, src := range []string{live, egress.DroppedPath(live)} {
		rel := path.Join(fsguard.NetworkDirName, filepath.Base(dst))
		if src != live {
			rel = path.Join(fsguard.NetworkDirName, filepath.Base(egress.DroppedPath(dst)))
		}
		if err := copyIntoRoot(root, src, rel); err != nil {
			return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
		}
	}
	_ = os.Remove(egress.DroppedPath(live))
	return os.Remove(live)
}

// copyIntoRoot copies a regular file (no final link followed) to rel under
// root, whole: a temporary file renamed over rel. A missing src is nothing.
func copyIntoRoot(root *os.Root, src, rel string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	tmp := path.Join(path.Dir(rel), "."+path.Base(rel)+"."+rand.Text())
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

// --- engine.EgressEnforcer -------------------------------------------------

// SetEgress serves a new policy to a live sandbox (engine.EgressEnforcer):
// new connections meet it from when it returns. A proxy that is gone is
// made again first.
func (p *Provider) SetEgress(ctx context.Context, sb engine.Sandbox, pol egress.Policy, getenv func(string) string) error {
	if pol.Sandbox != sb.SessionID {
		return fmt.Errorf("set egress of %s: the policy is sandbox %s's", sb.SessionID, pol.Sandbox)
	}
	if _, err := p.Ping(ctx); err != nil {
		return err
	}
	name := EgressNetworkName(sb.SessionID)
	cctx, cancel := p.call(ctx)
	n, err := p.cli.NetworkInspect(cctx, name, network.InspectOptions{})
	cancel()
	if cerrdefs.IsNotFound(err) {
		return fail.Refusedf("session %s has no egress policy to change (its network is not proxied): create it with XMODE_SANDBOX_NETWORK=allow", sb.SessionID)
	}
	if err != nil {
		return p.wrap(err, "inspect network "+name)
	}
	if n.Labels[LabelManaged] != "true" || n.Labels[LabelSession] != sb.SessionID || n.Labels[LabelRole] != RoleEgressNetwork {
		return fail.Refusedf("network %s is not session %s's: refusing to change its policy", name, sb.SessionID)
	}
	unlock, err := p.lockEgress(false)
	if err != nil {
		return err
	}
	defer unlock()
	proxyID, err := p.ensureProxy(ctx, n.Labels[LabelInstance], map[string]string{LabelInstance: n.Labels[LabelInstance]})
	if err != nil {
		return err
	}
	had := p.hasCredentials(sb.SessionID)
	if _, err := p.servePolicy(ctx, proxyID, &pol, getenv); err != nil {
		return err
	}
	if len(pol.Credentials) > 0 && !had && sb.ContainerID != "" {
		// The first credential: the sandbox trusts its CA from now on.
		ca, err := p.readEgressCA(sb.SessionID)
		if err != nil {
			return err
		}
		subnet, err := p.egressSubnet(ctx, name)
		if err != nil {
			return err
		}
		return p.setupInside(ctx, sb.ContainerID, proxyAddr(subnet), false, ca, p.caDirIn())
	}
	return nil
}

// EgressLog is where a sandbox's network log is on this host
// (engine.EgressEnforcer): the proxy's live log while the sandbox lives,
// the run's copy after its teardown; "" when it has neither.
func (p *Provider) EgressLog(_ context.Context, sb engine.Sandbox) (string, error) {
	if !fsguard.ValidID("sbx_", sb.SessionID) {
		return "", fail.Refusedf("session id %q is malformed; refusing to derive a path from it", sb.SessionID)
	}
	live := egress.LogPath(p.egressDir(), sb.SessionID)
	if _, err := os.Lstat(live); err == nil {
		return live, nil
	}
	kept, err := p.guard.NetworkLog(sb.RunID, sb.SessionID)
	if err != nil {
		return "", err
	}
	if _, err := os.Lstat(kept); err == nil {
		return kept, nil
	}
	return "", nil
}
