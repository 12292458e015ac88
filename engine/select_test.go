package engine

import (
	"testing"

	"github.com/xmode/xmode/fail"
)

// Contract §5: runner_mode × XMODE_SANDBOX_ENGINE.
func TestChoose(t *testing.T) {
	cases := []struct{ mode, engine, want string }{
		{"local_worktree", "", "host"},
		{"local_worktree", "docker", "host"},
		{"cloud_worker", "", "host"},
		{"cloud_worker", "docker", "docker"},
	}
	for _, c := range cases {
		if got, err := Choose(c.mode, c.engine); err != nil || got != c.want {
			t.Errorf("Choose(%s, %q) = %q, %v; want %q", c.mode, c.engine, got, err, c.want)
		}
	}
	for _, e := range []string{"", "docker"} {
		if _, err := Choose("cloud_subscription", e); fail.KindOf(err) != fail.Refused {
			t.Errorf("cloud_subscription with %q: %v", e, err)
		}
	}
	if _, err := Choose("nope", ""); fail.KindOf(err) != fail.Usage {
		t.Errorf("unknown mode: %v", err)
	}
}
