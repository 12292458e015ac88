package bench

import (
	"os"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// TestMain stops the second (TLS) docker daemon the TLS benchmarks start.
// Run with bareRelayEnv set, the test binary is the bare CONNECT relay the
// egress benchmarks measure the proxy against instead.
func TestMain(m *testing.M) {
	if os.Getenv(bareRelayEnv) != "" {
		bareRelay()
		return
	}
	code := m.Run()
	dockertest.RemoveBuilt()
	dockertest.StopTLSDaemon()
	os.Exit(code)
}
