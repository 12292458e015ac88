package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/internal/kubetest"
)

// env is one test's provider on the test cluster, in a namespace of its own
// (restricted, deleted at cleanup), with the test image and small limits.
type env struct {
	p        *Provider
	cfg      *config.Config
	rest     *rest.Config
	cs       kubernetes.Interface
	ns       string
	root     string
	instance string
	// pool, when not "", is the project whose warm pool (agent-sandbox)
	// the env's sandboxes come from: spec gives them Spec.Pool.
	pool string
}

// The ways a sandbox is made on the cluster that the tests run a behaviour
// under: a pod of xmode's own (XMODE_KUBE_API=pods), a Sandbox of
// agent-sandbox's, and a pool entry's pod, one of a SandboxWarmPool's taken
// by a SandboxClaim.
const (
	viaPods    = "pods"
	viaSandbox = "agent-sandbox"
	viaPool    = "agent-sandbox-pool"
)

// eachAPI runs f once for each way (a subtest each); agent-sandbox's need
// its controller on the test cluster (their absence fails under CI=true).
func eachAPI(t *testing.T, f func(t *testing.T, via string)) {
	for _, via := range []string{viaPods, viaSandbox, viaPool} {
		t.Run(via, func(t *testing.T) {
			if via != viaPods {
				kubetest.RequireAgentSandbox(t)
			}
			f(t, via)
		})
	}
}

// newEnvVia is newEnv for one way of eachAPI; for viaPool its warm pool
// (of size 1: claims beyond it make their Sandbox from the template) is
// there before it returns.
func newEnvVia(t *testing.T, via string, vars map[string]string) *env {
	t.Helper()
	all := map[string]string{"XMODE_KUBE_API": APIPods}
	if via != viaPods {
		all["XMODE_KUBE_API"] = APIAgentSandbox
	}
	for k, v := range vars {
		all[k] = v
	}
	e := newEnv(t, all)
	if via == viaPool {
		e.keepWarm(t, "proj", 1)
	}
	return e
}

// keepWarm sizes the warm pool of project (and makes later specs come
// from it).
func (e *env) keepWarm(t *testing.T, project string, size int) {
	t.Helper()
	e.pool = project
	if err := e.p.KeepWarm(context.Background(), e.spec(t), size); err != nil {
		t.Fatalf("KeepWarm(%s, %d): %v", project, size, err)
	}
}

// podName is the name of sb's pod.
func (e *env) podName(t *testing.T, sb engine.Sandbox) string {
	t.Helper()
	name, _, err := podRef(sb)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func newID(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + idEncoding.EncodeToString(b[:])
}

// newEnv makes a provider for the test cluster; vars override its settings.
func newEnv(t *testing.T, vars map[string]string) *env {
	t.Helper()
	rc, cs := kubetest.Require(t)
	img := kubetest.Image(t)
	ns := kubetest.Namespace(t, cs)
	root := t.TempDir()
	base := map[string]string{
		"HOME": root, "XMODE_STORAGE_ROOT": root,
		"KUBECONFIG": kubetest.Kubeconfig(t), "XMODE_KUBE_NAMESPACE": ns,
		"XMODE_SANDBOX_IMAGE": img, "XMODE_KUBE_IMAGE_PULL_POLICY": "Never",
		"XMODE_SANDBOX_CPUS": "0.1", "XMODE_SANDBOX_MEMORY": "256m", "XMODE_KUBE_EPHEMERAL_STORAGE": "1g",
		"XMODE_KUBE_START_TIMEOUT": "90s", "XMODE_SANDBOX_ENGINE": "kubernetes", "XMODE_RUNNER_MODE": "cloud_worker",
		"XMODE_KUBE_API": APIPods,
	}
	for k, v := range vars {
		base[k] = v
	}
	cfg, err := config.Load(func(k string) string { return base[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.SetWarnings(testWriter{t})
	t.Cleanup(func() { p.Close() })
	return &env{p: p, cfg: cfg, rest: rc, cs: cs, ns: ns, root: root, instance: strings.TrimPrefix(newID("i"), "i")}
}

// spec is a fresh session's spec: a new run with a worktree holding a file.
func (e *env) spec(t *testing.T) engine.Spec {
	t.Helper()
	sess, run := newID("sbx_"), newID("run_")
	wt := filepath.Join(e.root, "runs", run, "worktree")
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	return engine.Spec{
		SessionID: sess, RunID: run, Worktree: wt, User: "tester", Expires: time.Now().Add(time.Hour),
		Labels:  map[string]string{LabelManaged: "true", LabelSession: sess, LabelRun: run, LabelInstance: e.instance, kubetest.LabelTest: "true"},
		Project: e.pool, Pool: e.pool,
	}
}

// provision provisions spec and destroys it when t ends.
func (e *env) provision(t *testing.T, spec engine.Spec) engine.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := e.p.Provision(ctx, spec)
	if err != nil {
		_ = e.p.Destroy(context.Background(), sb)
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { _ = e.p.Destroy(context.Background(), sb) })
	return sb
}

// sh runs a script in the sandbox and returns its status and output.
func (e *env) sh(t *testing.T, sb engine.Sandbox, script string) (engine.Status, string, string) {
	t.Helper()
	return e.shArgs(t, sb, []string{"sh", "-c", script})
}

func (e *env) shArgs(t *testing.T, sb engine.Sandbox, argv []string) (engine.Status, string, string) {
	t.Helper()
	var out, errb strings.Builder
	st, err := e.p.Exec(context.Background(), sb, engine.ExecRequest{Argv: argv, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return st, out.String(), errb.String()
}

// RoleRules are the rules of the Role docs/kubernetes.md gives (its first
// YAML block of kind Role), so that the tests run with exactly it.
func RoleRules() []rbacv1.PolicyRule {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "kubernetes.md"))
	if err != nil {
		panic(err)
	}
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		for _, doc := range strings.Split(block, "\n---\n") {
			var role rbacv1.Role
			if err := yaml.Unmarshal([]byte(doc), &role); err == nil && role.Kind == "Role" {
				return role.Rules
			}
		}
	}
	panic("docs/kubernetes.md has no Role")
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
