package config

import (
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

// The Codex cloud loop's variables: defaults from docs/configuration.md, and
// bad values refused naming the variable.
func TestCloudSettings(t *testing.T) {
	c, err := Load(envOf(map[string]string{"HOME": "/h"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.CodexBin != "codex" || c.CloudPollInterval != 15*time.Second || c.CloudStaleAfter != 10*time.Minute ||
		c.CloudStatusCommand != "codex cloud status {task_id}" {
		t.Fatalf("defaults: bin=%q interval=%v stale=%v status=%q", c.CodexBin, c.CloudPollInterval, c.CloudStaleAfter, c.CloudStatusCommand)
	}
	c, err = Load(envOf(map[string]string{"HOME": "/h", "XMODE_CODEX_BIN": "/opt/codex/bin/codex",
		"XMODE_CLOUD_POLL_INTERVAL": "2s", "XMODE_CLOUD_STALE_AFTER": "1h", "CODEX_CLOUD_STATUS_COMMAND": "my-status --id={task_id}"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.CodexBin != "/opt/codex/bin/codex" || c.CloudPollInterval != 2*time.Second || c.CloudStaleAfter != time.Hour ||
		c.CloudStatusCommand != "my-status --id={task_id}" {
		t.Fatalf("from env: %+v", c)
	}
	for name, val := range map[string]string{
		"XMODE_CLOUD_POLL_INTERVAL":  "often",
		"XMODE_CLOUD_STALE_AFTER":    "-5m",
		"XMODE_CODEX_BIN":            "   ",
		"CODEX_CLOUD_STATUS_COMMAND": "codex cloud status",
	} {
		_, err := Load(envOf(map[string]string{"HOME": "/h", name: val}), nil)
		if fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: %v", name, val, err)
		}
	}
}
