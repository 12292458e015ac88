package kubernetes

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/kubetest"
)

// The apiserver lets a pod's activeDeadlineSeconds be set or lowered, never
// raised: the reason the dead-man switch is an annotation the keep-alive
// reads, which Extend can move either way (docs/kubernetes.md).
func TestActiveDeadlineOnlyShrinks(t *testing.T) {
	_, cs := kubetest.Require(t)
	ns := kubetest.Namespace(t, cs)
	ctx := context.Background()
	pod := kubetest.RestrictedPod("deadline", kubetest.Image(t), "sleep", "3600")
	d := int64(600)
	pod.Spec.ActiveDeadlineSeconds = &d
	created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = created
	_, err = cs.CoreV1().Pods(ns).Patch(ctx, "deadline", types.MergePatchType, []byte(`{"spec":{"activeDeadlineSeconds":1200}}`), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must be less than or equal to previous value") {
		t.Fatalf("raising activeDeadlineSeconds: %v, want the apiserver to refuse it", err)
	}
}

// The dead-man switch: a pod whose deadline passed ends by itself, with no
// xmode to reap it; Extend moves the deadline of a running pod, and the
// keep-alive sees the move in time.
func TestDeadManSwitch(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		e := newEnvVia(t, via, map[string]string{"XMODE_KUBE_DEADLINE_GRACE": "1s"})
		ctx := context.Background()

		short := e.spec(t)
		// Past before long, but not before it started (a busy node, -race).
		short.Expires = time.Now().Add(8 * time.Second)
		sbShort := e.provision(t, short)
		extended := e.spec(t)
		extended.Expires = time.Now().Add(8 * time.Second)
		sbExt := e.provision(t, extended)
		if err := e.p.Extend(ctx, sbExt, time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			alive, err := e.p.Alive(ctx, sbShort)
			if err != nil {
				t.Fatal(err)
			}
			if !alive {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the pod past its deadline still runs 60 s later")
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Logf("the pod ended %s after its deadline", time.Since(short.Expires.Add(time.Second)).Round(100*time.Millisecond))
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			pod, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, e.podName(t, sbShort), metav1.GetOptions{})
			if err == nil && pod.Status.Phase == corev1.PodSucceeded {
				break
			}
			if apierrors.IsNotFound(err) && via != viaPods {
				// agent-sandbox's controller deleted it (and its owner)
				// at the owner's shutdown time, the same deadline.
				break
			}
			if err != nil || time.Now().After(end) {
				t.Fatalf("the pod past its deadline: %v, phase %s; want Succeeded (its keep-alive exited)", err, pod.Status.Phase)
			}
		}
		if _, err := e.p.Exec(ctx, sbShort, engine.ExecRequest{Argv: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "deadline") && !(via != viaPods && strings.Contains(err.Error(), "is gone")) {
			t.Errorf("a step in the ended pod: %v, want an error naming its deadline", err)
		}
		if alive, err := e.p.Alive(ctx, sbExt); err != nil || !alive {
			t.Fatalf("the extended pod: alive %v, %v; want it running past its first deadline", alive, err)
		}
		if st, out, _ := e.sh(t, sbExt, "cat "+metaDir+"/deadline"); st.ExitCode != 0 || strings.TrimSpace(out) == "" {
			t.Errorf("the deadline the pod sees: %q", out)
		} else if n, _ := strconv.ParseInt(strings.TrimSpace(out), 10, 64); n < time.Now().Add(30*time.Minute).Unix() {
			t.Errorf("the pod sees deadline %d, want the extended one", n)
		}
	})
}

// A pod that cannot be scheduled fails create within the bound, with the
// scheduler's reason; an image that is not there (pull policy Never) fails
// at once with the kubelet's. Both are the engine's failures (exit 5), and
// nothing is left.
func TestStartFailures(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		t.Run("Unschedulable", func(t *testing.T) {
			e := newEnvVia(t, via, map[string]string{"XMODE_SANDBOX_CPUS": "1000", "XMODE_KUBE_START_TIMEOUT": "4s"})
			start := time.Now()
			_, err := e.p.Provision(context.Background(), e.spec(t))
			took := time.Since(start)
			if fail.KindOf(err) != fail.EngineUnavailable || !strings.Contains(err.Error(), "Unschedulable") || !strings.Contains(err.Error(), "0/1 nodes") {
				t.Fatalf("an unschedulable pod: %v, want exit 5 with the scheduler's reason", err)
			}
			if took > 20*time.Second {
				t.Errorf("it took %s to fail, bound 4s", took)
			}
			e.wantNoPods(t)
		})
		t.Run("ImageNeverPulled", func(t *testing.T) {
			// The configuration's image: a warm pool's template has it.
			e := newEnvVia(t, via, map[string]string{"XMODE_SANDBOX_IMAGE": "xmode-no-such-image:nope"})
			spec := e.spec(t)
			start := time.Now()
			_, err := e.p.Provision(context.Background(), spec)
			if fail.KindOf(err) != fail.EngineUnavailable || !strings.Contains(err.Error(), "ErrImageNeverPull") {
				t.Fatalf("a missing image: %v, want exit 5 with ErrImageNeverPull", err)
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("it took %s to fail: it must not wait for the bound", took)
			}
			e.wantNoPods(t)
		})
	})
}

// wantNoPods waits until the namespace has no pod left that is not being
// deleted.
func (e *env) wantNoPods(t *testing.T) {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Labels[LabelManaged] != "true" && p.Labels[LabelPool] != "" {
			continue // a warm pool's, no session's
		}
		if p.DeletionTimestamp == nil {
			t.Errorf("pod %s left behind (%s)", p.Name, p.Status.Phase)
		}
	}
	nps, err := e.cs.NetworkingV1().NetworkPolicies(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, np := range nps.Items {
		if np.Labels[LabelManaged] == "true" {
			t.Errorf("NetworkPolicy %s left behind", np.Name)
		}
	}
	c, err := e.p.client()
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{resSandboxes, resClaims} {
		if items, err := c.asList(context.Background(), res, LabelManaged+"=true"); err == nil && len(items) > 0 {
			t.Errorf("%d %s left behind", len(items), res)
		}
	}
}

// XMODE_SANDBOX_NETWORK=none: the sandbox gets a NetworkPolicy denying all
// traffic, owned by what owns the pod (the pod, its Sandbox, a pool
// entry's SandboxClaim) and made before the pod; a sandbox with it cannot
// reach a test pod that an open sandbox can (on the test cluster
// kube-router enforces policies). A warm pool's template for network none
// names a policy that allows nothing, not agent-sandbox's default.
func TestNetworkNone(t *testing.T) {
	kubetest.RequireNetworkPolicy(t)
	eachAPI(t, func(t *testing.T, via string) {
		closed := newEnvVia(t, via, nil)
		ctx := context.Background()
		server := kubetest.RestrictedPod("server", kubetest.Image(t), "httpd", "-f", "-p", "8080", "-h", "/tmp")
		if _, err := closed.cs.CoreV1().Pods(closed.ns).Create(ctx, server, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ip := kubetest.WaitRunning(t, closed.cs, closed.ns, "server", time.Minute).Status.PodIP
		open := newEnvVia(t, via, map[string]string{"XMODE_SANDBOX_NETWORK": "bridge"})
		if open.p.Network() != "" || closed.p.Network() != "none" {
			t.Fatalf("Network(): open %q closed %q", open.p.Network(), closed.p.Network())
		}
		sbOpen := open.provision(t, open.spec(t))
		spec := closed.spec(t)
		sbClosed := closed.provision(t, spec)
		np, err := closed.cs.NetworkingV1().NetworkPolicies(closed.ns).Get(ctx, PodName(spec.SessionID), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the closed sandbox's NetworkPolicy: %v", err)
		}
		_, uid, _ := podRef(sbClosed)
		ownerKind, ownerUID := "Pod", uid
		if via != viaPods {
			ownerKind = map[string]string{viaSandbox: "Sandbox", viaPool: "SandboxClaim"}[via]
			res := map[string]string{viaSandbox: resSandboxes, viaPool: resClaims}[via]
			var m struct {
				metav1.ObjectMeta `json:"metadata"`
			}
			c, _ := closed.p.client()
			if err := c.asGet(ctx, res, PodName(spec.SessionID), &m); err != nil {
				t.Fatal(err)
			}
			ownerUID = string(m.UID)
		}
		if len(np.OwnerReferences) != 1 || string(np.OwnerReferences[0].UID) != ownerUID || np.OwnerReferences[0].Kind != ownerKind {
			t.Errorf("the NetworkPolicy's owners %+v, want the %s %s", np.OwnerReferences, ownerKind, ownerUID)
		}
		if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
			t.Errorf("the NetworkPolicy allows %+v", np.Spec)
		}
		if via == viaPool {
			// The template's own, which covers the warm pool's pods
			// before any is a session's.
			tpl, err := closed.p.template(spec)
			if err != nil {
				t.Fatal(err)
			}
			var shared *networkingv1.NetworkPolicy
			for end := time.Now().Add(30 * time.Second); shared == nil; time.Sleep(200 * time.Millisecond) {
				shared, err = closed.cs.NetworkingV1().NetworkPolicies(closed.ns).Get(ctx, tpl.Name+"-network-policy", metav1.GetOptions{})
				if err != nil {
					shared = nil
					if time.Now().After(end) {
						t.Fatalf("the template's NetworkPolicy: %v", err)
					}
				}
			}
			if len(shared.Spec.Ingress) != 0 || len(shared.Spec.Egress) != 0 || len(shared.Spec.PolicyTypes) != 2 {
				t.Errorf("the template's NetworkPolicy allows %+v", shared.Spec)
			}
		}
		probe := "nc -w 2 " + ip + " 8080 </dev/null"
		if st, out, errs := open.sh(t, sbOpen, probe); st.ExitCode != 0 {
			t.Fatalf("the open sandbox cannot reach the server: %+v %s %s", st, out, errs)
		}
		// At once: the policy exists before the pod is the session's.
		if st, _, _ := closed.sh(t, sbClosed, probe); st.ExitCode == 0 {
			t.Fatal("the sandbox with network none reached the server")
		}
		// The policy goes with its owner, whoever deletes it.
		var err2 error
		switch via {
		case viaPods:
			err2 = closed.cs.CoreV1().Pods(closed.ns).Delete(ctx, PodName(spec.SessionID), metav1.DeleteOptions{})
		default:
			c, _ := closed.p.client()
			err2 = c.asDelete(ctx, map[string]string{viaSandbox: resSandboxes, viaPool: resClaims}[via], PodName(spec.SessionID), "")
		}
		if err2 != nil {
			t.Fatal(err2)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, err := closed.cs.NetworkingV1().NetworkPolicies(closed.ns).Get(ctx, np.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the NetworkPolicy outlived its owner by 60 s (%v)", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// The worktree travels: copied in at Provision, a step's changes brought
// back by SyncBack, a path pushed by PushPath, a path seen by PathPresent.
func TestWorktreeTravels(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		e := newEnvVia(t, via, nil)
		spec := e.spec(t)
		if err := os.MkdirAll(filepath.Join(spec.Worktree, "sub", "deep"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"README": "from the host\n", "sub/deep/f": "deep\n", "gone": "x"} {
			if err := os.WriteFile(filepath.Join(spec.Worktree, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("README", filepath.Join(spec.Worktree, "link")); err != nil {
			t.Fatal(err)
		}
		sb := e.provision(t, spec)
		ctx := context.Background()
		st, out, _ := e.sh(t, sb, `pwd; id -u; cat README sub/deep/f; readlink link; touch w && echo writable`)
		if want := Worktree + "\n65532\nfrom the host\ndeep\nREADME\nwritable\n"; st.ExitCode != 0 || out != want {
			t.Fatalf("in the pod: %+v %q, want %q", st, out, want)
		}
		e.sh(t, sb, `echo changed > README; echo new > sub/new; rm gone; ln -s /etc/passwd out`)
		if b, _ := os.ReadFile(filepath.Join(spec.Worktree, "README")); string(b) != "from the host\n" {
			t.Fatalf("the host's README changed before SyncBack: %q", b)
		}
		if err := e.p.SyncBack(ctx, sb); err != nil {
			t.Fatalf("SyncBack: %v", err)
		}
		for rel, want := range map[string]string{"README": "changed\n", "sub/new": "new\n", "sub/deep/f": "deep\n"} {
			if b, err := os.ReadFile(filepath.Join(spec.Worktree, rel)); err != nil || string(b) != want {
				t.Errorf("%s after SyncBack: %q %v, want %q", rel, b, err, want)
			}
		}
		for _, rel := range []string{"gone", "out"} {
			if _, err := os.Lstat(filepath.Join(spec.Worktree, rel)); !os.IsNotExist(err) {
				t.Errorf("%s after SyncBack: %v, want it gone (deleted in the pod; a link out is left out)", rel, err)
			}
		}
		if err := os.WriteFile(filepath.Join(spec.Worktree, "sub", "pushed"), []byte("pushed\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := e.p.PushPath(ctx, sb, "sub/pushed"); err != nil {
			t.Fatalf("PushPath: %v", err)
		}
		if _, out, _ := e.sh(t, sb, "cat sub/pushed"); out != "pushed\n" {
			t.Errorf("the pushed file in the pod: %q", out)
		}
		os.Remove(filepath.Join(spec.Worktree, "sub", "pushed"))
		if err := e.p.PushPath(ctx, sb, "sub/pushed"); err != nil {
			t.Fatalf("PushPath of a removed file: %v", err)
		}
		if st, _, _ := e.sh(t, sb, "test -e sub/pushed"); st.ExitCode == 0 {
			t.Error("a file removed on the host is still in the pod")
		}
		e.sh(t, sb, "mkdir -p /tmp/elsewhere && rm -rf sub2 && ln -s /tmp/elsewhere sub2")
		os.MkdirAll(filepath.Join(spec.Worktree, "sub2"), 0o755)
		os.WriteFile(filepath.Join(spec.Worktree, "sub2", "x"), []byte("x"), 0o644)
		if err := e.p.PushPath(ctx, sb, "sub2/x"); fail.KindOf(err) != fail.Refused {
			t.Errorf("PushPath through a link the pod planted: %v, want refused", err)
		}
		if ok, err := e.p.PathPresent(ctx, sb, "/bin/sh"); err != nil || !ok {
			t.Errorf("PathPresent(/bin/sh) = %v, %v", ok, err)
		}
		if ok, err := e.p.PathPresent(ctx, sb, "/no/such/thing"); err != nil || ok {
			t.Errorf("PathPresent(/no/such/thing) = %v, %v", ok, err)
		}
	})
}

// A copy of the worktree coming back is hostile: here the pod's copy-out
// sends archives made on the host — names with "..", absolute names, entries
// under a link out, more than the limit, a copy cut short, no archive at
// all. Each is refused whole and the host's worktree is as it was; links
// out in an otherwise good copy are left out.
func TestHostileSyncBack(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		e := newEnvVia(t, via, map[string]string{"XMODE_SANDBOX_SYNC_MAX_BYTES": "64k"})
		spec := e.spec(t)
		if err := os.WriteFile(filepath.Join(spec.Worktree, "keep"), []byte("before\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := entry{name: "worktree/", typ: tar.TypeDir, mode: 0o755}
		keep := entry{name: "worktree/keep", typ: tar.TypeReg, body: "before\n"}
		hostile := map[string][]byte{
			"dot-dot":      tarOf(t, dir, entry{name: "worktree/../../../../../../../../tmp/escaped", typ: tar.TypeReg, body: "x"}),
			"absolute":     tarOf(t, dir, entry{name: "/tmp/escaped", typ: tar.TypeReg, body: "x"}),
			"under a link": tarOf(t, dir, entry{name: "worktree/out", typ: tar.TypeSymlink, link: "/tmp"}, entry{name: "worktree/out/escaped", typ: tar.TypeReg, body: "x"}),
			"over limit":   tarOf(t, dir, entry{name: "worktree/big", typ: tar.TypeReg, body: strings.Repeat("x", 200<<10)}),
			"cut short":    tarOf(t, dir, keep, entry{name: "worktree/more", typ: tar.TypeReg, body: strings.Repeat("y", 8<<10)})[:1536],
			"no archive":   []byte("this is no archive\n"),
			"links out":    tarOf(t, dir, keep, entry{name: "worktree/abs", typ: tar.TypeSymlink, link: "/etc/passwd"}, entry{name: "worktree/up", typ: tar.TypeSymlink, link: "../../x"}),
		}
		if err := os.MkdirAll(filepath.Join(spec.Worktree, ".h"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range hostile {
			if err := os.WriteFile(filepath.Join(spec.Worktree, ".h", strings.ReplaceAll(name, " ", "-")+".tar"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		sb := e.provision(t, spec)
		// The pod's shell runs busybox's tar applet whatever the PATH (a step
		// cannot put a tar of its own in the way), so the test replaces the
		// copy-out command: the same exec, another archive.
		fake := func(name string) {
			e.p.copyOutOverride = `exec cat "$1/worktree/.h/` + strings.ReplaceAll(name, " ", "-") + `.tar"`
		}
		unchanged := func(what string) {
			t.Helper()
			if b, err := os.ReadFile(filepath.Join(spec.Worktree, "keep")); err != nil || string(b) != "before\n" {
				t.Errorf("%s: the host's worktree changed: %q %v", what, b, err)
			}
			if _, err := os.Stat(filepath.Join(spec.Worktree, ".h")); err != nil {
				t.Errorf("%s: the host's worktree changed: %v", what, err)
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(spec.Worktree), ".sync-*")); len(left) != 0 {
				t.Errorf("%s: left %v", what, left)
			}
			if _, err := os.Lstat("/tmp/escaped"); err == nil {
				os.Remove("/tmp/escaped")
				t.Fatalf("%s: a file escaped the worktree", what)
			}
		}
		ctx := context.Background()
		for _, name := range []string{"dot-dot", "absolute", "under a link", "over limit", "cut short", "no archive"} {
			fake(name)
			if err := e.p.SyncBack(ctx, sb); err == nil {
				t.Errorf("%s: SyncBack accepted it", name)
			} else {
				t.Logf("%s: %v", name, err)
			}
			unchanged(name)
		}
		fake("links out")
		if err := e.p.SyncBack(ctx, sb); err != nil {
			t.Fatalf("a copy with links out: %v", err)
		}
		for _, rel := range []string{"abs", "up"} {
			if _, err := os.Lstat(filepath.Join(spec.Worktree, rel)); !os.IsNotExist(err) {
				t.Errorf("the link %s came back: %v", rel, err)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(spec.Worktree, "keep")); string(b) != "before\n" {
			t.Errorf("keep: %q", b)
		}
	})
}

// entry is one member of a crafted archive.
type entry struct {
	name, link string
	typ        byte
	body       string
	mode       int64
}

func tarOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A step that allocates more than the memory limit is OOM-killed and
// reported so; a plain KILL is not.
func TestOOMKilled(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		e := newEnvVia(t, via, map[string]string{"XMODE_SANDBOX_MEMORY": "48m"})
		sb := e.provision(t, e.spec(t))
		st, _, errs := e.sh(t, sb, "echo before; exec dd if=/dev/zero of=/dev/null bs=96M count=1")
		if want := (engine.Status{ExitCode: 137, Signal: "SIGKILL", OOMKilled: true}); st != want {
			t.Fatalf("memory hog: %+v, want %+v (stderr %s)", st, want, errs)
		}
		if st, _, _ := e.sh(t, sb, "kill -KILL $$"); st != (engine.Status{ExitCode: 137, Signal: "SIGKILL"}) {
			t.Errorf("kill -KILL: %+v, want 137 without OOMKilled", st)
		}
	})
}

// The reaper's view: ListObjects finds this install's pods (and policies)
// by label across the namespace, whatever xmode's store remembers, and
// RemoveObject deletes them; another install's are not listed.
func TestOrphans(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		e := newEnvVia(t, via, nil)
		mine := e.provision(t, e.spec(t))
		other := *e
		other.instance, other.pool = "otherinstance", ""
		theirs := other.provision(t, other.spec(t))
		ctx := context.Background()
		objs, err := e.p.ListObjects(ctx, e.instance)
		if err != nil {
			t.Fatal(err)
		}
		var found *engine.Object
		for i, o := range objs {
			if o.SessionID == theirs.SessionID {
				t.Errorf("another install's pod was listed: %+v", o)
			}
			if o.Kind == engine.KindPod && o.SessionID == mine.SessionID {
				found = &objs[i]
			}
		}
		_, uid, _ := podRef(mine)
		if found == nil || found.State != "running" || found.ID != uid || found.Instance != e.instance {
			t.Fatalf("the pod of %s among %+v: %+v", mine.SessionID, objs, found)
		}
		if err := e.p.RemoveObject(ctx, *found); err != nil {
			t.Fatal(err)
		}
		if alive, err := e.p.Alive(ctx, mine); err != nil || alive {
			t.Errorf("after RemoveObject: alive %v, %v", alive, err)
		}
		if alive, err := e.p.Alive(ctx, theirs); err != nil || !alive {
			t.Errorf("another install's pod after the sweep: alive %v, %v", alive, err)
		}
		if via != viaPods {
			// The pod's owner is listed too (a Sandbox, or a pool entry's
			// SandboxClaim), and nothing of the warm pool's own.
			kind := KindSandbox
			if via == viaPool {
				kind = KindClaim
			}
			owners := 0
			for _, o := range objs {
				if o.SessionID == "" {
					t.Errorf("an object of no session was listed (the warm pool's?): %+v", o)
				}
				if o.Kind == kind && o.SessionID == mine.SessionID && o.Name == PodName(mine.SessionID) {
					owners++
					if err := e.p.RemoveObject(ctx, o); err != nil {
						t.Fatal(err)
					}
				}
			}
			if owners != 1 {
				t.Errorf("the %s of %s listed %d times among %+v", kind, mine.SessionID, owners, objs)
			}
		}
		if _, err := e.p.ListObjects(ctx, ""); err == nil {
			t.Error("ListObjects without an instance listed every install's")
		}
	})
}

// RBAC: a service account bound to a Role without pods/exec (impersonated
// through its kubeconfig): doctor names the missing permission, and a
// create fails with exit 5 and the fix.
func TestRBACMissingExec(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		admin := newEnvVia(t, via, nil)
		ctx := context.Background()
		ns := admin.ns
		if _, err := admin.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "xmode"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rules := RoleRules()
		var noExec []rbacv1.PolicyRule
		for _, r := range rules {
			if len(r.Resources) == 1 && r.Resources[0] == "pods/exec" {
				continue
			}
			noExec = append(noExec, r)
		}
		if len(noExec) == len(rules) {
			t.Fatal("the Role has no pods/exec rule to leave out")
		}
		if _, err := admin.cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "xmode"}, Rules: noExec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "xmode"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "xmode", Namespace: ns}},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "xmode"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kc := ImpersonatingKubeconfig(t, kubetest.Kubeconfig(t), "system:serviceaccount:"+ns+":xmode")
		e := newEnvVia(t, viaPods, map[string]string{"KUBECONFIG": kc, "XMODE_KUBE_NAMESPACE": ns, "XMODE_KUBE_API": admin.cfg.KubeAPI})
		e.ns = ns
		if via == viaPool {
			e.keepWarm(t, "proj", 1)
		}
		var rbac *engine.Check
		checks := e.p.Health(ctx)
		for i, c := range checks {
			if c.Name == "kubernetes rbac" {
				rbac = &checks[i]
			}
		}
		if rbac == nil || rbac.Status != engine.CheckFail || !strings.Contains(rbac.Detail, "create pods/exec") || strings.Contains(rbac.Detail, "create pods (") || rbac.Fix == "" {
			t.Fatalf("doctor's rbac line: %+v, want a failure naming create pods/exec alone, with a fix", rbac)
		}
		_, err := e.p.Provision(ctx, e.spec(t))
		if fail.KindOf(err) != fail.EngineUnavailable || !strings.Contains(err.Error(), "pods/exec") || !strings.Contains(err.Error(), "docs/kubernetes.md") {
			t.Fatalf("create without pods/exec: %v, want exit 5 naming pods/exec and the Role", err)
		}
		admin.wantNoPods(t)
	})
}

// With the Role of docs/kubernetes.md and nothing more, everything works:
// doctor's rbac line is ok and a sandbox runs a step, syncs back and goes.
func TestRoleIsEnough(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		admin := newEnvVia(t, via, nil)
		ctx := context.Background()
		ns := admin.ns
		if _, err := admin.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "xmode"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "xmode"}, Rules: RoleRules()}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "xmode"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "xmode", Namespace: ns}},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "xmode"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kc := ImpersonatingKubeconfig(t, kubetest.Kubeconfig(t), "system:serviceaccount:"+ns+":xmode")
		e := newEnvVia(t, viaPods, map[string]string{"KUBECONFIG": kc, "XMODE_KUBE_NAMESPACE": ns, "XMODE_KUBE_API": admin.cfg.KubeAPI})
		if via == viaPool {
			e.keepWarm(t, "proj", 1) // with the Role alone, too
		}
		for _, c := range e.p.Health(ctx) {
			if c.Name == "kubernetes rbac" && c.Status != engine.CheckOK {
				t.Errorf("doctor with the Role: %+v", c)
			}
		}
		spec := e.spec(t)
		sb, err := e.p.Provision(ctx, spec)
		if err != nil {
			t.Fatalf("Provision with the Role alone: %v", err)
		}
		if st, out, _ := e.sh(t, sb, "echo hi > f; cat f"); st.ExitCode != 0 || out != "hi\n" {
			t.Errorf("a step: %+v %q", st, out)
		}
		if err := e.p.SyncBack(ctx, sb); err != nil {
			t.Errorf("SyncBack: %v", err)
		}
		if err := e.p.Extend(ctx, sb, time.Now().Add(2*time.Hour)); err != nil {
			t.Errorf("Extend: %v", err)
		}
		if objs, err := e.p.ListObjects(ctx, e.instance); err != nil || len(objs) == 0 {
			t.Errorf("ListObjects: %v %v", objs, err)
		}
		if err := e.p.Claim(ctx, sb, spec.SessionID, time.Now().Add(3*time.Hour)); err != nil {
			t.Errorf("Claim: %v", err)
		}
		if err := e.p.Destroy(ctx, sb); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		if via == viaPool {
			e.keepWarm(t, "proj", 0)
		}
	})
}

// ImpersonatingKubeconfig writes a copy of the kubeconfig at path whose
// user acts as user (the admin may impersonate anyone).
func ImpersonatingKubeconfig(t *testing.T, path, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatal(err)
	}
	return out
}
