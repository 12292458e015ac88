package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// egressEnv is a docker setup whose sandboxes are proxied: an upstream
// network the test made, with test hosts allowed.test, denied.test and
// other.test on it, which the proxy reaches (XMODE_SANDBOX_EGRESS_NETWORK)
// and resolves by the names the policies give it (and only those).
type egressEnv struct {
	*tenv
	up                     *dockertest.Upstream
	allowed, denied, other netip.Addr
	resolve                string
}

func newEgressEnv(t *testing.T, mode string, vars map[string]string) *egressEnv {
	t.Helper()
	env := map[string]string{
		"XMODE_SANDBOX_NETWORK":       "allow",
		"XMODE_SANDBOX_IMAGE":         dockertest.ProbeImage(t),
		"XMODE_SANDBOX_EGRESS_BINARY": dockertest.XmodeBinary(t),
		"XMODE_SANDBOX_EGRESS_CA":     dockertest.TestPKI(t).CAFile,
	}
	for k, v := range vars {
		env[k] = v
	}
	e := &egressEnv{tenv: newEnv(t, mode, env)}
	e.p.egressResolveOnly = true
	e.up = dockertest.NewUpstream(t, e.cli, e.instance)
	e.cfg.EgressNetwork = e.up.Name
	e.allowed, e.denied, e.other = e.up.Host(t, "allowed.test"), e.up.Host(t, "denied.test"), e.up.Host(t, "other.test")
	e.resolve = fmt.Sprintf("allowed.test=%s,denied.test=%s,other.test=%s", e.allowed, e.denied, e.other)
	return e
}

// policy is a new session's spec with an egress policy in mode allow: the
// sources given, then the test hosts' names.
func (e *egressEnv) policy(sources ...egress.Source) engine.Spec {
	e.t.Helper()
	spec := e.spec(newRun())
	sources = append(sources, egress.Source{Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{e.resolve}})
	pol, err := egress.Merge(spec.SessionID, egress.ModeAllow, sources...)
	if err != nil {
		e.t.Fatal(err)
	}
	spec.Egress = &pol
	return spec
}

// allowOnly lets a sandbox reach allowed.test on 80 and 443: its name, and
// its address (the upstream network is blocked unless a CIDR rule names
// the address, as for any network beside the docker host).
func (e *egressEnv) allowOnly() egress.Source {
	return egress.Source{Name: "--allow", Allow: []string{"allowed.test:80", "allowed.test:443", e.allowed.String()}}
}

// fails runs script and requires a non-zero exit: the attempt did not get
// through.
func (e *egressEnv) fails(sb engine.Sandbox, what, script string) string {
	e.t.Helper()
	r := e.run(sb, script)
	if r.err != nil {
		e.t.Fatalf("%s: %v", what, r.err)
	}
	if r.st.ExitCode == 0 {
		e.t.Errorf("%s GOT THROUGH: sh -c %q\nstdout: %s\nstderr: %s", what, script, r.stdout, r.stderr)
	}
	return r.stdout + r.stderr
}

// records reads a sandbox's network log.
func (e *egressEnv) records(sb engine.Sandbox) []egress.Record {
	e.t.Helper()
	path, err := e.p.EgressLog(context.Background(), sb)
	if err != nil || path == "" {
		e.t.Fatalf("EgressLog: %q %v", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	var out []egress.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r egress.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			e.t.Fatalf("a log line that is not a record: %q", sc.Text())
		}
		out = append(out, r)
	}
	return out
}

// logged finds a record a connection left (the proxy writes a
// connection's line when it ends: it waits for it a little).
func (e *egressEnv) logged(sb engine.Sandbox, match func(egress.Record) bool) egress.Record {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, r := range e.records(sb) {
			if match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no such record in the network log: %+v", e.records(sb))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proxyOf is the proxy's address as the sandbox's environment has it.
func (e *egressEnv) proxyOf(sb engine.Sandbox) netip.AddrPort {
	e.t.Helper()
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(e.ok(sb, `echo "$HTTP_PROXY"`), "http://"))
	if err != nil {
		e.t.Fatalf("HTTP_PROXY: %v", err)
	}
	return ap
}

// control requires that argv gets through from a plain container on the
// upstream network: the attempt a sandbox fails can succeed at all.
func (e *egressEnv) control(what string, argv ...string) {
	e.t.Helper()
	if code, out := e.up.Run(e.t, argv...); code != 0 {
		e.t.Fatalf("control %s: a plain container on the upstream network did not get through either (exit %d): %s", what, code, out)
	}
}

// quiet requires that a test host saw nothing since the count before.
func (e *egressEnv) quiet(host string, before int) {
	e.t.Helper()
	if hits := e.up.Requests(e.t, host); len(hits) != before {
		e.t.Errorf("test host %s was reached: %+v", host, hits[before:])
	}
}

// TestEgressBypassCorpus is docs/network.md's list of ways out, each tried
// from a root sandbox in bind mode (docker's default capabilities, less
// NET_RAW and NET_ADMIN) that may reach allowed.test on ports 80 and 443
// only; each fails when the attempt gets through. The allowed host is
// reached, and the proxy's log names the rule that let it.
func TestEgressBypassCorpus(t *testing.T) {
	t.Parallel()
	e := newEgressEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_USER": "0:0"})
	meta := dockertest.MetadataHost(t, e.cli, e.instance)
	spec := e.policy(e.allowOnly(), egress.Source{Name: "--allow", Allow: []string{"metadata.test", "169.254.169.254"}},
		egress.Source{Name: "test", Resolve: []string{"metadata.test=169.254.169.254"}})
	a := e.provisionSpec(spec)
	// The test's fake metadata host is on a network of its own the proxy
	// is joined to: the proxy could reach it, and must not.
	dockertest.ConnectNetwork(t, e.cli, meta.Name, EgressProxyName(e.instance))
	px := e.proxyOf(a)
	proxy := px.String()

	t.Run("AllowedHostReached", func(t *testing.T) {
		if out := e.ok(a, "egressprobe get http://allowed.test/"); !strings.Contains(out, "hello from allowed.test") {
			t.Fatalf("plain HTTP through the proxy: %s", out)
		}
		if out := e.ok(a, "egressprobe get -insecure https://allowed.test/"); !strings.Contains(out, "hello from allowed.test") {
			t.Fatalf("HTTPS through the proxy: %s", out)
		}
		for _, port := range []int{80, 443} {
			r := e.logged(a, func(r egress.Record) bool {
				return r.Host == "allowed.test" && r.Port == port && r.Verdict == egress.Allowed
			})
			if r.Rule != fmt.Sprintf("allowed.test:%d", port) || r.Source != "--allow" || r.Sandbox != a.SessionID || r.BytesDown == 0 {
				t.Errorf("the log's record of allowed.test:%d: %+v", port, r)
			}
		}
	})

	t.Run("DirectIPToTheDeniedHost", func(t *testing.T) {
		before := len(e.up.Requests(t, "denied.test"))
		e.fails(a, "HTTP straight to denied.test's address", "egressprobe get -noproxy http://"+e.denied.String()+"/")
		e.fails(a, "TCP straight to denied.test's address", "egressprobe tcp "+e.denied.String()+":7000")
		e.fails(a, "HTTP straight to allowed.test's address", "egressprobe get -noproxy http://"+e.allowed.String()+"/")
		out := e.fails(a, "denied.test's address through the proxy", "egressprobe get http://"+e.denied.String()+"/")
		if !strings.Contains(out, "STATUS 403") {
			t.Errorf("the proxy's answer for an address no rule names: %s", out)
		}
		e.quiet("denied.test", before)
	})

	t.Run("UDP", func(t *testing.T) {
		e.control("UDP", "egressprobe", "udp", e.other.String()+":7001")
		for _, h := range []string{"allowed.test", "denied.test"} {
			before := len(e.up.Requests(t, h))
			addr := map[string]netip.Addr{"allowed.test": e.allowed, "denied.test": e.denied}[h]
			e.fails(a, "UDP to "+h, "egressprobe udp "+addr.String()+":7001")
			e.quiet(h, before)
		}
		e.fails(a, "UDP to the proxy on another port", "egressprobe udp "+px.Addr().String()+":7001")
	})

	t.Run("RawTCPPort", func(t *testing.T) {
		e.control("raw TCP", "egressprobe", "tcp", e.other.String()+":7000")
		before := len(e.up.Requests(t, "allowed.test"))
		e.fails(a, "raw TCP straight to allowed.test", "egressprobe tcp "+e.allowed.String()+":7000")
		e.fails(a, "another port of the proxy", "egressprobe tcp "+px.Addr().String()+":7000")
		out := e.fails(a, "CONNECT to a port no rule names", "egressprobe front "+proxy+" allowed.test:7000 allowed.test")
		if !strings.Contains(out, "403") {
			t.Errorf("CONNECT allowed.test:7000: %s", out)
		}
		e.quiet("allowed.test", before)
	})

	t.Run("FrontedSNI", func(t *testing.T) {
		e.ok(a, "egressprobe front "+proxy+" allowed.test:443 allowed.test") // the same tunnel, its own name
		before, beforeA := len(e.up.Requests(t, "denied.test")), len(e.up.Requests(t, "allowed.test"))
		e.fails(a, "CONNECT allowed.test with denied.test in the SNI", "egressprobe front "+proxy+" allowed.test:443 denied.test")
		e.quiet("denied.test", before)
		e.quiet("allowed.test", beforeA)
		r := e.logged(a, func(r egress.Record) bool { return r.SNI == "denied.test" })
		if r.Verdict != egress.Denied || r.Rule != "sni" {
			t.Errorf("the log's record of the fronted tunnel: %+v", r)
		}
	})

	t.Run("ForgedHost", func(t *testing.T) {
		before, beforeA := len(e.up.Requests(t, "denied.test")), len(e.up.Requests(t, "allowed.test"))
		out := e.fails(a, "plain HTTP to allowed.test with Host: denied.test", "egressprobe get -host denied.test http://allowed.test/")
		if !strings.Contains(out, "STATUS 403") {
			t.Errorf("the proxy's answer to a forged Host: %s", out)
		}
		e.quiet("denied.test", before)
		e.quiet("allowed.test", beforeA)
	})

	t.Run("DNS", func(t *testing.T) {
		dns := px.Addr().String() + ":53"
		if out := e.ok(a, "egressprobe dns -server "+dns+" allowed.test"); !strings.Contains(out, e.allowed.String()) {
			t.Errorf("the proxy's resolver on an allowed name: %s", out)
		}
		if out := e.ok(a, "nslookup allowed.test"); !strings.Contains(out, e.allowed.String()) {
			t.Errorf("the sandbox's own resolver (resolv.conf) on an allowed name: %s", out)
		}
		for _, q := range []string{"denied.test", "-type TXT exfiltrated-data.denied.test", "-type TXT allowed.test", "-tcp -type TXT exfiltrated-data.denied.test", "-type MX allowed.test"} {
			e.fails(a, "DNS "+q, "egressprobe dns -server "+dns+" "+q)
		}
		// docker's own resolver in the sandbox forwards nothing on an
		// internal network: no way around the proxy's resolver.
		e.fails(a, "docker's embedded resolver", "egressprobe dns -server 127.0.0.11:53 denied.test")
		e.fails(a, "docker's embedded resolver, TXT", "egressprobe dns -server 127.0.0.11:53 -type TXT exfiltrated-data.denied.test")
		r := e.logged(a, func(r egress.Record) bool { return r.Kind == "dns" && r.Host == "exfiltrated-data.denied.test" })
		if r.Verdict != egress.Denied {
			t.Errorf("the log's record of a TXT question for a denied name: %+v", r)
		}
	})

	t.Run("TheHostAndItsBridgeAddresses", func(t *testing.T) {
		// A listener of the test's on every address of this machine: the
		// docker host's address on any bridge, its own addresses, IPv4 and
		// IPv6, would reach it.
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var accepted atomic.Int32
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		subnet, err := e.p.egressSubnet(context.Background(), EgressNetworkName(a.SessionID))
		if err != nil {
			t.Fatal(err)
		}
		targets := []netip.Addr{subnet.Addr().Next(), e.up.Gateway()}
		addrs, _ := net.InterfaceAddrs()
		for _, ad := range addrs {
			if ipn, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && !ip.Unmap().IsLoopback() {
					targets = append(targets, ip.Unmap())
				}
			}
		}
		// The sandbox's bridge: the host has no IPv4 address on it, only
		// IPv6 link-local, which the sandbox (IPv6 off) cannot use.
		br := bridgeOf(t, e, a)
		for _, ad := range br {
			ip, _ := netip.ParsePrefix(ad.String())
			if ip.Addr().Is4() {
				t.Errorf("the docker host has an IPv4 address on the sandbox's bridge: %s", ad)
			}
		}
		if got := e.ok(a, "cat /proc/sys/net/ipv6/conf/all/disable_ipv6"); got != "1" {
			t.Errorf("IPv6 in the sandbox: disable_ipv6=%s", got)
		}
		for _, ip := range targets {
			hp := netip.AddrPortFrom(ip.WithZone(""), uint16(port)).String()
			if ip.Is6() && ip.IsLinkLocalUnicast() {
				hp = fmt.Sprintf("[%s%%eth0]:%d", ip.WithZone(""), port)
			}
			e.fails(a, "the host at "+hp, "egressprobe tcp '"+hp+"'")
			if ip.Is4() {
				out := e.fails(a, "the host at "+hp+" through the proxy", "egressprobe front "+proxy+" "+hp+" x.test")
				if !strings.Contains(out, "403") {
					t.Errorf("CONNECT %s: %s", hp, out)
				}
			}
		}
		if n := accepted.Load(); n != 0 {
			t.Errorf("the test's listener on the host accepted %d connections from the sandbox", n)
		}
		// The listener is reachable from a plain container beside the proxy.
		e.control("the host's listener", "egressprobe", "tcp", netip.AddrPortFrom(e.up.Gateway(), uint16(port)).String())
		if n := accepted.Load(); n != 1 {
			t.Errorf("the control reached the listener %d times, want 1", n)
		}
	})

	t.Run("DockerSocket", func(t *testing.T) {
		for _, s := range e.p.dockerSockets() {
			e.fails(a, "the docker socket "+s, "test -e "+s)
		}
	})

	t.Run("AnotherSandbox", func(t *testing.T) {
		b := e.provisionSpec(e.policy())
		bIP := sandboxAddrOf(t, e, b)
		done := make(chan execResult, 1)
		go func() { done <- e.run(b, "timeout 15 nc -l -p 7000; echo rc=$?") }()
		time.Sleep(500 * time.Millisecond)
		e.fails(a, "TCP straight to another sandbox", "egressprobe tcp "+bIP.String()+":7000")
		out := e.fails(a, "another sandbox through the proxy", "egressprobe front "+proxy+" "+bIP.String()+":7000 x.test")
		if !strings.Contains(out, "403") {
			t.Errorf("CONNECT to another sandbox: %s", out)
		}
		if r := <-done; !strings.Contains(r.stdout, "rc=143") {
			t.Errorf("the other sandbox's listener was reached: %+v", r)
		}
	})

	t.Run("UnsetProxyVariables", func(t *testing.T) {
		before := len(e.up.Requests(t, "allowed.test"))
		e.fails(a, "allowed.test without the proxy variables",
			"env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy egressprobe get http://allowed.test/")
		e.quiet("allowed.test", before)
	})

	t.Run("CloudMetadata", func(t *testing.T) {
		// Never asked of a real metadata service: the address is a test
		// host's, on a network the test made.
		for _, u := range []string{"http://169.254.169.254/", "http://metadata.test/"} {
			out := e.fails(a, u+" through the proxy", "egressprobe get "+u)
			if !strings.Contains(out, "STATUS 403") {
				t.Errorf("%s: %s", u, out)
			}
		}
		e.fails(a, "metadata.test through the resolver", "egressprobe dns -server "+px.Addr().String()+":53 metadata.test")
		if n := len(meta.Requests(t, "metadata")); n != 0 {
			t.Errorf("the metadata address was reached %d times", n)
		}
		r := e.logged(a, func(r egress.Record) bool { return r.Host == "169.254.169.254" })
		if r.Verdict != egress.Denied || r.Rule != "block list" {
			t.Errorf("the log's record of 169.254.169.254 (allowed by a CIDR rule, blocked whatever the rules say): %+v", r)
		}
		// No route of the sandbox's leads anywhere but its own network:
		// the gateway is an address nothing has.
		routes := e.ok(a, "ip route")
		for _, line := range strings.Split(routes, "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "default" && f[2] != subnetGateway(t, e, a).String() {
				t.Errorf("a default route through something that exists: %s", line)
			}
		}
	})

	t.Run("NoRawSockets", func(t *testing.T) {
		caps := e.ok(a, "grep CapEff /proc/self/status")
		var eff uint64
		fmt.Sscanf(strings.Fields(caps)[1], "%x", &eff)
		if eff&(1<<13) != 0 || eff&(1<<12) != 0 {
			t.Errorf("the sandbox has CAP_NET_RAW or CAP_NET_ADMIN: %s", caps)
		}
	})

	t.Run("EditedHostsAndResolvConf", func(t *testing.T) {
		before := len(e.up.Requests(t, "denied.test"))
		e.ok(a, "echo '"+e.denied.String()+" sneaky.test' >> /etc/hosts")
		e.fails(a, "a name /etc/hosts maps to denied.test, straight", "egressprobe get -noproxy http://sneaky.test/")
		out := e.fails(a, "a name /etc/hosts maps to denied.test, through the proxy", "egressprobe get http://sneaky.test/")
		if !strings.Contains(out, "STATUS 403") {
			t.Errorf("the proxy resolves names itself: %s", out)
		}
		// resolv.conf is the proxy's, read-only: a step that wants another
		// resolver names it, and reaches none.
		e.fails(a, "rewriting resolv.conf", "printf 'nameserver "+e.up.Gateway().String()+"\\n' > /etc/resolv.conf")
		if got := e.ok(a, "grep nameserver /etc/resolv.conf"); got != "nameserver "+px.Addr().String() {
			t.Errorf("resolv.conf: %s", got)
		}
		e.fails(a, "another resolver", "nslookup -timeout=2 allowed.test "+e.up.Gateway().String())
		e.quiet("denied.test", before)
	})
}

// bridgeOf is the addresses the docker host has on the bridge of a
// sandbox's network.
func bridgeOf(t *testing.T, e *egressEnv, sb engine.Sandbox) []net.Addr {
	t.Helper()
	ctx := context.Background()
	n, err := e.cli.NetworkInspect(ctx, EgressNetworkName(sb.SessionID), network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ifc, err := net.InterfaceByName("br-" + n.ID[:12])
	if err != nil {
		t.Fatalf("the sandbox's bridge on this host: %v", err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// sandboxAddrOf is a proxied sandbox's own address.
func sandboxAddrOf(t *testing.T, e *egressEnv, sb engine.Sandbox) netip.Addr {
	t.Helper()
	subnet, err := e.p.egressSubnet(context.Background(), EgressNetworkName(sb.SessionID))
	if err != nil {
		t.Fatal(err)
	}
	return sandboxAddr(subnet)
}

// subnetGateway is the address docker reserved as the sandbox network's
// gateway (and, with inhibit_ipv4, gave to nothing).
func subnetGateway(t *testing.T, e *egressEnv, sb engine.Sandbox) netip.Addr {
	t.Helper()
	subnet, err := e.p.egressSubnet(context.Background(), EgressNetworkName(sb.SessionID))
	if err != nil {
		t.Fatal(err)
	}
	return subnet.Addr().Next()
}

// A credential added at the edge: the upstream gets the secret in its
// header, the sandbox only a placeholder — in its environment, every
// process's, its files, and the network log — and a request to another
// host carries the placeholder as the sandbox sent it.
func TestEgressCredentials(t *testing.T) {
	t.Parallel()
	e := newEgressEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_USER": "0:0"})
	const secret = "sk-test-7f3c1d9e2b4a6c8e0f1a3b5d"
	env := map[string]string{"XMODE_TEST_EGRESS_SECRET": secret}
	spec := e.policy(egress.Source{Name: "--credential", Credentials: []string{"allowed.test=x-api-key:XMODE_TEST_EGRESS_SECRET"}},
		egress.Source{Name: "--allow", Allow: []string{"other.test:443", e.allowed.String(), e.other.String()}})
	spec.Getenv = func(k string) string { return env[k] }
	placeholder := spec.Egress.Credentials[0].Placeholder
	sb := e.provisionSpec(spec)

	if got := e.ok(sb, `echo "$XMODE_TEST_EGRESS_SECRET"`); got != placeholder {
		t.Fatalf("the sandbox's copy of the variable: %q, want the placeholder %q", got, placeholder)
	}
	// The sandbox trusts its CA through SSL_CERT_FILE (the probe is Go,
	// which reads it); the bundle keeps the image's own roots.
	out := e.ok(sb, `egressprobe get -H "X-Api-Key: $XMODE_TEST_EGRESS_SECRET" https://allowed.test/echo`)
	if !strings.Contains(out, "STATUS 200") {
		t.Fatalf("the credential host: %s", out)
	}
	hits := e.up.Requests(t, "allowed.test")
	if len(hits) == 0 || hits[len(hits)-1].Headers["X-Api-Key"] != secret {
		t.Fatalf("the upstream did not get the secret: %+v", hits)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the upstream's echo of the secret reached the sandbox: %s", out)
	}
	if n := e.ok(sb, `grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE"`); n == "1" {
		t.Errorf("SSL_CERT_FILE holds the sandbox's CA alone, not the image's roots as well")
	}
	// Another host: its tunnel is untouched, the placeholder is what it gets.
	e.ok(sb, `egressprobe get -insecure -H "X-Api-Key: $XMODE_TEST_EGRESS_SECRET" https://other.test/echo`)
	others := e.up.Requests(t, "other.test")
	if len(others) == 0 || others[len(others)-1].Headers["X-Api-Key"] != placeholder {
		t.Errorf("another host got %+v, want the placeholder", others)
	}
	// Nowhere in the sandbox: environments, files (the worktree, /etc,
	// /tmp, the root), nor its mounts.
	// Each search finds the placeholder (so it would find the secret).
	environ := "cat /proc/*/environ | tr '\\0' '\\n' | grep -F "
	files := func(s string) string {
		return "grep -rlF " + s + " $(ls -d /* | grep -v -e '^/proc$' -e '^/sys$' -e '^/dev$') 2>/dev/null | grep ."
	}
	e.ok(sb, environ+placeholder)
	e.ok(sb, "echo "+placeholder+" > /tmp/placeholder; "+files(placeholder))
	e.fails(sb, "the secret in a process's environment", environ+secret)
	e.fails(sb, "the secret in a file", files(secret))
	e.fails(sb, "the CA's key", "grep -rl 'PRIVATE KEY' /etc /tmp /workspace 2>/dev/null | grep .")
	r := e.logged(sb, func(r egress.Record) bool { return r.Kind == "https" && r.Host == "allowed.test" })
	if !strings.Contains(r.Credential, "X-Api-Key from") || r.Verdict != egress.Allowed {
		t.Errorf("the log's record of the credential request: %+v", r)
	}
	logPath, _ := e.p.EgressLog(context.Background(), sb)
	if b, _ := os.ReadFile(logPath); strings.Contains(string(b), secret) {
		t.Error("the secret is in the network log")
	}
	// Teardown: the secret's file goes with the sandbox; the log stays.
	if err := e.p.Destroy(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	if found := grepTree(t, e.root, secret); len(found) > 0 {
		t.Errorf("the secret is left in the storage root after teardown: %v", found)
	}
}

// grepTree lists the files under dir that contain s.
func grepTree(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s) {
				found = append(found, p)
			}
		}
		return nil
	})
	return found
}

// A policy changed on a live sandbox holds for the connections that start
// after SetEgress returns; the old rules no longer do.
func TestEgressPolicyChangesOnALiveSandbox(t *testing.T) {
	t.Parallel()
	e := newEgressEnv(t, MountBind, nil)
	spec := e.policy(e.allowOnly())
	sb := e.provisionSpec(spec)
	e.ok(sb, "egressprobe get http://allowed.test/")
	e.fails(sb, "other.test before it is allowed", "egressprobe get http://other.test/")

	pol := *spec.Egress
	more, err := egress.Merge(sb.SessionID, egress.ModeAllow,
		egress.Source{Name: "sandbox network --allow", Allow: []string{"other.test:80", e.other.String()}},
		egress.Source{Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{e.resolve}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.SetEgress(context.Background(), sb, more, nil); err != nil {
		t.Fatalf("SetEgress: %v", err)
	}
	if out := e.ok(sb, "egressprobe get http://other.test/"); !strings.Contains(out, "hello from other.test") {
		t.Errorf("other.test once allowed: %s", out)
	}
	e.fails(sb, "allowed.test once its rule is gone", "egressprobe get http://allowed.test/")
	r := e.logged(sb, func(r egress.Record) bool { return r.Host == "other.test" && r.Verdict == egress.Allowed })
	if r.Source != "sandbox network --allow" {
		t.Errorf("the decision names the new rule's source: %+v", r)
	}
	if err := e.p.SetEgress(context.Background(), sb, pol, nil); err != nil {
		t.Fatalf("SetEgress back: %v", err)
	}
	e.ok(sb, "egressprobe get http://allowed.test/")
	e.fails(sb, "other.test once refused again", "egressprobe get http://other.test/")

	// A sandbox without a proxied network has no policy to change.
	plain := newEnv(t, MountBind, nil)
	psb := plain.provision()
	more.Sandbox = psb.SessionID
	if err := plain.p.SetEgress(context.Background(), psb, more, nil); err == nil || !strings.Contains(err.Error(), "has no egress policy") {
		t.Errorf("SetEgress on a sandbox without one: %v", err)
	}
}

// Teardown keeps the network log in the run's evidence and removes the
// network, the policy, the CA and the secrets; the log says what happened.
func TestEgressTeardownKeepsTheLog(t *testing.T) {
	t.Parallel()
	e := newEgressEnv(t, MountBind, nil)
	sb := e.provisionSpec(e.policy(e.allowOnly()))
	e.ok(sb, "egressprobe get http://allowed.test/")
	e.fails(sb, "denied.test", "egressprobe get http://denied.test/")
	live, _ := e.p.EgressLog(context.Background(), sb)
	if err := e.p.Destroy(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	kept, err := e.p.guard.NetworkLog(sb.RunID, sb.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.p.EgressLog(context.Background(), sb); got != kept {
		t.Errorf("EgressLog after teardown: %q, want the run's copy %q", got, kept)
	}
	s, err := egress.SummarizeFile(kept, time.Time{}, time.Time{})
	if err != nil || s.Connections < 2 || s.Denied < 1 || len(s.DeniedHosts) == 0 || s.DeniedHosts[0].Host != "denied.test" {
		t.Errorf("the kept log's summary: %+v %v", s, err)
	}
	if st, err := os.Stat(kept); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the kept log: %v %v", st, err)
	}
	for _, gone := range []string{live, filepath.Join(e.root, "egress", "policies", sb.SessionID+".json"),
		filepath.Join(e.root, "egress", "ca", sb.SessionID), filepath.Join(e.root, "egress", "state", sb.SessionID+".json")} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s is left after teardown: %v", gone, err)
		}
	}
	if _, err := e.cli.NetworkInspect(context.Background(), EgressNetworkName(sb.SessionID), network.InspectOptions{}); err == nil {
		t.Error("the sandbox's network is left after teardown")
	}
	// Teardown again: nothing left to do is success.
	if err := e.p.Destroy(context.Background(), sb); err != nil {
		t.Errorf("a second Destroy: %v", err)
	}
}

// The proxy fails closed: while it is stopped its sandboxes reach nothing,
// allowed hosts included; killed, the daemon starts it again on the same
// addresses and it serves every policy again; removed by hand, the next
// policy change (or create) makes it again, joined to every sandbox's
// network.
func TestEgressProxyFailsClosed(t *testing.T) {
	t.Parallel()
	e := newEgressEnv(t, MountBind, nil)
	sb := e.provisionSpec(e.policy(e.allowOnly()))
	pol := e.currentPolicy(sb)
	ctx := context.Background()
	e.ok(sb, "egressprobe get http://allowed.test/")
	name := EgressProxyName(e.instance)

	timeout := 2
	if err := e.cli.ContainerStop(ctx, name, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	before := len(e.up.Requests(t, "allowed.test"))
	e.fails(sb, "allowed.test while the proxy is stopped", "egressprobe get -timeout 3s http://allowed.test/")
	e.fails(sb, "allowed.test's address while the proxy is stopped", "egressprobe get -noproxy -timeout 3s http://"+e.allowed.String()+"/")
	e.quiet("allowed.test", before)
	if err := e.cli.ContainerStart(ctx, name, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitAllowed(sb)

	// Killed (its process, from this host): the restart policy brings it
	// back with its addresses, and it serves the policies it finds.
	ci, err := e.cli.ContainerInspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if ci.State.Pid > 0 && dockertest.Host() == client.DefaultDockerHost {
		ip := ci.NetworkSettings.Networks[EgressNetworkName(sb.SessionID)].IPAddress
		if err := syscall.Kill(ci.State.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		e.waitAllowed(sb)
		after, err := e.cli.ContainerInspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if after.RestartCount < 1 || after.NetworkSettings.Networks[EgressNetworkName(sb.SessionID)].IPAddress != ip {
			t.Errorf("after a kill: restarts %d, address %s (was %s)", after.RestartCount, after.NetworkSettings.Networks[EgressNetworkName(sb.SessionID)].IPAddress, ip)
		}
		e.fails(sb, "denied.test after the restart", "egressprobe get http://denied.test/")
	}

	// Removed: nothing gets out until a change makes it again.
	if err := e.cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	e.fails(sb, "allowed.test without a proxy", "egressprobe get -timeout 3s http://allowed.test/")
	if err := e.p.SetEgress(ctx, sb, pol, nil); err != nil {
		t.Fatalf("SetEgress with the proxy gone: %v", err)
	}
	e.ok(sb, "egressprobe get http://allowed.test/")
}

// currentPolicy is the policy a sandbox was provisioned with, as the proxy
// reads it (listen addresses filled in).
func (e *egressEnv) currentPolicy(sb engine.Sandbox) egress.Policy {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, "egress", "policies", sb.SessionID+".json"))
	if err != nil {
		e.t.Fatal(err)
	}
	var p egress.Policy
	if err := json.Unmarshal(b, &p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// waitAllowed waits until allowed.test answers through the proxy again.
func (e *egressEnv) waitAllowed(sb engine.Sandbox) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.run(sb, "egressprobe get -timeout 2s http://allowed.test/")
		if r.err == nil && r.st.ExitCode == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("allowed.test does not answer through the proxy again: %s %s", r.stdout, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The reaper's orphan sweep: the network of a session whose container went
// (a crashed xmode) is an orphan, removed with its log kept; the proxy is
// one only once it serves no sandbox, and goes then.
func TestEgressOrphans(t *testing.T) {
	t.Parallel()
	e := newEgressEnv(t, MountBind, nil)
	sb := e.provisionSpec(e.policy(e.allowOnly()))
	e.ok(sb, "egressprobe get http://allowed.test/")
	ctx := context.Background()
	list := func() map[string]engine.Object {
		objs, err := e.p.ListObjects(ctx, e.instance)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]engine.Object{}
		for _, o := range objs {
			m[o.Kind+" "+o.Name] = o
		}
		return m
	}
	objs := list()
	net, ok := objs["network "+EgressNetworkName(sb.SessionID)]
	if !ok || net.SessionID != sb.SessionID || net.Instance != e.instance {
		t.Fatalf("the sandbox's network among the objects: %+v", objs)
	}
	if _, ok := objs["container "+EgressProxyName(e.instance)]; ok {
		t.Fatal("the proxy of a live sandbox is listed as an orphan candidate")
	}
	// xmode died: the container is gone, its network, policy and log stay.
	if err := e.cli.ContainerRemove(ctx, sb.ContainerID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.p.RemoveObject(ctx, net); err != nil {
		t.Fatalf("remove the orphan network: %v", err)
	}
	kept, _ := e.p.guard.NetworkLog(sb.RunID, sb.SessionID)
	if s, err := egress.SummarizeFile(kept, time.Time{}, time.Time{}); err != nil || s.Connections == 0 {
		t.Errorf("the orphan's log was not kept: %+v %v", s, err)
	}
	proxy, ok := list()["container "+EgressProxyName(e.instance)]
	if !ok || proxy.SessionID != "" {
		t.Fatalf("the idle proxy is not listed: %+v", list())
	}
	if err := e.p.RemoveObject(ctx, proxy); err != nil {
		t.Fatalf("remove the idle proxy: %v", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, proxy.ID); err == nil {
		t.Error("the idle proxy is still there")
	}
	if len(list()) != 0 {
		t.Errorf("objects left: %+v", list())
	}
}

// Volume mode (xmode in a job container, the storage root a volume): the
// proxy's directory is the storage volume's egress/, mounted as the
// sandboxes' worktrees are; the sandbox runs hardened, as always there.
func TestEgressVolumeMode(t *testing.T) {
	t.Parallel()
	e := newEgressEnv(t, MountVolume, nil)
	sb := e.provisionSpec(e.policy(e.allowOnly()))
	if out := e.ok(sb, "egressprobe get http://allowed.test/"); !strings.Contains(out, "hello from allowed.test") {
		t.Fatalf("allowed.test from a volume-mode sandbox: %s", out)
	}
	e.fails(sb, "denied.test", "egressprobe get http://denied.test/")
	e.fails(sb, "denied.test's address", "egressprobe get -noproxy http://"+e.denied.String()+"/")
	ci, err := e.cli.ContainerInspect(context.Background(), EgressProxyName(e.instance))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ci.Mounts {
		if m.Destination != egressDirIn {
			t.Errorf("the proxy mounts %s at %s: only its own directory belongs there", m.Source, m.Destination)
		}
	}
	if err := e.p.Destroy(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	kept, _ := e.p.guard.NetworkLog(sb.RunID, sb.SessionID)
	if s, err := egress.SummarizeFile(kept, time.Time{}, time.Time{}); err != nil || s.Connections < 2 || s.Denied < 1 {
		t.Errorf("the kept log: %+v %v", s, err)
	}
}

// A proxied network needs its policy in the spec, and a daemon on another
// machine cannot have one yet: both are refused before anything exists.
func TestEgressSpecRefusals(t *testing.T) {
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"HOME": t.TempDir(), "XMODE_STORAGE_ROOT": t.TempDir(), "XMODE_SANDBOX_NETWORK": "allow"}[k]
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	spec := engine.Spec{SessionID: "sbx_aaaaaaaa"}
	if err := p.checkEgressSpec(spec, MountBind); err == nil || !strings.Contains(err.Error(), "needs the sandbox's egress policy") {
		t.Errorf("network allow without a policy: %v", err)
	}
	pol, _ := egress.Merge("sbx_aaaaaaaa", egress.ModeAllow)
	spec.Egress = &pol
	if err := p.checkEgressSpec(spec, MountBind); err != nil {
		t.Errorf("a policy in bind mode: %v", err)
	}
	if err := p.checkEgressSpec(spec, MountSync); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "another machine") {
		t.Errorf("a policy in sync mode: %v", err)
	}
	other, _ := egress.Merge("sbx_bbbbbbbb", egress.ModeAllow)
	spec.Egress = &other
	if err := p.checkEgressSpec(spec, MountBind); err == nil {
		t.Error("another sandbox's policy was taken")
	}
}

// doctor's "egress proxy" line: what a create needs to make the proxy,
// checked before any create fails on it.
func TestEgressHealth(t *testing.T) {
	t.Parallel()
	find := func(e *tenv) engine.Check {
		for _, c := range e.p.Health(context.Background()) {
			if c.Name == "egress proxy" {
				return c
			}
		}
		return engine.Check{}
	}
	static := newEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_NETWORK": "allow", "XMODE_SANDBOX_EGRESS_BINARY": dockertest.XmodeBinary(t)})
	if c := find(static); c.Status != engine.CheckOK || !strings.Contains(c.Detail, "out through bridge") {
		t.Errorf("a static binary and docker's bridge: %+v", c)
	}
	git, err := exec.LookPath("git") // dynamically linked: the test image carries its libraries
	if err != nil {
		t.Fatal(err)
	}
	dynamic := newEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_NETWORK": "allow", "XMODE_SANDBOX_EGRESS_BINARY": git})
	if c := find(dynamic); c.Status != engine.CheckFail || !strings.Contains(c.Detail, "dynamically linked") {
		t.Errorf("a dynamically linked binary: %+v", c)
	}
	script := filepath.Join(t.TempDir(), "xmode")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	notELF := newEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_NETWORK": "allow", "XMODE_SANDBOX_EGRESS_BINARY": script})
	if c := find(notELF); c.Status != engine.CheckFail || !strings.Contains(c.Detail, "not an ELF binary") {
		t.Errorf("a script: %+v", c)
	}
	nonet := newEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_NETWORK": "allow", "XMODE_SANDBOX_EGRESS_BINARY": dockertest.XmodeBinary(t),
		"XMODE_SANDBOX_EGRESS_NETWORK": "xmode-test-no-such-network"})
	if c := find(nonet); c.Status != engine.CheckFail || !strings.Contains(c.Detail, "does not exist") {
		t.Errorf("a missing egress network: %+v", c)
	}
	if c := find(newEnv(t, MountBind, nil)); c.Name != "" {
		t.Errorf("a line without a policy asked for: %+v", c)
	}
}

// Mode open: every host but deny rules and the block list — the docker
// host and the sandboxes' networks stay refused.
func TestEgressOpenMode(t *testing.T) {
	t.Parallel()
	e := newEgressEnv(t, MountBind, nil)
	spec := e.spec(newRun())
	pol, err := egress.Merge(spec.SessionID, egress.ModeOpen,
		egress.Source{Name: "--deny", Deny: []string{"denied.test"}},
		// The test hosts' addresses are on the proxy's own network, which
		// is blocked unless a rule names them by address.
		egress.Source{Name: "--allow", Allow: []string{e.allowed.String(), e.other.String(), e.denied.String()}},
		egress.Source{Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{e.resolve}})
	if err != nil {
		t.Fatal(err)
	}
	spec.Egress = &pol
	sb := e.provisionSpec(spec)
	e.ok(sb, "egressprobe get http://allowed.test/")
	e.ok(sb, "egressprobe get http://other.test/")
	e.fails(sb, "a host a deny rule names", "egressprobe get http://denied.test/")
	e.fails(sb, "the docker host through the proxy", "egressprobe get http://"+e.up.Gateway().String()+":2375/")
	r := e.logged(sb, func(r egress.Record) bool { return r.Host == "other.test" })
	if r.Verdict != egress.Allowed || r.Rule != "mode open" {
		t.Errorf("the log's record in mode open: %+v", r)
	}
}

// The proxy images of other binaries go when a new one is made, unless a
// container still runs them.
func TestEgressOldImagesPruned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	ctx := context.Background()
	tag := func(v string) string { return EgressImageRepo + ":test-" + v }
	unused, used := tag(strings.TrimPrefix(dockertest.NewID("u_"), "u_")), tag(strings.TrimPrefix(dockertest.NewID("k_"), "k_"))
	for _, ref := range []string{unused, used} {
		// An image labelled as the proxy's, made of the test image.
		c, err := e.cli.ContainerCreate(ctx, &container.Config{Image: dockertest.Image(t), Labels: map[string]string{dockertest.LabelTest: "true", LabelInstance: e.instance}}, nil, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.cli.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: ref,
			Changes: []string{"LABEL " + LabelManaged + "=true " + LabelRole + "=" + RoleEgressProxy}}); err != nil {
			t.Fatal(err)
		}
		e.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		t.Cleanup(func() { e.cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true}) })
	}
	keeper, err := e.cli.ContainerCreate(ctx, &container.Config{Image: used, Labels: map[string]string{dockertest.LabelTest: "true", LabelInstance: e.instance}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	e.p.pruneEgressImages(ctx, EgressImageRepo+":current")
	if _, err := e.cli.ImageInspect(ctx, unused); err == nil {
		t.Error("an old proxy image no container runs is left")
	}
	if _, err := e.cli.ImageInspect(ctx, used); err != nil {
		t.Errorf("an old proxy image a container uses was removed: %v", err)
	}
	e.cli.ContainerRemove(ctx, keeper.ID, container.RemoveOptions{Force: true})
}
