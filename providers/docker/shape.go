package docker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xmode/xmode/engine"
)

// What a warm pool asks of the docker provider (docs/project-machines.md,
// "The pool").
var (
	_ engine.Shaper = (*Provider)(nil)
	_ engine.Mover  = (*Provider)(nil)
)

// shapeSettings are the settings that make one docker sandbox differ from
// another: a create claims only a pool entry made with the same values.
var shapeSettings = []string{
	"XMODE_SANDBOX_DOCKER_HOST", "XMODE_SANDBOX_DOCKER_REMOTE", "XMODE_SANDBOX_RUNTIME",
	"XMODE_SANDBOX_IMAGE", "XMODE_SANDBOX_STORAGE_VOLUME", "XMODE_SANDBOX_STORAGE_MOUNT",
	"XMODE_SANDBOX_CPUS", "XMODE_SANDBOX_MEMORY", "XMODE_SANDBOX_PIDS_LIMIT", "XMODE_SANDBOX_TMPFS",
	"XMODE_SANDBOX_NETWORK", "XMODE_SANDBOX_READONLY_ROOT", "XMODE_SANDBOX_BIND_HARDENED",
	"XMODE_SANDBOX_USER", "XMODE_PROJECT_CACHE_MOUNT",
}

// laterSettings shape a sandbox too, but came after pools did: each is part
// of the shape only once it is set, so that an entry made before it existed
// keeps the shape a create of the same settings has.
var laterSettings = []string{
	"XMODE_SANDBOX_ALLOW", "XMODE_SANDBOX_RESOLVE", "XMODE_SANDBOX_EGRESS_NETWORK", "XMODE_SANDBOX_EGRESS_SUBNETS",
}

// Shape implements engine.Shaper: the mount mode, then every setting of
// shapeSettings in the configuration's order, with whether it was set
// (bind mode applies only the limits that were).
func (p *Provider) Shape() string {
	var b strings.Builder
	b.WriteString("mount=" + p.MountMode() + "\n")
	for _, v := range p.cfg.Values {
		set := v.Source != "default"
		if slices.Contains(shapeSettings, v.Name) || set && slices.Contains(laterSettings, v.Name) {
			fmt.Fprintf(&b, "%s=%s set=%t\n", v.Name, v.Value, set)
		}
	}
	return b.String()
}

// MoveCost implements engine.Mover: a new sandbox starts a container, which
// costs more than any checkout, except in sync mode, where the container
// works on a copy of the worktree taken when it was made.
func (p *Provider) MoveCost() engine.MoveCost {
	if p.MountMode() == MountSync {
		return engine.MoveNever
	}
	return engine.MoveCheaper
}
