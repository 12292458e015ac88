package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
)

// kubernetes-sigs/agent-sandbox (docs/kubernetes.md, "agent-sandbox"): where
// the cluster serves its API, a session's pod is a Sandbox's and a pool's
// entries come from a SandboxWarmPool of a SandboxTemplate carrying xmode's
// hardened pod spec, each taken by a SandboxClaim. xmode speaks it through
// the REST client with the few fields it uses, typed below, rather than
// the project's Go module: that module's go.mod would bring
// controller-runtime, prometheus, OpenTelemetry's exporters and
// k8s.io/apiextensions-apiserver at another release than the rest of
// k8s.io into xmode's module graph, for four structs. The apiserver holds
// the fields to the CRDs' schemas: xmode writes with fieldValidation=Strict,
// so a field it spells wrong is an error, not dropped (the tests run
// against the real CRDs of v1.0.1).

// The values of XMODE_KUBE_API.
const (
	APIAuto         = "auto"
	APIPods         = "pods"
	APIAgentSandbox = "agent-sandbox"
)

// The agent-sandbox API groups (v1beta1) and the resources xmode uses.
const (
	asGroup    = "agents.x-k8s.io"
	asExtGroup = "extensions.agents.x-k8s.io"
	asVersion  = "v1beta1"

	resSandboxes = "sandboxes"
	resClaims    = "sandboxclaims"
	resTemplates = "sandboxtemplates"
	resWarmPools = "sandboxwarmpools"
)

// Object kinds ListObjects lists in agent-sandbox mode, besides pods and
// NetworkPolicies.
const (
	KindSandbox = "sandbox"      // a session's Sandbox (a session of its own)
	KindClaim   = "sandboxclaim" // a pool entry's SandboxClaim, then its session's
)

// LabelPool marks the SandboxTemplate and SandboxWarmPool of a project's
// pool, and the pods the warm pool keeps: the project, made a label value.
// Those pods carry no xmode.managed label until a claim makes one a
// session's, so the reaper never takes the warm pool's pods for orphans.
const LabelPool = "xmode.pool"

// asShutdownPolicy: what the controller does to a Sandbox or SandboxClaim
// at its shutdown time — deletes it, with its pod, so nothing of a session
// whose xmode died is left.
const asShutdownPolicy = "Delete"

// asMeta is the metadata of an agent-sandbox object.
type asPodMetadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type asPodTemplate struct {
	Metadata asPodMetadata  `json:"metadata"`
	Spec     corev1.PodSpec `json:"spec"`
}

// asSandbox is agents.x-k8s.io/v1beta1 Sandbox: one pod, made by the
// controller after its podTemplate and named after the Sandbox.
type asSandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		PodTemplate    asPodTemplate `json:"podTemplate"`
		ShutdownTime   *metav1.Time  `json:"shutdownTime,omitempty"`
		ShutdownPolicy string        `json:"shutdownPolicy,omitempty"`
	} `json:"spec"`
	Status struct {
		Conditions []metav1.Condition `json:"conditions,omitempty"`
	} `json:"status,omitempty"`
}

// asNetworkPolicy is a SandboxTemplate's networkPolicy: the rules of the
// one NetworkPolicy the controller makes for the template's pods; empty
// lists deny everything.
type asNetworkPolicy struct {
	Ingress []networkingv1.NetworkPolicyIngressRule `json:"ingress,omitempty"`
	Egress  []networkingv1.NetworkPolicyEgressRule  `json:"egress,omitempty"`
}

// asTemplate is extensions.agents.x-k8s.io/v1beta1 SandboxTemplate.
type asTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		PodTemplate             asPodTemplate    `json:"podTemplate"`
		NetworkPolicy           *asNetworkPolicy `json:"networkPolicy,omitempty"`
		NetworkPolicyManagement string           `json:"networkPolicyManagement,omitempty"`
	} `json:"spec"`
}

// asWarmPool is extensions.agents.x-k8s.io/v1beta1 SandboxWarmPool.
type asWarmPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Replicas    *int32 `json:"replicas,omitempty"`
		TemplateRef struct {
			Name string `json:"name"`
		} `json:"sandboxTemplateRef"`
	} `json:"spec"`
}

// asClaim is extensions.agents.x-k8s.io/v1beta1 SandboxClaim: the
// controller gives it a Sandbox of its warm pool (a ready one when there is
// one), owned by the claim, and names it in status.sandbox.
type asClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		WarmPoolRef struct {
			Name string `json:"name"`
		} `json:"warmPoolRef"`
		Lifecycle *asLifecycle `json:"lifecycle,omitempty"`
	} `json:"spec"`
	Status struct {
		Conditions []metav1.Condition `json:"conditions,omitempty"`
		Sandbox    struct {
			Name string `json:"name,omitempty"`
		} `json:"sandbox,omitempty"`
	} `json:"status,omitempty"`
}

type asLifecycle struct {
	ShutdownTime   *metav1.Time `json:"shutdownTime,omitempty"`
	ShutdownPolicy string       `json:"shutdownPolicy,omitempty"`
}

// asList is a list of any of them; Items are decoded by the caller.
type asList struct {
	Items []json.RawMessage `json:"items"`
}

// asPath is the path of a namespaced agent-sandbox resource (and object).
func (c *client) asPath(group, resource, name string) string {
	p := "/apis/" + group + "/" + asVersion + "/namespaces/" + c.ns + "/" + resource
	if name != "" {
		p += "/" + name
	}
	return p
}

func asGroupOf(resource string) string {
	if resource == resSandboxes {
		return asGroup
	}
	return asExtGroup
}

// asGet reads one object into out.
func (c *client) asGet(ctx context.Context, resource, name string, out any) error {
	b, err := c.core.Get().AbsPath(c.asPath(asGroupOf(resource), resource, name)).Do(ctx).Raw()
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// asCreate creates obj, its fields held to the CRD's schema (an unknown
// field is an error), and reads the result into out.
func (c *client) asCreate(ctx context.Context, resource string, obj, out any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	b, err := c.core.Post().AbsPath(c.asPath(asGroupOf(resource), resource, "")).Param("fieldValidation", "Strict").
		Body(body).Do(ctx).Raw()
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// asPatch applies a JSON merge patch.
func (c *client) asPatch(ctx context.Context, resource, name string, patch []byte) error {
	return c.core.Patch(mergePatch).AbsPath(c.asPath(asGroupOf(resource), resource, name)).Param("fieldValidation", "Strict").
		Body(patch).Do(ctx).Error()
}

// asDelete deletes an object, only the one of uid when uid is not "", and
// lets the garbage collector delete what it owns (its Sandbox, its pod).
func (c *client) asDelete(ctx context.Context, resource, name, uid string) error {
	bg := metav1.DeletePropagationBackground
	opts := &metav1.DeleteOptions{PropagationPolicy: &bg}
	if uid != "" {
		u := types.UID(uid)
		opts.Preconditions = &metav1.Preconditions{UID: &u}
	}
	body, _ := json.Marshal(opts)
	return c.core.Delete().AbsPath(c.asPath(asGroupOf(resource), resource, name)).Body(body).Do(ctx).Error()
}

// asList lists the objects of a resource matching selector.
func (c *client) asList(ctx context.Context, resource, selector string) ([]json.RawMessage, error) {
	b, err := c.core.Get().AbsPath(c.asPath(asGroupOf(resource), resource, "")).Param("labelSelector", selector).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var l asList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("a list of %s: %w", resource, err)
	}
	return l.Items, nil
}

// served says whether the cluster serves every one of resources in group
// (discovery: one GET of the group version; a group it does not serve is
// a 404).
func (c *client) served(ctx context.Context, group string, resources ...string) (bool, error) {
	b, err := c.core.Get().AbsPath("/apis/" + group + "/" + asVersion).Do(ctx).Raw()
	if notFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var l metav1.APIResourceList
	if err := json.Unmarshal(b, &l); err != nil {
		return false, fmt.Errorf("discovery of %s: %w", group, err)
	}
	have := map[string]bool{}
	for _, r := range l.APIResources {
		have[r.Name] = true
	}
	for _, r := range resources {
		if !have[r] {
			return false, nil
		}
	}
	return true, nil
}

// apiState is the API a provider resolved, once.
type apiState struct {
	mu  sync.Mutex
	api string
}

// API is what sandboxes are on the cluster: "pods" or "agent-sandbox".
// XMODE_KUBE_API=auto asks the cluster (discovery, once per process):
// agent-sandbox when it serves Sandbox and the extensions' SandboxTemplate,
// SandboxWarmPool and SandboxClaim, pods otherwise. agent-sandbox on a
// cluster that does not serve them is exit 5, with the fix.
func (p *Provider) API(ctx context.Context) (string, error) {
	p.apiState.mu.Lock()
	defer p.apiState.mu.Unlock()
	if p.apiState.api != "" {
		return p.apiState.api, nil
	}
	want := p.cfg.KubeAPI
	if want == APIPods {
		p.apiState.api = APIPods
		return APIPods, nil
	}
	c, err := p.client()
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, p.pingTimeout())
	defer cancel()
	// The two groups at once: every command of auto mode pays for this.
	var ext bool
	var extErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		ext, extErr = c.served(cctx, asExtGroup, resTemplates, resWarmPools, resClaims)
	}()
	ok, err := c.served(cctx, asGroup, resSandboxes)
	<-done
	ok = ok && ext
	if err == nil {
		err = extErr
	}
	if err != nil {
		return "", p.wrap(err, "ask the cluster whether it serves agent-sandbox's API (XMODE_KUBE_API="+want+")")
	}
	switch {
	case ok:
		p.apiState.api = APIAgentSandbox
	case want == APIAgentSandbox:
		return "", fail.Enginef("XMODE_KUBE_API=agent-sandbox, but the cluster at %s does not serve %s/%s Sandbox with %s/%s SandboxTemplate, SandboxWarmPool and SandboxClaim: install kubernetes-sigs/agent-sandbox (v1.0.1, its controller with its extensions on), or set XMODE_KUBE_API=pods", c.host, asGroup, asVersion, asExtGroup, asVersion)
	default:
		p.apiState.api = APIPods
	}
	return p.apiState.api, nil
}

// agentSandbox reports whether sandboxes are agent-sandbox's.
func (p *Provider) agentSandbox(ctx context.Context) (bool, error) {
	api, err := p.API(ctx)
	return api == APIAgentSandbox, err
}

// ownerRef points an object at the one that owns it, so that the garbage
// collector deletes it with its owner.
type ownerRef struct {
	APIVersion, Kind, Name, UID string
}

func (o ownerRef) patch() []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []map[string]string{{
		"apiVersion": o.APIVersion, "kind": o.Kind, "name": o.Name, "uid": o.UID,
	}}}})
	return b
}

// objectLabels are the labels of an object xmode makes for a session (its
// pod, Sandbox, SandboxClaim, NetworkPolicy): the spec's, the owner's as a
// label value, managed-by.
func objectLabels(spec engine.Spec) map[string]string {
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelManagedBy] = "xmode"
	if v := labelValue(spec.User); v != "" {
		labels[LabelUser] = v
	}
	return labels
}

// shutdownTime is the agent-sandbox shutdown time of a sandbox whose pod's
// deadline is the Unix second d (none for 0).
func shutdownTime(d int64) *metav1.Time {
	if d <= 0 {
		return nil
	}
	t := metav1.NewTime(time.Unix(d, 0).UTC())
	return &t
}

// startSandbox makes a session's own Sandbox, named like its pod, whose
// podTemplate is xmode's pod; the controller makes the pod (named after the
// Sandbox) and deletes it, with the Sandbox, at its shutdown time.
func (p *Provider) startSandbox(ctx context.Context, c *client, spec engine.Spec, pod *corev1.Pod) (ownerRef, error) {
	var s asSandbox
	s.APIVersion, s.Kind = asGroup+"/"+asVersion, "Sandbox"
	s.Name, s.Labels = pod.Name, objectLabels(spec)
	s.Annotations = map[string]string{}
	if spec.User != "" {
		s.Annotations[AnnotationUser] = spec.User
	}
	// The pod's deadline annotation goes on the pod, not the template,
	// so that Extend moves it without touching the Sandbox's podTemplate.
	ann := map[string]string{}
	if v, ok := pod.Annotations[AnnotationUser]; ok {
		ann[AnnotationUser] = v
	}
	s.Spec.PodTemplate = asPodTemplate{Metadata: asPodMetadata{Labels: pod.Labels, Annotations: ann}, Spec: pod.Spec}
	if t := shutdownTime(p.deadline(spec.Expires)); t != nil {
		s.Spec.ShutdownTime, s.Spec.ShutdownPolicy = t, asShutdownPolicy
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	var out asSandbox
	if err := c.asCreate(cctx, resSandboxes, &s, &out); err != nil {
		if isAlreadyExists(err) {
			return ownerRef{}, fail.Failedf("a Sandbox named %s %w in namespace %s: stop the session first (`xmode sandbox stop`) or delete it (`kubectl delete sandbox -n %s %s`)", s.Name, errNameInUse, c.ns, c.ns, s.Name)
		}
		return ownerRef{}, p.wrap(err, "create Sandbox "+s.Name)
	}
	return ownerRef{APIVersion: s.APIVersion, Kind: s.Kind, Name: out.Name, UID: string(out.UID)}, nil
}

// claimSandbox makes a pool entry's SandboxClaim, named like a session's
// pod, on the project's warm pool: the controller gives it one of the
// pool's running Sandboxes (or makes one when none is ready).
func (p *Provider) claimSandbox(ctx context.Context, c *client, spec engine.Spec, pool string) (ownerRef, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	var wp asWarmPool
	if err := c.asGet(cctx, resWarmPools, pool, &wp); err != nil {
		if notFound(err) {
			return ownerRef{}, fail.Failedf("no SandboxWarmPool %s in namespace %s for the pool of %s: `xmode machine warm %s` or `xmode reap` makes it", pool, c.ns, spec.Project, spec.Project)
		}
		return ownerRef{}, p.wrap(err, "get SandboxWarmPool "+pool)
	}
	var cl asClaim
	cl.APIVersion, cl.Kind = asExtGroup+"/"+asVersion, "SandboxClaim"
	cl.Name, cl.Labels = PodName(spec.SessionID), objectLabels(spec)
	cl.Annotations = map[string]string{}
	if spec.User != "" {
		cl.Annotations[AnnotationUser] = spec.User
	}
	cl.Spec.WarmPoolRef.Name = pool
	if t := shutdownTime(p.deadline(spec.Expires)); t != nil {
		cl.Spec.Lifecycle = &asLifecycle{ShutdownTime: t, ShutdownPolicy: asShutdownPolicy}
	}
	var out asClaim
	if err := c.asCreate(cctx, resClaims, &cl, &out); err != nil {
		if isAlreadyExists(err) {
			return ownerRef{}, fail.Failedf("a SandboxClaim named %s %w in namespace %s: delete it (`kubectl delete sandboxclaim -n %s %s`)", cl.Name, errNameInUse, c.ns, c.ns, cl.Name)
		}
		return ownerRef{}, p.wrap(err, "create SandboxClaim "+cl.Name)
	}
	return ownerRef{APIVersion: cl.APIVersion, Kind: cl.Kind, Name: out.Name, UID: string(out.UID)}, nil
}

// waitPodOf waits, until the start bound, for the pod of owner (a Sandbox
// or a SandboxClaim) to exist, and returns its name and UID: a Sandbox's
// pod has its name; a claim's is its Sandbox's, once the controller gave it
// one. What the controller reports on the way (a condition not Ready) is
// the reason given at the bound.
func (p *Provider) waitPodOf(ctx context.Context, c *client, owner ownerRef, until time.Time) (string, string, error) {
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	w := &podWait{p: p, c: c, owner: owner, last: "the agent-sandbox controller made no pod for it yet (does it run?)"}
	if owner.Kind == "Sandbox" {
		w.name = owner.Name
	}
	for interval := 10 * time.Millisecond; ; interval = min(interval*2, 200*time.Millisecond) {
		cctx, ccancel := p.call(wctx)
		uid, err := w.poll(cctx)
		ccancel()
		switch {
		case uid != "":
			return w.name, uid, nil
		case err != nil && wctx.Err() == nil:
			var fe *fail.Error
			if errors.As(err, &fe) {
				return "", "", err
			}
			if notFound(err) {
				return "", "", fail.Failedf("%s %s was deleted while it started", owner.Kind, owner.Name)
			}
			return "", "", p.wrap(err, "wait for the pod of "+owner.Kind+" "+owner.Name)
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return "", "", ctx.Err()
			}
			return "", "", fail.Enginef("%s %s in namespace %s had no pod within %s (XMODE_KUBE_START_TIMEOUT): %s — see `kubectl describe %s -n %s %s`",
				owner.Kind, owner.Name, c.ns, p.cfg.KubeStartTimeout, w.last, strings.ToLower(owner.Kind), c.ns, owner.Name)
		case <-time.After(interval):
		}
	}
}

// podWait is one waitPodOf.
type podWait struct {
	p     *Provider
	c     *client
	owner ownerRef
	name  string // the pod's, once known
	last  string // the controller's last word
}

// poll looks once: the pod's UID once it exists.
func (w *podWait) poll(ctx context.Context) (string, error) {
	c := w.c
	if w.name == "" {
		var cl asClaim
		if err := c.asGet(ctx, resClaims, w.owner.Name, &cl); err != nil {
			return "", err
		}
		if string(cl.UID) != w.owner.UID {
			return "", fail.Failedf("SandboxClaim %s was replaced while it started", w.owner.Name)
		}
		if why := notReady(cl.Status.Conditions); why != "" {
			w.last = why
		}
		name := cl.Status.Sandbox.Name
		if name == "" {
			return "", nil
		}
		if !strings.HasPrefix(name, "xmode-") || !validName(name) {
			return "", fail.Refusedf("SandboxClaim %s was given Sandbox %q, which is not of one of xmode's warm pools: refusing it", w.owner.Name, name)
		}
		w.name = name
	}
	pod, err := c.getPod(ctx, w.name)
	if notFound(err) {
		if w.owner.Kind == "Sandbox" {
			var s asSandbox
			if err := c.asGet(ctx, resSandboxes, w.name, &s); err != nil {
				return "", err
			}
			if why := notReady(s.Status.Conditions); why != "" {
				w.last = why
			}
		}
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !ownedBy(pod, "Sandbox", w.name) {
		return "", fail.Refusedf("pod %s in namespace %s is not Sandbox %s's: refusing it", w.name, c.ns, w.name)
	}
	return string(pod.UID), nil
}

// notReady is a Ready condition that is not True, as the controller words
// it ("" when there is none, or it is True).
func notReady(conds []metav1.Condition) string {
	c := apimeta.FindStatusCondition(conds, "Ready")
	if c == nil || c.Status == metav1.ConditionTrue {
		return ""
	}
	return strings.TrimSpace(c.Reason + ": " + c.Message)
}

// ownedBy reports whether kind name controls obj.
func ownedBy(pod *corev1.Pod, kind, name string) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.Kind == kind && ref.Name == name && strings.HasPrefix(ref.APIVersion, asGroup+"/")
}

// validName reports whether s can be a pod's name xmode addresses: a DNS
// label (what xmode's and a warm pool's names are).
func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(s)-1) {
			return false
		}
	}
	return true
}

// adopt makes a pod the session's once agent-sandbox made it: the labels
// and annotations a pod of xmode's own has (the session's, the owner's,
// its deadline), which a warm pool's pod lacks, and which the controller
// leaves alone (it only keeps the keys it propagated itself).
func (p *Provider) adopt(ctx context.Context, c *client, name string, spec engine.Spec) error {
	ann := map[string]string{}
	if spec.User != "" {
		ann[AnnotationUser] = spec.User
	}
	if d := p.deadline(spec.Expires); d > 0 {
		ann[AnnotationDeadline] = fmt.Sprint(d)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": objectLabels(spec), "annotations": ann}})
	cctx, cancel := p.call(ctx)
	defer cancel()
	if _, err := c.patchPod(cctx, name, patch); err != nil {
		return p.wrap(err, "label pod "+name+" as the session's")
	}
	return nil
}

// removeOwner deletes the session's Sandbox or SandboxClaim (named like its
// pod) when it is xmode's and the session's: the garbage collector deletes
// what it owns. Gone is success.
func (p *Provider) removeOwner(ctx context.Context, c *client, resource, name, sessionID string) error {
	_, err := p.ownerGone(ctx, c, resource, name, sessionID)
	return err
}

// ownerGone is removeOwner, saying whether there was one to remove.
func (p *Provider) ownerGone(ctx context.Context, c *client, resource, name, sessionID string) (bool, error) {
	var meta struct {
		metav1.ObjectMeta `json:"metadata"`
	}
	err := c.asGet(ctx, resource, name, &meta)
	if notFound(err) {
		return false, nil
	}
	if err != nil {
		return false, p.wrap(err, "get "+resource+" "+name)
	}
	if err := checkOwned(meta.Labels, sessionID); err != nil {
		return true, fail.Refusedf("will not delete %s %s in namespace %s: %v", resource, name, c.ns, err)
	}
	if meta.DeletionTimestamp != nil {
		return true, nil
	}
	if err := c.asDelete(ctx, resource, name, string(meta.UID)); err != nil && !notFound(err) {
		return true, p.wrap(err, "delete "+resource+" "+name)
	}
	return true, nil
}

// moveShutdown moves the shutdown time of the session's Sandbox or
// SandboxClaim to the Unix second d.
func (p *Provider) moveShutdown(ctx context.Context, c *client, pooled bool, name string, d int64) error {
	t := shutdownTime(d)
	if t == nil {
		return nil
	}
	resource, patch := resSandboxes, map[string]any{"spec": map[string]any{"shutdownTime": t}}
	if pooled {
		resource, patch = resClaims, map[string]any{"spec": map[string]any{"lifecycle": map[string]any{"shutdownTime": t}}}
	}
	b, _ := json.Marshal(patch)
	if err := c.asPatch(ctx, resource, name, b); err != nil && !notFound(err) {
		return p.wrap(err, "move the shutdown time of "+resource+" "+name)
	}
	return nil
}

// template is the SandboxTemplate of a project's pool under this
// configuration: xmode's pod for spec (its PodSpec, the same a session's
// own pod has) with no session's labels, and for network none a
// NetworkPolicy that allows nothing (agent-sandbox's default one, made
// when a template names none, lets in its router and out to every public
// address; policies add up, so it would open a sandbox of network none).
// Its name is a hash of what it holds, so a template never changes: other
// settings make another.
func (p *Provider) template(spec engine.Spec) (*asTemplate, error) {
	img := spec.Image
	if img == "" {
		img = p.Image()
	}
	pod, err := p.podSpec(spec, img)
	if err != nil {
		return nil, err
	}
	var t asTemplate
	t.APIVersion, t.Kind = asExtGroup+"/"+asVersion, "SandboxTemplate"
	t.Labels = poolLabels(spec)
	t.Spec.PodTemplate = asPodTemplate{Metadata: asPodMetadata{Labels: poolLabels(spec)}, Spec: pod.Spec}
	if p.networkNone() {
		t.Spec.NetworkPolicyManagement, t.Spec.NetworkPolicy = "Managed", &asNetworkPolicy{}
	} else {
		t.Spec.NetworkPolicyManagement = "Unmanaged" // the pod network, as for a pod of xmode's own
	}
	b, err := json.Marshal(struct {
		Labels map[string]string
		Spec   any
	}{t.Labels, t.Spec})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	t.Name = "xmode-pool-" + hex.EncodeToString(sum[:5])
	return &t, nil
}

// poolLabels label a project's template, warm pool and the pods it keeps.
func poolLabels(spec engine.Spec) map[string]string {
	return map[string]string{LabelManagedBy: "xmode", LabelInstance: spec.Labels[LabelInstance], LabelPool: poolLabel(spec.Project)}
}

// poolLabel is the project as a label value; "-" for none.
func poolLabel(project string) string {
	if v := labelValue(project); v != "" {
		return v
	}
	return "-"
}

// KeepWarm keeps the SandboxWarmPool of the project's pool at size
// sandboxes of spec's SandboxTemplate (engine.WarmPooler), making both when
// missing, and deletes the project's warm pools and templates of other
// settings; size 0 deletes them all. In pods mode it does nothing.
func (p *Provider) KeepWarm(ctx context.Context, spec engine.Spec, size int) error {
	if ok, err := p.agentSandbox(ctx); err != nil || !ok {
		return err
	}
	inst := spec.Labels[LabelInstance]
	if inst == "" || labelValue(inst) != inst {
		return fmt.Errorf("keep the warm pool of %s: no valid instance id", spec.Project)
	}
	c, err := p.client()
	if err != nil {
		return err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	keep := ""
	if size > 0 {
		t, err := p.template(spec)
		if err != nil {
			return err
		}
		keep = t.Name
		var have asTemplate
		switch err := c.asGet(cctx, resTemplates, t.Name, &have); {
		case notFound(err):
			if err := c.asCreate(cctx, resTemplates, t, &have); err != nil && !isAlreadyExists(err) {
				return p.wrap(err, "create SandboxTemplate "+t.Name)
			}
		case err != nil:
			return p.wrap(err, "get SandboxTemplate "+t.Name)
		}
		n := int32(size)
		var wp asWarmPool
		switch err := c.asGet(cctx, resWarmPools, t.Name, &wp); {
		case notFound(err):
			wp = asWarmPool{}
			wp.APIVersion, wp.Kind = asExtGroup+"/"+asVersion, "SandboxWarmPool"
			wp.Name, wp.Labels = t.Name, poolLabels(spec)
			wp.Spec.Replicas = &n
			wp.Spec.TemplateRef.Name = t.Name
			if err := c.asCreate(cctx, resWarmPools, &wp, &wp); err != nil && !isAlreadyExists(err) {
				return p.wrap(err, "create SandboxWarmPool "+t.Name)
			}
		case err != nil:
			return p.wrap(err, "get SandboxWarmPool "+t.Name)
		case wp.Spec.Replicas == nil || *wp.Spec.Replicas != n:
			if err := c.asPatch(cctx, resWarmPools, t.Name, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)); err != nil {
				return p.wrap(err, "resize SandboxWarmPool "+t.Name)
			}
		}
	}
	// The warm pool first: its template is what its controller makes pods of.
	sel := LabelInstance + "=" + inst + "," + LabelPool + "=" + poolLabel(spec.Project) + "," + LabelManagedBy + "=xmode"
	for _, res := range []string{resWarmPools, resTemplates} {
		items, err := c.asList(cctx, res, sel)
		if err != nil {
			return p.wrap(err, "list "+res)
		}
		for _, raw := range items {
			var m struct {
				metav1.ObjectMeta `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				return fmt.Errorf("a %s: %w", res, err)
			}
			if m.Name == keep || m.DeletionTimestamp != nil {
				continue
			}
			if err := c.asDelete(cctx, res, m.Name, string(m.UID)); err != nil && !notFound(err) {
				return p.wrap(err, "delete "+res+" "+m.Name)
			}
		}
	}
	return nil
}
