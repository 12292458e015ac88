package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
)

// client is what the provider needs of the API: REST clients for the three
// groups it uses, the rest.Config pods/exec is made from, and the namespace.
type client struct {
	rest  *rest.Config
	core  *rest.RESTClient // "" v1: pods, namespaces, nodes
	net   *rest.RESTClient // networking.k8s.io/v1: NetworkPolicies
	authz *rest.RESTClient // authorization.k8s.io/v1: SelfSubjectAccessReviews
	ns    string
	host  string
	codec runtime.ParameterCodec
}

// scheme knows the types of the three groups, built on first use: a scheme
// of every group (client-go/kubernetes/scheme) costs every xmode command
// ~670 KB when it starts.
var scheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme, authorizationv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // static registrations: cannot fail
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
})

// quietKlog sends klog's lines nowhere, once per process: before any
// client, so before any of client-go's goroutines that log.
var quietKlog = sync.OnceFunc(func() { klog.SetLogger(logr.Discard()) })

// newClient reads the credentials: the kubeconfig files of KUBECONFIG (a
// path list; ~/.kube/config without it) at XMODE_KUBE_CONTEXT or their
// current context, else the service account of the pod xmode runs in.
// source says which, for doctor.
func newClient(cfg *config.Config, warnf func(string, ...any)) (*client, string, error) {
	// client-go logs what it handles itself (a stream closed once xmode
	// refused what came through it) to stderr through klog: xmode says
	// what matters in its own words, and the apiserver's warnings come
	// through warnings below.
	quietKlog()
	files := filepath.SplitList(cfg.KubeConfig)
	if len(files) == 0 {
		files = []string{clientcmd.RecommendedHomeFile}
	}
	rules := &clientcmd.ClientConfigLoadingRules{Precedence: files}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: cfg.KubeContext}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	rc, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", fail.Enginef("no Kubernetes cluster to use: no kubeconfig at %s and xmode does not run in a pod — set KUBECONFIG to a kubeconfig file (and XMODE_KUBE_CONTEXT to its context), or run xmode in a pod with a service account (docs/kubernetes.md)", strings.Join(files, ", "))
		}
		return nil, "", fail.Enginef("the kubeconfig (%s%s) cannot be used: %v — check it with `kubectl config view`", strings.Join(files, ", "), contextNote(cfg.KubeContext), err)
	}
	source := "kubeconfig " + strings.Join(files, string(filepath.ListSeparator))
	if raw, err := cc.RawConfig(); err == nil && len(raw.Contexts) == 0 {
		source = "the pod's service account"
	} else if cur := currentContext(cc, cfg.KubeContext); cur != "" {
		source += ", context " + cur
	}
	ns := cfg.KubeNamespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "xmode"
	// A reap of a hundred pods lists once and deletes each: client-go's
	// default of 5 requests a second would make it take 20 s of waiting.
	rc.QPS, rc.Burst = 50, 100
	rc.WarningHandlerWithContext = warnings{warnf}
	c := &client{rest: rc, ns: ns, host: rc.Host, codec: runtime.NewParameterCodec(scheme())}
	codecs := serializer.NewCodecFactory(scheme()).WithoutConversion()
	for _, g := range []struct {
		out     **rest.RESTClient
		apiPath string
		gv      schema.GroupVersion
	}{
		{&c.core, "/api", corev1.SchemeGroupVersion},
		{&c.net, "/apis", networkingv1.SchemeGroupVersion},
		{&c.authz, "/apis", authorizationv1.SchemeGroupVersion},
	} {
		gc := rest.CopyConfig(rc)
		gv := g.gv
		gc.GroupVersion, gc.APIPath, gc.NegotiatedSerializer = &gv, g.apiPath, codecs
		rc, err := rest.RESTClientFor(gc)
		if err != nil {
			return nil, "", fail.Enginef("a client for the cluster at %s (%s): %v", gc.Host, source, err)
		}
		*g.out = rc
	}
	return c, source, nil
}

func contextNote(ctx string) string {
	if ctx == "" {
		return ""
	}
	return ", context " + ctx + " from XMODE_KUBE_CONTEXT"
}

func currentContext(cc clientcmd.ClientConfig, override string) string {
	if override != "" {
		return override
	}
	raw, err := cc.RawConfig()
	if err != nil {
		return ""
	}
	return raw.CurrentContext
}

// close drops the idle connections of the clients.
func (c *client) close() {
	for _, r := range []*rest.RESTClient{c.core, c.net, c.authz} {
		if r != nil && r.Client != nil {
			r.Client.CloseIdleConnections()
		}
	}
}

// warnings passes the apiserver's warnings (a Pod Security "warn" label, a
// deprecated field) on to xmode's warnings.
type warnings struct{ warnf func(string, ...any) }

func (w warnings) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, text string) {
	if code == 299 && text != "" {
		w.warnf("kubernetes: %s", text)
	}
}

// classify is wrap's rule: what xmode cannot fix itself is exit 5 with the
// fix — the cluster unreachable, the credentials refused or expired, a
// permission missing — and the rest an error of what was being done.
func classify(c *client, err error, what string) error {
	where := "the cluster"
	if c != nil {
		where = "the cluster at " + c.host
	}
	var ne net.Error
	var oe *net.OpError
	switch {
	case apierrors.IsUnauthorized(err):
		return fail.Enginef("%s: %s refused xmode's credentials (%v): renew them (the kubeconfig's user, or the pod's service account token)", what, where, err)
	case apierrors.IsForbidden(err), strings.Contains(err.Error(), "is forbidden: User"):
		// An exec's upgrade refused comes back as text, not as a Status.
		return fail.Enginef("%s: %v — xmode's user lacks a permission in namespace %s: bind it the Role of docs/kubernetes.md (`xmode doctor` names each missing permission)", what, err, nsOf(c))
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return fail.Enginef("%s: %s did not answer in time: check it with `kubectl get --raw /readyz`", what, where)
	case errors.As(err, &oe), errors.As(err, &ne), isConnRefused(err):
		return fail.Enginef("%s: %s is unreachable (%v): check that it runs and that the kubeconfig (KUBECONFIG, XMODE_KUBE_CONTEXT) points at it", what, where, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func nsOf(c *client) string {
	if c == nil {
		return "?"
	}
	return c.ns
}

func isConnRefused(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "no such host") || strings.Contains(s, "i/o timeout")
}

// notFound reports whether err is the API's 404.
func notFound(err error) bool { return apierrors.IsNotFound(err) }

// Version asks the apiserver for its version (GET /version).
func (c *client) version(ctx context.Context) (string, error) {
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	b, err := c.core.Get().AbsPath("/version").DoRaw(ctx)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return "", fmt.Errorf("the apiserver's /version: %w", err)
	}
	return v.GitVersion, nil
}

func (c *client) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := c.core.Get().Namespace(c.ns).Resource("pods").Name(name).Do(ctx).Into(&pod)
	return &pod, err
}

func (c *client) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	var out corev1.Pod
	err := c.core.Post().Namespace(c.ns).Resource("pods").Body(pod).Do(ctx).Into(&out)
	return &out, err
}

// deletePod deletes a pod, only the one of uid when uid is not "" (a pod
// of that name made since is not xmode's to remove), after grace seconds.
func (c *client) deletePod(ctx context.Context, name, uid string, grace int64) error {
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if uid != "" {
		u := types.UID(uid)
		opts.Preconditions = &metav1.Preconditions{UID: &u}
	}
	return c.core.Delete().Namespace(c.ns).Resource("pods").Name(name).Body(opts).Do(ctx).Error()
}

func (c *client) listPods(ctx context.Context, selector string) (*corev1.PodList, error) {
	var out corev1.PodList
	err := c.core.Get().Namespace(c.ns).Resource("pods").VersionedParams(&metav1.ListOptions{LabelSelector: selector}, c.codec).Do(ctx).Into(&out)
	return &out, err
}

// patchPod applies a JSON merge patch.
func (c *client) patchPod(ctx context.Context, name string, patch []byte) (*corev1.Pod, error) {
	var out corev1.Pod
	err := c.core.Patch(mergePatch).Namespace(c.ns).Resource("pods").Name(name).Body(patch).Do(ctx).Into(&out)
	return &out, err
}

func (c *client) createPolicy(ctx context.Context, np *networkingv1.NetworkPolicy) (*networkingv1.NetworkPolicy, error) {
	var out networkingv1.NetworkPolicy
	err := c.net.Post().Namespace(c.ns).Resource("networkpolicies").Body(np).Do(ctx).Into(&out)
	return &out, err
}

func (c *client) getPolicy(ctx context.Context, name string) (*networkingv1.NetworkPolicy, error) {
	var out networkingv1.NetworkPolicy
	err := c.net.Get().Namespace(c.ns).Resource("networkpolicies").Name(name).Do(ctx).Into(&out)
	return &out, err
}

func (c *client) patchPolicy(ctx context.Context, name string, patch []byte) error {
	return c.net.Patch(mergePatch).Namespace(c.ns).Resource("networkpolicies").Name(name).Body(patch).Do(ctx).Error()
}

func (c *client) deletePolicy(ctx context.Context, name string) error {
	return c.net.Delete().Namespace(c.ns).Resource("networkpolicies").Name(name).Do(ctx).Error()
}

func (c *client) listPolicies(ctx context.Context, selector string) (*networkingv1.NetworkPolicyList, error) {
	var out networkingv1.NetworkPolicyList
	err := c.net.Get().Namespace(c.ns).Resource("networkpolicies").VersionedParams(&metav1.ListOptions{LabelSelector: selector}, c.codec).Do(ctx).Into(&out)
	return &out, err
}

// allowed asks whether xmode's user may do verb on resource (and
// subresource) in the namespace: a SelfSubjectAccessReview.
func (c *client) allowed(ctx context.Context, verb, group, resource, sub string) (bool, string, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.ns, Verb: verb, Group: group, Resource: resource, Subresource: sub},
	}}
	var out authorizationv1.SelfSubjectAccessReview
	if err := c.authz.Post().Resource("selfsubjectaccessreviews").Body(review).Do(ctx).Into(&out); err != nil {
		return false, "", err
	}
	return out.Status.Allowed, out.Status.Reason, nil
}

// getRaw GETs an absolute path, for the few objects of groups xmode does
// not link (RuntimeClass), whose existence alone matters; the status code
// says what happened (404: there is none).
func (c *client) getRaw(ctx context.Context, path string) (int, error) {
	var code int
	err := c.core.Get().AbsPath(path).Do(ctx).StatusCode(&code).Error()
	return code, err
}

// mergePatch is the JSON merge patch type (RFC 7386).
const mergePatch = types.MergePatchType

// httpStatus is the HTTP status of an API error, 0 for another error.
func httpStatus(err error) int {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return int(se.Status().Code)
	}
	return 0
}
