package kubernetes

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/internal/kubetest"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// What the kubernetes egress tests need (docs/network.md, "The bypasses
// tested"): the proxy's image (FROM scratch with a static xmode built from
// this tree) and the probe's (busybox and egressprobe), imported into the
// test cluster's containerd by hack/kube/image.sh; test hosts that are pods
// the test makes in its own namespace; a control pod beside them with no
// policy, which shows each refused probe can get through elsewhere. No
// test names a real host or sends anything to an address it did not create
// but the cluster's own (the apiserver, the node), which only the control
// pod reaches.

// egressEnv is a test namespace with proxied sandboxes (network allow), the
// test hosts allowed.test, denied.test and other.test (pods running
// egressprobe serve, with a certificate of the tests' CA), and a control
// pod beside them.
type egressEnv struct {
	*env
	t                      *testing.T
	probe                  string
	allowed, denied, other netip.Addr
	controlIP              netip.Addr // the control pod's address
	resolve                string
}

// controlPod is the plain pod the controls run in: no policy selects it.
const controlPod = "control"

func newEgressEnv(t *testing.T, vars map[string]string) *egressEnv {
	t.Helper()
	// klog quiet before the control pod's execs: their goroutines log, and
	// the provider's first client would set klog's logger under them.
	quietKlog()
	egImg, prImg := kubetest.EgressImages(t)
	pki := dockertest.TestPKI(t)
	base := map[string]string{
		"XMODE_SANDBOX_NETWORK":   "allow",
		"XMODE_SANDBOX_IMAGE":     prImg,
		"XMODE_KUBE_EGRESS_IMAGE": egImg,
		"XMODE_SANDBOX_EGRESS_CA": pki.CAFile,
	}
	for k, v := range vars {
		base[k] = v
	}
	e := &egressEnv{env: newEnv(t, base), t: t, probe: prImg}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, h := range []struct {
		addr *netip.Addr
		name string
	}{{&e.allowed, "allowed"}, {&e.denied, "denied"}, {&e.other, "other"}} {
		*h.addr = kubetest.EgressHost(t, e.cs, e.ns, h.name, h.name+".test", prImg, pki.CertPEM, pki.KeyPEM)
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, kubetest.RestrictedPod(controlPod, prImg, "sleep", "3600"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.controlIP = netip.MustParseAddr(kubetest.WaitRunning(t, e.cs, e.ns, controlPod, time.Minute).Status.PodIP)
	e.resolve = fmt.Sprintf("allowed.test=%s,denied.test=%s,other.test=%s", e.allowed, e.denied, e.other)
	// The test hosts answer (the control reaches each).
	for _, a := range []netip.Addr{e.allowed, e.denied, e.other} {
		e.eventually(func() bool { return e.controlRun("egressprobe", "tcp", a.String()+":7000") == nil }, "test host "+a.String()+" answers")
	}
	return e
}

// eventually waits for cond, at most 30 s.
func (e *egressEnv) eventually(cond func() bool, what string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("not within 30 s: %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// controlRun runs argv in the control pod; nil when it exited 0.
func (e *egressEnv) controlRun(argv ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := kubetest.Exec(ctx, e.rest, e.cs, e.ns, controlPod, "main", kubetest.Fallback, nil, argv...)
	if err != nil {
		return err
	}
	if r.ExitCode != 0 {
		return fmt.Errorf("exit %d: %s%s", r.ExitCode, r.Stdout, r.Stderr)
	}
	return nil
}

// control requires that argv gets through from the control pod: the
// attempt a sandbox fails can succeed at all.
func (e *egressEnv) control(t *testing.T, what string, argv ...string) {
	t.Helper()
	if err := e.controlRun(argv...); err != nil {
		t.Fatalf("control %s: the plain pod beside the test hosts did not get through either: %v", what, err)
	}
}

// policy is a new session's spec with an egress policy in mode allow: the
// sources given, then the test hosts' names.
func (e *egressEnv) policy(t *testing.T, sources ...egress.Source) engine.Spec {
	t.Helper()
	spec := e.spec(t)
	sources = append(sources, egress.Source{Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{e.resolve}})
	pol, err := egress.Merge(spec.SessionID, egress.ModeAllow, sources...)
	if err != nil {
		t.Fatal(err)
	}
	spec.Egress = &pol
	return spec
}

// allowOnly lets a sandbox reach allowed.test on 80 and 443: its name, and
// its address (the pods' range is blocked unless a CIDR rule names it).
func (e *egressEnv) allowOnly() egress.Source {
	return egress.Source{Name: "--allow", Allow: []string{"allowed.test:80", "allowed.test:443", e.allowed.String()}}
}

// ok runs script in the sandbox and requires exit 0; its stdout.
func (e *egressEnv) ok(t *testing.T, sb engine.Sandbox, script string) string {
	t.Helper()
	st, out, errs := e.sh(t, sb, script)
	if st.ExitCode != 0 {
		t.Fatalf("sh -c %q: exit %d\nstdout: %s\nstderr: %s", script, st.ExitCode, out, errs)
	}
	return out
}

// fails runs script and requires a non-zero exit: the attempt did not get
// through.
func (e *egressEnv) fails(t *testing.T, sb engine.Sandbox, what, script string) string {
	t.Helper()
	st, out, errs := e.sh(t, sb, script)
	if st.ExitCode == 0 {
		t.Errorf("%s GOT THROUGH: sh -c %q\nstdout: %s\nstderr: %s", what, script, out, errs)
	}
	return out + errs
}

// sandboxHits are the hits of a test host from anything but the control
// pod.
func (e *egressEnv) sandboxHits(t *testing.T, host string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, h := range e.hits(t, host) {
		if from, _ := h["from"].(string); from != "" && !strings.HasPrefix(from, e.controlIP.String()+":") {
			out = append(out, h)
		}
	}
	return out
}

// hits are the requests a test host saw (its log's JSON lines).
func (e *egressEnv) hits(t *testing.T, host string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := e.cs.CoreV1().Pods(e.ns).GetLogs(host, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(string(b), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// records reads a sandbox's network log through EgressLog.
func (e *egressEnv) records(t *testing.T, sb engine.Sandbox) []egress.Record {
	t.Helper()
	p, err := e.p.EgressLog(context.Background(), sb)
	if err != nil || p == "" {
		t.Fatalf("EgressLog: %q %v", p, err)
	}
	return readRecords(t, p)
}

func readRecords(t *testing.T, p string) []egress.Record {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []egress.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r egress.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a log line that is not a record: %q", sc.Text())
		}
		out = append(out, r)
	}
	return out
}

// logged finds a record a connection left (the proxy writes a
// connection's line when it ends: it waits for it a little).
func (e *egressEnv) logged(t *testing.T, sb engine.Sandbox, match func(egress.Record) bool) egress.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs := e.records(t, sb)
		for _, r := range rs {
			if match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such record in the network log: %+v", rs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// proxyOf is the proxy's address as the sandbox's environment has it.
func (e *egressEnv) proxyOf(t *testing.T, sb engine.Sandbox) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(strings.TrimSpace(strings.TrimPrefix(e.ok(t, sb, `echo "$HTTP_PROXY"`), "http://")))
	if err != nil {
		t.Fatalf("HTTP_PROXY: %v", err)
	}
	return ap
}
