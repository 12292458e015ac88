package kubetest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// TestClusterNetwork holds hack/kube/up.sh to its network promises
// (docs/kubernetes.md, "A cluster on this machine"): pods reach each other
// and the apiserver (at its ClusterIP and at the bridge address), but have
// no default route and cannot reach the kubelet on the node; and a
// NetworkPolicy is enforced.
func TestClusterNetwork(t *testing.T) {
	cfg, cs := Require(t)
	image := Image(t)
	ns := Namespace(t, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	server := RestrictedPod("server", image, "httpd", "-f", "-p", "8080", "-h", "/tmp")
	server.Labels["role"] = "server"
	client := RestrictedPod("client", image, "sleep", "3600")
	client.Labels["role"] = "client"
	for _, p := range []*corev1.Pod{server, client} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
	serverIP := WaitRunning(t, cs, ns, "server", time.Minute).Status.PodIP
	WaitRunning(t, cs, ns, "client", time.Minute)

	svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes: %v (%d)", err, len(nodes.Items))
	}
	var nodeIP string
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}

	sh := func(script string) ExecResult {
		t.Helper()
		res, err := Exec(ctx, cfg, cs, ns, "client", "main", Fallback, nil, "sh", "-c", script)
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return res
	}
	routes := sh("ip route").Stdout
	if strings.Contains(routes, "default") || !strings.Contains(routes, svc.Spec.ClusterIP[:strings.LastIndex(svc.Spec.ClusterIP, ".")]) {
		t.Errorf("the pod's routes:\n%s\nwant no default route, and one to the services' network (%s)", routes, svc.Spec.ClusterIP)
	}
	for _, c := range []struct {
		what, addr string
		reach      bool
	}{
		{"the other pod", serverIP + " 8080", true},
		{"the apiserver's ClusterIP", svc.Spec.ClusterIP + " 443", true},
		{"the apiserver on the bridge address", nodeIP + " 6443", true},
		{"the kubelet on the bridge address", nodeIP + " 10250", false},
	} {
		res := sh("nc -w 2 " + c.addr + " </dev/null")
		if got := res.ExitCode == 0; got != c.reach {
			t.Errorf("%s (%s) reached: %v, want %v (%+v)", c.what, c.addr, got, c.reach, res)
		}
	}

	// An egress policy that allows nothing cuts the client off the server;
	// without it the connection works again.
	deny := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-egress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		},
	}
	RequireNetworkPolicy(t)
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reaches := func(want bool) {
		t.Helper()
		var res ExecResult
		for i := 0; i < 20; i++ {
			if res = sh("nc -w 1 " + serverIP + " 8080 </dev/null"); (res.ExitCode == 0) == want {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Fatalf("the server reached: %v after 20 tries, want %v (%+v)", !want, want, res)
	}
	reaches(false)
	if err := cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, deny.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reaches(true)
}

// TestAgentSandbox: the agent-sandbox CRDs are served and its controller,
// which runs, makes a Sandbox's pod.
func TestAgentSandbox(t *testing.T) {
	cfg, cs := Require(t)
	RequireAgentSandbox(t)
	image := Image(t)
	ns := Namespace(t, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&RestrictedPod("", image, "sleep", "3600").Spec)
	if err != nil {
		t.Fatal(err)
	}
	sb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1",
		"kind":       "Sandbox",
		"metadata":   map[string]any{"name": "smoke"},
		"spec":       map[string]any{"podTemplate": map[string]any{"spec": spec}},
	}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, sb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Sandbox: %v", err)
	}
	// The controller names the pod after the Sandbox.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "smoke", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no pod for Sandbox %s/smoke: is the agent-sandbox controller running? (its log: /var/lib/xmode-kube/logs)", ns)
	}
	WaitRunning(t, cs, ns, "smoke", time.Minute)
}
