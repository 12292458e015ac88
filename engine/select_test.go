package engine

import (
	"strings"
	"testing"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
)

// Contract §5: runner_mode × XMODE_SANDBOX_ENGINE.
func TestChoose(t *testing.T) {
	cases := []struct{ mode, engine, want string }{
		{"local_worktree", "", "host"},
		{"local_worktree", "docker", "host"},
		{"cloud_worker", "", "host"},
		{"cloud_worker", "docker", "docker"},
		{"cloud_worker", "kubernetes", "kubernetes"},
		{"local_worktree", "kubernetes", "host"},
	}
	for _, c := range cases {
		if got, err := Choose(c.mode, c.engine); err != nil || got != c.want {
			t.Errorf("Choose(%s, %q) = %q, %v; want %q", c.mode, c.engine, got, err, c.want)
		}
	}
	// cloud_subscription: the cloud engine, which has no provider: nothing
	// can run locally in such a session.
	for _, e := range []string{"", "docker", "kubernetes"} {
		if got, err := Choose("cloud_subscription", e); err != nil || got != Cloud {
			t.Errorf("Choose(cloud_subscription, %q) = %q, %v; want %q", e, got, err, Cloud)
		}
	}
	if _, err := Open(Cloud, nil); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "xmode cloud submit") {
		t.Errorf("Open(cloud): %v, want a refusal pointing at `xmode cloud submit`", err)
	}
	if _, err := Choose("nope", ""); fail.KindOf(err) != fail.Usage {
		t.Errorf("unknown mode: %v", err)
	}
}

// Configured is XMODE_SANDBOX_ENGINE whatever the runner mode: machine rm
// removes a docker cache volume even when new sessions run on the host.
func TestConfigured(t *testing.T) {
	for _, c := range []struct{ mode, engine, want string }{
		{"local_worktree", "", "host"},
		{"local_worktree", "docker", "docker"},
		{"cloud_worker", "docker", "docker"},
		{"cloud_subscription", "docker", "docker"},
	} {
		if got := Configured(&config.Config{RunnerMode: c.mode, Engine: c.engine}); got != c.want {
			t.Errorf("Configured(runner mode %s, XMODE_SANDBOX_ENGINE=%q) = %q, want %q", c.mode, c.engine, got, c.want)
		}
	}
}
