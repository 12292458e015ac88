package kubernetes

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// Labels xmode puts on every pod and NetworkPolicy (docs/reference.md,
// "Kubernetes objects and labels"): the docker engine's, from
// engine.Spec.Labels, and these.
const (
	LabelManaged  = "xmode.managed"
	LabelSession  = "xmode.session"
	LabelRun      = "xmode.run"
	LabelInstance = "xmode.instance"
	// LabelUser is the session's owner made a label value (at most 63 of
	// [A-Za-z0-9._-]); AnnotationUser has it as it is.
	LabelUser = "xmode.user"
	// LabelManagedBy is the recommended label of the tool that manages an
	// object, so that cluster tooling sees whose the pods are.
	LabelManagedBy = "app.kubernetes.io/managed-by"

	AnnotationUser = "xmode.user"
	// AnnotationDeadline is when the pod ends by itself, in Unix seconds:
	// the session's expiry plus XMODE_KUBE_DEADLINE_GRACE. The keep-alive
	// reads it through the downward API (Extend moves it).
	AnnotationDeadline = "xmode.deadline"
	// AnnotationOOMKills is the container's OOM-kill count xmode has
	// already reported, so that each step's OOM kill is reported once.
	AnnotationOOMKills = "xmode.oom-kills"
)

// Where a sandbox pod's volumes are.
const (
	// Workspace is the session's emptyDir; the worktree is a directory in
	// it, so that it can belong to the sandbox user.
	Workspace = "/xmode"
	// Worktree is where the steps see the worktree (engine.WorktreeMounter).
	Worktree = Workspace + "/worktree"
	// metaDir holds the downward API's copy of the pod's deadline.
	metaDir = Workspace + "/.meta"
	// containerName is the pod's one container.
	containerName = "sandbox"
)

// MountSync is the mount mode sessions record: the sandbox works on a copy
// of the worktree, as docker's sync mode.
const MountSync = "sync"

// PodName is the name of a session's pod (and NetworkPolicy): a DNS-1123
// label, so the session ID's "_" becomes "-".
func PodName(sessionID string) string {
	return "xmode-" + strings.ReplaceAll(sessionID, "_", "-")
}

// keepAlive is the pod's command: it keeps the pod running between steps
// and is its dead-man switch — once the deadline the downward API shows it
// has passed, it exits and the pod ends with everything in it, whether or
// not any xmode is left to reap it. Builtins only but for sleep (a fork
// every 5 s); the time is the boot time plus the uptime, both from /proc.
// TERM (the pod's deletion) ends it at once.
const keepAlive = `trap 'exit 0' TERM INT
command -v sleep >/dev/null 2>&1 || { echo "xmode: the image has no sleep: xmode's pods need sleep and a POSIX /bin/sh" >&2; exit 127; }
f=` + metaDir + `/deadline
while :; do
	d=
	read -r d 2>/dev/null <"$f"
	case $d in
	''|*[!0-9]*) ;;
	*)
		b=
		while read -r k v; do [ "$k" = btime ] && { b=$v; break; }; done </proc/stat
		read -r u _ </proc/uptime
		[ -n "$b" ] && [ $((b + ${u%%.*})) -ge "$d" ] && exit 0
		;;
	esac
	sleep 5 &
	wait $!
done`

// sandboxUser is who a pod runs as: XMODE_SANDBOX_USER when it was set
// (never root), else 65532, distroless's nonroot — the worktree is a copy,
// so the host's owner does not matter.
func sandboxUser(cfg *config.Config) (int64, int64, error) {
	v := config.NonRootUser
	if cfg.Explicit("XMODE_SANDBOX_USER") && cfg.SandboxUser != "" {
		v = cfg.SandboxUser
	}
	u, g, _ := strings.Cut(v, ":")
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil {
		return 0, 0, fail.Usagef("XMODE_SANDBOX_USER %q is not uid:gid", v)
	}
	gid, err := strconv.ParseInt(g, 10, 64)
	if err != nil {
		gid = uid
	}
	if uid == 0 {
		return 0, 0, fail.Usagef("XMODE_SANDBOX_USER=%s: a kubernetes sandbox never runs as root (Pod Security \"restricted\" requires runAsNonRoot): use another uid, or unset it for 65532", v)
	}
	return uid, gid, nil
}

// labelValue makes s a label value: at most 63 of [A-Za-z0-9._-],
// beginning and ending with a letter or digit ("" when nothing is left).
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	out := string(b)
	if len(out) > 63 {
		out = out[:63]
	}
	return strings.Trim(out, "._-")
}

// deadline is the Unix second a pod of a session expiring at expires ends
// by itself; 0 when no expiry is known (the pod then waits for a deadline
// Extend gives it, or for the reaper).
func (p *Provider) deadline(expires time.Time) int64 {
	if expires.IsZero() {
		return 0
	}
	return expires.Add(p.cfg.KubeDeadlineGrace).Unix()
}

// networkNone reports whether sandboxes get no network: a NetworkPolicy
// that denies all ingress and egress.
func (p *Provider) networkNone() bool { return p.cfg.Network == "none" }

// podSpec is the pod of one session: hardened to Pod Security "restricted"
// (docs/kubernetes.md, "The pod").
func (p *Provider) podSpec(spec engine.Spec, img string) (*corev1.Pod, error) {
	uid, gid, err := sandboxUser(p.cfg)
	if err != nil {
		return nil, err
	}
	switch p.cfg.Network {
	case "none", "bridge", "default", "allow", "open":
	default:
		return nil, fail.Usagef("XMODE_SANDBOX_NETWORK=%s names a docker network; a kubernetes sandbox has none (a NetworkPolicy denying all traffic), the pod network (bridge), or a policy its egress proxy enforces (allow, open)", p.cfg.Network)
	}
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelManagedBy] = "xmode"
	annotations := map[string]string{}
	if spec.User != "" {
		if v := labelValue(spec.User); v != "" {
			labels[LabelUser] = v
		}
		annotations[AnnotationUser] = spec.User
	}
	if d := p.deadline(spec.Expires); d > 0 {
		annotations[AnnotationDeadline] = strconv.FormatInt(d, 10)
	}
	cpu := resource.NewMilliQuantity(int64(p.cfg.CPUs*1000+0.5), resource.DecimalSI)
	mem := resource.NewQuantity(p.cfg.Memory, resource.BinarySI)
	eph := resource.NewQuantity(p.cfg.KubeEphemeral, resource.BinarySI)
	limits := corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *mem, corev1.ResourceEphemeralStorage: *eph}
	tmpSize, err := tmpfsSize(p.cfg.TmpfsOptions)
	if err != nil {
		return nil, err
	}
	yes, no := true, false
	grace := int64(2)
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(spec.SessionID), Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &gid, SeccompProfile: seccomp,
			},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           img,
				ImagePullPolicy: corev1.PullPolicy(p.cfg.KubePullPolicy),
				Command:         []string{"/bin/sh", "-c", keepAlive},
				WorkingDir:      Workspace,
				Env:             envVars(spec),
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: limits},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					Privileged:               &no,
					ReadOnlyRootFilesystem:   &yes,
					RunAsNonRoot:             &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           seccomp,
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "workspace", MountPath: Workspace},
					{Name: "tmp", MountPath: p.cfg.TmpfsPath},
					{Name: "meta", MountPath: metaDir, ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: eph}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(tmpSize, resource.BinarySI),
				}}},
				{Name: "meta", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
					Items: []corev1.DownwardAPIVolumeFile{{
						Path:     "deadline",
						FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationDeadline + "']"},
					}},
				}}},
			},
		},
	}
	if rt := p.cfg.Runtime; rt != "" {
		pod.Spec.RuntimeClassName = &rt
	}
	if spec.CacheVolume != "" {
		// A project's sandbox has its cache variables (Spec.Env) pointing
		// under the cache mount: the pod gets an emptyDir there, a cache
		// for the session's own steps (no volume outlives a pod).
		mnt := path.Clean(cmp.Or(spec.CacheMount, p.cfg.ProjectCacheMount))
		if !path.IsAbs(mnt) || mnt == "/" {
			return nil, fail.Usagef("XMODE_PROJECT_CACHE_MOUNT %q must be an absolute path other than /", mnt)
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: eph}}})
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "cache", MountPath: mnt})
	}
	return pod, nil
}

// envVars is the sandbox's environment for every step (engine.Spec.Env).
func envVars(spec engine.Spec) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, kv := range spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out = append(out, corev1.EnvVar{Name: k, Value: v})
		}
	}
	return out
}

// tmpfsSize is the size= of XMODE_SANDBOX_TMPFS's options: the memory-
// backed emptyDir's limit, which counts against the pod's memory as
// docker's tmpfs does.
func tmpfsSize(opts string) (int64, error) {
	for _, o := range strings.Split(opts, ",") {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			return config.ParseSize(v)
		}
	}
	return 0, fail.Usagef("XMODE_SANDBOX_TMPFS %q has no size=: a kubernetes sandbox's /tmp needs one", opts)
}

// policySpec is the NetworkPolicy of a session without network: it selects
// the session's pod and allows nothing in or out.
func policySpec(spec engine.Spec) *networkingv1.NetworkPolicy {
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelManagedBy] = "xmode"
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(spec.SessionID), Labels: labels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				LabelSession: spec.SessionID, LabelInstance: spec.Labels[LabelInstance],
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// Provision makes the session's sandbox (docs/kubernetes.md): with network
// none its NetworkPolicy first, so the pod is never without it; then the
// pod — xmode's own (API pods), a Sandbox's (agent-sandbox), or for a pool
// entry (Spec.Pool) one of the project's warm pool, taken by a
// SandboxClaim — waits until it runs, failing within
// XMODE_KUBE_START_TIMEOUT with the cluster's own reason when it cannot be
// scheduled or its image cannot be had, and copies the worktree into it.
// What it made is removed again when it fails.
func (p *Provider) Provision(ctx context.Context, spec engine.Spec) (engine.Sandbox, error) {
	if !fsguard.ValidID("sbx_", spec.SessionID) {
		return engine.Sandbox{}, fail.Refusedf("session id %q is malformed: refusing to name a pod after it", spec.SessionID)
	}
	if spec.Labels[LabelManaged] != "true" || spec.Labels[LabelSession] != spec.SessionID || spec.Labels[LabelInstance] == "" {
		return engine.Sandbox{}, fmt.Errorf("provision %s: spec.Labels must carry %s=true, %s=%s and %s (docs/reference.md)", spec.SessionID, LabelManaged, LabelSession, spec.SessionID, LabelInstance)
	}
	if _, err := p.guard.CheckWorktree(spec.RunID, spec.Worktree); err != nil {
		return engine.Sandbox{}, err
	}
	if st, err := os.Stat(spec.Worktree); err != nil || !st.IsDir() {
		return engine.Sandbox{}, fail.Failedf("worktree %s is not a directory: create the session's worktree before its pod", spec.Worktree)
	}
	if err := ctx.Err(); err != nil {
		return engine.Sandbox{}, err
	}
	if err := p.checkEgressSpec(spec); err != nil {
		return engine.Sandbox{}, err
	}
	img := spec.Image
	if img == "" {
		img = p.Image()
	}
	pod, err := p.podSpec(spec, img)
	if err != nil {
		return engine.Sandbox{}, err
	}
	c, err := p.client()
	if err != nil {
		return engine.Sandbox{}, err
	}
	as, err := p.agentSandbox(ctx)
	if err != nil {
		return engine.Sandbox{}, err
	}
	var pool string // the warm pool a pool entry's pod comes from
	if as && spec.Pool != "" {
		t, err := p.template(spec)
		if err != nil {
			return engine.Sandbox{}, err
		}
		pool = t.Name
		if spec.Egress != nil {
			// A warm pool's pods come from its SandboxTemplate, made before
			// any sandbox's proxy: none could name it.
			return engine.Sandbox{}, fail.Refusedf("a pool entry on agent-sandbox cannot have an egress policy (XMODE_SANDBOX_NETWORK=%s): keep pools to sandboxes of network none or bridge there, or set XMODE_KUBE_API=pods", p.cfg.Network)
		}
	}
	sb := engine.Sandbox{Engine: Name, MountMode: MountSync, Image: img, Worktree: spec.Worktree, RunID: spec.RunID, SessionID: spec.SessionID, Project: spec.Project}
	name := pod.Name
	podName, uid := name, ""
	var owner ownerRef
	discard := func() {
		dctx, cancel := p.call(context.WithoutCancel(ctx))
		defer cancel()
		if owner.Kind == "Sandbox" {
			_ = p.removeOwner(dctx, c, resSandboxes, name, spec.SessionID)
		}
		if owner.Kind == "SandboxClaim" {
			_ = p.removeOwner(dctx, c, resClaims, name, spec.SessionID)
		}
		if uid != "" || owner.Kind == "" {
			_ = p.removePod(dctx, podName, spec.SessionID, uid)
		}
		_ = p.removePolicy(dctx, name, spec.SessionID)
		if spec.Egress != nil {
			_ = p.removePod(dctx, EgressPodName(spec.SessionID), spec.SessionID, "")
			_ = p.removePolicy(dctx, EgressPodName(spec.SessionID), spec.SessionID)
		}
	}
	// A proxied sandbox: its proxy pod first, for the address the sandbox's
	// pod names (docs/kubernetes.md, "Egress").
	var eg *egressSetup
	np := policySpec(spec)
	if spec.Egress != nil {
		if eg, err = p.startEgress(ctx, c, spec); err != nil {
			discard()
			return sb, err
		}
		p.applyEgress(pod, spec, eg)
		np = proxiedPolicy(spec)
	}
	if p.networkNone() || eg != nil {
		cctx, cancel := p.call(ctx)
		_, err := c.createPolicy(cctx, np)
		cancel()
		if err != nil {
			if isAlreadyExists(err) {
				return sb, fail.Failedf("a NetworkPolicy named %s already exists in namespace %s: stop the session first (`xmode sandbox stop`) or delete it (`kubectl delete networkpolicy -n %s %s`)", name, c.ns, c.ns, name)
			}
			return sb, p.wrap(err, "create the NetworkPolicy of "+name)
		}
	}
	until := time.Now().Add(p.cfg.KubeStartTimeout)
	switch {
	case !as:
		cctx, cancel := p.call(ctx)
		created, err := c.createPod(cctx, pod)
		cancel()
		if err != nil {
			if isAlreadyExists(err) {
				// Not ours to discard: it may be another session's.
				_ = p.removePolicy(context.WithoutCancel(ctx), name, spec.SessionID)
				return sb, fail.Failedf("a pod named %s already exists in namespace %s: stop the session first (`xmode sandbox stop`) or delete it (`kubectl delete pod -n %s %s`)", name, c.ns, c.ns, name)
			}
			// The apiserver may have made it before the call failed.
			discard()
			if httpStatus(err) == 403 && strings.Contains(err.Error(), "violates PodSecurity") {
				return sb, fail.Enginef("namespace %s refused the sandbox pod: %v", c.ns, err)
			}
			return sb, p.wrap(err, "create pod "+name)
		}
		uid = string(created.UID)
		owner = ownerRef{APIVersion: "v1", Kind: "Pod", Name: name, UID: uid}
	default:
		if pool != "" {
			owner, err = p.claimSandbox(ctx, c, spec, pool)
		} else {
			owner, err = p.startSandbox(ctx, c, spec, pod)
		}
		if err != nil {
			if errors.Is(err, errNameInUse) {
				_ = p.removePolicy(context.WithoutCancel(ctx), name, spec.SessionID) // the name's owner is not ours
			} else {
				discard()
			}
			return sb, err
		}
	}
	if p.networkNone() || eg != nil {
		// The policy's owner is the sandbox's: deleting it (by xmode, or by
		// anything else) deletes the policy with it.
		cctx, cancel := p.call(ctx)
		err := c.patchPolicy(cctx, name, owner.patch())
		cancel()
		if err != nil {
			discard()
			return sb, p.wrap(err, "give the NetworkPolicy of "+name+" to its "+owner.Kind)
		}
	}
	if eg != nil {
		// The proxy goes with its sandbox's owner, whoever deletes it.
		cctx, cancel := p.call(ctx)
		_, err := c.patchPod(cctx, EgressPodName(spec.SessionID), owner.patch())
		cancel()
		if err == nil {
			err = <-eg.served
		}
		if err != nil {
			discard()
			return sb, p.wrap(err, "start the egress proxy of "+name)
		}
	}
	if as {
		if podName, uid, err = p.waitPodOf(ctx, c, owner, until); err != nil {
			discard()
			return sb, err
		}
		// The pod is the session's from here: its labels (a warm pool's
		// pod has none of the session's), its owner, its deadline.
		if err := p.adopt(ctx, c, podName, spec); err != nil {
			discard()
			return sb, err
		}
	}
	if err := p.waitRunning(ctx, podName, uid, until); err != nil {
		if eg != nil {
			err = p.egressStartFailure(ctx, podName, err)
		}
		discard()
		return sb, err
	}
	if eg != nil && eg.creds {
		if err := p.installCA(ctx, EgressPodName(spec.SessionID), podName, spec.SessionID); err != nil {
			discard()
			return sb, err
		}
	}
	if err := p.copyIn(ctx, podName, spec.Worktree); err != nil {
		discard()
		return sb, err
	}
	sb.ContainerID = uid
	if pool != "" {
		// The claim's Sandbox is one of the warm pool's, named by it (or,
		// none being ready, one the controller made for the claim).
		sb.ContainerID = podName + "/" + uid
	}
	return sb, nil
}

// errNameInUse: a Sandbox or SandboxClaim of the session's name exists,
// which is not this Provision's to discard.
var errNameInUse = errors.New("already exists")

// podRef is the name and UID of sb's pod. A session's own pod (and a
// Sandbox's) is named after the session (PodName), its UID the session's
// container_id; the pod of a pool entry's SandboxClaim is its Sandbox's,
// named by the warm pool, so its container_id is "<name>/<UID>".
func podRef(sb engine.Sandbox) (name, uid string, err error) {
	n, u, ok := strings.Cut(sb.ContainerID, "/")
	if !ok {
		return PodName(sb.SessionID), sb.ContainerID, nil
	}
	if !strings.HasPrefix(n, "xmode-") || !validName(n) || u == "" || strings.Contains(u, "/") {
		return "", "", fail.Refusedf("session %s: container id %q is not a pod's name and UID: refusing to derive a pod from it", sb.SessionID, sb.ContainerID)
	}
	return n, u, nil
}

// pooled reports whether sb's pod came through a SandboxClaim (named
// after the session).
func pooled(sb engine.Sandbox) bool { return strings.Contains(sb.ContainerID, "/") }

// startFailures are the waiting reasons that no wait will cure: the pod
// fails at once with the cluster's reason.
var startFailures = map[string]bool{
	"ErrImageNeverPull": true, "InvalidImageName": true, "CreateContainerConfigError": true,
	"CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
}

// waitRunning waits until the pod's container runs, at most until the
// end of XMODE_KUBE_START_TIMEOUT. A reason the pod cannot start for good
// (ErrImageNeverPull, …) fails at once; one that might pass (Unschedulable,
// ImagePullBackOff) fails at the bound, with the cluster's message. Both
// are exit 5: the cluster cannot run the sandbox as configured.
func (p *Provider) waitRunning(ctx context.Context, name, uid string, until time.Time) error {
	c, err := p.client()
	if err != nil {
		return err
	}
	bound := p.cfg.KubeStartTimeout
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	last := "it was not scheduled yet"
	for interval := 20 * time.Millisecond; ; interval = min(interval*2, 250*time.Millisecond) {
		cctx, ccancel := p.call(wctx)
		pod, err := c.getPod(cctx, name)
		ccancel()
		switch {
		case err != nil && wctx.Err() == nil:
			if notFound(err) {
				return fail.Failedf("pod %s was deleted while it started", name)
			}
			return p.wrap(err, "wait for pod "+name)
		case err == nil:
			if string(pod.UID) != uid {
				return fail.Failedf("pod %s was replaced while it started", name)
			}
			ok, why, final := podStarted(pod)
			if ok {
				return nil
			}
			if final {
				return fail.Enginef("pod %s in namespace %s cannot start: %s — check the image (XMODE_SANDBOX_IMAGE or %s; with XMODE_KUBE_IMAGE_PULL_POLICY=Never it must be on the node already) and `kubectl describe pod -n %s %s`", name, c.ns, why, fail.Image, c.ns, name)
			}
			if why != "" {
				last = why
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fail.Enginef("pod %s in namespace %s did not start within %s (XMODE_KUBE_START_TIMEOUT): %s — see `kubectl describe pod -n %s %s`", name, c.ns, bound, last, c.ns, name)
		case <-time.After(interval):
		}
	}
}

// podStarted says whether the pod's container runs; else why not, and
// whether that is final.
func podStarted(pod *corev1.Pod) (ok bool, why string, final bool) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		why = "the pod ended (" + string(pod.Status.Phase) + ")"
		if pod.Status.Reason != "" {
			why += ": " + pod.Status.Reason + ": " + pod.Status.Message
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil {
				why = fmt.Sprintf("its container ended (%s, exit %d) %s", t.Reason, t.ExitCode, strings.TrimSpace(t.Message))
			}
		}
		return false, why, true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		switch {
		case cs.State.Running != nil:
			return pod.DeletionTimestamp == nil, "", pod.DeletionTimestamp != nil
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "ContainerCreating":
			w := cs.State.Waiting
			return false, strings.TrimSpace(w.Reason + ": " + w.Message), startFailures[w.Reason]
		case cs.State.Terminated != nil:
			t := cs.State.Terminated
			return false, fmt.Sprintf("its container ended (%s, exit %d) %s", t.Reason, t.ExitCode, strings.TrimSpace(t.Message)), true
		}
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			return false, strings.TrimSpace(cond.Reason + ": " + cond.Message), false
		}
	}
	return false, "", false
}

// MountMode is how sandboxes see their worktree (engine.MountModer): a copy.
func (p *Provider) MountMode() string { return MountSync }

// WorktreeIn is where sb's steps see its worktree (engine.WorktreeMounter).
func (p *Provider) WorktreeIn(sb engine.Sandbox) (string, error) {
	if sb.MountMode != "" && sb.MountMode != MountSync {
		return "", fmt.Errorf("session %s: kubernetes session with unknown mount mode %q", sb.SessionID, sb.MountMode)
	}
	return Worktree, nil
}

// Network is the network a new sandbox gets (engine.Networker): "none"
// (a NetworkPolicy denying all traffic), "allow" or "open" (its egress
// proxy, the only way out) or "" (the pod network).
func (p *Provider) Network() string {
	if m, proxied := p.cfg.EgressMode(); proxied {
		return string(m)
	}
	if p.networkNone() {
		return "none"
	}
	return ""
}

// Image is the image a new sandbox runs when its spec names none
// (engine.ImageRunner): XMODE_SANDBOX_IMAGE.
func (p *Provider) Image() string { return p.cfg.Image }

// podPath is path inside the pod's worktree.
func podPath(rel string) string { return path.Join(Worktree, rel) }

// mergeJSON is a merge patch of the pod's annotations.
func annotationPatch(key, value string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	return b
}
