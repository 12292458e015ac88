package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/xmode/xmode/internal/kubetest"
)

// TestKubernetesEngineCLI drives the real xmode CLI, as processes, against
// the real test cluster: XMODE_SANDBOX_ENGINE=kubernetes with cloud_worker
// sessions (docs/kubernetes.md) — a session's life, extend moving the pod's
// deadline, doctor, a pod that cannot start (exit 5), and a killed xmode
// mid-exec, whose step the reaper ends and whose pod ends at its deadline.
func TestKubernetesEngineCLI(t *testing.T) {
	// XMODE_KUBE_API: bare pods, and (auto on the test cluster, which runs
	// its controller) agent-sandbox's Sandboxes.
	for _, api := range []string{"pods", "auto"} {
		t.Run(api, func(t *testing.T) {
			if api == "auto" {
				kubetest.RequireAgentSandbox(t)
			}
			kubernetesEngineCLI(t, api)
		})
	}
}

func kubernetesEngineCLI(t *testing.T, api string) {
	_, cs := kubetest.Require(t)
	img := kubetest.Image(t)
	ns := kubetest.Namespace(t, cs)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	kubeEnv := []string{
		"XMODE_SANDBOX_ENGINE=kubernetes", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_KUBE_API=" + api,
		"KUBECONFIG=" + kubetest.Kubeconfig(t), "XMODE_KUBE_NAMESPACE=" + ns,
		"XMODE_SANDBOX_IMAGE=" + img, "XMODE_KUBE_IMAGE_PULL_POLICY=Never",
		"XMODE_SANDBOX_CPUS=0.1", "XMODE_SANDBOX_MEMORY=128m", "XMODE_KUBE_EPHEMERAL_STORAGE=1g",
	}
	with := func(more ...string) []string { return append(slices.Clone(kubeEnv), more...) }
	pod := func(id string) (*corev1.Pod, bool) {
		t.Helper()
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), "xmode-"+strings.ReplaceAll(id, "_", "-"), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return p, p.DeletionTimestamp == nil
	}

	t.Run("lifecycle", func(t *testing.T) {
		t.Parallel()
		root := filepath.Join(t.TempDir(), "root")
		var s dkSession
		dkJSON(t, dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "create", "--repo", repo, "--json"), 0), &s)
		p, live := pod(s.ID)
		if s.Engine != "kubernetes" || s.MountMode != "sync" || !live || s.ContainerID != string(p.UID) || s.Image != img {
			t.Fatalf("a kubernetes session: %+v (pod %v)", s, live)
		}
		if api == "auto" {
			// agent-sandbox's: the pod is its Sandbox's, named alike.
			sbx, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/agents.x-k8s.io/v1beta1/namespaces/" + ns + "/sandboxes/" + p.Name).DoRaw(context.Background())
			if err != nil || !strings.Contains(string(sbx), `"xmode.session":"`+s.ID+`"`) {
				t.Fatalf("the session's Sandbox: %v %s", err, sbx)
			}
			if ref := metav1.GetControllerOf(p); ref == nil || ref.Kind != "Sandbox" || ref.Name != p.Name {
				t.Fatalf("the pod's controller: %+v, want Sandbox %s", ref, p.Name)
			}
		}
		if r := dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "exec", s.ID, "--", "cat", "README"), 0); r.stdout != "version two\n" {
			t.Fatalf("README in the pod: %q", r.stdout)
		}
		if r := dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "exec", s.ID, "--", "sh", "-c", "exit 3"), 3); r.stderr != "" {
			t.Errorf("a failing step: %s", r)
		}
		dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "exec", s.ID, "--", "sh", "-c", "echo added > added.txt"), 0)
		if _, err := os.Stat(filepath.Join(s.WorktreePath, "added.txt")); err == nil {
			t.Fatal("the pod's file is on the host before anything synced it back")
		}
		if r := dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "diff", s.ID), 0); !strings.Contains(r.stdout, "added.txt") {
			t.Fatalf("sandbox diff does not show the pod's new file:\n%s", r)
		}
		if r := dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "exec", s.ID, "--timeout", "1s", "--", "sleep", "30"), 124); r.took > 20*time.Second {
			t.Errorf("a timed-out step took %s", r.took)
		}
		dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "extend", s.ID, "--ttl", "5h"), 0)
		p, _ = pod(s.ID)
		if d, _ := strconv.ParseInt(p.Annotations["xmode.deadline"], 10, 64); d < time.Now().Add(5*time.Hour).Unix() {
			t.Errorf("after extend --ttl 5h the pod's deadline is %s", p.Annotations["xmode.deadline"])
		}
		d := dkWant(t, dkXmode(t, root, kubeEnv, "doctor"), 0)
		for _, line := range []string{"kubernetes cluster", "kubernetes namespace", "kubernetes rbac"} {
			if !strings.Contains(d.stdout, "ok    "+line) {
				t.Errorf("doctor has no ok line %q:\n%s", line, d.stdout)
			}
		}
		dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "stop", s.ID), 0)
		if _, live := pod(s.ID); live {
			t.Fatal("the pod outlived sandbox stop")
		}
	})

	t.Run("missing-image", func(t *testing.T) {
		t.Parallel()
		root := filepath.Join(t.TempDir(), "root")
		const missing = "xmode-no-such-image:nope"
		r := dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "create", "--repo", repo, "--image", missing), 5)
		if !strings.Contains(r.stderr, "ErrImageNeverPull") || !strings.Contains(r.stderr, missing) || r.took > 30*time.Second {
			t.Fatalf("a missing image: %s", r)
		}
		var all []dkSession
		dkJSON(t, dkWant(t, dkXmode(t, root, kubeEnv, "sandbox", "list", "--all", "--json"), 0), &all)
		if len(all) != 1 || all[0].Status != "failed" || all[0].EndReason != "provision_failed" {
			t.Fatalf("after a failed create: %+v", all)
		}
		if _, live := pod(all[0].ID); live {
			t.Fatal("a failed create left its pod")
		}
	})

	t.Run("unschedulable", func(t *testing.T) {
		t.Parallel()
		root := filepath.Join(t.TempDir(), "root")
		r := dkWant(t, dkXmode(t, root, with("XMODE_SANDBOX_CPUS=1000", "XMODE_KUBE_START_TIMEOUT=3s"), "sandbox", "create", "--repo", repo), 5)
		if !strings.Contains(r.stderr, "Unschedulable") || !strings.Contains(r.stderr, "0/1 nodes") || !strings.Contains(r.stderr, "XMODE_KUBE_START_TIMEOUT") {
			t.Fatalf("an unschedulable pod: %s", r)
		}
	})

	t.Run("killed-mid-exec", func(t *testing.T) {
		t.Parallel()
		killedMidExec(t, cs, ns, repo, with("XMODE_KUBE_DEADLINE_GRACE=1s"), pod, api != "pods")
	})
}

// killedMidExec: xmode killed while its step runs leaves the step's
// processes in the pod; `xmode reap` ends them (the step is lost); and with
// no reaper after that, the pod ends by itself at its deadline — or, on
// agent-sandbox (as), its controller deletes it at the same time, the
// Sandbox's shutdown time.
func killedMidExec(t *testing.T, cs kubernetes.Interface, ns, repo string, env []string, pod func(string) (*corev1.Pod, bool), as bool) {
	root := filepath.Join(t.TempDir(), "root")
	var s dkSession
	// The TTL outlasts a create on a loaded machine (30 s seen on a shared
	// one): the pod ends at its deadline, counted from the create's start.
	created := dkWant(t, dkXmode(t, root, env, "sandbox", "create", "--repo", repo, "--ttl", "45s", "--json"), 0)
	dkJSON(t, created, &s)
	var rec struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	dkJSON(t, created, &rec)
	expires := rec.ExpiresAt
	// When the pod ends by itself: its deadline, from the TTL as the create
	// began (the session's recorded expiry counts from its end: a slow
	// create puts it later, within XMODE_KUBE_DEADLINE_GRACE).
	var podDeadline time.Time
	if p, _ := pod(s.ID); p != nil {
		if d, err := strconv.ParseInt(p.Annotations["xmode.deadline"], 10, 64); err == nil {
			podDeadline = time.Unix(d, 0)
		}
	}
	if podDeadline.IsZero() || expires.IsZero() {
		t.Fatalf("the session's pod has no xmode.deadline, or the create no expires_at:\n%s", created)
	}
	c := xmode(t, root, "sandbox", "exec", s.ID, "--name", "long", "--", "sh", "-c", "touch up; sleep 600 & exec sleep 601")
	var keep []string
	for _, kv := range c.Env {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "XMODE_") || k == "XMODE_TEST_AS_MAIN" || k == "XMODE_STORAGE_ROOT" || k == clockEnv {
			keep = append(keep, kv)
		}
	}
	c.Env = append(append(keep, "XMODE_USER=tester"), env...)
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	running := func() string {
		return dkWant(t, dkXmode(t, root, env, "sandbox", "exec", s.ID, "--", "sh", "-c", `for d in /proc/[0-9]*; do read -r c <"$d/cmdline" 2>/dev/null; case $c in sleep60*) echo "${d#/proc/}";; esac; done; true`), 0).stdout
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(running(), "\n") < 2 {
		if time.Now().After(deadline) {
			_ = c.Process.Kill()
			t.Fatalf("the step never started: %s", errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = c.Process.Signal(syscall.SIGKILL)
	_ = c.Wait()
	if n := strings.Count(running(), "\n"); n != 2 {
		t.Fatalf("after xmode was killed %d of the step's processes run, want both (nothing ended them yet)", n)
	}
	r := dkWant(t, dkXmode(t, root, env, "reap", "--json"), 0)
	if !strings.Contains(r.stdout, `"steps_lost": 1`) {
		t.Fatalf("reap did not end the lost step:\n%s", r)
	}
	if left := running(); left != "" {
		t.Fatalf("the lost step's processes outlived the reap: %q", left)
	}
	// No reaper from here on: the pod ends itself once the session's
	// expiry and the grace have passed.
	for {
		p, live := pod(s.ID)
		if p != nil && p.Status.Phase == corev1.PodSucceeded {
			t.Logf("the pod ended by itself %s after the session's expiry", time.Since(expires).Round(100*time.Millisecond))
			break
		}
		if !live && as && !time.Now().Before(podDeadline) {
			t.Logf("the Sandbox's controller deleted the pod %s after its deadline", time.Since(podDeadline).Round(100*time.Millisecond))
			break
		}
		if !live {
			t.Fatalf("the pod was deleted, not ended by its deadline: %+v", p)
		}
		if time.Since(expires) > 60*time.Second {
			t.Fatalf("the pod still runs %s after the session expired (phase %s)", time.Since(expires).Round(time.Second), p.Status.Phase)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(time.Until(expires) + time.Second) // the reaper ends a session once it expired
	dkWant(t, dkXmode(t, root, env, "reap"), 0)
	if _, live := pod(s.ID); live {
		t.Fatal("the reaper left the ended pod")
	}
}
