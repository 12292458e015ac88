package local

import "github.com/xmode/xmode/engine"

var _ engine.IsolationReporter = (*Provider)(nil)

// IsolationGaps says what a host sandbox lacks (engine.IsolationReporter):
// everything but its worktree.
func (*Provider) IsolationGaps() []string {
	return []string{"isolation of any kind: the host engine runs commands on this machine as the user — with the user's files, network, credentials and environment, and no limits; only the worktree is separate (for a container, the user sets XMODE_SANDBOX_ENGINE=docker and XMODE_RUNNER_MODE=cloud_worker for the server)"}
}
