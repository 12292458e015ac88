package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// `sandbox shell` without a command runs the user's $SHELL where steps run
// on this host (engine.OnHost), and /bin/sh in a container, where the
// host's $SHELL names nothing.
func TestShellDefaultFollowsTheEngine(t *testing.T) {
	t.Parallel()
	usersShell := filepath.Join(t.TempDir(), "users-shell")
	if err := os.WriteFile(usersShell, []byte("#!/bin/sh\necho the-users-shell\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"SHELL=" + usersShell}

	t.Run("host", func(t *testing.T) {
		t.Parallel()
		root, id := newSession(t)
		term := startTerminal(t, xmodeEnv(t, root, env, "sandbox", "shell", id), 24, 80)
		if code := term.exit(); code != 7 || !strings.Contains(term.screen(), "the-users-shell") {
			t.Fatalf("sandbox shell on the host with SHELL=%s: exit %d, want its 7\n%q", usersShell, code, term.screen())
		}
	})

	t.Run("docker", func(t *testing.T) {
		t.Parallel()
		dockertest.Require(t)
		img := dockertest.Image(t)
		dir := t.TempDir()
		repo := filepath.Join(dir, "repo")
		if err := makeRepo(repo); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(dir, "root")
		denv := append([]string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
			"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}, env...)
		out, err := xmodeEnv(t, root, denv, "sandbox", "create", "--repo", repo, "-q").Output()
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		id := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = xmodeEnv(t, root, denv, "sandbox", "stop", id).Run() })
		term := startTerminal(t, xmodeEnv(t, root, denv, "sandbox", "shell", id), 24, 80)
		term.typeIn("echo in-the-container-$((20+1)); exit 5\r")
		if code := term.exit(); code != 5 || !strings.Contains(term.screen(), "in-the-container-21") || strings.Contains(term.screen(), "the-users-shell") {
			t.Fatalf("sandbox shell in docker with the host's SHELL=%s: exit %d, want /bin/sh's 5\n%q", usersShell, code, term.screen())
		}
	})
}
