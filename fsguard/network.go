package fsguard

import (
	"path/filepath"

	"github.com/xmode/xmode/fail"
)

// Where sandboxes' network evidence lives (docs/network.md, docs/reference.md
// "Storage layout"):
//
//	<root>/egress/                         the egress proxy's directory (an engine's)
//	<root>/runs/<run>/network/<session>.jsonl   a session's network log, kept after its teardown
const (
	EgressDirName  = "egress"
	NetworkDirName = "network"
)

// EgressDir is <root>/egress: the configuration directory of the install's
// egress proxy (policies, its state, the sandboxes' CAs and live logs).
func (g Guard) EgressDir() string { return filepath.Join(g.Root, EgressDirName) }

// NetworkLog is <root>/runs/<run>/network/<session>.jsonl: a session's
// network log as its teardown keeps it, with the step evidence (never
// reclaimed).
func (g Guard) NetworkLog(runID, sessionID string) (string, error) {
	d, err := g.RunDir(runID)
	if err != nil {
		return "", err
	}
	if !ValidID("sbx_", sessionID) {
		return "", fail.Refusedf("session id %q is malformed; refusing to derive a path from it", sessionID)
	}
	return filepath.Join(d, NetworkDirName, sessionID+".jsonl"), nil
}
