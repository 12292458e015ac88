package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/internal/kubetest"
)

// A claim of a pool entry's pod is atomic on the cluster: claimers with
// clients of their own (as other processes or hosts would be) racing for
// one pod — exactly one lands its mark, and its deadline with it; every
// other is told engine.ErrClaimed, and so is anyone who comes later.
func TestClaimIsAtomic(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		e := newEnvVia(t, via, nil)
		ctx := context.Background()
		const claimers = 6
		for round := range 3 {
			sb := e.provision(t, e.spec(t))
			ps := make([]*Provider, claimers)
			for i := range ps {
				p, err := New(e.cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				ps[i] = p
				if _, err := p.Alive(ctx, sb); err != nil { // its client made and connected
					t.Fatal(err)
				}
			}
			// Each claimer its own expiry: the pod's deadline is the
			// winner's, set with its mark.
			base := time.Now().Add(2 * time.Hour)
			expiry := func(i int) time.Time { return base.Add(time.Duration(i) * time.Hour) }
			errs := make([]error, claimers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, p := range ps {
				wg.Go(func() {
					<-start
					errs[i] = p.Claim(ctx, sb, fmt.Sprintf("claimer-%d", i), expiry(i))
				})
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil && winner >= 0:
					t.Fatalf("round %d: claimers %d and %d both claimed pod %s", round, winner, i, sb.ContainerID)
				case err == nil:
					winner = i
				case !errors.Is(err, engine.ErrClaimed):
					t.Fatalf("round %d: claimer %d: %v, want engine.ErrClaimed", round, i, err)
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: nobody claimed the pod: %v", round, errs)
			}
			pod, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, e.podName(t, sb), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if by := pod.Annotations[AnnotationClaimedBy]; !strings.HasPrefix(by, fmt.Sprintf("claimer-%d ", winner)) {
				t.Fatalf("round %d: the pod's %s is %q, want claimer %d's", round, AnnotationClaimedBy, by, winner)
			}
			if want := strconv.FormatInt(e.p.deadline(expiry(winner)), 10); pod.Annotations[AnnotationDeadline] != want {
				t.Fatalf("round %d: the pod's deadline %s, want claimer %d's %s", round, pod.Annotations[AnnotationDeadline], winner, want)
			}
			if st := e.ownerShutdown(t, via, sb); via != viaPods && (st == nil || st.Unix() != e.p.deadline(expiry(winner))) {
				t.Fatalf("round %d: the %s's shutdown time %v, want claimer %d's deadline", round, via, st, winner)
			}
			if err := e.p.Claim(ctx, sb, sb.SessionID, time.Now().Add(time.Hour)); !errors.Is(err, engine.ErrClaimed) {
				t.Fatalf("round %d: a later claim: %v, want engine.ErrClaimed", round, err)
			}
		}

		// A claim for a session that ends before the entry would have
		// leaves the deadline where it is, as Extend does: the pod's and
		// its owner's, which then costs no second PATCH.
		spec := e.spec(t)
		sb := e.provision(t, spec)
		before := e.ownerShutdown(t, via, sb)
		if err := e.p.Claim(ctx, sb, "shorter", time.Now().Add(10*time.Minute)); err != nil {
			t.Fatal(err)
		}
		pod, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, e.podName(t, sb), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.FormatInt(e.p.deadline(spec.Expires), 10); pod.Annotations[AnnotationDeadline] != want || !strings.HasPrefix(pod.Annotations[AnnotationClaimedBy], "shorter ") {
			t.Fatalf("a claim for an earlier expiry: deadline %s (want the entry's %s), claimed by %q", pod.Annotations[AnnotationDeadline], want, pod.Annotations[AnnotationClaimedBy])
		}
		if after := e.ownerShutdown(t, via, sb); via != viaPods && (after == nil || !after.Equal(before)) {
			t.Fatalf("a claim for an earlier expiry moved the %s's shutdown time from %v to %v", via, before, after)
		}
	})
}

// ownerShutdown is the shutdown time of sb's Sandbox (viaSandbox) or
// SandboxClaim (viaPool); nil for a pod of xmode's own.
func (e *env) ownerShutdown(t *testing.T, via string, sb engine.Sandbox) *metav1.Time {
	t.Helper()
	if via == viaPods {
		return nil
	}
	var owner struct {
		Spec struct {
			ShutdownTime *metav1.Time `json:"shutdownTime"`
			Lifecycle    struct {
				ShutdownTime *metav1.Time `json:"shutdownTime"`
			} `json:"lifecycle"`
		} `json:"spec"`
	}
	c, _ := e.p.client()
	res := map[string]string{viaSandbox: resSandboxes, viaPool: resClaims}[via]
	if err := c.asGet(context.Background(), res, PodName(sb.SessionID), &owner); err != nil {
		t.Fatal(err)
	}
	if via == viaPool {
		return owner.Spec.Lifecycle.ShutdownTime
	}
	return owner.Spec.ShutdownTime
}

// agent-sandbox's objects for a session of its own: a Sandbox named like
// the pod, labelled as the pod is, whose podTemplate is xmode's hardened
// pod and whose shutdown time is the pod's deadline; the pod its
// controller made, which Extend and Destroy reach through the Sandbox.
func TestAgentSandboxSession(t *testing.T) {
	kubetest.RequireAgentSandbox(t)
	e := newEnvVia(t, viaSandbox, nil)
	ctx := context.Background()
	spec := e.spec(t)
	sb := e.provision(t, spec)
	c, _ := e.p.client()
	var s asSandbox
	if err := c.asGet(ctx, resSandboxes, PodName(spec.SessionID), &s); err != nil {
		t.Fatalf("the session's Sandbox: %v", err)
	}
	for k, v := range map[string]string{LabelManaged: "true", LabelSession: spec.SessionID, LabelRun: spec.RunID, LabelInstance: e.instance, LabelUser: "tester", LabelManagedBy: "xmode"} {
		if s.Labels[k] != v || s.Spec.PodTemplate.Metadata.Labels[k] != v {
			t.Errorf("label %s of the Sandbox %q and of its pod template %q, want %q", k, s.Labels[k], s.Spec.PodTemplate.Metadata.Labels[k], v)
		}
	}
	want := e.p.deadline(spec.Expires)
	if s.Spec.ShutdownTime == nil || s.Spec.ShutdownTime.Unix() != want || s.Spec.ShutdownPolicy != "Delete" {
		t.Errorf("the Sandbox's shutdown: %v %s, want %d, Delete", s.Spec.ShutdownTime, s.Spec.ShutdownPolicy, want)
	}
	ps := s.Spec.PodTemplate.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken || ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot ||
		len(ps.Containers) != 1 || ps.Containers[0].SecurityContext == nil || !*ps.Containers[0].SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("the Sandbox's pod is not xmode's hardened one: %+v", ps)
	}
	pod, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, PodName(spec.SessionID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.Kind != "Sandbox" || ref.UID != s.UID || string(pod.UID) != sb.ContainerID {
		t.Fatalf("the pod %s (UID %s, session's %s) is controlled by %+v, want Sandbox %s", pod.Name, pod.UID, sb.ContainerID, ref, s.UID)
	}
	if pod.Annotations[AnnotationDeadline] != strconv.FormatInt(want, 10) {
		t.Errorf("the pod's deadline %q, want %d", pod.Annotations[AnnotationDeadline], want)
	}
	later := time.Now().Add(5 * time.Hour)
	if err := e.p.Extend(ctx, sb, later); err != nil {
		t.Fatal(err)
	}
	if err := c.asGet(ctx, resSandboxes, PodName(spec.SessionID), &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.ShutdownTime == nil || s.Spec.ShutdownTime.Unix() != e.p.deadline(later) {
		t.Errorf("after Extend the Sandbox shuts down at %v, want %d", s.Spec.ShutdownTime, e.p.deadline(later))
	}
	if err := e.p.Destroy(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if alive, err := e.p.Alive(ctx, sb); err != nil || alive {
		t.Errorf("after Destroy: alive %v, %v", alive, err)
	}
	e.wantGone(t, resSandboxes, PodName(spec.SessionID))
}

// A project's pool on agent-sandbox: KeepWarm makes a SandboxTemplate of
// xmode's hardened pod and a SandboxWarmPool of the pool's size; a pool
// entry's Provision takes one of the warm pool's running pods through a
// SandboxClaim named like a session's pod (the worktree copied in, the pod
// labelled the session's), and the warm pool refills; Extend moves the
// claim's shutdown time; other settings make another template and pool
// and the old ones go, without the claimed sandbox; size 0 removes them.
func TestAgentSandboxPool(t *testing.T) {
	kubetest.RequireAgentSandbox(t)
	e := newEnvVia(t, viaPool, nil)
	ctx := context.Background()
	c, _ := e.p.client()
	spec := e.spec(t)
	tpl, err := e.p.template(spec)
	if err != nil {
		t.Fatal(err)
	}
	var have asTemplate
	if err := c.asGet(ctx, resTemplates, tpl.Name, &have); err != nil {
		t.Fatalf("the pool's SandboxTemplate: %v", err)
	}
	ps := have.Spec.PodTemplate.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken || len(ps.Containers) != 1 || !*ps.Containers[0].SecurityContext.ReadOnlyRootFilesystem ||
		have.Spec.NetworkPolicyManagement != "Managed" || have.Spec.NetworkPolicy == nil || len(have.Spec.NetworkPolicy.Egress)+len(have.Spec.NetworkPolicy.Ingress) != 0 {
		t.Errorf("the template is not xmode's hardened pod with a policy that allows nothing: %+v", have.Spec)
	}
	if have.Spec.PodTemplate.Metadata.Labels[LabelManaged] != "" || have.Spec.PodTemplate.Metadata.Labels[LabelPool] != "proj" {
		t.Errorf("the template's pod labels %v: a warm pod is no session's", have.Spec.PodTemplate.Metadata.Labels)
	}
	warm := e.waitWarm(t, 1, "")
	start := time.Now()
	sb := e.provision(t, spec)
	took := time.Since(start)
	name, uid, err := podRef(sb)
	if err != nil || name != warm[0].Name || uid != string(warm[0].UID) || sb.ContainerID != name+"/"+uid {
		t.Fatalf("the entry's sandbox %q (%v), want the warm pod %s/%s", sb.ContainerID, err, warm[0].Name, warm[0].UID)
	}
	t.Logf("a pool entry from the warm pool's running pod in %s (claim, labels, the worktree copied in)", took.Round(time.Millisecond))
	var cl asClaim
	if err := c.asGet(ctx, resClaims, PodName(spec.SessionID), &cl); err != nil {
		t.Fatalf("the entry's SandboxClaim: %v", err)
	}
	if cl.Spec.WarmPoolRef.Name != tpl.Name || cl.Labels[LabelSession] != spec.SessionID || cl.Spec.Lifecycle == nil || cl.Spec.Lifecycle.ShutdownTime.Unix() != e.p.deadline(spec.Expires) {
		t.Errorf("the SandboxClaim: %+v %+v", cl.ObjectMeta, cl.Spec)
	}
	pod, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels[LabelManaged] != "true" || pod.Labels[LabelSession] != spec.SessionID || pod.Labels[LabelRun] != spec.RunID {
		t.Errorf("the claimed pod's labels %v", pod.Labels)
	}
	if st, out, _ := e.sh(t, sb, "pwd; id -u"); st.ExitCode != 0 || out != Worktree+"\n65532\n" {
		t.Errorf("a step in the claimed pod: %+v %q", st, out)
	}
	e.waitWarm(t, 1, name) // refilled by the controller
	later := time.Now().Add(3 * time.Hour)
	if err := e.p.Extend(ctx, sb, later); err != nil {
		t.Fatal(err)
	}
	if err := c.asGet(ctx, resClaims, PodName(spec.SessionID), &cl); err != nil || cl.Spec.Lifecycle.ShutdownTime.Unix() != e.p.deadline(later) {
		t.Errorf("after Extend the claim shuts down at %v (%v), want %d", cl.Spec.Lifecycle.ShutdownTime, err, e.p.deadline(later))
	}

	e.keepWarm(t, "proj", 2)
	var wp asWarmPool
	if err := c.asGet(ctx, resWarmPools, tpl.Name, &wp); err != nil || wp.Spec.Replicas == nil || *wp.Spec.Replicas != 2 || wp.Spec.TemplateRef.Name != tpl.Name {
		t.Fatalf("the warm pool after KeepWarm(2): %+v %v", wp.Spec, err)
	}
	other := newEnvVia(t, viaPods, map[string]string{"XMODE_KUBE_API": APIAgentSandbox, "XMODE_KUBE_NAMESPACE": e.ns, "XMODE_SANDBOX_MEMORY": "200m"})
	other.instance = e.instance
	other.keepWarm(t, "proj", 1)
	otherTpl, _ := other.p.template(other.spec(t))
	if otherTpl.Name == tpl.Name {
		t.Fatal("other settings, the same template")
	}
	e.wantGone(t, resWarmPools, tpl.Name)
	e.wantGone(t, resTemplates, tpl.Name)
	if alive, err := e.p.Alive(ctx, sb); err != nil || !alive {
		t.Fatalf("the claimed sandbox after its warm pool went: alive %v, %v", alive, err)
	}
	other.keepWarm(t, "proj", 0)
	e.wantGone(t, resWarmPools, otherTpl.Name)
	e.wantGone(t, resTemplates, otherTpl.Name)

	if err := e.p.Destroy(ctx, sb); err != nil {
		t.Fatal(err)
	}
	e.wantGone(t, resClaims, PodName(spec.SessionID))

	// No warm pod to give: the controller makes the claim a Sandbox of its
	// own, named like the claim. It is a pool entry's all the same, and the
	// orphan sweep removes its claim (and so its Sandbox) before its pod.
	e.keepWarm(t, "proj", 1)
	if err := c.asPatch(ctx, resWarmPools, tpl.Name, []byte(`{"spec":{"replicas":0}}`)); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(60 * time.Second); len(e.warmPods(t)) > 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the warm pool of 0 still has pods after 60 s")
		}
	}
	cold := e.spec(t)
	csb := e.provision(t, cold)
	if name, _, _ := podRef(csb); name != PodName(cold.SessionID) || !pooled(csb) {
		t.Fatalf("a claim with no warm pod to give: %q, want its own Sandbox's pod %s", csb.ContainerID, PodName(cold.SessionID))
	}
	objs, err := e.p.ListObjects(ctx, e.instance)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Kind == engine.KindPod && o.SessionID == cold.SessionID {
			if err := e.p.RemoveObject(ctx, o); err != nil {
				t.Fatalf("the sweep's removal of the pod: %v", err)
			}
		}
	}
	e.wantGone(t, resClaims, PodName(cold.SessionID))
	if alive, err := e.p.Alive(ctx, csb); err != nil || alive {
		t.Fatalf("after the sweep: alive %v, %v", alive, err)
	}
	e.keepWarm(t, "proj", 0)
}

// warmPods are the pods of the env's warm pool that no claim took.
func (e *env) warmPods(t *testing.T) []corev1.Pod {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: LabelPool + "=" + poolLabel(e.pool) + "," + LabelManaged + "!=true"})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// waitWarm waits until the warm pool of the env's project has n running
// pods other than not, and returns them.
func (e *env) waitWarm(t *testing.T, n int, not string) []corev1.Pod {
	t.Helper()
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var ready []corev1.Pod
		for _, p := range e.warmPods(t) {
			if ok, _, _ := podStarted(&p); ok && p.Name != not {
				ready = append(ready, p)
			}
		}
		if len(ready) >= n {
			return ready
		}
		if time.Now().After(end) {
			t.Fatalf("the warm pool has %d running pods after 90 s, want %d", len(ready), n)
		}
	}
}

// wantGone waits until an agent-sandbox object is gone (or being deleted).
func (e *env) wantGone(t *testing.T, resource, name string) {
	t.Helper()
	c, _ := e.p.client()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var m struct {
			metav1.ObjectMeta `json:"metadata"`
		}
		err := c.asGet(context.Background(), resource, name, &m)
		if notFound(err) || err == nil && m.DeletionTimestamp != nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s %s is still there after 30 s (%v)", resource, name, err)
		}
	}
}
