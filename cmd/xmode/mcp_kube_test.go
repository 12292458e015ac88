package main

import (
	"testing"

	"github.com/xmode/xmode/internal/kubetest"
)

// The MCP server's every tool against the kubernetes engine: the same
// walk as TestMCPEveryTool, each session a pod on the test cluster (its
// file tools, diff and change request through the copy of the worktree).
func TestMCPEveryToolKubernetes(t *testing.T) {
	_, cs := kubetest.Require(t)
	ns := kubetest.Namespace(t, cs)
	r := newMCPRig(t, "SECRET_FOR_MCP=hunter2-very-secret", "XMODE_MCP_ENV=SECRET_*",
		"XMODE_SANDBOX_ENGINE=kubernetes", "XMODE_RUNNER_MODE=cloud_worker",
		"KUBECONFIG="+kubetest.Kubeconfig(t), "XMODE_KUBE_NAMESPACE="+ns,
		"XMODE_SANDBOX_IMAGE="+kubetest.Image(t), "XMODE_KUBE_IMAGE_PULL_POLICY=Never",
		"XMODE_SANDBOX_CPUS=0.1", "XMODE_SANDBOX_MEMORY=128m", "XMODE_KUBE_EPHEMERAL_STORAGE=1g")
	everyTool(t, r, r.stdio(nil, nil))
}
