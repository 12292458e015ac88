package bench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// The egress proxy on the docker engine (docs/network.md, docs/docker.md
// "Egress"), side by side in one run: a proxied sandbox (network allow)
// against a sandbox on the test hosts' own network that goes direct. Both
// are real xmode sessions on the local daemon; the test hosts are
// containers the benchmark starts; the measurements are taken inside the
// sandboxes (egressprobe) so that `sandbox exec` itself is not counted.

// egressBench is a proxied sandbox and a direct one, and the test host.
type egressBench struct {
	env, directEnv []string
	bin            string
	proxied, plain string // session IDs
	allowed        string // the test host's address
	cli            *client.Client
	instance       string
}

func newEgressBench(b *testing.B, sandboxes int) *egressBench {
	b.Helper()
	dir := b.TempDir()
	env, repo, _ := dockerSession(b, dir)
	cli := dockertest.Require(b)
	bin := xmodeBin(b)
	img := dockertest.ProbeImage(b)
	root := filepath.Join(dir, "root")
	// The storage root's instance labels the test hosts' network, so that
	// its cleanup finds it: the store is made by a first command.
	run(b, env, bin, "sandbox", "list")
	raw, err := os.ReadFile(filepath.Join(root, "xmode.instance"))
	if err != nil {
		b.Fatal(err)
	}
	instance := strings.TrimSpace(string(raw))
	b.Cleanup(func() { dockertest.CleanupInstance(b, cli, instance) })
	up := dockertest.NewUpstream(b, cli, instance)
	allowed := up.Host(b, "allowed.test").String()
	base := append(env, "XMODE_SANDBOX_IMAGE="+img, "XMODE_SANDBOX_EGRESS_BINARY="+bin, "XMODE_SANDBOX_EGRESS_NETWORK="+up.Name,
		"XMODE_SANDBOX_RESOLVE=allowed.test="+allowed)
	e := &egressBench{
		env:       append(base, "XMODE_SANDBOX_NETWORK=allow", "XMODE_SANDBOX_ALLOW=allowed.test "+allowed),
		directEnv: append(base, "XMODE_SANDBOX_NETWORK="+up.Name),
		bin:       bin, allowed: allowed, cli: cli, instance: instance,
	}
	var ids []string
	for range sandboxes {
		ids = append(ids, output(b, e.env, bin, "sandbox", "create", "--repo", repo, "-q"))
	}
	e.proxied = ids[0]
	e.plain = output(b, e.directEnv, bin, "sandbox", "create", "--repo", repo, "-q")
	b.Cleanup(func() { stopSessions(b, e.env, bin, append(ids, e.plain)...) })
	return e
}

// probe runs egressprobe in a session and returns the value after key in
// its output.
func (e *egressBench) probe(b *testing.B, env []string, id, key string, args ...string) float64 {
	b.Helper()
	argv := append([]string{"sandbox", "exec", id, "--", "egressprobe"}, args...)
	c := exec.Command(e.bin, argv...)
	c.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	c.Stderr = &stderr
	raw, err := c.Output()
	out := strings.TrimSpace(string(raw))
	if err != nil {
		b.Fatalf("xmode %s: %v: %s %s\nthe proxy: %s", strings.Join(argv, " "), err, out, stderr.String(), e.proxyLogs(env, id))
	}
	f := strings.Fields(out)
	for i := range f {
		if f[i] == key && i+1 < len(f) {
			v, err := strconv.ParseFloat(f[i+1], 64)
			if err == nil {
				return v
			}
		}
	}
	b.Fatalf("egressprobe %s: no %s in %q", strings.Join(args, " "), key, out)
	return 0
}

// proxyLogs says how the install's proxy is, for a probe that failed: its
// restarts, the end of its log, and what it decided for the session.
func (e *egressBench) proxyLogs(env []string, id string) string {
	name := "xmode-egress-" + e.instance
	ci, err := e.cli.ContainerInspect(context.Background(), name)
	if err != nil {
		return err.Error()
	}
	logs, _ := exec.Command("docker", "logs", "--tail", "30", name).CombinedOutput()
	c := exec.Command(e.bin, "sandbox", "network", id)
	c.Env = append(os.Environ(), env...)
	decisions, _ := c.CombinedOutput()
	return fmt.Sprintf("restarts %d, state %s\n%s\nxmode sandbox network %s:\n%s", ci.RestartCount, ci.State.Status, logs, id, decisions)
}

// proxyCPU is the CPU time the install's proxy container has used.
func (e *egressBench) proxyCPU(b *testing.B) time.Duration {
	b.Helper()
	st, err := e.cli.ContainerStatsOneShot(context.Background(), "xmode-egress-"+e.instance)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(st.Body).Decode(&s); err != nil {
		b.Fatal(err)
	}
	return time.Duration(s.CPUStats.CPUUsage.TotalUsage)
}

// proxyRSS is the proxy process's resident memory in MB (the daemon is on
// this machine: its pid is in this PID namespace).
func (e *egressBench) proxyRSS(b *testing.B, field string) float64 {
	b.Helper()
	top, err := e.cli.ContainerTop(context.Background(), "xmode-egress-"+e.instance, []string{"-o", "pid,args"})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range top.Processes {
		if len(p) == 2 && strings.HasPrefix(p[1], "/xmode __egress") {
			pid, _ := strconv.Atoi(strings.TrimSpace(p[0]))
			return procStatusMB(b, pid, field)
		}
	}
	b.Fatalf("no proxy process in %v", top.Processes)
	return 0
}

// alternate takes n measurements of direct and of via, one after the
// other, so that a slow phase of a shared machine lands on both.
func alternate(n int, direct, via func() float64) (d, v []float64) {
	for range n {
		d = append(d, direct())
		v = append(v, via())
	}
	return d, v
}

// BenchmarkDockerEgressFirstByte: a fresh HTTPS request's time to first
// byte from a sandbox, through the proxy (network allow) and direct (a
// sandbox on the test host's network), measured in the sandbox over 10
// requests a round. Target: ≤ 1.5× direct.
func BenchmarkDockerEgressFirstByte(b *testing.B) {
	e := newEgressBench(b, 1)
	u := "https://allowed.test/"
	via := func() float64 { return e.probe(b, e.env, e.proxied, "TTFB_US", "ttfb", "-n", "10", "-insecure", u) }
	direct := func() float64 {
		return e.probe(b, e.directEnv, e.plain, "TTFB_US", "ttfb", "-n", "10", "-insecure", "-noproxy", "-resolve", "allowed.test="+e.allowed, u)
	}
	via()
	direct()
	cpu0 := e.proxyCPU(b)
	b.ResetTimer()
	d, v := alternate(rounds(b), direct, via)
	b.StopTimer()
	b.ReportMetric(ms(e.proxyCPU(b)-cpu0)/float64(10*rounds(b)), "proxy-cpu-ms/req")
	md, mv := medianF(d), medianF(v)
	b.ReportMetric(md/1000, "direct-ms")
	b.ReportMetric(mv/1000, "proxy-ms")
	b.ReportMetric(mv/md, "proxy/direct")
}

// BenchmarkDockerEgressThroughput: a 100 MB HTTPS download from the test
// host in a sandbox, through the proxy and direct. Target: ≥ 0.8× direct.
func BenchmarkDockerEgressThroughput(b *testing.B) {
	const size = 100 << 20
	e := newEgressBench(b, 1)
	u := "https://allowed.test/big?bytes=" + strconv.Itoa(size)
	via := func() float64 { return e.probe(b, e.env, e.proxied, "SECONDS", "download", "-insecure", u) }
	direct := func() float64 {
		return e.probe(b, e.directEnv, e.plain, "SECONDS", "download", "-insecure", "-noproxy", "-resolve", "allowed.test="+e.allowed, u)
	}
	via()
	cpu0 := e.proxyCPU(b)
	b.ResetTimer()
	d, v := alternate(rounds(b), direct, via)
	b.StopTimer()
	mbps := func(s float64) float64 { return float64(size) / (1 << 20) / s }
	b.ReportMetric(ms(e.proxyCPU(b)-cpu0)/float64(rounds(b)), "proxy-cpu-ms/100MB")
	b.ReportMetric(mbps(medianF(d)), "direct-MB/s")
	b.ReportMetric(mbps(medianF(v)), "proxy-MB/s")
	b.ReportMetric(medianF(d)/medianF(v), "proxy/direct-throughput")
}

// BenchmarkDockerEgressCreate: `xmode sandbox create` with network allow
// against none (and docker's bridge, for what a network costs at all),
// side by side, each stopped after its round (not timed). The proxy
// exists before the first timed round (made once per install). Target:
// allow ≤ 1.2× none.
func BenchmarkDockerEgressCreate(b *testing.B) {
	e := newEgressBench(b, 1)
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	makeRepo(b, repo, 20, 2)
	walls := createModes(b, e.bin, repo, true, []netMode{
		{"none", append(append([]string(nil), e.env...), "XMODE_SANDBOX_NETWORK=none")},
		{"allow", e.env},
		{"bridge", append(append([]string(nil), e.env...), "XMODE_SANDBOX_NETWORK=bridge")},
	})
	b.ReportMetric(float64(walls[1])/float64(walls[0]), "allow/none")
	b.ReportMetric(float64(walls[1])/float64(walls[2]), "allow/bridge")
}

// BenchmarkDockerEgressRSS: the proxy's resident memory with 20 proxied
// sandboxes, idle, then with 50 TLS tunnels held open from each (1,000).
// It is measured once (the first of the harness's calls), with its
// sandboxes kept until the benchmark ends, and reported by each call.
func BenchmarkDockerEgressRSS(b *testing.B) {
	if !strings.HasPrefix(dockertest.Host(), "unix://") {
		b.Skip("SKIP: the proxy's memory is read from /proc: the daemon must be on this machine")
	}
	rssOnce.Do(func() { rssMB = measureEgressRSS(b) })
	if rssMB == nil {
		b.Fatal("the first call did not measure")
	}
	b.ReportMetric(rssMB[0], "idle-rss-MB")
	b.ReportMetric(rssMB[1], "busy-rss-MB")
	b.ReportMetric(rssMB[2], "peak-rss-MB")
}

var (
	rssOnce sync.Once
	rssMB   []float64
)

func measureEgressRSS(b *testing.B) []float64 {
	const sandboxes, conns = 20, 50
	e := newEgressBench(b, sandboxes)
	ids := strings.Fields(output(b, e.env, e.bin, "sandbox", "list", "-q"))
	time.Sleep(500 * time.Millisecond)
	b.ResetTimer()
	idle := e.proxyRSS(b, "VmRSS:")
	for _, id := range ids {
		if id == e.plain {
			continue
		}
		proxy := output(b, e.env, e.bin, "sandbox", "exec", id, "--", "sh", "-c", `echo "${HTTP_PROXY#http://}"`)
		output(b, e.env, e.bin, "sandbox", "exec", id, "--detach", "--", "egressprobe", "hold", proxy, "allowed.test:443", strconv.Itoa(conns))
	}
	// Wait until every sandbox holds its tunnels (the proxy logs none
	// until they end): each is two established connections in the
	// proxy's network namespace, the sandbox's and the upstream's.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n := proxyConnections(b, e)
		if n >= 2*sandboxes*conns {
			break
		}
		if time.Now().After(deadline) {
			c := exec.Command(e.bin, "sandbox", "logs", e.proxied, "2", "--stderr")
			c.Env = append(os.Environ(), e.env...)
			out, _ := c.CombinedOutput()
			c = exec.Command(e.bin, "sandbox", "logs", e.proxied)
			c.Env = append(os.Environ(), e.env...)
			steps, _ := c.CombinedOutput()
			out = append(append(out, "\nsteps:\n"...), steps...)
			b.Fatalf("only %d of %d tunnels' connections open; a sandbox's holding step says:\n%s", n, 2*sandboxes*conns, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.StopTimer()
	return []float64{idle, e.proxyRSS(b, "VmRSS:"), e.proxyRSS(b, "VmHWM:")}
}

// proxyConnections counts the established TCP connections in the proxy's
// network namespace (its /proc/PID/fd is not readable without ptrace).
func proxyConnections(b *testing.B, e *egressBench) int {
	b.Helper()
	top, err := e.cli.ContainerTop(context.Background(), "xmode-egress-"+e.instance, []string{"-o", "pid,args"})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range top.Processes {
		if len(p) == 2 && strings.HasPrefix(p[1], "/xmode __egress") {
			raw, err := os.ReadFile("/proc/" + strings.TrimSpace(p[0]) + "/net/tcp")
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, l := range strings.Split(string(raw), "\n") {
				if f := strings.Fields(l); len(f) > 3 && f[3] == "01" {
					n++
				}
			}
			return n
		}
	}
	return 0
}

// BenchmarkDockerEgressCreateFloor: what the daemon alone charges for a
// container's network, side by side, without xmode: create and start a
// probe container with network none; on an internal network made for it
// in the round (a proxied sandbox's create today); on an internal network
// that already exists (a network made ahead of time: the endpoint alone);
// and in the network namespace of a container that already exists
// (container:<holder>, a namespace made ahead of time). Each is removed
// after its round (not timed). The floor of `sandbox create --network
// allow` against none is the ratio of its way here (docs/network.md,
// "Figures").
func BenchmarkDockerEgressCreateFloor(b *testing.B) {
	cli := dockertest.Require(b)
	img := dockertest.ProbeImage(b)
	instance := dockertest.NewInstance(b, cli)
	ctx := context.Background()
	labels := map[string]string{dockertest.LabelTest: "true", "xmode.instance": instance}
	internal := func() (string, netip.Prefix) {
		no := false
		name := "xmode-test-floor-" + strings.TrimPrefix(dockertest.NewID("n_"), "n_")
		for range 64 {
			var r [2]byte
			_, _ = rand.Read(r[:])
			subnet := netip.MustParsePrefix(fmt.Sprintf("10.214.%d.%d/29", r[0], r[1]&^7))
			_, err := cli.NetworkCreate(ctx, name, network.CreateOptions{
				Driver: "bridge", Internal: true, EnableIPv6: &no, Labels: labels,
				IPAM: &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet.String()}}},
				Options: map[string]string{"com.docker.network.bridge.inhibit_ipv4": "true",
					"com.docker.network.bridge.enable_ip_masquerade": "false"},
			})
			if err == nil {
				return name, subnet
			}
			if !strings.Contains(err.Error(), "overlap") {
				b.Fatalf("create network: %v", err)
			}
		}
		b.Fatal("no free /29 in 10.214.0.0/16")
		return "", netip.Prefix{}
	}
	seq := 0
	// run creates and starts a container; addr, if valid, is its address on
	// the network it joins.
	run := func(mode string, addr netip.Addr) string {
		seq++
		yes := true
		cc := &container.Config{Image: img, Cmd: []string{"sleep", "3600"}, Labels: labels}
		hc := &container.HostConfig{NetworkMode: container.NetworkMode(mode), Init: &yes}
		var nc *network.NetworkingConfig
		if addr.IsValid() {
			nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
				mode: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr.String()}}}}
		}
		c, err := cli.ContainerCreate(ctx, cc, hc, nc, nil, fmt.Sprintf("xmode-test-floor-%s-%d", instance, seq))
		if err != nil {
			b.Fatal(err)
		}
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			b.Fatal(err)
		}
		return c.ID
	}
	remove := func(id string) {
		if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
	}
	made, madeSubnet := internal()
	holder := run(made, madeSubnet.Addr().Next().Next())
	ways := []struct {
		name string
		run  func() (string, func())
	}{
		{"none", func() (string, func()) { return run("none", netip.Addr{}), nil }},
		{"fresh", func() (string, func()) {
			name, subnet := internal()
			return run(name, subnet.Addr().Next().Next()), func() { _ = cli.NetworkRemove(ctx, name) }
		}},
		{"made", func() (string, func()) { return run(made, madeSubnet.Addr().Next().Next().Next()), nil }},
		{"holder", func() (string, func()) { return run("container:"+holder, netip.Addr{}), nil }},
	}
	walls := make([][]time.Duration, len(ways))
	b.ResetTimer()
	for range rounds(b) {
		for i, w := range ways {
			start := time.Now()
			id, after := w.run()
			walls[i] = append(walls[i], time.Since(start))
			remove(id)
			if after != nil {
				after()
			}
		}
	}
	b.StopTimer()
	none := median(walls[0])
	for i, w := range ways {
		b.ReportMetric(ms(median(walls[i])), w.name+"-ms")
		if i > 0 {
			b.ReportMetric(float64(median(walls[i]))/float64(none), w.name+"/none")
		}
	}
}

// netMode is an environment `sandbox create` is timed under.
type netMode struct {
	name string
	env  []string
}

// createModes times `sandbox create --repo repo -q` under each mode,
// interleaved round by round (after an untimed create of each when warm:
// the image, the first network of its kind), stopping what each made
// untimed, reports each mode's median wall and CPU (NAME-ms,
// NAME-cpu-ms) and returns the median walls in the modes' order.
func createModes(b *testing.B, bin, repo string, warm bool, modes []netMode) []time.Duration {
	create := func(env []string) (time.Duration, time.Duration) {
		c := exec.Command(bin, "sandbox", "create", "--repo", repo, "-q")
		c.Env = append(os.Environ(), env...)
		start := time.Now()
		out, err := c.Output()
		wall := time.Since(start)
		if err != nil {
			b.Fatalf("sandbox create: %v", err)
		}
		stopSessions(b, env, bin, strings.TrimSpace(string(out)))
		return wall, c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	if warm {
		for _, m := range modes {
			create(m.env)
		}
	}
	b.ResetTimer()
	walls := make([][]time.Duration, len(modes))
	cpus := make([][]time.Duration, len(modes))
	for range rounds(b) {
		for i, m := range modes {
			w, c := create(m.env)
			walls[i] = append(walls[i], w)
			cpus[i] = append(cpus[i], c)
		}
	}
	b.StopTimer()
	medians := make([]time.Duration, len(modes))
	for i, m := range modes {
		medians[i] = median(walls[i])
		b.ReportMetric(ms(medians[i]), m.name+"-ms")
		b.ReportMetric(ms(median(cpus[i])), m.name+"-cpu-ms")
	}
	return medians
}
