package bench

import (
	"os"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// TestMain stops the second (TLS) docker daemon the TLS benchmarks start.
func TestMain(m *testing.M) {
	code := m.Run()
	dockertest.RemoveBuilt()
	dockertest.StopTLSDaemon()
	os.Exit(code)
}
