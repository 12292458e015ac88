package cmd

import (
	"os"
	"testing"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
)

// TestMain lets this test binary be the Codex stand-in too, when a cloud
// test starts it as codex (codexcloudtest.Install).
func TestMain(m *testing.M) {
	codexcloudtest.Dispatch()
	os.Exit(m.Run())
}
