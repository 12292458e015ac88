package kubernetes

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
)

func testConfig(t *testing.T, env map[string]string) *config.Config {
	t.Helper()
	root := t.TempDir()
	cfg, err := config.Load(func(k string) string {
		if k == "XMODE_STORAGE_ROOT" || k == "HOME" {
			return root
		}
		return env[k]
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func testSpec() engine.Spec {
	return engine.Spec{
		SessionID: "sbx_abcdefgh", RunID: "run_abcdefgh", User: "alice@example.com",
		Expires: time.Unix(1_800_000_000, 0),
		Labels:  map[string]string{LabelManaged: "true", LabelSession: "sbx_abcdefgh", LabelRun: "run_abcdefgh", LabelInstance: "inst12345"},
		Env:     []string{"CACHE=/cache"},
	}
}

// The pod of a session is hardened to Pod Security "restricted" and bounded
// by the same settings as a docker sandbox.
func TestPodSpecIsRestricted(t *testing.T) {
	cfg := testConfig(t, map[string]string{"XMODE_SANDBOX_CPUS": "0.5", "XMODE_SANDBOX_MEMORY": "512m", "XMODE_SANDBOX_RUNTIME": "gvisor", "XMODE_KUBE_IMAGE_PULL_POLICY": "Never", "XMODE_KUBE_DEADLINE_GRACE": "1m"})
	p, _ := New(cfg)
	pod, err := p.podSpec(testSpec(), "busybox:1")
	if err != nil {
		t.Fatal(err)
	}
	s := pod.Spec
	c := s.Containers[0]
	if pod.Name != "xmode-sbx-abcdefgh" {
		t.Errorf("name %q", pod.Name)
	}
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || s.HostNetwork || s.HostPID || s.HostIPC || s.ShareProcessNamespace != nil {
		t.Errorf("service account token or host namespaces: %+v", s)
	}
	if s.RestartPolicy != corev1.RestartPolicyNever || s.RuntimeClassName == nil || *s.RuntimeClassName != "gvisor" {
		t.Errorf("restart policy %s, runtime class %v", s.RestartPolicy, s.RuntimeClassName)
	}
	psc := s.SecurityContext
	if psc == nil || !*psc.RunAsNonRoot || *psc.RunAsUser != 65532 || *psc.RunAsGroup != 65532 || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	sc := c.SecurityContext
	if sc == nil || *sc.AllowPrivilegeEscalation || *sc.Privileged || !*sc.ReadOnlyRootFilesystem || !*sc.RunAsNonRoot ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v", sc)
	}
	for _, v := range s.Volumes {
		if v.HostPath != nil {
			t.Errorf("a host path volume: %+v", v)
		}
	}
	lim := c.Resources.Limits
	if lim.Cpu().MilliValue() != 500 || lim.Memory().Value() != 512<<20 || lim.StorageEphemeral().Value() != 10<<30 {
		t.Errorf("limits %v", lim)
	}
	if c.Resources.Requests.Memory().Value() != 512<<20 {
		t.Errorf("requests %v", c.Resources.Requests)
	}
	if c.ImagePullPolicy != corev1.PullNever || c.Image != "busybox:1" {
		t.Errorf("image %s pull %s", c.Image, c.ImagePullPolicy)
	}
	var tmp *corev1.Volume
	for i, v := range s.Volumes {
		if v.Name == "tmp" {
			tmp = &s.Volumes[i]
		}
	}
	if tmp == nil || tmp.EmptyDir == nil || tmp.EmptyDir.Medium != corev1.StorageMediumMemory || tmp.EmptyDir.SizeLimit.Value() != 256<<20 {
		t.Errorf("/tmp volume %+v", tmp)
	}
	if got := pod.Annotations[AnnotationDeadline]; got != "1800000060" {
		t.Errorf("deadline annotation %q, want the expiry plus a minute", got)
	}
	if pod.Labels[LabelUser] != "alice_example.com" || pod.Annotations[AnnotationUser] != "alice@example.com" || pod.Labels[LabelManagedBy] != "xmode" {
		t.Errorf("labels %v annotations %v", pod.Labels, pod.Annotations)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "CACHE" {
		t.Errorf("env %v", c.Env)
	}
}

func TestPodSpecRefusals(t *testing.T) {
	for env, want := range map[string]string{
		"XMODE_SANDBOX_USER=0:0":      "never runs as root",
		"XMODE_SANDBOX_NETWORK=mynet": "docker network",
	} {
		k, v, _ := strings.Cut(env, "=")
		p, _ := New(testConfig(t, map[string]string{k: v}))
		if _, err := p.podSpec(testSpec(), "busybox:1"); fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a usage error saying %q", env, err, want)
		}
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"alice":                 "alice",
		"alice@example.com":     "alice_example.com",
		"-x-":                   "x",
		strings.Repeat("a", 70): strings.Repeat("a", 63),
		"@@@":                   "",
	} {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// The set-up a step's shell reads carries any value, quotes, newlines and
// all, exactly; the real sh checks it.
func TestSetupScriptRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	env := []string{"A=it's", "B=two\nlines\n", "C=$(echo no) `no` \\ \"q\""}
	setup, err := setupScript(env, "0123456789abcdef", "/", []string{"x", "a b", "it's", ""})
	if err != nil {
		t.Fatal(err)
	}
	sentinel := newSentinel(setup)
	script := strings.Replace(setupReader, `exec /bin/sh -c "$0" xmode-step "$@"`, `printf '[%s]' "$A" "$B" "$C" "$XMODE_EXEC_TAG" "$@"`, 1)
	cmd := exec.Command(sh, "-c", script, "wrapper", sentinel)
	cmd.Stdin = strings.NewReader(setup + sentinel + "\nstdin follows\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "[it's][two\nlines\n][$(echo no) `no` \\ \"q\"][0123456789abcdef][x][a b][it's][]"
	if string(out) != want {
		t.Errorf("got %q, want %q", out, want)
	}
	if _, err := setupScript([]string{"A-B=1"}, "t", "/", []string{"x"}); fail.KindOf(err) != fail.Usage {
		t.Errorf("a name the shell cannot set: %v", err)
	}
}

func TestExecDir(t *testing.T) {
	for _, c := range []struct{ wt, rel, want string }{
		{"/r/runs/run_x/worktree", "", Worktree},
		{"/r/runs/run_x/worktree", "sub/d", Worktree + "/sub/d"},
		{"/r/runs/run_x/worktree", "/r/runs/run_x/worktree/sub", Worktree + "/sub"},
	} {
		if got, err := execDir(c.wt, c.rel); err != nil || got != c.want {
			t.Errorf("execDir(%q) = %q, %v; want %q", c.rel, got, err, c.want)
		}
	}
	if _, err := execDir("/w", "../x"); err == nil {
		t.Error("a workdir that escapes")
	}
}

// Why a pod does not start, and whether waiting can help.
func TestPodStarted(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "msg"}},
		}}}}
	}
	for _, c := range []struct {
		pod   *corev1.Pod
		ok    bool
		final bool
		why   string
	}{
		{waiting("ErrImageNeverPull"), false, true, "ErrImageNeverPull: msg"},
		{waiting("ImagePullBackOff"), false, false, "ImagePullBackOff: msg"},
		{waiting("ContainerCreating"), false, false, ""},
		{&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available"}}}}, false, false, "Unschedulable: 0/1 nodes are available"},
		{&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}, true, false, ""},
		{&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false, true, "the pod ended (Succeeded)"},
	} {
		ok, why, final := podStarted(c.pod)
		if ok != c.ok || final != c.final || why != c.why {
			t.Errorf("%+v: %v %q %v, want %v %q %v", c.pod.Status, ok, why, final, c.ok, c.why, c.final)
		}
	}
}

func TestHasImage(t *testing.T) {
	if !hasImage([]string{"docker.io/library/busybox:1"}, "busybox:1") || !hasImage([]string{"docker.io/me/x:1"}, "me/x:1") || hasImage([]string{"x:2"}, "x:1") {
		t.Error("hasImage")
	}
}

// A project's sandbox gets an emptyDir at the cache mount its cache
// variables point under (no volume outlives a pod).
func TestPodSpecProjectCache(t *testing.T) {
	p, _ := New(testConfig(t, nil))
	spec := testSpec()
	spec.CacheVolume, spec.CacheMount = "xmode_proj_p", "/cache"
	pod, err := p.podSpec(spec, "busybox:1")
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	found := false
	for _, m := range c.VolumeMounts {
		found = found || m.MountPath == "/cache" && m.Name == "cache"
	}
	if !found {
		t.Errorf("mounts %+v, want the cache emptyDir at /cache", c.VolumeMounts)
	}
}

// Without a cluster: no kubeconfig is one ok line for an engine that is not
// configured and a failure for the configured one; an apiserver that does
// not answer is exit 5 naming it, within the ping bound.
func TestNoCluster(t *testing.T) {
	dir := t.TempDir()
	p, _ := New(testConfig(t, map[string]string{"KUBECONFIG": filepath.Join(dir, "none")}))
	checks := p.Health(context.Background())
	if len(checks) != 1 || checks[0].Status != engine.CheckOK || !strings.Contains(checks[0].Detail, "not configured") {
		t.Errorf("doctor without a kubeconfig, engine not configured: %+v", checks)
	}
	p, _ = New(testConfig(t, map[string]string{"KUBECONFIG": filepath.Join(dir, "none"), "XMODE_SANDBOX_ENGINE": "kubernetes"}))
	if checks := p.Health(context.Background()); len(checks) != 1 || checks[0].Status != engine.CheckFail || !strings.Contains(checks[0].Fix, "KUBECONFIG") {
		t.Errorf("doctor without a kubeconfig, engine configured: %+v", checks)
	}
	if _, err := p.Namespace(); fail.KindOf(err) != fail.EngineUnavailable {
		t.Errorf("no kubeconfig: %v, want exit 5", err)
	}

	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, _ = New(testConfig(t, map[string]string{"KUBECONFIG": kc, "XMODE_SANDBOX_ENGINE": "kubernetes"}))
	if ns, err := p.Namespace(); err != nil || ns != "team" {
		t.Errorf("the context's namespace: %q, %v", ns, err)
	}
	start := time.Now()
	checks = p.Health(context.Background())
	if len(checks) != 1 || checks[0].Status != engine.CheckFail || !strings.Contains(checks[0].Detail, "127.0.0.1:1") {
		t.Errorf("doctor with an apiserver that does not answer: %+v", checks)
	}
	wt := filepath.Join(p.cfg.StorageRoot, "runs", "run_abcdefgh", "worktree")
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := testSpec()
	spec.Worktree = wt
	_, err := p.Provision(context.Background(), spec)
	if fail.KindOf(err) != fail.EngineUnavailable || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Provision with an apiserver that does not answer: %v, want exit 5 naming it", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("it took %s", took)
	}
}
