// Package kubetest holds what tests against a real Kubernetes cluster need:
// the cluster's kubeconfig (skip on a machine without one, fail in CI), a
// fresh namespace per test that enforces the Pod Security "restricted"
// standard and is deleted when the test ends, the test image's name, a
// hardened pod and exec through the API.
//
// hack/kube/up.sh starts such a cluster and prints the variables read here
// (docs/kubernetes.md, "A cluster on this machine").
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/xmode/xmode/internal/testenv"
)

// The variables hack/kube/up.sh prints.
const (
	// EnvKubeconfig names the kubeconfig of the test cluster (an admin).
	EnvKubeconfig = "XMODE_TEST_KUBECONFIG"
	// EnvImage names the test image present on the node (busybox, git).
	EnvImage = "XMODE_TEST_KUBE_IMAGE"
	// EnvAgentSandbox is 1 when the agent-sandbox controller runs and its
	// CRDs are installed.
	EnvAgentSandbox = "XMODE_TEST_KUBE_AGENT_SANDBOX"
	// EnvNetworkPolicy is 1 when a policy agent enforces NetworkPolicy.
	EnvNetworkPolicy = "XMODE_TEST_KUBE_NETPOL"
)

// LabelTest marks every object a test creates.
const LabelTest = "xmode.test"

// SandboxUser is the non-root user test pods run as (the image's "sandbox").
const SandboxUser = 65532

// Kubeconfig returns the path $XMODE_TEST_KUBECONFIG names, or skips the
// test (fails it under CI=true) when it is unset or absent.
func Kubeconfig(t testing.TB) string {
	t.Helper()
	path := os.Getenv(EnvKubeconfig)
	if path == "" {
		testenv.Skip(t, "%s is not set: start a cluster with hack/kube/up.sh and eval its output", EnvKubeconfig)
	}
	if _, err := os.Stat(path); err != nil {
		testenv.Skip(t, "%s names %s: %v: start the cluster with hack/kube/up.sh", EnvKubeconfig, path, err)
	}
	return path
}

// Require returns a REST config and a clientset for the test cluster, or
// skips the test (fails it under CI=true) when the cluster does not answer.
func Require(t testing.TB) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	path := Kubeconfig(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", path, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for %s: %v", cfg.Host, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		testenv.Skip(t, "the cluster at %s (%s) is not ready (%v): start it with hack/kube/up.sh", cfg.Host, path, err)
	}
	return cfg, cs
}

// Image returns the test image's name ($XMODE_TEST_KUBE_IMAGE), present on
// the node: pods use it with imagePullPolicy Never.
func Image(t testing.TB) string {
	t.Helper()
	img := os.Getenv(EnvImage)
	if img == "" {
		testenv.Skip(t, "%s is not set: start a cluster with hack/kube/up.sh and eval its output", EnvImage)
	}
	return img
}

// RequireAgentSandbox skips the test (fails it under CI=true) unless the
// cluster runs the agent-sandbox controller.
func RequireAgentSandbox(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvAgentSandbox) != "1" {
		testenv.Skip(t, "%s is not 1: the cluster runs no agent-sandbox controller (hack/kube/up.sh starts one)", EnvAgentSandbox)
	}
}

// RequireNetworkPolicy skips the test (fails it under CI=true) unless a
// policy agent enforces NetworkPolicy on the cluster.
func RequireNetworkPolicy(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvNetworkPolicy) != "1" {
		testenv.Skip(t, "%s is not 1: nothing enforces NetworkPolicy on the cluster (hack/kube/up.sh runs kube-router's firewall)", EnvNetworkPolicy)
	}
}

// Namespace creates a fresh namespace that enforces Pod Security
// "restricted", labelled xmode.test=true, and deletes it (with all it holds)
// when the test ends. It returns once pods can be created in it: the
// namespace's default service account exists.
func Namespace(t testing.TB, cs kubernetes.Interface) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var b [4]byte
	_, _ = rand.Read(b[:])
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "xmode-test-" + hex.EncodeToString(b[:]),
		Labels: map[string]string{
			LabelTest:                                    "true",
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
		},
	}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
		}
	})
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s: its default service account did not appear: %v", ns.Name, err)
	}
	return ns.Name
}

// RestrictedPod is a pod that Pod Security "restricted" admits: one
// container "main" running args in image as SandboxUser, no capabilities,
// no privilege escalation, seccomp RuntimeDefault, a read-only root with
// an emptyDir at /tmp, no service account token, imagePullPolicy Never.
func RestrictedPod(name, image string, args ...string) *corev1.Pod {
	yes, no := true, false
	uid := int64(SandboxUser)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelTest: "true"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: new(int64),
			RestartPolicy:                 corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &uid,
				RunAsGroup:     &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// WaitRunning waits until the pod's containers are all ready, and fails
// the test with the pod's own reason when it does not get there in time.
func WaitRunning(t testing.TB, cs kubernetes.Interface, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var pod *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod ended: %s", p.Status.Phase)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.ContainersReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not running after %s: %v; %s", ns, name, timeout, err, describe(pod))
	}
	return pod
}

// describe says why a pod is where it is, from its status.
func describe(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	s := "phase " + string(p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf("; %s: %s %s", c.Type, c.Reason, c.Message)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s += fmt.Sprintf("; container %s waiting: %s %s", c.Name, w.Reason, w.Message)
		}
	}
	return s
}

// Transport chooses how Exec reaches the pod.
type Transport int

const (
	// Fallback is what kubectl does: WebSocket, and SPDY where the
	// WebSocket upgrade fails.
	Fallback Transport = iota
	// SPDY only.
	SPDY
)

// ExecResult is what an exec gave back.
type ExecResult struct {
	Stdout, Stderr string
	ExitCode       int
}

// Exec runs cmd in the pod's container through the API (pods/exec) with
// stdin, if not nil, as its standard input. A command that ran and exited
// non-zero is not an error: its code is in the result.
func Exec(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod, container string, tr Transport, stdin io.Reader, cmd ...string) (ExecResult, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   cmd,
			Stdin:     stdin != nil,
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return ExecResult{}, fmt.Errorf("spdy executor: %w", err)
	}
	exec := spdy
	if tr == Fallback {
		ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		if err != nil {
			return ExecResult{}, fmt.Errorf("websocket executor: %w", err)
		}
		exec, err = remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
		if err != nil {
			return ExecResult{}, fmt.Errorf("fallback executor: %w", err)
		}
	}
	var out, errOut bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	res := ExecResult{Stdout: out.String(), Stderr: errOut.String()}
	var exit utilexec.CodeExitError
	if errors.As(err, &exit) {
		res.ExitCode = exit.Code
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("exec %q in %s/%s: %w", cmd, ns, pod, err)
	}
	return res, nil
}
