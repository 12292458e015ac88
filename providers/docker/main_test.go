package docker

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// TestMain runs the docker tests with more parallelism than the CPU count
// (they mostly wait on the daemon; -parallel still wins when given) and
// fails the run when a test left containers or volumes behind.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit && runtime.GOMAXPROCS(0) < 4 {
		_ = flag.Set("test.parallel", strconv.Itoa(4))
	}
	code := m.Run()
	dockertest.RemoveBuilt()
	strays := append(dockertest.Strays(), dockertest.StopTLSDaemon()...)
	if len(strays) > 0 {
		fmt.Fprintln(os.Stderr, "docker objects left behind by tests (now removed):")
		for _, s := range strays {
			fmt.Fprintln(os.Stderr, "  "+s)
		}
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
