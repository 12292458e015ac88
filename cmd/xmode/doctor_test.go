package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// doctor's setuid warning is about docker steps leaving setuid files in
// worktrees on this host: it shows when the docker engine is configured
// (bind mode here) and the storage root's filesystem honours setuid bits,
// and not for host sessions, whose files are the user's own.
func TestDoctorSetuidWarningOnlyForDocker(t *testing.T) {
	t.Parallel()
	dockertest.Require(t)
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if suid, err := fsguard.AllowsSetuid(root); err != nil || !suid {
		testenv.Skip(t, "%s is on a nosuid filesystem (%v): nothing to warn about", root, err)
	}
	setuid := func(env ...string) *dkCheck {
		t.Helper()
		var checks []dkCheck
		dkJSON(t, dkXmode(t, root, env, "doctor", "--json"), &checks)
		return dkFind(checks, "setuid")
	}
	if c := setuid(); c != nil {
		t.Errorf("host engine: %+v, want no setuid line", c)
	}
	if c := setuid("XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_DOCKER_HOST="+dockertest.Host()); c == nil || c.Status != "warn" {
		t.Errorf("docker engine, bind mode: %+v, want a setuid warning", c)
	}
}
