package docker

import (
	"strings"
	"testing"

	"github.com/xmode/xmode/engine"
)

// What a new sandbox lacks, by configuration: bind mode leaves the limits,
// the network and the hardening unless set or hardened; volume and sync
// mode lack only a network other than none; each gap says what closes it.
func TestIsolationGaps(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want []string // each gap's start, in order
	}{
		{nil, []string{"network isolation: the container is on docker's default bridge", "limits: XMODE_SANDBOX_CPUS, XMODE_SANDBOX_MEMORY, XMODE_SANDBOX_PIDS_LIMIT, XMODE_SANDBOX_TMPFS are left", "hardening: "}},
		{map[string]string{"XMODE_SANDBOX_BIND_HARDENED": "1"}, nil},
		{map[string]string{"XMODE_SANDBOX_BIND_HARDENED": "1", "XMODE_SANDBOX_NETWORK": "bridge"}, []string{"network isolation: the container is on network bridge"}},
		{map[string]string{"XMODE_SANDBOX_NETWORK": "none", "XMODE_SANDBOX_MEMORY": "1g"}, []string{"limits: XMODE_SANDBOX_CPUS, XMODE_SANDBOX_PIDS_LIMIT, XMODE_SANDBOX_TMPFS are left", "hardening: "}},
		{map[string]string{"XMODE_SANDBOX_STORAGE_VOLUME": "vol"}, nil},
		// A proxied network: allow lacks nothing, open says what it lets out.
		{map[string]string{"XMODE_SANDBOX_BIND_HARDENED": "1", "XMODE_SANDBOX_NETWORK": "allow"}, nil},
		{map[string]string{"XMODE_SANDBOX_BIND_HARDENED": "1", "XMODE_SANDBOX_NETWORK": "open"}, []string{"network isolation: its network is open"}},
		{map[string]string{"XMODE_SANDBOX_DOCKER_HOST": "tcp://127.0.0.1:2375", "XMODE_SANDBOX_NETWORK": "bridge"}, []string{"network isolation: "}},
	} {
		gaps := engine.IsolationGaps(shapeProvider(t, c.env))
		if len(gaps) != len(c.want) {
			t.Errorf("%v: %q, want %d gaps", c.env, gaps, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.HasPrefix(gaps[i], w) {
				t.Errorf("%v: gap %d %q, want it to start %q", c.env, i, gaps[i], w)
			}
		}
	}
}
