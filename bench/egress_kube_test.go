package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/xmode/xmode/internal/kubetest"
	"github.com/xmode/xmode/providers/docker/dockertest"
	kube "github.com/xmode/xmode/providers/kubernetes"
)

// The egress proxy on the kubernetes engine (docs/kubernetes.md, "Egress"),
// side by side in one run: a proxied sandbox pod (network allow, its own
// proxy pod) against a sandbox pod on the pod network that goes straight
// to the test host, a pod the benchmark starts. Both are real xmode
// sessions on the test cluster; the measurements are taken inside the
// sandboxes (egressprobe), so that `sandbox exec` itself is not counted.

type kubeEgressBench struct {
	env, directEnv []string
	bin            string
	proxied, plain string
	allowed        string
	repo, ns       string
	cs             kubernetes.Interface
}

func newKubeEgressBench(b *testing.B) *kubeEgressBench {
	b.Helper()
	dir := b.TempDir()
	env, repo, ns := kubeSession(b, dir, "pods")
	_, cs := kubetest.Require(b)
	egImg, prImg := kubetest.EgressImages(b)
	bin := xmodeBin(b)
	pki := dockertest.TestPKI(b)
	allowed := kubetest.EgressHost(b, cs, ns, "allowed", "allowed.test", prImg, pki.CertPEM, pki.KeyPEM).String()
	base := append(env, "XMODE_SANDBOX_IMAGE="+prImg, "XMODE_KUBE_EGRESS_IMAGE="+egImg,
		"XMODE_SANDBOX_EGRESS_CA="+pki.CAFile, "XMODE_SANDBOX_RESOLVE=allowed.test="+allowed,
		// A quarter of a core each: the test cluster is one 2-core node
		// that other tests share.
		"XMODE_SANDBOX_MEMORY=256m", "XMODE_SANDBOX_CPUS=0.25")
	e := &kubeEgressBench{
		env:       append(base[:len(base):len(base)], "XMODE_SANDBOX_NETWORK=allow", "XMODE_SANDBOX_ALLOW=allowed.test "+allowed),
		directEnv: append(base[:len(base):len(base)], "XMODE_SANDBOX_NETWORK=bridge"),
		bin:       bin, allowed: allowed, repo: repo, ns: ns, cs: cs,
	}
	e.proxied = output(b, e.env, bin, "sandbox", "create", "--repo", repo, "-q")
	e.plain = output(b, e.directEnv, bin, "sandbox", "create", "--repo", repo, "-q")
	b.Cleanup(func() { stopSessions(b, e.env, bin, e.proxied, e.plain) })
	return e
}

func (e *kubeEgressBench) probe(b *testing.B, env []string, id, key string, args ...string) float64 {
	b.Helper()
	c := exec.Command(e.bin, append([]string{"sandbox", "exec", id, "--", "egressprobe"}, args...)...)
	c.Env = append(os.Environ(), env...)
	raw, err := c.CombinedOutput()
	out := string(raw)
	if err != nil {
		b.Fatalf("egressprobe %s: %v: %s", strings.Join(args, " "), err, out)
	}
	f := strings.Fields(out)
	for i := range f {
		if f[i] == key && i+1 < len(f) {
			if v, err := strconv.ParseFloat(f[i+1], 64); err == nil {
				return v
			}
		}
	}
	b.Fatalf("egressprobe %s: no %s in %q", strings.Join(args, " "), key, out)
	return 0
}

// BenchmarkKubeEgressFirstByte: a fresh HTTPS request's time to first byte
// from a sandbox pod, through its proxy pod and straight, 10 requests a
// round. Target: ≤ 1.5× direct.
func BenchmarkKubeEgressFirstByte(b *testing.B) {
	e := newKubeEgressBench(b)
	u := "https://allowed.test/"
	via := func() float64 { return e.probe(b, e.env, e.proxied, "TTFB_US", "ttfb", "-n", "10", "-insecure", u) }
	direct := func() float64 {
		return e.probe(b, e.directEnv, e.plain, "TTFB_US", "ttfb", "-n", "10", "-insecure", "-noproxy", "-resolve", "allowed.test="+e.allowed, u)
	}
	via()
	direct()
	b.ResetTimer()
	d, v := alternate(rounds(b), direct, via)
	b.StopTimer()
	md, mv := medianF(d), medianF(v)
	b.ReportMetric(md/1000, "direct-ms")
	b.ReportMetric(mv/1000, "proxy-ms")
	b.ReportMetric(mv/md, "proxy/direct")
}

// BenchmarkKubeEgressThroughput: a 100 MB HTTPS download from the test host
// pod, through the proxy pod and straight. Target: ≥ 0.8× direct.
func BenchmarkKubeEgressThroughput(b *testing.B) {
	const size = 100 << 20
	e := newKubeEgressBench(b)
	u := "https://allowed.test/big?bytes=" + strconv.Itoa(size)
	via := func() float64 { return e.probe(b, e.env, e.proxied, "SECONDS", "download", "-insecure", u) }
	direct := func() float64 {
		return e.probe(b, e.directEnv, e.plain, "SECONDS", "download", "-insecure", "-noproxy", "-resolve", "allowed.test="+e.allowed, u)
	}
	via()
	b.ResetTimer()
	d, v := alternate(rounds(b), direct, via)
	b.StopTimer()
	mbps := func(s float64) float64 { return float64(size) / (1 << 20) / s }
	b.ReportMetric(mbps(medianF(d)), "direct-MB/s")
	b.ReportMetric(mbps(medianF(v)), "proxy-MB/s")
	b.ReportMetric(medianF(d)/medianF(v), "proxy/direct-throughput")
}

// BenchmarkKubeEgressCreate: `xmode sandbox create` with network allow (a
// proxy pod of its own, both NetworkPolicies, the start-up check) against
// none, side by side, wall and the CLI's CPU, each stopped after its round
// (not timed). Target: allow ≤ 1.2× none.
func BenchmarkKubeEgressCreate(b *testing.B) {
	e := newKubeEgressBench(b)
	walls := createModes(b, e.bin, e.repo, false, []netMode{
		{"none", append(append([]string(nil), e.env...), "XMODE_SANDBOX_NETWORK=none")},
		{"allow", e.env},
	})
	b.ReportMetric(float64(walls[1])/float64(walls[0]), "allow/none")
}

// BenchmarkKubeEgressRSS: a proxy pod's resident memory (one per sandbox
// on kubernetes), idle, then with 50 TLS tunnels held open through it, and
// its peak. The node is this machine: the proxy's process is found by its
// pod's UID in its cgroup.
func BenchmarkKubeEgressRSS(b *testing.B) {
	const conns = 50
	e := newKubeEgressBench(b)
	pod, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), kube.EgressPodName(e.proxied), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pid := proxyPID(b, string(pod.UID))
	b.ResetTimer()
	idle := procStatusMB(b, pid, "VmRSS:")
	proxy := strings.TrimSpace(output(b, e.env, e.bin, "sandbox", "exec", e.proxied, "--", "sh", "-c", `echo "${HTTP_PROXY#http://}"`))
	output(b, e.env, e.bin, "sandbox", "exec", e.proxied, "--detach", "--", "egressprobe", "hold", proxy, "allowed.test:443", strconv.Itoa(conns))
	// Each tunnel is two established connections in the proxy pod's
	// network namespace: the sandbox's and the upstream's.
	deadline := time.Now().Add(2 * time.Minute)
	for established(b, pid) < 2*conns {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d tunnels' connections open", established(b, pid), 2*conns)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(idle, "idle-rss-MB")
	b.ReportMetric(procStatusMB(b, pid, "VmRSS:"), "busy-rss-MB")
	b.ReportMetric(procStatusMB(b, pid, "VmHWM:"), "peak-rss-MB")
}

// proxyPID is the pid of the egress proxy in the pod of that UID.
func proxyPID(b *testing.B, uid string) int {
	b.Helper()
	cg := "pod" + uid
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		cmd, err := os.ReadFile(c)
		if err != nil || !strings.HasPrefix(string(cmd), "/xmode\x00__egress\x00") {
			continue
		}
		dir := filepath.Dir(c)
		if g, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil && strings.Contains(string(g), cg) {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			return pid
		}
	}
	b.Fatalf("no egress proxy process in pod %s on this machine (the node must be this machine)", uid)
	return 0
}

// established counts the established TCP connections (IPv4 and IPv6
// sockets) in pid's network namespace.
func established(b *testing.B, pid int) int {
	b.Helper()
	n := 0
	for _, f := range []string{"tcp", "tcp6"} {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + f)
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[3] == "01" {
				n++
			}
		}
	}
	return n
}
