package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xmode/xmode/internal/kubetest"
)

// Warm pools on the kubernetes engine through the CLI, as bare pods and on
// agent-sandbox (docs/kubernetes.md, "Warm pools"): `machine warm --pool 1`
// keeps one ready pod; two creates racing for it, as separate processes,
// get it once — the other makes its own, and the pod carries the winner's
// claim; `xmode reap` refills the pool; an entry whose pod was deleted
// behind xmode's back is retired, not handed out; and two xmodes with
// stores of their own (a copied storage root) racing for the same entry's
// pod are settled by the cluster: exactly one gets it, the other leaves it
// alone and makes its own.
func TestKubernetesPool(t *testing.T) {
	_, cs := kubetest.Require(t)
	img := kubetest.Image(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	for _, api := range []string{"pods", "agent-sandbox"} {
		t.Run(api, func(t *testing.T) {
			if api == "agent-sandbox" {
				kubetest.RequireAgentSandbox(t)
			}
			ns := kubetest.Namespace(t, cs)
			env := []string{
				"XMODE_SANDBOX_ENGINE=kubernetes", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_KUBE_API=" + api,
				"KUBECONFIG=" + kubetest.Kubeconfig(t), "XMODE_KUBE_NAMESPACE=" + ns,
				"XMODE_SANDBOX_IMAGE=" + img, "XMODE_KUBE_IMAGE_PULL_POLICY=Never",
				"XMODE_SANDBOX_CPUS=0.1", "XMODE_SANDBOX_MEMORY=128m", "XMODE_KUBE_EPHEMERAL_STORAGE=1g",
				"XMODE_PROJECT_MACHINES=1", "XMODE_SANDBOX_MAX_OPEN=0",
			}
			root := filepath.Join(t.TempDir(), "root")
			const project = "kpool"
			x := func(root string, args ...string) dkResult {
				t.Helper()
				return dkWant(t, dkXmode(t, root, env, args...), 0)
			}
			show := func(root string) poolShow {
				t.Helper()
				var p poolShow
				dkJSON(t, x(root, "machine", "show", project, "--json"), &p)
				return p
			}
			podOf := func(containerID, id string) string {
				if name, _, ok := strings.Cut(containerID, "/"); ok {
					return name // a warm pool's pod: "<name>/<UID>"
				}
				return "xmode-" + strings.ReplaceAll(id, "_", "-")
			}
			ready := func(root string) (poolShow, poolEntry) {
				t.Helper()
				p := show(root)
				if p.Pool.Ready != 1 || len(p.Pool.Entries) != 1 || p.Pool.Entries[0].ContainerID == "" {
					t.Fatalf("the pool: %+v, want one ready entry", p.Pool)
				}
				return p, p.Pool.Entries[0]
			}
			// racingCreates runs a create from the project in each root at
			// once, as processes of their own.
			// (Without --json: what a create says on stderr is checked.)
			session := func(root string, r dkResult) dkSession {
				t.Helper()
				var s dkSession
				dkJSON(t, x(root, "sandbox", "show", strings.TrimSpace(r.stdout), "--json"), &s)
				return s
			}
			racingCreates := func(roots ...string) ([]dkResult, []dkSession) {
				t.Helper()
				rs := make([]dkResult, len(roots))
				var wg sync.WaitGroup
				for i, r := range roots {
					wg.Go(func() { rs[i] = dkXmode(t, r, env, "sandbox", "create", "--project", project) })
				}
				wg.Wait()
				var ss []dkSession
				for i, r := range rs {
					ss = append(ss, session(roots[i], dkWant(t, r, 0)))
				}
				return rs, ss
			}
			claimedBy := func(entry poolEntry) string {
				t.Helper()
				pod, err := cs.CoreV1().Pods(ns).Get(context.Background(), podOf(entry.ContainerID, entry.ID), metav1.GetOptions{})
				if err != nil {
					t.Fatalf("the entry's pod: %v", err)
				}
				return pod.Annotations["xmode.claimed-by"]
			}

			x(root, "machine", "warm", project, "--repo", repo, "--pool", "1")
			_, entry := ready(root)
			if api == "agent-sandbox" && !strings.Contains(entry.ContainerID, "/") {
				t.Fatalf("an agent-sandbox pool entry's container_id %q, want a warm pool pod's <name>/<UID>", entry.ContainerID)
			}
			if by := claimedBy(entry); by != "" {
				t.Fatalf("a ready entry's pod is claimed: %q", by)
			}

			// Two creates racing for a one-pod pool: exactly one gets it.
			_, got := racingCreates(root, root)
			winners := 0
			for _, s := range got {
				if s.ContainerID == entry.ContainerID {
					winners++
					if s.ID != entry.ID {
						t.Errorf("the claim of pod %s is session %s, want the entry's %s", s.ContainerID, s.ID, entry.ID)
					}
				} else if s.ContainerID == "" {
					t.Errorf("the create that lost made no pod: %+v", s)
				}
			}
			if winners != 1 {
				t.Fatalf("%d of two racing creates got the one pool entry: %+v", winners, got)
			}
			if by := claimedBy(entry); !strings.HasPrefix(by, entry.ID+" ") {
				t.Fatalf("the claimed pod's xmode.claimed-by is %q, want session %s", by, entry.ID)
			}
			for _, s := range got {
				if r := x(root, "sandbox", "exec", s.ID, "--", "cat", "README"); r.stdout != "version two\n" {
					t.Fatalf("README in %s: %s", s.ID, r)
				}
				x(root, "sandbox", "stop", s.ID)
			}

			// The pool refills; an entry whose pod is deleted behind
			// xmode's back is retired at the claim, not handed out.
			x(root, "reap")
			_, dead := ready(root)
			if dead.ID == entry.ID {
				t.Fatal("the claimed entry is back in the pool")
			}
			if err := cs.CoreV1().Pods(ns).Delete(context.Background(), podOf(dead.ContainerID, dead.ID), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			r := x(root, "sandbox", "create", "--project", project)
			fresh := session(root, r)
			if fresh.ID == dead.ID || fresh.ContainerID == dead.ContainerID {
				t.Fatalf("create handed out the dead entry %s: %+v", dead.ID, fresh)
			}
			if !strings.Contains(r.stderr, "pool entry "+dead.ID+" of "+project+" was dead") {
				t.Fatalf("create did not say it retired the dead entry:\n%s", r)
			}
			if r := x(root, "sandbox", "exec", fresh.ID, "--", "cat", "README"); r.stdout != "version two\n" {
				t.Fatalf("README in the fresh sandbox: %s", r)
			}
			x(root, "sandbox", "stop", fresh.ID)
			if slices.Contains(show(root).ids(), dead.ID) {
				t.Fatal("the dead entry is still in the pool")
			}

			// Two stores (the second a copy of the first, as a restored
			// backup on another host would be) racing for the same entry:
			// the cluster's claim settles it.
			x(root, "reap")
			_, shared := ready(root)
			root2 := filepath.Join(t.TempDir(), "root")
			if out, err := exec.Command("cp", "-a", root, root2).CombinedOutput(); err != nil {
				t.Fatalf("copy the storage root: %v %s", err, out)
			}
			rs, ss := racingCreates(root, root2)
			var onPod, lost int
			for i, r := range rs {
				s := ss[i]
				if s.ContainerID == shared.ContainerID {
					onPod++
					continue
				}
				if !strings.Contains(r.stderr, "pool entry "+shared.ID+" of "+project+" was claimed by another xmode first") {
					t.Errorf("the create that lost the pod (root %d) did not say so:\n%s", i, r)
				}
				lost++
				var all []dkSession
				dkJSON(t, x([]string{root, root2}[i], "sandbox", "list", "--all", "--json"), &all)
				for _, a := range all {
					if a.ID == shared.ID && (a.Status != "failed" || a.ContainerID != "") {
						t.Errorf("the lost claim's session: %+v, want failed, with no pod of its own", a)
					}
				}
				if s.ID == shared.ID {
					t.Errorf("the create that lost the pod is its session: %+v", s)
				}
			}
			if onPod != 1 || lost != 1 {
				t.Fatalf("of two stores racing for pod %s, %d got it and %d made their own", shared.ContainerID, onPod, lost)
			}
			if by := claimedBy(shared); !strings.HasPrefix(by, shared.ID+" ") {
				t.Fatalf("the shared pod's claim: %q", by)
			}
		})
	}
}

// poolEntry is one entry of `machine show --json`.
type poolEntry = struct {
	ID          string `json:"id"`
	RunID       string `json:"run_id"`
	State       string `json:"state"`
	Commit      string `json:"commit"`
	ContainerID string `json:"container_id"`
	Worktree    string `json:"worktree_path"`
	User        string `json:"user"`
}
