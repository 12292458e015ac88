package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
)

// KindPolicy is the object kind of a session's NetworkPolicy as ListObjects
// lists it (one left behind when a Provision died between the policy and
// its pod).
const KindPolicy = "networkpolicy"

// deleteGrace is how long a deleted pod's processes get between TERM and
// KILL: the keep-alive exits at TERM, and a step's processes belong to a
// session that is being ended.
const deleteGrace = 1

// Destroy deletes the session's pod and its NetworkPolicy (the pod, or its
// Sandbox, owns it, so the garbage collector would too) and, with
// agent-sandbox, the Sandbox or SandboxClaim the pod came from, first, so
// that its controller makes no new pod. Something already gone is
// success; an object that is not xmode's, or another session's, is
// refused. It does not wait for the pod's processes to end: the pod is
// not alive from the moment it is deleted (Alive), and the kubelet ends it
// within deleteGrace.
func (p *Provider) Destroy(ctx context.Context, sb engine.Sandbox) error {
	if sb.SessionID == "" {
		return nil
	}
	c, err := p.client()
	if err != nil {
		return err
	}
	podName, uid, err := podRef(sb)
	if err != nil {
		return err
	}
	name := PodName(sb.SessionID)
	// A proxied session's proxy, its network log kept first.
	if err := p.removeEgress(ctx, sb.SessionID, sb.RunID, sb.ContainerID); err != nil {
		return err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	as, err := p.agentSandbox(cctx)
	if err != nil {
		return err
	}
	if as {
		res := resSandboxes
		if pooled(sb) {
			res = resClaims
		}
		if err := p.removeOwner(cctx, c, res, name, sb.SessionID); err != nil {
			return err
		}
	}
	if err := p.removePod(cctx, podName, sb.SessionID, uid); err != nil {
		return err
	}
	return p.removePolicy(cctx, name, sb.SessionID)
}

// removePod deletes the pod name when it is xmode's and sessionID's (and of
// uid, when given).
func (p *Provider) removePod(ctx context.Context, name, sessionID, uid string) error {
	c, err := p.client()
	if err != nil {
		return err
	}
	pod, err := c.getPod(ctx, name)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return p.wrap(err, "get pod "+name)
	}
	if uid != "" && string(pod.UID) != uid {
		// A pod of that name made since belongs to whoever made it (a
		// Sandbox's controller makes a deleted pod anew, unlabelled).
		return nil
	}
	if err := checkOwned(pod.Labels, sessionID); err != nil {
		return fail.Refusedf("will not delete pod %s in namespace %s: %v", name, c.ns, err)
	}
	if pod.DeletionTimestamp != nil {
		return nil
	}
	err = c.deletePod(ctx, name, string(pod.UID), deleteGrace)
	if err == nil || notFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return p.wrap(err, "delete pod "+name)
}

// removePolicy deletes the NetworkPolicy name when it is xmode's and
// sessionID's.
func (p *Provider) removePolicy(ctx context.Context, name, sessionID string) error {
	c, err := p.client()
	if err != nil {
		return err
	}
	np, err := c.getPolicy(ctx, name)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return p.wrap(err, "get NetworkPolicy "+name)
	}
	if err := checkOwned(np.Labels, sessionID); err != nil {
		return fail.Refusedf("will not delete NetworkPolicy %s in namespace %s: %v", name, c.ns, err)
	}
	if err := c.deletePolicy(ctx, name); err != nil && !notFound(err) {
		return p.wrap(err, "delete NetworkPolicy "+name)
	}
	return nil
}

// selector is the label selector of this install's objects.
func selector(instance string) string {
	return LabelManaged + "=true," + LabelInstance + "=" + instance
}

// ListObjects lists the pods and NetworkPolicies of the namespace labelled
// xmode.managed=true and xmode.instance=<instance> (engine.OrphanLister):
// what the reaper may consider for orphan removal, by label selector across
// the namespace. Objects already being deleted are left out.
func (p *Provider) ListObjects(ctx context.Context, instance string) ([]engine.Object, error) {
	if instance == "" || labelValue(instance) != instance {
		return nil, errors.New("list managed objects: no valid instance id: refusing to list every instance's objects")
	}
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	pods, err := c.listPods(cctx, selector(instance))
	if err != nil {
		return nil, p.wrap(err, "list pods")
	}
	var out []engine.Object
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil {
			continue // on its way out: nothing left to remove
		}
		state := strings.ToLower(string(pod.Status.Phase))
		if ok, _, _ := podStarted(&pod); ok {
			state = "running"
		}
		out = append(out, engine.Object{
			Kind: engine.KindPod, ID: string(pod.UID), Name: pod.Name, State: state,
			SessionID: pod.Labels[LabelSession], Instance: pod.Labels[LabelInstance],
		})
	}
	nps, err := c.listPolicies(cctx, selector(instance))
	if err != nil {
		return nil, p.wrap(err, "list NetworkPolicies")
	}
	for _, np := range nps.Items {
		if np.DeletionTimestamp != nil {
			continue
		}
		out = append(out, engine.Object{
			Kind: KindPolicy, ID: string(np.UID), Name: np.Name,
			SessionID: np.Labels[LabelSession], Instance: np.Labels[LabelInstance],
		})
	}
	as, err := p.agentSandbox(cctx)
	if err != nil || !as {
		return out, err
	}
	// A session's Sandbox, a pool entry's SandboxClaim. A warm pool's own
	// Sandboxes and pods carry no xmode.managed label: they are its.
	for _, k := range []struct{ res, kind string }{{resSandboxes, KindSandbox}, {resClaims, KindClaim}} {
		items, err := c.asList(cctx, k.res, selector(instance))
		if err != nil {
			return nil, p.wrap(err, "list "+k.res)
		}
		for _, raw := range items {
			var m struct {
				metav1.ObjectMeta `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, fmt.Errorf("a %s: %w", k.res, err)
			}
			if m.DeletionTimestamp != nil {
				continue
			}
			out = append(out, engine.Object{
				Kind: k.kind, ID: string(m.UID), Name: m.Name,
				SessionID: m.Labels[LabelSession], Instance: m.Labels[LabelInstance],
			})
		}
	}
	return out, nil
}

// RemoveObject removes one object ListObjects returned, with Destroy's
// checks (engine.OrphanLister).
func (p *Provider) RemoveObject(ctx context.Context, o engine.Object) error {
	cctx, cancel := p.call(ctx)
	defer cancel()
	switch o.Kind {
	case engine.KindPod:
		if o.Name == EgressPodName(o.SessionID) {
			// An orphaned proxy: its log kept in its run's evidence first.
			return p.removeEgress(ctx, o.SessionID, "", "")
		}
		if o.SessionID != "" {
			// Its Sandbox's controller would make it anew: the owner
			// (the session's Sandbox, or a pool entry's claim) goes first.
			as, err := p.agentSandbox(cctx)
			if err != nil {
				return err
			}
			if as {
				c, err := p.client()
				if err != nil {
					return err
				}
				// A claim's Sandbox (named by its warm pool, or like the
				// claim when the controller made one for it) goes with it.
				found, err := p.ownerGone(cctx, c, resClaims, PodName(o.SessionID), o.SessionID)
				if err == nil && !found {
					_, err = p.ownerGone(cctx, c, resSandboxes, PodName(o.SessionID), o.SessionID)
				}
				if err != nil {
					return err
				}
			}
		}
		return p.removePod(cctx, o.Name, o.SessionID, o.ID)
	case KindPolicy:
		return p.removePolicy(cctx, o.Name, o.SessionID)
	case KindSandbox, KindClaim:
		c, err := p.client()
		if err != nil {
			return err
		}
		res := resSandboxes
		if o.Kind == KindClaim {
			res = resClaims
		}
		return p.removeOwner(cctx, c, res, o.Name, o.SessionID)
	}
	return fmt.Errorf("unknown object kind %q", o.Kind)
}

// Alive reports whether the sandbox's pod exists, is xmode's, the
// session's and the one made for it, runs and is not being deleted
// (engine.LivenessChecker): one GET, bounded like a ping.
func (p *Provider) Alive(ctx context.Context, sb engine.Sandbox) (bool, error) {
	if sb.ContainerID == "" || sb.SessionID == "" {
		return false, nil
	}
	name, uid, err := podRef(sb)
	if err != nil {
		return false, err
	}
	c, err := p.client()
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, p.pingTimeout())
	defer cancel()
	pod, err := c.getPod(cctx, name)
	switch {
	case notFound(err):
		return false, nil
	case err != nil && ctx.Err() != nil:
		return false, ctx.Err()
	case err != nil:
		return false, p.wrap(err, "get pod "+name)
	}
	if string(pod.UID) != uid || checkOwned(pod.Labels, sb.SessionID) != nil {
		return false, nil
	}
	ok, _, _ := podStarted(pod)
	if ok {
		p.seen.put(sb, pod) // a pool claim comes next
	}
	return ok, nil
}

// Extend moves the pod's deadline to expires plus XMODE_KUBE_DEADLINE_GRACE
// (engine.Extender): its annotation, which the keep-alive reads through the
// downward API, and with agent-sandbox the shutdown time of the pod's
// Sandbox or SandboxClaim, the controller's own dead-man switch. A pod's
// activeDeadlineSeconds cannot do this: the apiserver lets it be set or
// lowered, never raised (docs/kubernetes.md, "The dead-man switch"). A
// deadline is never moved earlier than the pod has.
func (p *Provider) Extend(ctx context.Context, sb engine.Sandbox, expires time.Time) error {
	pod, err := p.ownedPod(ctx, sb)
	if err != nil {
		return err
	}
	want := p.deadline(expires)
	if have, err := strconv.ParseInt(pod.Annotations[AnnotationDeadline], 10, 64); err == nil && have >= want {
		return nil
	}
	c, err := p.client()
	if err != nil {
		return err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	if metav1.GetControllerOf(pod) != nil {
		// Made by agent-sandbox: the controller would end the pod at the
		// old time, so that moves first.
		if err := p.moveShutdown(cctx, c, pooled(sb), PodName(sb.SessionID), want); err != nil {
			return err
		}
	}
	if _, err := c.patchPod(cctx, pod.Name, annotationPatch(AnnotationDeadline, strconv.FormatInt(want, 10))); err != nil {
		return p.wrap(err, "move the deadline of pod "+pod.Name)
	}
	return nil
}

// shapeSettings are the settings that make one kubernetes sandbox differ
// from another: a pool entry goes only to a create of the same values.
var shapeSettings = []string{
	"KUBECONFIG", "XMODE_KUBE_CONTEXT", "XMODE_KUBE_NAMESPACE", "XMODE_KUBE_IMAGE_PULL_POLICY", "XMODE_KUBE_EPHEMERAL_STORAGE",
	"XMODE_SANDBOX_RUNTIME", "XMODE_SANDBOX_IMAGE", "XMODE_SANDBOX_CPUS", "XMODE_SANDBOX_MEMORY", "XMODE_SANDBOX_TMPFS",
	"XMODE_SANDBOX_NETWORK", "XMODE_SANDBOX_USER", "XMODE_KUBE_API",
}

// Shape implements engine.Shaper.
func (p *Provider) Shape() string {
	var b strings.Builder
	b.WriteString("mount=" + MountSync + "\n")
	for _, v := range p.cfg.Values {
		if slices.Contains(shapeSettings, v.Name) {
			fmt.Fprintf(&b, "%s=%s\n", v.Name, v.Value)
		}
	}
	return b.String()
}

// MoveCost implements engine.Mover: the pod works on a copy of the worktree
// taken when it was made, which a checkout on the host does not reach.
func (p *Provider) MoveCost() engine.MoveCost { return engine.MoveNever }

// isAlreadyExists reports the API's 409 for a name in use.
func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
