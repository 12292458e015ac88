package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/xmode/xmode/internal/kubetest"
	"github.com/xmode/xmode/internal/testenv"
)

// TestXmodeInAPod: xmode as a CI job that runs as a pod — the static xmode
// binary copied into a pod whose service account is bound to exactly the
// Role of docs/kubernetes.md; with no kubeconfig it uses that account
// (rest.InClusterConfig) and the pod's namespace. doctor says so, and a
// session runs in a pod of its own beside it.
func TestXmodeInAPod(t *testing.T) {
	rc, cs := kubetest.Require(t)
	img := kubetest.Image(t)
	ns := kubetest.Namespace(t, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Skip(t, "no go command to build xmode with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "xmode")
	build := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "xmode"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := docsRole(t)
	role.Namespace = ns
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "xmode"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "xmode", Namespace: ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := kubetest.RestrictedPod("job", img, "sleep", "3600")
	yes := true
	job.Spec.ServiceAccountName = "xmode"
	job.Spec.AutomountServiceAccountToken = &yes
	job.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "HOME", Value: "/tmp"}, {Name: "XMODE_STORAGE_ROOT", Value: "/tmp/root"}, {Name: "XMODE_USER", Value: "ci"},
		{Name: "XMODE_SANDBOX_ENGINE", Value: "kubernetes"}, {Name: "XMODE_RUNNER_MODE", Value: "cloud_worker"},
		{Name: "XMODE_SANDBOX_IMAGE", Value: img}, {Name: "XMODE_KUBE_IMAGE_PULL_POLICY", Value: "Never"},
		{Name: "XMODE_SANDBOX_CPUS", Value: "0.1"}, {Name: "XMODE_SANDBOX_MEMORY", Value: "128m"}, {Name: "XMODE_KUBE_EPHEMERAL_STORAGE", Value: "1g"},
		{Name: "XMODE_MIN_FREE", Value: "0"}, {Name: "GIT_CONFIG_NOSYSTEM", Value: "1"},
		{Name: "PATH", Value: "/tmp/bin:/usr/local/bin:/usr/bin:/bin"},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitRunning(t, cs, ns, "job", time.Minute)
	sh := func(script string, stdin io.Reader) kubetest.ExecResult {
		t.Helper()
		res, err := kubetest.Exec(ctx, rc, cs, ns, "job", "main", kubetest.Fallback, stdin, "sh", "-c", script)
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return res
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if r := sh("cat > /tmp/xmode && chmod +x /tmp/xmode", f); r.ExitCode != 0 {
		t.Fatalf("copy xmode into the pod: %+v", r)
	}
	// The test image has git alone, not its dashed programs: a clone runs
	// git-upload-pack, which is git by another name.
	if r := sh(`set -e; mkdir -p /tmp/bin; for p in git-upload-pack git-receive-pack; do ln -sf "$(command -v git)" /tmp/bin/$p; done`, nil); r.ExitCode != 0 {
		t.Fatalf("git's programs in the pod: %+v", r)
	}
	if r := sh(`set -e; git init -q -b main /tmp/repo; cd /tmp/repo; echo in-a-pod > README; git add README
git -c user.email=ci@example.com -c user.name=ci commit -qm one`, nil); r.ExitCode != 0 {
		t.Fatalf("a repository in the pod: %+v", r)
	}
	d := sh("/tmp/xmode doctor", nil)
	for _, want := range []string{"the pod's service account", "pods go to namespace " + ns, "ok    kubernetes rbac"} {
		if !strings.Contains(d.Stdout, want) {
			t.Errorf("doctor in the pod lacks %q:\n%s\n%s", want, d.Stdout, d.Stderr)
		}
	}
	c := sh("/tmp/xmode sandbox create --repo /tmp/repo -q", nil)
	id := strings.TrimSpace(c.Stdout)
	if c.ExitCode != 0 || !strings.HasPrefix(id, "sbx_") {
		t.Fatalf("sandbox create in the pod: %+v", c)
	}
	if r := sh("/tmp/xmode sandbox exec "+id+" -- cat README", nil); r.ExitCode != 0 || r.Stdout != "in-a-pod\n" {
		t.Fatalf("a step from xmode in a pod: %+v", r)
	}
	sandboxPod := "xmode-" + strings.ReplaceAll(id, "_", "-")
	if _, err := cs.CoreV1().Pods(ns).Get(ctx, sandboxPod, metav1.GetOptions{}); err != nil {
		t.Fatalf("the session's pod %s in the job's namespace: %v", sandboxPod, err)
	}
	if r := sh("/tmp/xmode sandbox stop "+id, nil); r.ExitCode != 0 {
		t.Fatalf("sandbox stop in the pod: %+v", r)
	}
}

// docsRole is the Role of docs/kubernetes.md.
func docsRole(t *testing.T) *rbacv1.Role {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		for _, doc := range strings.Split(block, "\n---\n") {
			var role rbacv1.Role
			if err := yaml.Unmarshal([]byte(doc), &role); err == nil && role.Kind == "Role" {
				return &role
			}
		}
	}
	t.Fatal("docs/kubernetes.md has no Role")
	return nil
}
