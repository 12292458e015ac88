package bench

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/internal/kubetest"
	"github.com/xmode/xmode/providers/docker/dockertest"
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
	repo           string
}

func newKubeEgressBench(b *testing.B) *kubeEgressBench {
	b.Helper()
	dir := b.TempDir()
	env, repo, ns := kubeSession(b, dir)
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
		bin:       bin, allowed: allowed, repo: repo,
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
	modes := []struct {
		name string
		env  []string
	}{
		{"none", append(append([]string(nil), e.env...), "XMODE_SANDBOX_NETWORK=none")},
		{"allow", e.env},
	}
	create := func(env []string) (time.Duration, time.Duration) {
		c := exec.Command(e.bin, "sandbox", "create", "--repo", e.repo, "-q")
		c.Env = append(os.Environ(), env...)
		start := time.Now()
		out, err := c.Output()
		wall := time.Since(start)
		if err != nil {
			b.Fatalf("sandbox create: %v", err)
		}
		stopSessions(b, env, e.bin, strings.TrimSpace(string(out)))
		return wall, c.ProcessState.UserTime() + c.ProcessState.SystemTime()
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
	for i, m := range modes {
		b.ReportMetric(ms(median(walls[i])), m.name+"-ms")
		b.ReportMetric(ms(median(cpus[i])), m.name+"-cpu-ms")
	}
	b.ReportMetric(float64(median(walls[1]))/float64(median(walls[0])), "allow/none")
}
