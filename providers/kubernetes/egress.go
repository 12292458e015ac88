package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// Egress enforcement on kubernetes (docs/kubernetes.md, "Egress"; docs/
// network.md): a sandbox of network allow or open gets a proxy pod of its
// own, xmode-sbx-<id>-egress, running `xmode __egress` from
// XMODE_KUBE_EGRESS_IMAGE (a pod of its own: the containers of a pod share
// one network namespace, so a sidecar would hand the sandbox the proxy's
// way out). The sandbox pod's NetworkPolicy lets it reach that pod's proxy
// and resolver ports and nothing else, and lets nothing in; the proxy
// pod's lets in its sandbox alone. The proxy's directory is the proxy
// pod's memory: policies, secrets and the CA go in, and the log comes out,
// over exec (`xmode __egress-ctl`), never through a Secret or a ConfigMap.
// One proxy per sandbox, not per namespace: a pod has one address, a
// resolv.conf names no port, so a shared proxy could tell sandboxes' DNS
// questions apart only by their source address.

// Labels and names of the egress objects (docs/reference.md, "Kubernetes
// objects and labels").
const (
	// LabelRole marks the proxy pod and its NetworkPolicy apart from the
	// session's own pod and policy (which carry the same session labels).
	LabelRole       = "xmode.role"
	RoleEgressProxy = "egress-proxy"
	// EgressProxyPort and EgressDNSPort are where the proxy pod listens:
	// HTTP(S)_PROXY, and the sandbox pod's only nameserver.
	EgressProxyPort = 3128
	EgressDNSPort   = 53
	// egressContainer is the proxy pod's container; egressCheckContainer
	// the sandbox pod's init container that proves the policy holds.
	egressContainer      = "egress"
	egressCheckContainer = "egress-check"
	// egressDirIn is the proxy's directory: a memory-backed emptyDir.
	egressDirIn = "/egress"
	// caDirIn is where a sandbox with credentials finds its CA (its root
	// filesystem is read-only).
	caDirIn = Workspace + "/.egress"
	// egressLogSlack is what a log may exceed its cap by when read back
	// (the proxy's one truncated line, a line it was writing).
	egressLogSlack = 256 << 10
)

// EgressPodName is the name of a session's proxy pod (and of its
// NetworkPolicy).
func EgressPodName(sessionID string) string { return PodName(sessionID) + "-egress" }

// egressSetup is what a proxied sandbox's pod needs of its proxy.
type egressSetup struct {
	proxy  netip.Addr // the proxy pod's address
	uid    string     // the proxy pod's
	creds  bool
	served chan error // the proxy's answer for the sandbox's policy
}

// checkEgressSpec refuses a proxied network without a policy, a policy of
// another sandbox, and one this install cannot enforce: without
// XMODE_KUBE_EGRESS_IMAGE there is no proxy to run. Before anything is made.
func (p *Provider) checkEgressSpec(spec engine.Spec) error {
	m, proxied := p.cfg.EgressMode()
	switch {
	case spec.Egress == nil && proxied:
		return fmt.Errorf("provision %s: network %s needs the sandbox's egress policy (engine.Spec.Egress)", spec.SessionID, m)
	case spec.Egress == nil:
		return nil
	case spec.Egress.Sandbox != spec.SessionID:
		return fmt.Errorf("provision %s: the egress policy is sandbox %s's", spec.SessionID, spec.Egress.Sandbox)
	}
	return p.EgressReady()
}

var _ engine.EgressReadier = (*Provider)(nil)

// EgressReady refuses a proxied network where this install has no proxy to
// run (engine.EgressReadier): XMODE_KUBE_EGRESS_IMAGE is unset.
func (p *Provider) EgressReady() error {
	if p.cfg.KubeEgressImage == "" {
		return fail.Refusedf("a network with an egress policy (allow, open) on kubernetes needs the egress proxy's image, and XMODE_KUBE_EGRESS_IMAGE is unset: build it from xmode's static binary and make it pullable by the nodes (docs/kubernetes.md, \"Egress\"), or XMODE_SANDBOX_NETWORK=none")
	}
	return nil
}

// restricted is the security context of every container xmode makes:
// Pod Security "restricted".
func restricted() *corev1.SecurityContext {
	yes, no := true, false
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		Privileged:               &no,
		ReadOnlyRootFilesystem:   &yes,
		RunAsNonRoot:             &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// egressLabels are a proxy object's labels: the session's, and the role.
func egressLabels(spec engine.Spec) map[string]string {
	l := map[string]string{}
	for k, v := range spec.Labels {
		l[k] = v
	}
	l[LabelManagedBy] = "xmode"
	l[LabelRole] = RoleEgressProxy
	return l
}

// proxyPodSpec is a session's proxy pod: restricted-hardened, its
// directory in memory, restarted by the kubelet when the process dies
// (the pod keeps its address and its directory; meanwhile the sandbox
// reaches nothing, for nothing else listens there).
func (p *Provider) proxyPodSpec(spec engine.Spec, cfgJSON, extraCA string) *corev1.Pod {
	yes, no := true, false
	uid := int64(65532)
	grace := int64(2)
	logCap := max(p.cfg.EvidenceMaxBytes, 0)
	dirSize := resource.NewQuantity(logCap*2+16<<20, resource.BinarySI)
	mem := resource.NewQuantity(logCap*2+256<<20, resource.BinarySI)
	cpu := resource.MustParse("50m")
	memReq := resource.MustParse("32Mi")
	args := []string{"/xmode", "__egress", "--dir", egressDirIn, "--keep-going", "--config-json", cfgJSON}
	if extraCA != "" {
		args = append(args, "--extra-ca-pem", extraCA)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: EgressPodName(spec.SessionID), Labels: egressLabels(spec)},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyAlways,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				// Port 53 without a capability: a safe, namespaced sysctl.
				Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
			},
			Containers: []corev1.Container{{
				Name:            egressContainer,
				Image:           p.cfg.KubeEgressImage,
				ImagePullPolicy: corev1.PullPolicy(p.cfg.KubePullPolicy),
				Command:         args,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memReq},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: *mem},
				},
				SecurityContext: restricted(),
				VolumeMounts:    []corev1.VolumeMount{{Name: "egress", MountPath: egressDirIn}},
			}},
			Volumes: []corev1.Volume{{Name: "egress", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium: corev1.StorageMediumMemory, SizeLimit: dirSize,
			}}}},
		},
	}
}

// proxyPolicySpec is the proxy pod's NetworkPolicy: in, its sandbox alone,
// on the proxy's and the resolver's ports (TCP 53 too, which the sandbox's
// own policy does not allow: the canary's closed door); out, anything,
// which the proxy decides by the sandbox's policy and its block list.
func proxyPolicySpec(spec engine.Spec) *networkingv1.NetworkPolicy {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	pp, dp := intstr.FromInt32(EgressProxyPort), intstr.FromInt32(EgressDNSPort)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: EgressPodName(spec.SessionID), Labels: egressLabels(spec)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: proxySelector(spec)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: sandboxSelector(spec)}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &pp}, {Protocol: &udp, Port: &dp}, {Protocol: &tcp, Port: &dp}},
			}},
		},
	}
}

// proxySelector selects a session's proxy pod; sandboxSelector its own pod,
// which has the same session labels but no role: without "has no role" the
// sandbox's policy would select the proxy too, and cut it off.
func proxySelector(spec engine.Spec) map[string]string {
	return map[string]string{LabelSession: spec.SessionID, LabelInstance: spec.Labels[LabelInstance], LabelRole: RoleEgressProxy}
}

func sandboxSelector(spec engine.Spec) *metav1.LabelSelector {
	return &metav1.LabelSelector{
		MatchLabels:      map[string]string{LabelSession: spec.SessionID, LabelInstance: spec.Labels[LabelInstance]},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelRole, Operator: metav1.LabelSelectorOpDoesNotExist}},
	}
}

// sandboxEgressRules are what a proxied sandbox's NetworkPolicy allows
// out: its proxy pod's proxy port (TCP) and resolver (UDP), nothing else.
func sandboxEgressRules(spec engine.Spec) []networkingv1.NetworkPolicyEgressRule {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	pp, dp := intstr.FromInt32(EgressProxyPort), intstr.FromInt32(EgressDNSPort)
	return []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: proxySelector(spec)}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &pp}, {Protocol: &udp, Port: &dp}},
	}}
}

// proxyConfig is the proxy's egress.json: what it never connects to
// besides the block list every policy has — the apiserver (by the
// kubeconfig's address, the kubernetes Service's, the pod's own variable)
// and the nodes' addresses, never; the pods' ranges (other sandboxes, other
// workloads) unless a CIDR rule names them. What xmode may not read is left
// out (docs/kubernetes.md, "Egress").
func (p *Provider) proxyConfig(ctx context.Context, c *client) (cfgJSON, extraCA string, err error) {
	cfg := egress.Config{LogMaxBytes: p.cfg.EvidenceMaxBytes}
	seen := map[netip.Prefix]bool{}
	add := func(pfx netip.Prefix, reason string, liftable bool) {
		if !pfx.IsValid() || seen[pfx.Masked()] {
			return
		}
		seen[pfx.Masked()] = true
		cfg.Block = append(cfg.Block, egress.Block{Prefix: pfx.Masked(), Reason: reason, Liftable: liftable})
	}
	host := func(s, reason string) {
		if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap()
			add(netip.PrefixFrom(a, a.BitLen()), reason, false)
		}
	}
	if u, err := url.Parse(c.host); err == nil {
		host(u.Hostname(), "the Kubernetes apiserver")
	}
	host(os.Getenv("KUBERNETES_SERVICE_HOST"), "the Kubernetes apiserver")
	var svc corev1.Service
	if err := c.core.Get().Namespace("default").Resource("services").Name("kubernetes").Do(ctx).Into(&svc); err == nil {
		for _, ip := range svc.Spec.ClusterIPs {
			host(ip, "the Kubernetes apiserver (its Service)")
		}
	}
	var nodes corev1.NodeList
	if err := c.core.Get().Resource("nodes").VersionedParams(&metav1.ListOptions{}, c.codec).Do(ctx).Into(&nodes); err != nil {
		// Not known (the Role grants the namespace alone): every private
		// range instead, where the nodes and the pods almost always are.
		for _, pfx := range privateRanges {
			add(pfx, "a private range: the cluster's nodes and pods are not known to xmode (it may not list nodes)", true)
		}
	} else {
		for _, n := range nodes.Items {
			for _, a := range n.Status.Addresses {
				host(a.Address, "a node of the cluster ("+n.Name+")")
			}
			for _, cidr := range append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...) {
				if pfx, err := netip.ParsePrefix(cidr); err == nil {
					add(pfx, "the cluster's pods (other sandboxes) on "+n.Name, true)
				}
			}
		}
	}
	if p.cfg.EgressCA != "" {
		pem, err := readBounded(p.cfg.EgressCA, 256<<10)
		if err != nil {
			return "", "", fail.Usagef("XMODE_SANDBOX_EGRESS_CA: %v", err)
		}
		extraCA = string(pem)
	}
	b, err := egress.EncodeConfig(cfg)
	return string(b), extraCA, err
}

// privateRanges are blocked when the cluster's own addresses cannot be
// listed: RFC 1918, shared address space, unique local IPv6.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("fc00::/7"),
}

// readBounded reads a regular file of at most max bytes.
func readBounded(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
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

// startEgress makes a session's proxy: its NetworkPolicy, then its pod,
// and waits for the pod's address (what the sandbox pod names); the policy
// is served meanwhile, once the proxy runs (wait for it with served). What
// it made stays on failure: removeEgress takes it away.
func (p *Provider) startEgress(ctx context.Context, c *client, spec engine.Spec) (*egressSetup, error) {
	cfgJSON, extraCA, err := p.proxyConfig(ctx, c)
	if err != nil {
		return nil, err
	}
	name := EgressPodName(spec.SessionID)
	cctx, cancel := p.call(ctx)
	defer cancel()
	if _, err := c.createPolicy(cctx, proxyPolicySpec(spec)); err != nil {
		if isAlreadyExists(err) {
			return nil, fail.Failedf("a NetworkPolicy named %s already exists in namespace %s: stop the session first (`xmode sandbox stop`) or delete it (`kubectl delete networkpolicy -n %s %s`)", name, c.ns, c.ns, name)
		}
		return nil, p.wrap(err, "create the NetworkPolicy of "+name)
	}
	created, err := c.createPod(cctx, p.proxyPodSpec(spec, cfgJSON, extraCA))
	if err != nil {
		if isAlreadyExists(err) {
			return nil, fail.Failedf("a pod named %s already exists in namespace %s: stop the session first (`xmode sandbox stop`) or delete it (`kubectl delete pod -n %s %s`)", name, c.ns, c.ns, name)
		}
		if httpStatus(err) == 403 && strings.Contains(err.Error(), "violates PodSecurity") {
			return nil, fail.Enginef("namespace %s refused the egress proxy's pod: %v", c.ns, err)
		}
		return nil, p.wrap(err, "create pod "+name)
	}
	// The pod owns its policy.
	own := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q,"uid":%q}]}}`, name, created.UID)
	if err := c.patchPolicy(cctx, name, []byte(own)); err != nil {
		return nil, p.wrap(err, "give the NetworkPolicy of "+name+" to its pod")
	}
	eg := &egressSetup{uid: string(created.UID), creds: len(spec.Egress.Credentials) > 0, served: make(chan error, 1)}
	if eg.proxy, err = p.waitPodIP(ctx, c, name, eg.uid); err != nil {
		return nil, err
	}
	pol := *spec.Egress
	go func() {
		err := p.waitRunning(ctx, name, eg.uid, time.Now().Add(p.cfg.KubeStartTimeout))
		if err == nil {
			err = p.servePolicy(ctx, name, &pol, spec.Getenv)
		}
		eg.served <- err
	}()
	return eg, nil
}

// waitPodIP waits until a pod has its address (the CNI gave it one: well
// before its containers run), at most XMODE_KUBE_START_TIMEOUT.
func (p *Provider) waitPodIP(ctx context.Context, c *client, name, uid string) (netip.Addr, error) {
	wctx, cancel := context.WithTimeout(ctx, p.cfg.KubeStartTimeout)
	defer cancel()
	for interval := 10 * time.Millisecond; ; interval = min(interval*2, 200*time.Millisecond) {
		cctx, ccancel := p.call(wctx)
		pod, err := c.getPod(cctx, name)
		ccancel()
		switch {
		case err != nil && wctx.Err() == nil:
			return netip.Addr{}, p.wrap(err, "wait for pod "+name)
		case err == nil && string(pod.UID) != uid:
			return netip.Addr{}, fail.Failedf("pod %s was replaced while it started", name)
		case err == nil && pod.Status.PodIP != "":
			a, perr := netip.ParseAddr(pod.Status.PodIP)
			if perr != nil {
				return netip.Addr{}, fmt.Errorf("pod %s: address %q: %w", name, pod.Status.PodIP, perr)
			}
			return a, nil
		case err == nil:
			if _, why, final := podStarted(pod); final {
				return netip.Addr{}, fail.Enginef("the egress proxy's pod %s cannot start: %s — check XMODE_KUBE_EGRESS_IMAGE (docs/kubernetes.md, \"Egress\")", name, why)
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return netip.Addr{}, ctx.Err()
			}
			return netip.Addr{}, fail.Enginef("the egress proxy's pod %s in namespace %s got no address within %s (XMODE_KUBE_START_TIMEOUT): see `kubectl describe pod -n %s %s`", name, c.ns, p.cfg.KubeStartTimeout, c.ns, name)
		case <-time.After(interval):
		}
	}
}

// applyEgress points a sandbox pod at its proxy: the proxy variables and
// the credentials' placeholders in its environment (never a secret), the
// proxy its only nameserver, and an init container of the proxy's image
// that lets the sandbox start only once its NetworkPolicy holds.
func (p *Provider) applyEgress(pod *corev1.Pod, spec engine.Spec, eg *egressSetup) {
	c := &pod.Spec.Containers[0]
	proxyURL := "http://" + netip.AddrPortFrom(eg.proxy, EgressProxyPort).String()
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: proxyURL})
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: "NO_PROXY", Value: "localhost,127.0.0.1,::1"}, corev1.EnvVar{Name: "no_proxy", Value: "localhost,127.0.0.1,::1"})
	for _, cr := range spec.Egress.Credentials {
		if cr.Env != "" {
			c.Env = append(c.Env, corev1.EnvVar{Name: cr.Env, Value: cr.Placeholder})
		}
	}
	if eg.creds {
		bundle, ca := path.Join(caDirIn, "ca-bundle.pem"), path.Join(caDirIn, "egress-ca.pem")
		for _, kv := range [][2]string{{"SSL_CERT_FILE", bundle}, {"REQUESTS_CA_BUNDLE", bundle}, {"CURL_CA_BUNDLE", bundle}, {"GIT_SSL_CAINFO", bundle}, {"NODE_EXTRA_CA_CERTS", ca}} {
			c.Env = append(c.Env, corev1.EnvVar{Name: kv[0], Value: kv[1]})
		}
	}
	pod.Spec.DNSPolicy = corev1.DNSNone
	ndots, attempts, timeout := "0", "2", "2"
	pod.Spec.DNSConfig = &corev1.PodDNSConfig{
		Nameservers: []string{eg.proxy.String()},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: &ndots}, {Name: "attempts", Value: &attempts}, {Name: "timeout", Value: &timeout}},
	}
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{
		Name:            egressCheckContainer,
		Image:           p.cfg.KubeEgressImage,
		ImagePullPolicy: corev1.PullPolicy(p.cfg.KubePullPolicy),
		Command: []string{"/xmode", egress.CtlCommand, "canary",
			netip.AddrPortFrom(eg.proxy, EgressProxyPort).String(), netip.AddrPortFrom(eg.proxy, EgressDNSPort).String()},
		Resources:       corev1.ResourceRequirements{Requests: small, Limits: small},
		SecurityContext: restricted(),
	})
}

// proxiedPolicy is a proxied sandbox's NetworkPolicy: nothing in, and out
// only to its proxy pod.
func proxiedPolicy(spec engine.Spec) *networkingv1.NetworkPolicy {
	np := policySpec(spec)
	np.Spec.PodSelector = *sandboxSelector(spec)
	np.Spec.Egress = sandboxEgressRules(spec)
	return np
}

// egressStartFailure turns the sandbox pod's failure to start into the
// reason when it was the egress check's: the cluster does not enforce the
// NetworkPolicy, or the proxy never listened.
func (p *Provider) egressStartFailure(ctx context.Context, name string, err error) error {
	c, cerr := p.client()
	if cerr != nil {
		return err
	}
	cctx, cancel := p.call(context.WithoutCancel(ctx))
	defer cancel()
	pod, gerr := c.getPod(cctx, name)
	if gerr != nil {
		return err
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if t := cs.State.Terminated; cs.Name == egressCheckContainer && t != nil && t.ExitCode != 0 {
			msg := strings.TrimSpace(t.Message)
			if b, lerr := c.core.Get().Namespace(c.ns).Resource("pods").Name(name).SubResource("log").
				Param("container", egressCheckContainer).Param("limitBytes", "4096").DoRaw(cctx); lerr == nil && len(b) > 0 {
				msg = strings.TrimSpace(string(b))
			}
			return fail.Refusedf("the sandbox's egress is not enforced, so it was not started: %s — network allow and open need a network plugin that enforces NetworkPolicy (Calico, Cilium, kube-router, Antrea…; `xmode doctor`), else use XMODE_SANDBOX_NETWORK=none", msg)
		}
	}
	return err
}

// --- the proxy's directory, over exec -------------------------------------

// ctl runs `xmode __egress-ctl --dir /egress ARGS…` in the proxy pod.
func (p *Provider) ctl(ctx context.Context, pod string, stdin io.Reader, stdout io.Writer, args ...string) error {
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	errb := &headBuffer{limit: 8 << 10}
	if stdout == nil {
		stdout = io.Discard
	}
	cmd := append([]string{"/xmode", egress.CtlCommand, "--dir", egressDirIn}, args...)
	err := p.stream(hctx, pod, streamReq{container: egressContainer, cmd: cmd, stdin: stdin, stdout: stdout, stderr: errb})
	code, xerr := exitCode(err)
	switch {
	case xerr != nil:
		return fmt.Errorf("%s %s in the egress proxy %s: %w", egress.CtlCommand, args[0], pod, xerr)
	case code != 0:
		return &ctlError{what: fmt.Sprintf("%s %s in the egress proxy %s", egress.CtlCommand, args[0], pod), out: strings.TrimSpace(errb.String())}
	}
	return nil
}

// ctlError is an action the proxy pod refused or failed, with what it said.
type ctlError struct{ what, out string }

func (e *ctlError) Error() string { return e.what + ": " + e.out }

// isMissing reports an action that failed for a file that is not there.
func isMissing(err error) bool {
	var ce *ctlError
	return errors.As(err, &ce) && strings.Contains(ce.out, "no such file")
}

// servePolicy completes pol for the proxy pod (it listens on every address
// of its pod; each credential's secret a file of the pod's memory that only
// the proxy reads), puts it there and waits until the proxy serves it.
func (p *Provider) servePolicy(ctx context.Context, pod string, pol *egress.Policy, getenv func(string) string) error {
	pol.Listen = "0.0.0.0:" + strconv.Itoa(EgressProxyPort)
	pol.DNS = "0.0.0.0:" + strconv.Itoa(EgressDNSPort)
	if getenv == nil {
		getenv = os.Getenv
	}
	creds := make([]egress.Credential, 0, len(pol.Credentials))
	for i, c := range pol.Credentials {
		secret, err := c.Secret(getenv)
		if err != nil {
			return fail.Usagef("%v: set it where xmode runs (the sandbox gets a placeholder, the proxy the value)", err)
		}
		file := strconv.Itoa(i)
		if c.Env != "" {
			file += "-" + c.Env
		}
		rel := path.Join("secrets", pol.Sandbox, file)
		if err := p.ctl(ctx, pod, strings.NewReader(secret), nil, "put", rel); err != nil {
			return fmt.Errorf("credential for %s: %w", c.Host, err)
		}
		c.Env, c.File = "", path.Join(egressDirIn, rel)
		creds = append(creds, c)
	}
	pol.Credentials = creds
	b, err := egress.EncodePolicy(*pol)
	if err != nil {
		return err
	}
	if err := p.ctl(ctx, pod, bytes.NewReader(b), nil, "put", path.Join(egress.PoliciesDir, pol.Sandbox+".json")); err != nil {
		return fmt.Errorf("egress policy of %s: %w", pol.Sandbox, err)
	}
	if err := p.ctl(ctx, pod, nil, nil, "serve", pol.Sandbox, egress.PolicyHash(b)); err != nil {
		var ce *ctlError
		if errors.As(err, &ce) && strings.Contains(ce.out, "refuses") {
			return fail.Failedf("%s", ce.out)
		}
		return fail.Enginef("the egress proxy did not serve sandbox %s's policy: %v — see `kubectl logs %s`", pol.Sandbox, err, pod)
	}
	return nil
}

// installCA puts the sandbox's CA (the proxy's certificate for it) where
// its variables point: its own file, and a bundle of the image's roots
// and it. As the sandbox's user, in its workspace: its root is read-only.
func (p *Provider) installCA(ctx context.Context, proxyPod, sandboxPod, sandbox string) error {
	var ca bytes.Buffer
	if err := p.ctl(ctx, proxyPod, nil, &limitWriter{w: &ca, n: 64 << 10}, "cat", path.Join("ca", sandbox, egress.CACertFile)); err != nil {
		return fmt.Errorf("the egress CA of %s: %w", sandbox, err)
	}
	const script = `dir=$1 ca=$2
mkdir -p "$dir" && printf '%s\n' "$ca" > "$dir/egress-ca.pem" || exit 1
b=
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem /etc/ssl/ca-bundle.pem; do
	if [ -z "$b" ] && [ -f "$f" ]; then b=$f; fi
done
{ if [ -n "$b" ]; then cat "$b"; fi; cat "$dir/egress-ca.pem"; } > "$dir/ca-bundle.pem" && chmod 0644 "$dir/egress-ca.pem" "$dir/ca-bundle.pem"`
	code, out, err := p.runHelper(ctx, sandboxPod, []string{"/bin/sh", "-c", script, "xmode-egress", caDirIn, strings.TrimSpace(ca.String())}, nil, 30*time.Second)
	if err != nil {
		return fmt.Errorf("install the egress CA in %s: %w", sandboxPod, err)
	}
	if code != 0 {
		return fmt.Errorf("install the egress CA in %s: exit %d: %s", sandboxPod, code, strings.TrimSpace(out))
	}
	return nil
}

// limitWriter fails a write past n bytes: what a pod sends is bounded.
type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if int64(len(b)) > l.n {
		return 0, errors.New("more than the bound xmode reads")
	}
	l.n -= int64(len(b))
	return l.w.Write(b)
}

// --- teardown ---------------------------------------------------------------

// proxyPod returns a session's proxy pod when there is one of xmode's for
// it; nil when there is none.
func (p *Provider) proxyPod(ctx context.Context, sessionID string) (*corev1.Pod, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	pod, err := c.getPod(cctx, EgressPodName(sessionID))
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, p.wrap(err, "get pod "+EgressPodName(sessionID))
	}
	if err := checkOwned(pod.Labels, sessionID); err != nil || pod.Labels[LabelRole] != RoleEgressProxy {
		return nil, fail.Refusedf("pod %s in namespace %s is not session %s's egress proxy: refusing to use it", pod.Name, c.ns, sessionID)
	}
	return pod, nil
}

// removeEgress ends a session's proxy after keeping its network log in the
// run's evidence (runs/<run>/network/<session>.jsonl): the sandbox pod
// goes first (deleted leaving the proxy pod, which it owns, in place), so
// that its connections end and their lines are written; then the log is
// read over exec; then the proxy pod and its policy go. A log that a
// running proxy could not hand over stops it, so that the next teardown
// tries again; a proxy that does not run (its pod deleted, its container
// failing) has no log to give, and is removed.
func (p *Provider) removeEgress(ctx context.Context, sessionID, runID, sandboxUID string) error {
	if !fsguard.ValidID("sbx_", sessionID) {
		return nil
	}
	px, err := p.proxyPod(ctx, sessionID)
	if err != nil || px == nil {
		return err
	}
	c, err := p.client()
	if err != nil {
		return err
	}
	if runID == "" {
		runID = px.Labels[LabelRun]
	}
	if err := p.orphanSandboxPod(ctx, c, sessionID, sandboxUID); err != nil {
		return err
	}
	if px.DeletionTimestamp == nil {
		if ok, _, _ := podStarted(px); ok {
			if err := p.keepNetworkLog(ctx, px.Name, runID, sessionID); err != nil {
				return err
			}
		} else {
			p.warnf("the egress proxy %s does not run: the network log of %s is lost with it", px.Name, sessionID)
		}
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	if err := p.removePod(cctx, px.Name, sessionID, string(px.UID)); err != nil {
		return err
	}
	return p.removePolicy(cctx, px.Name, sessionID)
}

// orphanSandboxPod deletes the session's pod without its dependents (the
// proxy pod it owns) and waits, a little, until it is gone.
func (p *Provider) orphanSandboxPod(ctx context.Context, c *client, sessionID, uid string) error {
	name := PodName(sessionID)
	cctx, cancel := p.call(ctx)
	defer cancel()
	pod, err := c.getPod(cctx, name)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return p.wrap(err, "get pod "+name)
	}
	if checkOwned(pod.Labels, sessionID) != nil || pod.Labels[LabelRole] != "" || (uid != "" && string(pod.UID) != uid) {
		return nil // not the one to end here: Destroy's own checks speak for it
	}
	if pod.DeletionTimestamp == nil {
		grace, orphan := int64(deleteGrace), metav1.DeletePropagationOrphan
		u := pod.UID
		opts := &metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &orphan, Preconditions: &metav1.Preconditions{UID: &u}}
		if err := c.core.Delete().Namespace(c.ns).Resource("pods").Name(name).Body(opts).Do(cctx).Error(); err != nil && !notFound(err) {
			return p.wrap(err, "delete pod "+name)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		got, err := c.getPod(cctx, name)
		if notFound(err) || (err == nil && got.UID != pod.UID) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.warnf("pod %s is still being deleted: the lines of connections it still holds may be missing from its network log", name)
	return nil
}

// keepNetworkLog copies a session's network log (and the count of the
// lines its cap dropped) out of the proxy pod into the run's evidence, each
// whole (a temporary file renamed into place) and bounded by the log's cap.
func (p *Provider) keepNetworkLog(ctx context.Context, proxyPod, runID, sessionID string) error {
	dst, err := p.guard.NetworkLog(runID, sessionID)
	if err != nil {
		return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
	}
	runDir, err := p.guard.RunDir(runID)
	if err != nil {
		return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
	}
	if err := os.MkdirAll(runDir, fsguard.EvidenceDirMode); err != nil {
		return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
	}
	root, err := os.OpenRoot(runDir)
	if err != nil {
		return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
	}
	defer root.Close()
	if err := root.Mkdir(fsguard.NetworkDirName, fsguard.EvidenceDirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
	}
	live := path.Join("logs", sessionID+".jsonl")
	for _, f := range [][2]string{{live, filepath.Base(dst)}, {egress.DroppedPath(live), filepath.Base(egress.DroppedPath(dst))}} {
		if err := p.copyFromProxy(ctx, proxyPod, f[0], root, path.Join(fsguard.NetworkDirName, f[1])); err != nil {
			return fmt.Errorf("keep the network log of %s: %w", sessionID, err)
		}
	}
	return nil
}

// copyFromProxy copies one file of the proxy's directory to rel under root
// (nothing when the proxy has none), whole and bounded.
func (p *Provider) copyFromProxy(ctx context.Context, pod, src string, root *os.Root, rel string) error {
	tmp := path.Join(path.Dir(rel), "."+path.Base(rel)+"."+rand.Text())
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	bound := max(p.cfg.EvidenceMaxBytes, 0) + egressLogSlack
	err = p.ctl(ctx, pod, nil, &limitWriter{w: out, n: bound}, "cat", src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if isMissing(err) {
		_ = root.Remove(tmp)
		return nil
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

// --- engine.EgressEnforcer ----------------------------------------------------

// SetEgress serves a new policy to a live sandbox (engine.EgressEnforcer): a
// new policy file put into the proxy pod and a reload; new connections meet
// it from when it returns. The first credential installs the sandbox's CA.
func (p *Provider) SetEgress(ctx context.Context, sb engine.Sandbox, pol egress.Policy, getenv func(string) string) error {
	if pol.Sandbox != sb.SessionID {
		return fmt.Errorf("set egress of %s: the policy is sandbox %s's", sb.SessionID, pol.Sandbox)
	}
	if !fsguard.ValidID("sbx_", sb.SessionID) {
		return fail.Refusedf("session id %q is malformed: refusing to name a pod after it", sb.SessionID)
	}
	px, err := p.proxyPod(ctx, sb.SessionID)
	if err != nil {
		return err
	}
	if px == nil {
		return fail.Refusedf("session %s has no egress proxy (its network is not proxied, or its proxy pod was deleted, which leaves it no way out): create it with XMODE_SANDBOX_NETWORK=allow", sb.SessionID)
	}
	if ok, why, _ := podStarted(px); !ok {
		return fail.Failedf("the egress proxy %s of session %s does not run (%s): its sandbox reaches nothing until it does", px.Name, sb.SessionID, why)
	}
	had := false
	var st bytes.Buffer
	if err := p.ctl(ctx, px.Name, nil, &limitWriter{w: &st, n: 1 << 20}, "cat", path.Join(egress.PoliciesDir, sb.SessionID+".json")); err == nil {
		var old egress.Policy
		had = json.Unmarshal(st.Bytes(), &old) == nil && len(old.Credentials) > 0
	}
	if err := p.servePolicy(ctx, px.Name, &pol, getenv); err != nil {
		return err
	}
	if len(pol.Credentials) > 0 && !had {
		return p.installCA(ctx, px.Name, PodName(sb.SessionID), sb.SessionID)
	}
	return nil
}

// EgressLog is where a sandbox's network log can be read on this host
// (engine.EgressEnforcer): while its proxy runs, a copy taken now
// (<root>/egress/kubernetes/<session>.jsonl); after teardown, the run's
// copy; "" when it has neither.
func (p *Provider) EgressLog(ctx context.Context, sb engine.Sandbox) (string, error) {
	if !fsguard.ValidID("sbx_", sb.SessionID) {
		return "", fail.Refusedf("session id %q is malformed; refusing to derive a path from it", sb.SessionID)
	}
	px, err := p.proxyPod(ctx, sb.SessionID)
	if err != nil {
		return "", err
	}
	if px != nil && px.DeletionTimestamp == nil {
		if ok, _, _ := podStarted(px); ok {
			return p.liveLogCopy(ctx, px.Name, sb.SessionID)
		}
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

// liveLogCopy copies a running proxy's log to this host, whole.
func (p *Provider) liveLogCopy(ctx context.Context, pod, sessionID string) (string, error) {
	dir := filepath.Join(p.guard.EgressDir(), Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	rel := sessionID + ".jsonl"
	if err := p.copyFromProxy(ctx, pod, path.Join("logs", rel), root, rel); err != nil {
		return "", fmt.Errorf("read the network log of %s: %w", sessionID, err)
	}
	out := filepath.Join(dir, rel)
	if _, err := os.Lstat(out); err != nil {
		// No connection yet: an empty log, not none.
		if err := os.WriteFile(out, nil, 0o600); err != nil {
			return "", err
		}
	}
	return out, nil
}

// --- doctor -------------------------------------------------------------------

// egressCheck is doctor's line on egress policies on this cluster: the
// proxy's image, and the network plugin that must enforce the
// NetworkPolicy that leaves the proxy the sandbox's only way out (each
// proxied sandbox proves it at its start, and is refused otherwise).
func (p *Provider) egressCheck(plugin engine.Check) engine.Check {
	ck := engine.Check{Name: "kubernetes egress", Method: "proxy"}
	_, proxied := p.cfg.EgressMode()
	bad := engine.CheckWarn
	if proxied {
		bad = engine.CheckFail
	}
	switch {
	case p.cfg.KubeEgressImage == "":
		ck.Status, ck.Method = bad, "none"
		ck.Detail = "not enforced: XMODE_KUBE_EGRESS_IMAGE is unset, so network allow and open are refused (exit 4)"
		ck.Fix = "build the egress proxy's image from xmode's static binary and set XMODE_KUBE_EGRESS_IMAGE (docs/kubernetes.md, \"Egress\")"
	case plugin.Status != engine.CheckOK:
		ck.Status = bad
		ck.Detail = "the egress proxy's image is " + p.cfg.KubeEgressImage + ", but whether the cluster enforces NetworkPolicy is not known (" + plugin.Detail + "): each proxied sandbox is checked as it starts and refused where its NetworkPolicy does not hold"
		ck.Fix = plugin.Fix
	default:
		ck.Status = engine.CheckOK
		ck.Detail = "enforced: a sandbox of network allow or open reaches only its own egress proxy pod (" + p.cfg.KubeEgressImage + "), by a NetworkPolicy its start proves in force"
	}
	return ck
}
