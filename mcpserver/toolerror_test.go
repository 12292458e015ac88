package mcpserver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/xmode/xmode/fail"
)

// TestToolErrorNamesParameters: a service's error reaches the model with
// the tool's parameter, never the CLI's flag, after what kind it is.
func TestToolErrorNamesParameters(t *testing.T) {
	err := fmt.Errorf("create: %w", fail.Usagef("%s %q: no such repository (give a URL, a file:// URL or an existing path)", fail.Repo, "/nope"))
	got := toolError(err).Error()
	want := `invalid input: create: repository "/nope": no such repository (give a URL, a file:// URL or an existing path)`
	if got != want {
		t.Errorf("toolError = %q, want %q", got, want)
	}
	if strings.Contains(got, "--repo") {
		t.Errorf("toolError names the CLI's flag: %q", got)
	}
	if got := toolError(fail.Enginef("docker unreachable")).Error(); !strings.HasPrefix(got, "the sandbox engine is unavailable: docker unreachable") || !strings.Contains(got, "xmode doctor") {
		t.Errorf("engine error = %q", got)
	}
}
