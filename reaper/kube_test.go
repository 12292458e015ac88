package reaper_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/xmode/xmode/internal/kubetest"
	kube "github.com/xmode/xmode/providers/kubernetes"
	"github.com/xmode/xmode/reaper"
)

// kubeEnv is an env whose sessions are pods on the test cluster (through
// api: XMODE_KUBE_API), in a namespace of the test's own.
func kubeEnv(t *testing.T, api string) (*env, kubernetes.Interface, string) {
	t.Helper()
	_, cs := kubetest.Require(t)
	if api == kube.APIAgentSandbox {
		kubetest.RequireAgentSandbox(t)
	}
	ns := kubetest.Namespace(t, cs)
	e := newEnv(t, map[string]string{
		"XMODE_SANDBOX_ENGINE": "kubernetes", "XMODE_RUNNER_MODE": "cloud_worker", "XMODE_KUBE_API": api,
		"KUBECONFIG": kubetest.Kubeconfig(t), "XMODE_KUBE_NAMESPACE": ns,
		"XMODE_SANDBOX_IMAGE": kubetest.Image(t), "XMODE_KUBE_IMAGE_PULL_POLICY": "Never",
		"XMODE_SANDBOX_CPUS": "0.1", "XMODE_SANDBOX_MEMORY": "128m", "XMODE_KUBE_EPHEMERAL_STORAGE": "1g",
	})
	return e, cs, ns
}

func podGone(t *testing.T, cs kubernetes.Interface, ns, name string) bool {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return p.DeletionTimestamp != nil
}

// Expired kubernetes sessions lose their pods; a pod whose session row was
// lost is found by the sweep by its labels across the namespace and
// deleted (on agent-sandbox with its Sandbox, so that none is made anew);
// an open session's pod stays. Bare pods and agent-sandbox alike.
func TestKubernetesExpiredSessionsAndOrphans(t *testing.T) {
	for _, api := range []string{kube.APIPods, kube.APIAgentSandbox} {
		t.Run(api, func(t *testing.T) {
			e, cs, ns := kubeEnv(t, api)
			expired := e.create("")
			lost := e.create("")
			live := e.create("")
			if expired.Engine != "kubernetes" || expired.ContainerID == "" || expired.MountMode != "sync" {
				t.Fatalf("not a kubernetes session: %+v", expired)
			}
			// The row of lost goes, as if the store had been restored from before it.
			for _, q := range []string{"DELETE FROM steps WHERE session_id = ?", "DELETE FROM sessions WHERE id = ?"} {
				e.sql(q, lost.ID)
			}
			e.expire(expired.ID)
			sum := e.pass(nil, false)
			// The orphans: the lost session's pod, its NetworkPolicy (network none),
			// on agent-sandbox its Sandbox, and its run's worktree.
			orphans := []string{"removed orphan pod " + kube.PodName(lost.ID), "removed orphan networkpolicy " + kube.PodName(lost.ID)}
			if api == kube.APIAgentSandbox {
				orphans = append(orphans, "removed orphan sandbox "+kube.PodName(lost.ID))
			}
			if sum.Expired != 1 || sum.Destroyed != 1 || sum.OrphansRemoved != len(orphans)+1 || len(sum.Errors) != 0 {
				t.Fatalf("pass: %+v\n%s", sum, e.log)
			}
			for _, want := range orphans {
				if !strings.Contains(e.log.String(), want) {
					t.Errorf("no log line %q:\n%s", want, e.log)
				}
			}
			if !podGone(t, cs, ns, kube.PodName(expired.ID)) || !podGone(t, cs, ns, kube.PodName(lost.ID)) {
				t.Fatal("an expired session's or a lost session's pod is still there")
			}
			if podGone(t, cs, ns, kube.PodName(live.ID)) {
				t.Fatal("an open session's pod was deleted")
			}
			want(t, e.pass(nil, false), reaper.Summary{})
		})
	}
}
