package cmd

import (
	"os"
	"testing"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
	"github.com/xmode/xmode/sandbox"
)

// TestMain lets this test binary be the Codex stand-in too, when a cloud
// test starts it as codex (codexcloudtest.Install), and xmode when `exec
// --detach` starts it again as a background step's supervisor.
func TestMain(m *testing.M) {
	codexcloudtest.Dispatch()
	if len(os.Args) > 1 && os.Args[1] == sandbox.SupervisorCommand {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}
