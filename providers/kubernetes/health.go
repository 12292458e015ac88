package kubernetes

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
)

// permission is one thing xmode does in its namespace.
type permission struct {
	verb, group, resource, sub string
	why                        string
}

// permissions are what the Role of docs/kubernetes.md grants, each checked
// by `xmode doctor` with a SelfSubjectAccessReview.
var permissions = []permission{
	{"create", "", "pods", "", "a session's pod"},
	{"get", "", "pods", "", "a pod's state, before every step"},
	{"list", "", "pods", "", "the reaper's orphans"},
	{"delete", "", "pods", "", "sandbox stop and the reaper"},
	{"patch", "", "pods", "", "sandbox extend (the pod's deadline)"},
	{"create", "", "pods", "exec", "every step, and the worktree's copy"},
	{"get", "", "pods", "log", "why a pod did not start"},
	{"create", "networking.k8s.io", "networkpolicies", "", "XMODE_SANDBOX_NETWORK=none"},
	{"get", "networking.k8s.io", "networkpolicies", "", "XMODE_SANDBOX_NETWORK=none"},
	{"list", "networking.k8s.io", "networkpolicies", "", "the reaper's orphans"},
	{"patch", "networking.k8s.io", "networkpolicies", "", "a policy given to its pod"},
	{"delete", "networking.k8s.io", "networkpolicies", "", "sandbox stop and the reaper"},
}

// asPermissions are what agent-sandbox mode needs besides (the same Role
// grants them): a session's Sandbox, a pool's template, warm pool and
// claims.
var asPermissions = []permission{
	{"create", asGroup, resSandboxes, "", "a session's Sandbox"},
	{"get", asGroup, resSandboxes, "", "a Sandbox's state while its pod starts"},
	{"list", asGroup, resSandboxes, "", "the reaper's orphans"},
	{"patch", asGroup, resSandboxes, "", "sandbox extend (its shutdown time)"},
	{"delete", asGroup, resSandboxes, "", "sandbox stop and the reaper"},
	{"create", asExtGroup, resClaims, "", "a pool entry's SandboxClaim"},
	{"get", asExtGroup, resClaims, "", "which Sandbox a claim got"},
	{"list", asExtGroup, resClaims, "", "the reaper's orphans"},
	{"patch", asExtGroup, resClaims, "", "a pool claim and sandbox extend (its shutdown time)"},
	{"delete", asExtGroup, resClaims, "", "sandbox stop and the reaper"},
	{"create", asExtGroup, resTemplates, "", "a pool's SandboxTemplate"},
	{"get", asExtGroup, resTemplates, "", "a pool's SandboxTemplate"},
	{"list", asExtGroup, resTemplates, "", "a project's templates of other settings"},
	{"delete", asExtGroup, resTemplates, "", "a pool turned off or of other settings"},
	{"create", asExtGroup, resWarmPools, "", "a pool's SandboxWarmPool"},
	{"get", asExtGroup, resWarmPools, "", "a pool's SandboxWarmPool"},
	{"list", asExtGroup, resWarmPools, "", "a project's warm pools of other settings"},
	{"patch", asExtGroup, resWarmPools, "", "a pool's size"},
	{"delete", asExtGroup, resWarmPools, "", "a pool turned off or of other settings"},
}

func (q permission) String() string {
	r := q.resource
	if q.sub != "" {
		r += "/" + q.sub
	}
	if q.group != "" {
		r += "." + q.group
	}
	return q.verb + " " + r
}

// policyAgents are the pods of network plugins known to enforce
// NetworkPolicy, by the name of their pods in kube-system.
var policyAgents = []string{"calico-node", "cilium", "kube-router", "antrea-agent", "weave-net", "canal", "kube-network-policies", "romana", "kube-ovn-cni", "azure-npm"}

// Health is the kubernetes engine's part of `xmode doctor`
// (engine.HealthChecker): the credentials and the cluster, its version,
// the namespace and its Pod Security label, each permission xmode needs,
// whether NetworkPolicy is enforced (as far as can be told), the runtime
// class, the image on the nodes where that can be seen, and how pids are
// bounded.
func (p *Provider) Health(ctx context.Context) []engine.Check {
	var out []engine.Check
	add := func(name, status, detail, fix string) {
		out = append(out, engine.Check{Name: name, Status: status, Detail: detail, Fix: fix})
	}
	c, err := p.client()
	if err != nil {
		if p.cfg.Engine != Name && fail.KindOf(err) == fail.EngineUnavailable && strings.Contains(err.Error(), "no Kubernetes cluster to use") {
			add("kubernetes", engine.CheckOK, "not configured: no kubeconfig and not in a pod (XMODE_SANDBOX_ENGINE=kubernetes uses one)", "")
			return out
		}
		add("kubernetes cluster", engine.CheckFail, err.Error(), "set KUBECONFIG (and XMODE_KUBE_CONTEXT) to a cluster's kubeconfig, or run xmode in a pod with a service account")
		return out
	}
	pctx, cancel := context.WithTimeout(ctx, p.pingTimeout())
	v, err := c.version(pctx)
	cancel()
	if err != nil {
		add("kubernetes cluster", engine.CheckFail, p.wrap(err, "ask "+c.host+" for its version").Error(), "check that the cluster runs and that the kubeconfig (KUBECONFIG, XMODE_KUBE_CONTEXT) points at it: `kubectl version`")
		return out
	}
	add("kubernetes cluster", engine.CheckOK, fmt.Sprintf("%s answers, Kubernetes %s (credentials: %s)", c.host, v, p.source), "")
	cctx, cancel := p.call(ctx)
	defer cancel()

	// The namespace and its Pod Security label.
	var ns corev1.Namespace
	switch err := c.core.Get().Resource("namespaces").Name(c.ns).Do(cctx).Into(&ns); {
	case notFound(err):
		add("kubernetes namespace", engine.CheckFail, "namespace "+c.ns+" does not exist", "kubectl create namespace "+c.ns+", or set XMODE_KUBE_NAMESPACE to one that does")
	case err != nil && httpStatus(err) == 403:
		add("kubernetes namespace", engine.CheckWarn, "pods go to namespace "+c.ns+"; xmode may not read the namespace itself, so its Pod Security label cannot be checked", "label it: kubectl label namespace "+c.ns+" pod-security.kubernetes.io/enforce=restricted")
	case err != nil:
		add("kubernetes namespace", engine.CheckFail, p.wrap(err, "get namespace "+c.ns).Error(), "")
	default:
		if level := ns.Labels["pod-security.kubernetes.io/enforce"]; level == "restricted" {
			add("kubernetes namespace", engine.CheckOK, "pods go to namespace "+c.ns+", which enforces Pod Security \"restricted\"", "")
		} else {
			if level == "" {
				level = "none"
			}
			add("kubernetes namespace", engine.CheckWarn, "pods go to namespace "+c.ns+", which enforces Pod Security "+level+": xmode's pods are restricted-hardened, but nothing stops another pod there from being privileged", "kubectl label namespace "+c.ns+" pod-security.kubernetes.io/enforce=restricted")
		}
	}

	// What a sandbox is: a pod of xmode's, or agent-sandbox's.
	api, err := p.API(ctx)
	switch {
	case err != nil:
		add("kubernetes api", engine.CheckFail, err.Error(), "set XMODE_KUBE_API=pods, or install kubernetes-sigs/agent-sandbox with its extensions")
	case api == APIAgentSandbox:
		add("kubernetes api", engine.CheckOK, "agent-sandbox (XMODE_KUBE_API="+p.cfg.KubeAPI+"): a Sandbox per session, a SandboxTemplate and SandboxWarmPool per pool, a SandboxClaim per pool entry ("+asGroup+", "+asExtGroup+" "+asVersion+" served); its controller must run", "")
	case p.cfg.KubeAPI == APIAuto:
		add("kubernetes api", engine.CheckOK, "pods: the cluster serves no agent-sandbox API (XMODE_KUBE_API=auto)", "")
	default:
		add("kubernetes api", engine.CheckOK, "pods (XMODE_KUBE_API=pods)", "")
	}
	needed := permissions
	if api == APIAgentSandbox {
		needed = append(append([]permission(nil), permissions...), asPermissions...)
	}

	// Each permission, by name.
	var missing []string
	for _, q := range needed {
		ok, _, err := c.allowed(cctx, q.verb, q.group, q.resource, q.sub)
		if err != nil {
			add("kubernetes rbac", engine.CheckFail, p.wrap(err, "ask whether xmode may "+q.String()).Error(), "")
			missing = nil
			break
		}
		if !ok {
			missing = append(missing, q.String()+" ("+q.why+")")
		}
	}
	if len(missing) > 0 {
		add("kubernetes rbac", engine.CheckFail, "in namespace "+c.ns+" xmode's user may not: "+strings.Join(missing, "; "), "bind xmode's user or service account the Role of docs/kubernetes.md, \"RBAC\", in namespace "+c.ns)
	} else if len(out) > 0 && out[len(out)-1].Name != "kubernetes rbac" {
		add("kubernetes rbac", engine.CheckOK, fmt.Sprintf("xmode's user may do all %d things it needs in namespace %s (SelfSubjectAccessReview)", len(needed), c.ns), "")
	}

	out = append(out, p.networkCheck(cctx, c), p.egressCheck(p.pluginCheck(cctx, c, egressPolicyWords)))
	if rt := p.cfg.Runtime; rt != "" {
		switch code, err := c.getRaw(cctx, "/apis/node.k8s.io/v1/runtimeclasses/"+rt); {
		case err == nil:
			add("kubernetes runtime", engine.CheckOK, "RuntimeClass "+rt+" exists (XMODE_SANDBOX_RUNTIME)", "")
		case code == 404:
			add("kubernetes runtime", engine.CheckFail, "RuntimeClass "+rt+" (XMODE_SANDBOX_RUNTIME) does not exist: pods would not be admitted", "create the RuntimeClass for the runtime (gVisor: handler runsc) on the cluster, or unset XMODE_SANDBOX_RUNTIME")
		case code == 403:
			add("kubernetes runtime", engine.CheckWarn, "cannot tell whether RuntimeClass "+rt+" exists: xmode may not read RuntimeClasses", "kubectl get runtimeclass "+rt)
		default:
			add("kubernetes runtime", engine.CheckFail, p.wrap(err, "get RuntimeClass "+rt).Error(), "")
		}
	} else {
		add("kubernetes runtime", engine.CheckOK, "the nodes' default runtime (XMODE_SANDBOX_RUNTIME unset)", "")
	}
	out = append(out, p.imageCheck(cctx, c))
	add("kubernetes pids", engine.CheckWarn, "XMODE_SANDBOX_PIDS_LIMIT is not applied: a pod's processes are bounded by the kubelet's podPidsLimit, a setting of each node, which a pod cannot set nor xmode read", "set podPidsLimit (kubelet --pod-max-pids) on the nodes that run sandboxes, e.g. to "+fmt.Sprint(p.cfg.PidsLimit))
	return out
}

// networkCheck says whether sandboxes without network are cut off: xmode
// makes a NetworkPolicy, which only a network plugin that enforces
// NetworkPolicy applies. Nothing in the API says whether one does; xmode
// looks for the pods of the plugins known to, in kube-system.
func (p *Provider) networkCheck(ctx context.Context, c *client) engine.Check {
	_, proxied := p.cfg.EgressMode()
	switch {
	case proxied:
		return p.pluginCheck(ctx, c, egressPolicyWords)
	case !p.networkNone():
		return engine.Check{Name: "kubernetes network", Status: engine.CheckOK, Detail: "sandboxes are on the pod network (XMODE_SANDBOX_NETWORK=" + p.cfg.Network + "): no NetworkPolicy is made"}
	}
	return p.pluginCheck(ctx, c, "a NetworkPolicy denying all traffic")
}

// egressPolicyWords is what a proxied sandbox's NetworkPolicy does.
const egressPolicyWords = "a NetworkPolicy that leaves them no way out but their egress proxy"

// pluginCheck says whether a plugin known to enforce NetworkPolicy runs,
// for sandboxes that get the policy what says.
func (p *Provider) pluginCheck(ctx context.Context, c *client, what string) engine.Check {
	ck := engine.Check{Name: "kubernetes network"}
	var pods corev1.PodList
	err := c.core.Get().Namespace("kube-system").Resource("pods").VersionedParams(&metav1.ListOptions{}, c.codec).Do(ctx).Into(&pods)
	checked := "looked for the pods of " + strings.Join(policyAgents, ", ") + " in kube-system"
	if err != nil {
		ck.Status = engine.CheckWarn
		ck.Detail = what + " holds each sandbox only where the network plugin enforces NetworkPolicy, and xmode cannot tell whether it does: it may not list pods in kube-system (" + strings.TrimSpace(err.Error()) + ")"
		ck.Fix = "make sure the cluster's network plugin enforces NetworkPolicy (Calico, Cilium, kube-router, Antrea…)"
		return ck
	}
	for _, pod := range pods.Items {
		for _, a := range policyAgents {
			if strings.HasPrefix(pod.Name, a) && pod.Status.Phase == corev1.PodRunning {
				ck.Status = engine.CheckOK
				ck.Detail = "sandboxes get " + what + ", and " + pod.Name + " runs in kube-system, a network plugin that enforces NetworkPolicy (xmode " + checked + "; it cannot know for certain)"
				return ck
			}
		}
	}
	ck.Status = engine.CheckWarn
	ck.Detail = "sandboxes get " + what + ", but xmode " + checked + " and found none: unless an agent outside the cluster's pods enforces it, the policy does nothing and sandboxes have the pod network"
	ck.Fix = "run a network plugin that enforces NetworkPolicy (Calico, Cilium, kube-router, Antrea…), or check that yours does"
	return ck
}

// imageCheck says whether the image is on the nodes, which the nodes'
// status lists where xmode may read nodes; with XMODE_KUBE_IMAGE_PULL_POLICY
// Never an image missing everywhere fails every create.
func (p *Provider) imageCheck(ctx context.Context, c *client) engine.Check {
	ck := engine.Check{Name: "kubernetes image"}
	img := p.cfg.Image
	var nodes corev1.NodeList
	if err := c.core.Get().Resource("nodes").VersionedParams(&metav1.ListOptions{}, c.codec).Do(ctx).Into(&nodes); err != nil {
		ck.Status, ck.Detail = engine.CheckOK, img+" (pull policy "+p.cfg.KubePullPolicy+"); whether the nodes have it cannot be told: xmode may not list nodes"
		return ck
	}
	var have []string
	for _, n := range nodes.Items {
		for _, im := range n.Status.Images {
			if hasImage(im.Names, img) {
				have = append(have, n.Name)
				break
			}
		}
	}
	switch {
	case len(have) > 0:
		ck.Status, ck.Detail = engine.CheckOK, fmt.Sprintf("%s is on %d of %d nodes (%s)", img, len(have), len(nodes.Items), strings.Join(have, ", "))
	case p.cfg.KubePullPolicy == "Never":
		ck.Status, ck.Detail = engine.CheckFail, img+" is on none of the "+fmt.Sprint(len(nodes.Items))+" nodes and XMODE_KUBE_IMAGE_PULL_POLICY=Never: every sandbox create will fail (ErrImageNeverPull)"
		ck.Fix = "load the image into the nodes' runtime, or use the pull policy IfNotPresent"
	default:
		ck.Status, ck.Detail = engine.CheckOK, img+" is on none of the nodes yet: the first sandbox on a node pulls it (pull policy "+p.cfg.KubePullPolicy+")"
	}
	return ck
}

// hasImage reports whether one of a node's image names is img, as given or
// normalised the way the runtime lists it (docker.io/library/…).
func hasImage(names []string, img string) bool {
	want := []string{img}
	if !strings.Contains(img, "/") {
		want = append(want, "docker.io/library/"+img)
	} else if !strings.Contains(strings.Split(img, "/")[0], ".") {
		want = append(want, "docker.io/"+img)
	}
	for _, n := range names {
		for _, w := range want {
			if n == w {
				return true
			}
		}
	}
	return false
}
