package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xmode/xmode/internal/kubetest"
	"github.com/xmode/xmode/providers/docker/dockertest"
	kube "github.com/xmode/xmode/providers/kubernetes"
)

// TestKubeNetworkPolicyFromTheCLI: the front ends reach the kubernetes
// engine's enforcement (docs/network.md, docs/kubernetes.md "Egress"):
// `sandbox create --network allow --allow HOST` makes a sandbox pod with a
// proxy pod of its own, which reaches HOST and is refused another test
// host; `sandbox network` shows the policy and the decisions and changes
// it on the live sandbox; doctor says egress is enforced; `sandbox stop`
// removes the proxy and keeps its log in the run's evidence. Without
// XMODE_KUBE_EGRESS_IMAGE, --network allow is refused (exit 4) before a
// session is recorded.
func TestKubeNetworkPolicyFromTheCLI(t *testing.T) {
	_, cs := kubetest.Require(t)
	egImg, prImg := kubetest.EgressImages(t)
	ns := kubetest.Namespace(t, cs)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	pki := dockertest.TestPKI(t)
	allowed := kubetest.EgressHost(t, cs, ns, "allowed", "allowed.test", prImg, pki.CertPEM, pki.KeyPEM).String()
	denied := kubetest.EgressHost(t, cs, ns, "denied", "denied.test", prImg, pki.CertPEM, pki.KeyPEM).String()
	env := []string{
		"XMODE_SANDBOX_ENGINE=kubernetes", "XMODE_RUNNER_MODE=cloud_worker",
		"KUBECONFIG=" + kubetest.Kubeconfig(t), "XMODE_KUBE_NAMESPACE=" + ns,
		"XMODE_SANDBOX_IMAGE=" + prImg, "XMODE_KUBE_IMAGE_PULL_POLICY=Never",
		"XMODE_SANDBOX_CPUS=0.1", "XMODE_SANDBOX_MEMORY=128m", "XMODE_KUBE_EPHEMERAL_STORAGE=1g",
		"XMODE_KUBE_EGRESS_IMAGE=" + egImg,
		"XMODE_SANDBOX_RESOLVE=allowed.test=" + allowed + ",denied.test=" + denied,
		// The test hosts are pods, whose range the proxy blocks unless a
		// CIDR rule names it.
		"XMODE_SANDBOX_ALLOW=" + allowed + "/32 " + denied + "/32",
	}
	root := filepath.Join(dir, "root")
	xm := func(code int, args ...string) dkResult {
		t.Helper()
		return dkWant(t, dkXmode(t, root, env, args...), code)
	}

	var s struct {
		dkSession
		Network string `json:"network"`
		Policy  *struct {
			Mode  string `json:"mode"`
			Allow []struct{ Rule, Source string }
		} `json:"network_policy"`
	}
	dkJSON(t, xm(0, "sandbox", "create", "--repo", repo, "--json", "--network", "allow", "--allow", "allowed.test:80"), &s)
	t.Cleanup(func() { dkXmode(t, root, env, "sandbox", "stop", s.ID) })
	if s.Engine != "kubernetes" || s.Network != "allow" || s.Policy == nil || s.Policy.Mode != "allow" || s.Policy.Allow[0] != (struct{ Rule, Source string }{"allowed.test:80", "--allow"}) {
		t.Fatalf("sandbox create --network allow on kubernetes: %+v %+v", s, s.Policy)
	}
	ctx := context.Background()
	proxy, err := cs.CoreV1().Pods(ns).Get(ctx, kube.EgressPodName(s.ID), metav1.GetOptions{})
	if err != nil || proxy.Labels[kube.LabelSession] != s.ID {
		t.Fatalf("the sandbox's proxy pod: %v", err)
	}

	get := func(url string) dkResult {
		return dkXmode(t, root, env, "sandbox", "exec", s.ID, "--", "egressprobe", "get", "-timeout", "5s", url)
	}
	if r := get("http://allowed.test/"); r.code != 0 || !strings.Contains(r.stdout, "hello from allowed.test") { // step 1
		t.Fatalf("allowed.test through the proxy pod:\n%s", r)
	}
	if r := get("http://denied.test/"); r.code == 0 { // step 2
		t.Fatalf("denied.test GOT THROUGH:\n%s", r)
	}
	// Straight to the address, past the proxy: the NetworkPolicy.
	if r := dkXmode(t, root, env, "sandbox", "exec", s.ID, "--", "egressprobe", "get", "-noproxy", "-timeout", "3s", "http://"+denied+"/"); r.code == 0 {
		t.Fatalf("denied.test's address without the proxy GOT THROUGH:\n%s", r)
	}
	out := xm(0, "sandbox", "network", s.ID).stdout
	for _, want := range []string{"Network: allow", "allowed.test:80", "--allow", "1 denied", "denied.test:80"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox network does not say %q:\n%s", want, out)
		}
	}

	// A change on the live sandbox: in force for the next connection.
	xm(0, "sandbox", "network", s.ID, "--allow", "denied.test:80") // step 4
	if r := get("http://denied.test/"); r.code != 0 || !strings.Contains(r.stdout, "hello from denied.test") {
		t.Fatalf("denied.test after --allow denied.test:80:\n%s", r)
	}
	xm(0, "sandbox", "network", s.ID, "--deny", "allowed.test")
	if r := get("http://allowed.test/"); r.code == 0 {
		t.Fatalf("allowed.test after --deny allowed.test GOT THROUGH:\n%s", r)
	}

	var checks []dkCheck
	kubetest.WaitImagesListed(t, cs, egImg, prImg) // what doctor reads
	dkJSON(t, xm(0, "doctor", "--json"), &checks)
	var egressLine *dkCheck
	for i := range checks {
		if checks[i].Name == "kubernetes egress" {
			egressLine = &checks[i]
		}
	}
	// ok where a plugin known to enforce NetworkPolicy runs in kube-system;
	// the test cluster's kube-router runs outside the cluster's pods, so a
	// warning there, which names the image and the start-up check.
	if egressLine == nil || egressLine.Status == "fail" || !strings.Contains(egressLine.Detail, egImg) {
		t.Errorf("doctor's kubernetes egress line: %+v", egressLine)
	}

	// Teardown: the proxy pod goes, its log stays in the run's evidence.
	xm(0, "sandbox", "stop", s.ID)
	if _, err := cs.CoreV1().Pods(ns).Get(ctx, kube.EgressPodName(s.ID), metav1.GetOptions{}); err == nil {
		p, _ := cs.CoreV1().Pods(ns).Get(ctx, kube.EgressPodName(s.ID), metav1.GetOptions{})
		if p.DeletionTimestamp == nil {
			t.Error("the proxy pod outlived sandbox stop")
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(s.RunDir, "network", "*"))
	var kept string
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		kept += string(b)
	}
	if !strings.Contains(kept, `"denied.test"`) || !strings.Contains(kept, `"allowed.test"`) {
		t.Errorf("the run's network evidence after stop (%v):\n%s", logs, kept)
	}
	if out := xm(0, "sandbox", "network", s.ID).stdout; !strings.Contains(out, "denied.test:80") {
		t.Errorf("sandbox network after stop (the kept log):\n%s", out)
	}

	// No proxy image: refused before anything is recorded.
	noImage := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "XMODE_KUBE_EGRESS_IMAGE=") })
	r := dkWant(t, dkXmode(t, root, noImage, "sandbox", "create", "--repo", repo, "-q", "--network", "allow", "--allow", "allowed.test"), 4)
	if !strings.Contains(r.stderr, "XMODE_KUBE_EGRESS_IMAGE") {
		t.Errorf("--network allow without the proxy's image:\n%s", r)
	}
	var all []dkSession
	dkJSON(t, xm(0, "sandbox", "list", "--all", "--json"), &all)
	if len(all) != 1 {
		t.Errorf("a refused create recorded a session: %+v", all)
	}
}
