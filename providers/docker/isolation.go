package docker

import (
	"strings"

	"github.com/xmode/xmode/engine"
)

var _ engine.IsolationReporter = (*Provider)(nil)

// IsolationGaps says what a new sandbox lacks (engine.IsolationReporter),
// each gap a noun, then why:
// in bind mode without XMODE_SANDBOX_BIND_HARDENED, the limits left at
// docker's defaults and the hardening (limits); in any mode, a network
// other than none.
func (p *Provider) IsolationGaps() []string {
	var gaps []string
	mode := p.MountMode()
	bind := mode == MountBind
	switch n := p.network(mode); n {
	case "none", "allow":
		// allow: only what its egress policy names, through the proxy.
	case "open":
		gaps = append(gaps, "network isolation: its network is open, so commands reach every host but the block list, through xmode's egress proxy, which records each connection (XMODE_SANDBOX_NETWORK=allow lets through only what rules name)")
	case "":
		gaps = append(gaps, "network isolation: the container is on docker's default bridge, so commands reach the user's network and the internet (XMODE_SANDBOX_NETWORK=none, or XMODE_SANDBOX_BIND_HARDENED=1, closes it)")
	default:
		gaps = append(gaps, "network isolation: the container is on network "+n+" (XMODE_SANDBOX_NETWORK), so commands reach what it reaches")
	}
	if !bind {
		return gaps
	}
	var left []string
	for _, name := range []string{"XMODE_SANDBOX_CPUS", "XMODE_SANDBOX_MEMORY", "XMODE_SANDBOX_PIDS_LIMIT", "XMODE_SANDBOX_TMPFS"} {
		if p.cfg.BindLeaves(name) {
			left = append(left, name)
		}
	}
	if len(left) > 0 {
		gaps = append(gaps, "limits: "+strings.Join(left, ", ")+" are left at docker's defaults (unbounded), so a command can take the machine's CPUs, memory and processes (XMODE_SANDBOX_BIND_HARDENED=1 applies them)")
	}
	if !p.cfg.BindHardened {
		gaps = append(gaps, "hardening: the container keeps docker's default capabilities and may gain privileges (no cap-drop ALL, no no-new-privileges; XMODE_SANDBOX_BIND_HARDENED=1 applies them)")
	}
	return gaps
}
