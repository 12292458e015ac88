package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/kubetest"
)

// clusterAddrs are the apiserver's Service address and the node's: what a
// sandbox must reach neither directly nor through its proxy.
func clusterAddrs(t *testing.T, e *egressEnv) (api, node string) {
	t.Helper()
	ctx := context.Background()
	svc, err := e.cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v", err)
	}
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			node = a.Address
		}
	}
	return svc.Spec.ClusterIP, node
}

// TestKubeEgressBypassCorpus is docs/network.md's list of ways out that
// apply on kubernetes, each tried from a sandbox pod that may reach
// allowed.test on ports 80 and 443 only (and, by rules the block list must
// overrule, the apiserver's and the node's addresses); each fails when the
// attempt gets through, and each has a control that does get through —
// from the plain pod beside the test hosts, or from the sandbox itself.
func TestKubeEgressBypassCorpus(t *testing.T) {
	e := newEgressEnv(t, nil)
	api, node := clusterAddrs(t, e)
	a := e.provision(t, e.policy(t, e.allowOnly(), egress.Source{Name: "--allow", Allow: []string{api, node}}))
	b := e.provision(t, e.policy(t, e.allowOnly()))
	px, pxB := e.proxyOf(t, a), e.proxyOf(t, b)
	proxy := px.String()
	denied, allowed := e.denied.String(), e.allowed.String()

	t.Run("AllowedHostReached", func(t *testing.T) {
		if out := e.ok(t, a, "egressprobe get http://allowed.test/"); !strings.Contains(out, "hello from allowed.test") {
			t.Fatalf("plain HTTP through the proxy: %s", out)
		}
		if out := e.ok(t, a, "egressprobe get -insecure https://allowed.test/"); !strings.Contains(out, "hello from allowed.test") {
			t.Fatalf("HTTPS through the proxy: %s", out)
		}
		for _, port := range []int{80, 443} {
			r := e.logged(t, a, func(r egress.Record) bool {
				return r.Host == "allowed.test" && r.Port == port && r.Verdict == egress.Allowed
			})
			if r.Rule != fmt.Sprintf("allowed.test:%d", port) || r.Source != "--allow" || r.Sandbox != a.SessionID || r.BytesDown == 0 {
				t.Errorf("the log's record of allowed.test:%d: %+v", port, r)
			}
		}
	})
	t.Run("DirectIPToTheDeniedHost", func(t *testing.T) {
		e.control(t, "HTTP to denied.test's address", "egressprobe", "get", "-noproxy", "http://"+denied+"/")
		e.control(t, "TCP to denied.test's address", "egressprobe", "tcp", denied+":7000")
		e.fails(t, a, "HTTP straight to denied.test's address", "egressprobe get -noproxy -timeout 3s http://"+denied+"/")
		e.fails(t, a, "TCP straight to denied.test's address", "egressprobe tcp "+denied+":7000")
		e.fails(t, a, "TCP straight to allowed.test's address", "egressprobe tcp "+allowed+":7000")
		if out := e.fails(t, a, "denied.test's address through the proxy", "egressprobe get http://"+denied+"/"); !strings.Contains(out, "403") {
			t.Errorf("the proxy's answer: %s", out)
		}
	})
	t.Run("AnotherPort", func(t *testing.T) {
		e.control(t, "allowed.test's raw TCP port", "egressprobe", "tcp", allowed+":7000")
		e.fails(t, a, "a port no rule names, through the proxy", "egressprobe get http://allowed.test:7000/")
		e.fails(t, a, "the proxy's resolver over TCP (its policy allows UDP only)", "egressprobe tcp "+px.Addr().String()+":53")
		e.fails(t, a, "another port of the proxy pod", "egressprobe tcp "+px.Addr().String()+":7000")
	})
	t.Run("UDP", func(t *testing.T) {
		e.control(t, "UDP to denied.test", "egressprobe", "udp", denied+":7001")
		e.fails(t, a, "UDP to denied.test", "egressprobe udp "+denied+":7001")
		e.fails(t, a, "UDP to allowed.test", "egressprobe udp "+allowed+":7001")
	})
	t.Run("DNS", func(t *testing.T) {
		server := px.Addr().String() + ":53"
		if out := e.ok(t, a, "egressprobe dns -server "+server+" allowed.test"); !strings.Contains(out, allowed) {
			t.Fatalf("the resolver's answer for allowed.test: %s", out)
		}
		e.ok(t, a, "grep -qx 'nameserver "+px.Addr().String()+"' /etc/resolv.conf")
		e.fails(t, a, "an A question for denied.test", "egressprobe dns -server "+server+" denied.test")
		e.fails(t, a, "a TXT question (tunnelling)", "egressprobe dns -server "+server+" -type TXT allowed.test")
		e.fails(t, a, "a question over TCP", "egressprobe dns -tcp -server "+server+" allowed.test")
	})
	t.Run("FrontedSNI", func(t *testing.T) {
		e.ok(t, a, "egressprobe front "+proxy+" allowed.test:443 allowed.test")
		e.fails(t, a, "CONNECT allowed.test with denied.test in the SNI", "egressprobe front "+proxy+" allowed.test:443 denied.test")
	})
	t.Run("ForgedHost", func(t *testing.T) {
		e.fails(t, a, "plain HTTP to allowed.test with Host: denied.test", "egressprobe get -host denied.test http://allowed.test/")
	})
	t.Run("UnsetProxyVariables", func(t *testing.T) {
		e.control(t, "allowed.test without a proxy", "egressprobe", "get", "-noproxy", "http://"+allowed+"/")
		e.fails(t, a, "allowed.test without the proxy variables",
			"env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy egressprobe get -timeout 3s http://allowed.test/")
		e.fails(t, a, "allowed.test's address without the proxy", "egressprobe get -noproxy -timeout 3s http://"+allowed+"/")
	})
	t.Run("EditedHostsAndResolvConf", func(t *testing.T) {
		// The root is read-only and the kubelet's files are its mounts; a
		// name mapped by hand (what an edited /etc/hosts gives) changes
		// nothing: the proxy resolves names itself.
		e.fails(t, a, "rewriting resolv.conf", "printf 'nameserver "+denied+"\\n' > /etc/resolv.conf")
		e.fails(t, a, "appending to /etc/hosts", "echo '"+denied+" allowed.test' >> /etc/hosts")
		e.fails(t, a, "denied.test mapped by hand, through the proxy", "egressprobe get -resolve denied.test="+denied+" http://denied.test/")
		e.fails(t, a, "allowed.test mapped to denied.test's address, straight", "egressprobe get -noproxy -timeout 3s -resolve allowed.test="+denied+" http://allowed.test/")
		e.ok(t, b, "egressprobe dns -server "+pxB.Addr().String()+":53 allowed.test")
		e.fails(t, a, "another resolver (another sandbox's proxy)", "egressprobe dns -server "+pxB.Addr().String()+":53 allowed.test")
	})
	t.Run("TheApiserverAndTheNode", func(t *testing.T) {
		e.control(t, "the apiserver's Service address", "egressprobe", "tcp", api+":443")
		e.control(t, "the node's address", "egressprobe", "tcp", node+":6443")
		e.fails(t, a, "the apiserver, straight", "egressprobe tcp "+api+":443")
		e.fails(t, a, "the node, straight", "egressprobe tcp "+node+":6443")
		// Rules of the policy allow both addresses: the block list wins.
		e.fails(t, a, "the apiserver through the proxy", "egressprobe get -insecure https://"+api+"/version")
		e.fails(t, a, "the node through the proxy", "egressprobe get -insecure https://"+node+":6443/version")
		r := e.logged(t, a, func(r egress.Record) bool { return r.Host == api && r.Verdict == egress.Denied })
		if r.Rule != "block list" {
			t.Errorf("the apiserver was refused by %q, want the block list: %+v", r.Rule, r)
		}
	})
	t.Run("AnotherSandbox", func(t *testing.T) {
		e.ok(t, b, "egressprobe get http://allowed.test/") // b reaches its own proxy
		e.fails(t, a, "another sandbox's proxy", "egressprobe tcp "+pxB.String())
		e.fails(t, a, "another sandbox's proxy, through its own", "egressprobe get http://"+pxB.String()+"/")
		pod, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), PodName(b.SessionID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.fails(t, a, "another sandbox's pod, through the proxy", "egressprobe get http://"+pod.Status.PodIP+":8080/")
	})
	if hits := e.sandboxHits(t, "denied"); len(hits) != 0 {
		t.Errorf("denied.test was reached from a sandbox or a proxy: %+v", hits)
	}
}

// TestKubeEgressCredentials: the secret reaches the upstream in the header,
// and is nowhere the sandbox can see — its processes' environments, its
// files, its pod's spec — nor in the network log, live or kept; another
// host gets the placeholder.
func TestKubeEgressCredentials(t *testing.T) {
	e := newEgressEnv(t, nil)
	const secret = "sk-test-kube-5e1d7c3b9a2f4e6d8c0b"
	vars := map[string]string{"XMODE_TEST_EGRESS_SECRET": secret}
	spec := e.policy(t, egress.Source{Name: "--credential", Credentials: []string{"allowed.test=x-api-key:XMODE_TEST_EGRESS_SECRET"}},
		egress.Source{Name: "--allow", Allow: []string{"other.test:443", e.allowed.String(), e.other.String()}})
	spec.Getenv = func(k string) string { return vars[k] }
	placeholder := spec.Egress.Credentials[0].Placeholder
	sb := e.provision(t, spec)

	if got := strings.TrimSpace(e.ok(t, sb, `echo "$XMODE_TEST_EGRESS_SECRET"`)); got != placeholder {
		t.Fatalf("the sandbox's copy of the variable: %q, want the placeholder %q", got, placeholder)
	}
	out := e.ok(t, sb, `egressprobe get -H "X-Api-Key: $XMODE_TEST_EGRESS_SECRET" https://allowed.test/echo`)
	if !strings.Contains(out, "STATUS 200") {
		t.Fatalf("the credential host: %s", out)
	}
	hits := e.hits(t, "allowed")
	if len(hits) == 0 || hits[len(hits)-1]["headers"].(map[string]any)["X-Api-Key"] != secret {
		t.Fatalf("the upstream did not get the secret: %+v", hits)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the upstream's echo of the secret reached the sandbox: %s", out)
	}
	e.ok(t, sb, `egressprobe get -insecure -H "X-Api-Key: $XMODE_TEST_EGRESS_SECRET" https://other.test/echo`)
	others := e.hits(t, "other")
	if len(others) == 0 || others[len(others)-1]["headers"].(map[string]any)["X-Api-Key"] != placeholder {
		t.Errorf("another host got %+v, want the placeholder", others)
	}
	environ := "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -F "
	files := func(s string) string {
		return "grep -rlF " + s + " $(ls -d /* | grep -v -e '^/proc$' -e '^/sys$' -e '^/dev$') 2>/dev/null | grep ."
	}
	// Each search finds the placeholder, so it would find the secret.
	e.ok(t, sb, environ+placeholder)
	e.ok(t, sb, "echo "+placeholder+" > /tmp/placeholder; "+files(placeholder))
	e.fails(t, sb, "the secret in a process's environment", environ+secret)
	e.fails(t, sb, "the secret in a file", files(secret))
	// Nor in what the cluster holds of either pod.
	for _, name := range []string{PodName(sb.SessionID), EgressPodName(sb.SessionID)} {
		pod, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(pod.String(), secret) {
			t.Errorf("the secret is in pod %s's object", name)
		}
	}
	if s, err := e.cs.CoreV1().Secrets(e.ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(s.Items) > 0 {
		t.Errorf("secrets in the namespace: %v %v", s, err)
	}
	r := e.logged(t, sb, func(r egress.Record) bool { return r.Kind == "https" && r.Host == "allowed.test" })
	if !strings.Contains(r.Credential, "X-Api-Key from") || r.Verdict != egress.Allowed {
		t.Errorf("the log's record of the credential request: %+v", r)
	}
	if err := e.p.Destroy(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	kept, _ := e.p.guard.NetworkLog(sb.RunID, sb.SessionID)
	b, err := os.ReadFile(kept)
	if err != nil || !strings.Contains(string(b), "X-Api-Key from") {
		t.Fatalf("the kept log: %v %q", err, b)
	}
	if found := grepTree(t, e.root, secret); len(found) > 0 {
		t.Errorf("the secret is in the storage root: %v", found)
	}
}

// grepTree lists the files under root that hold s.
func grepTree(t *testing.T, root, s string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s) {
				out = append(out, p)
			}
		}
		return nil
	})
	return out
}

// TestKubeEgressPolicyChange: a rule added on a live sandbox (a new policy
// file put into the proxy pod, and a reload) holds for the next connection.
func TestKubeEgressPolicyChange(t *testing.T) {
	e := newEgressEnv(t, nil)
	spec := e.policy(t, e.allowOnly())
	sb := e.provision(t, spec)
	e.fails(t, sb, "other.test before the change", "egressprobe get http://other.test/")
	src := []egress.Source{e.allowOnly(), {Name: "sandbox network", Allow: []string{"other.test:80", e.other.String()}}, {Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{e.resolve}}}
	pol, err := egress.Merge(sb.SessionID, egress.ModeAllow, src...)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.SetEgress(context.Background(), sb, pol, nil); err != nil {
		t.Fatal(err)
	}
	if out := e.ok(t, sb, "egressprobe get http://other.test/"); !strings.Contains(out, "hello from other.test") {
		t.Fatalf("other.test after the change: %s", out)
	}
	r := e.logged(t, sb, func(r egress.Record) bool { return r.Host == "other.test" && r.Verdict == egress.Allowed })
	if r.Source != "sandbox network" {
		t.Errorf("the decision after the change: %+v", r)
	}
	// Another sandbox's policy is refused.
	pol.Sandbox = "sbx_other"
	if err := e.p.SetEgress(context.Background(), sb, pol, nil); err == nil {
		t.Error("SetEgress took another sandbox's policy")
	}
}

// TestKubeEgressFailsClosed: with its proxy pod deleted the sandbox reaches
// nothing — not through the proxy, not straight — and a policy change says
// there is no proxy rather than pretending.
func TestKubeEgressFailsClosed(t *testing.T) {
	e := newEgressEnv(t, nil)
	sb := e.provision(t, e.policy(t, e.allowOnly()))
	e.ok(t, sb, "egressprobe get http://allowed.test/")
	ctx := context.Background()
	if err := e.cs.CoreV1().Pods(e.ns).Delete(ctx, EgressPodName(sb.SessionID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(func() bool {
		_, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, EgressPodName(sb.SessionID), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, "the proxy pod is gone")
	e.control(t, "allowed.test straight", "egressprobe", "get", "-noproxy", "http://"+e.allowed.String()+"/")
	e.fails(t, sb, "allowed.test through a proxy that is gone", "egressprobe get -timeout 3s http://allowed.test/")
	e.fails(t, sb, "allowed.test straight, its proxy gone", "egressprobe get -noproxy -timeout 3s http://"+e.allowed.String()+"/")
	pol := *e.policy(t, e.allowOnly()).Egress
	pol.Sandbox = sb.SessionID
	if err := e.p.SetEgress(ctx, sb, pol, nil); fail.KindOf(err) != fail.Refused {
		t.Errorf("SetEgress without a proxy: %v, want refused", err)
	}
	// Teardown still ends the sandbox.
	if err := e.p.Destroy(ctx, sb); err != nil {
		t.Fatal(err)
	}
}

// TestKubeEgressTeardownKeepsTheLog: Destroy keeps the proxy's log in the
// run's evidence, lines of connections open until then included, and
// removes the proxy pod and both NetworkPolicies; the reaper's removal of
// an orphaned proxy keeps its log too.
func TestKubeEgressTeardownKeepsTheLog(t *testing.T) {
	e := newEgressEnv(t, nil)
	ctx := context.Background()
	sb := e.provision(t, e.policy(t, e.allowOnly()))
	e.ok(t, sb, "egressprobe get http://allowed.test/")
	e.fails(t, sb, "denied.test", "egressprobe get http://denied.test/")
	// A connection still open at teardown (a step holding it): its line is
	// written when it ends, with the sandbox's pod.
	held := make(chan struct{})
	hw := &signalWriter{match: "HELD", ch: held}
	go func() {
		_, _ = e.p.Exec(ctx, sb, engine.ExecRequest{Argv: []string{"sh", "-c", `egressprobe hold "${HTTP_PROXY#http://}" allowed.test:443 1`}, Stdout: hw, Stderr: hw})
	}()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the holding step did not hold its connection")
	}
	if err := e.p.Destroy(ctx, sb); err != nil {
		t.Fatal(err)
	}
	kept, _ := e.p.guard.NetworkLog(sb.RunID, sb.SessionID)
	rs := readRecords(t, kept)
	var allowedN, deniedN, heldN int
	for _, r := range rs {
		switch {
		case r.Host == "allowed.test" && r.Port == 443 && r.Kind == "connect":
			heldN++
		case r.Host == "allowed.test" && r.Verdict == egress.Allowed:
			allowedN++
		case r.Host == "denied.test" && r.Verdict == egress.Denied:
			deniedN++
		}
	}
	if allowedN == 0 || deniedN == 0 || heldN == 0 {
		t.Errorf("the kept log lacks a decision (allowed %d, denied %d, held %d): %+v", allowedN, deniedN, heldN, rs)
	}
	for _, name := range []string{PodName(sb.SessionID), EgressPodName(sb.SessionID)} {
		e.eventually(func() bool {
			_, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, "pod "+name+" is gone")
		e.eventually(func() bool {
			_, err := e.cs.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, "NetworkPolicy "+name+" is gone")
	}
	if p, err := e.p.EgressLog(ctx, sb); err != nil || p != kept {
		t.Errorf("EgressLog after teardown: %q %v, want %s", p, err, kept)
	}

	// An orphaned proxy (its sandbox pod gone without xmode): listed by
	// the install's labels, removed with its log kept.
	sb2 := e.provision(t, e.policy(t, e.allowOnly()))
	e.ok(t, sb2, "egressprobe get http://allowed.test/")
	grace := int64(0)
	orphan := metav1.DeletePropagationOrphan
	if err := e.cs.CoreV1().Pods(e.ns).Delete(ctx, PodName(sb2.SessionID), metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	objs, err := e.p.ListObjects(ctx, e.instance)
	if err != nil {
		t.Fatal(err)
	}
	var proxyObj *engine.Object
	for i, o := range objs {
		if o.Name == EgressPodName(sb2.SessionID) && o.Kind == engine.KindPod {
			proxyObj = &objs[i]
		}
	}
	if proxyObj == nil || proxyObj.SessionID != sb2.SessionID {
		t.Fatalf("the orphaned proxy is not listed: %+v", objs)
	}
	if err := e.p.RemoveObject(ctx, *proxyObj); err != nil {
		t.Fatal(err)
	}
	kept2, _ := e.p.guard.NetworkLog(sb2.RunID, sb2.SessionID)
	if rs := readRecords(t, kept2); len(rs) == 0 {
		t.Error("the reaped proxy's log was not kept")
	}
}

// TestKubeEgressRefusedWhereNotEnforced: a broader NetworkPolicy selecting
// the sandbox (NetworkPolicies add up: one that allows all egress, as a
// SandboxTemplate's or an operator's may) leaves the proxy not the only
// way out. The sandbox's start detects it and is refused, with the reason,
// and nothing of it is left.
func TestKubeEgressRefusedWhereNotEnforced(t *testing.T) {
	e := newEgressEnv(t, nil)
	ctx := context.Background()
	wide := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "allow-all-egress", Labels: map[string]string{kubetest.LabelTest: "true"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
		},
	}
	if _, err := e.cs.NetworkingV1().NetworkPolicies(e.ns).Create(ctx, wide, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := e.policy(t, e.allowOnly())
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err := e.p.Provision(pctx, spec)
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "not enforced") || !strings.Contains(err.Error(), "does not allow, got through") {
		t.Fatalf("Provision under a broader policy: %v, want refused with the reason", err)
	}
	e.eventually(func() bool {
		pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelSession + "=" + spec.SessionID})
		return err == nil && len(pods.Items) == 0
	}, "the refused sandbox's pods are gone")
	nps, err := e.cs.NetworkingV1().NetworkPolicies(e.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelSession + "=" + spec.SessionID})
	if err != nil || len(nps.Items) != 0 {
		t.Errorf("the refused sandbox's NetworkPolicies: %v %v", nps, err)
	}
}

// TestKubeEgressRefusedWithoutImage: without XMODE_KUBE_EGRESS_IMAGE a
// proxied sandbox is refused before anything is made; doctor says so.
func TestKubeEgressRefusedWithoutImage(t *testing.T) {
	e := newEgressEnv(t, map[string]string{"XMODE_KUBE_EGRESS_IMAGE": ""})
	ctx := context.Background()
	spec := e.policy(t, e.allowOnly())
	_, err := e.p.Provision(ctx, spec)
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "XMODE_KUBE_EGRESS_IMAGE") {
		t.Fatalf("Provision without the proxy's image: %v", err)
	}
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelSession + "=" + spec.SessionID})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods made for a refused sandbox: %v %v", pods, err)
	}
	ck := findCheck(t, e.p.Health(ctx), "kubernetes egress")
	if ck.Method != "none" || ck.Status != engine.CheckFail || !strings.Contains(ck.Detail, "XMODE_KUBE_EGRESS_IMAGE is unset") {
		t.Errorf("doctor without the image: %+v", ck)
	}
	// The front ends ask before they record a session (engine.CheckEgress),
	// and doctor's engine line agrees.
	if err := engine.CheckEgress(e.p, Name, egress.ModeAllow); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "XMODE_KUBE_EGRESS_IMAGE") {
		t.Errorf("CheckEgress without the proxy's image: %v", err)
	}
	if ck := engine.EgressCheck(Name, e.p, true); ck.Method != "none" || ck.Status != engine.CheckWarn || !strings.Contains(ck.Detail, "XMODE_KUBE_EGRESS_IMAGE") {
		t.Errorf("EgressCheck without the proxy's image: %+v", ck)
	}
	// With it, doctor names it and says how enforcement is proven.
	cfg := *e.cfg
	cfg.KubeEgressImage = "xmode.invalid/xmode-egress:doctor"
	with, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer with.Close()
	ck = findCheck(t, with.Health(ctx), "kubernetes egress")
	if ck.Method != "proxy" || !strings.Contains(ck.Detail, cfg.KubeEgressImage) {
		t.Errorf("doctor with the image: %+v", ck)
	}
	if _, ok := engine.Egress(with); !ok || engine.CheckEgress(with, Name, egress.ModeAllow) != nil {
		t.Error("the kubernetes provider is not an egress enforcer")
	}
}

func findCheck(t *testing.T, cs []engine.Check, name string) engine.Check {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %q line in %+v", name, cs)
	return engine.Check{}
}

// signalWriter closes ch once what was written holds match.
type signalWriter struct {
	mu    sync.Mutex
	buf   strings.Builder
	match string
	ch    chan struct{}
	done  bool
}

func (w *signalWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if !w.done && strings.Contains(w.buf.String(), w.match) {
		w.done = true
		close(w.ch)
	}
	return len(b), nil
}

// TestKubeEgressWithTheRoleAlone: with docs/kubernetes.md's Role and
// nothing more, a proxied sandbox starts and is held to its policy; xmode
// cannot list the nodes, so the proxy does not know the cluster's
// addresses and refuses every private range instead (fails closed), which
// a CIDR rule lifts.
func TestKubeEgressWithTheRoleAlone(t *testing.T) {
	e := newEgressEnv(t, nil)
	ctx := context.Background()
	if _, err := e.cs.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "xmode"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().Roles(e.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "xmode"}, Rules: RoleRules()}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().RoleBindings(e.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "xmode"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "xmode", Namespace: e.ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "xmode"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := *e.cfg
	cfg.KubeConfig = ImpersonatingKubeconfig(t, kubetest.Kubeconfig(t), "system:serviceaccount:"+e.ns+":xmode")
	p, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.SetWarnings(testWriter{t})
	t.Cleanup(func() { p.Close() })
	e.p, e.cfg = p, &cfg

	byName := e.provision(t, e.policy(t, egress.Source{Name: "--allow", Allow: []string{"allowed.test:80"}}))
	e.fails(t, byName, "allowed.test by name, its pod's address in a private range", "egressprobe get -timeout 5s http://allowed.test/")
	r := e.logged(t, byName, func(r egress.Record) bool { return r.Host == "allowed.test" && r.Verdict == egress.Denied })
	if r.Rule != "block list" || !strings.Contains(r.Reason, "may not list nodes") {
		t.Errorf("the refusal of allowed.test: %+v", r)
	}
	lifted := e.provision(t, e.policy(t, e.allowOnly()))
	if out := e.ok(t, lifted, "egressprobe get http://allowed.test/"); !strings.Contains(out, "hello from allowed.test") {
		t.Fatalf("allowed.test with a rule naming its address: %s", out)
	}
	e.fails(t, lifted, "denied.test by its address, without the proxy", "egressprobe get -noproxy -timeout 3s http://"+e.denied.String()+"/")
}

// TestKubeEgressOpenMode: a sandbox of network open reaches any host its
// deny rules and the block list leave (the test hosts' pod addresses
// lifted by CIDR rules), through its proxy only; a deny rule wins, the
// apiserver stays refused, and nothing goes straight.
func TestKubeEgressOpenMode(t *testing.T) {
	e := newEgressEnv(t, nil)
	api, _ := clusterAddrs(t, e)
	spec := e.spec(t)
	pol, err := egress.Merge(spec.SessionID, egress.ModeOpen,
		egress.Source{Name: "--allow", Allow: []string{e.allowed.String(), e.other.String(), e.denied.String()}},
		egress.Source{Name: "--deny", Deny: []string{"denied.test"}},
		egress.Source{Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{e.resolve}})
	if err != nil {
		t.Fatal(err)
	}
	spec.Egress = &pol
	sb := e.provision(t, spec)
	for _, h := range []string{"allowed.test", "other.test"} {
		if out := e.ok(t, sb, "egressprobe get http://"+h+"/"); !strings.Contains(out, "hello from "+h) {
			t.Fatalf("%s in mode open: %s", h, out)
		}
	}
	r := e.logged(t, sb, func(r egress.Record) bool { return r.Host == "other.test" && r.Verdict == egress.Allowed })
	if r.Rule != "mode open" {
		t.Errorf("other.test was let through by %q, want mode open: %+v", r.Rule, r)
	}
	e.fails(t, sb, "denied.test, which a deny rule names", "egressprobe get -timeout 5s http://denied.test/")
	e.fails(t, sb, "the apiserver through the proxy", "egressprobe get -insecure -timeout 5s https://"+api+"/version")
	e.fails(t, sb, "other.test's address, straight", "egressprobe get -noproxy -timeout 3s http://"+e.other.String()+"/")
}
