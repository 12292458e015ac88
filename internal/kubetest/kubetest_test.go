package kubetest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestSmoke proves the cluster works from Go with client-go: a hardened pod
// in a restricted namespace runs, takes execs through pods/exec (WebSocket
// with SPDY fallback, and SPDY alone) with stdin and exit codes, and is
// deleted.
func TestSmoke(t *testing.T) {
	cfg, cs := Require(t)
	image := Image(t)
	ns := Namespace(t, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pod := RestrictedPod("smoke", image, "sleep", "3600")
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	WaitRunning(t, cs, ns, "smoke", time.Minute)

	for _, tr := range []struct {
		name string
		tr   Transport
	}{{"websocket", Fallback}, {"spdy", SPDY}} {
		t.Run(tr.name, func(t *testing.T) {
			res, err := Exec(ctx, cfg, cs, ns, "smoke", "main", tr.tr, nil, "true")
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec true: %+v, %v", res, err)
			}
			in := strings.Repeat("through stdin\n", 1000)
			res, err = Exec(ctx, cfg, cs, ns, "smoke", "main", tr.tr, strings.NewReader(in), "cat")
			if err != nil || res.ExitCode != 0 || res.Stdout != in {
				t.Fatalf("exec cat: exit %d, %d bytes back of %d, stderr %q, %v", res.ExitCode, len(res.Stdout), len(in), res.Stderr, err)
			}
			res, err = Exec(ctx, cfg, cs, ns, "smoke", "main", tr.tr, nil, "sh", "-c", "echo w > /tmp/w && cat /tmp/w && ! touch /w 2>/dev/null")
			if err != nil || res.ExitCode != 0 || res.Stdout != "w\n" {
				t.Fatalf("exec sh: %+v, %v; want /tmp writable and / read-only", res, err)
			}
			res, err = Exec(ctx, cfg, cs, ns, "smoke", "main", tr.tr, nil, "sh", "-c", "id -u; echo oops >&2; exit 3")
			if err != nil || res.ExitCode != 3 || res.Stdout != "65532\n" || res.Stderr != "oops\n" {
				t.Fatalf("exec sh: %+v, %v; want exit 3, uid 65532 on stdout, oops on stderr", res, err)
			}
		})
	}

	if err := cs.CoreV1().Pods(ns).Delete(ctx, "smoke", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "smoke", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod still there after delete: %v", err)
	}
}

// TestNamespaceRestricted: Namespace's namespace refuses a pod that breaks
// the restricted standard, and is deleted when its test ends.
func TestNamespaceRestricted(t *testing.T) {
	_, cs := Require(t)
	image := Image(t)
	var ns string
	t.Run("inner", func(t *testing.T) {
		ns = Namespace(t, cs)
		root := RestrictedPod("root", image, "sleep", "1")
		root.Spec.SecurityContext = nil
		root.Spec.Containers[0].SecurityContext = nil
		_, err := cs.CoreV1().Pods(ns).Create(context.Background(), root, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
			t.Fatalf("an unhardened pod: %v; want it forbidden by PodSecurity restricted", err)
		}
	})
	got, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	case got.DeletionTimestamp == nil || got.Status.Phase != corev1.NamespaceTerminating:
		t.Fatalf("namespace %s still active after its test ended", ns)
	}
}
