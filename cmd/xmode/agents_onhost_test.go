package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// A codex API key in xmode's environment reaches a step that runs on this
// host (engine.OnHost), so the login check is skipped there; a container
// does not inherit it, so a docker session checks the login first.
// XMODE_AGENT_ENV names another variable: the key is not passed by name.
func TestCodexKeyInheritedOnlyOnHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A stand-in codex on the host: every call succeeds.
	codex := filepath.Join(dir, "codex")
	if err := os.WriteFile(codex, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	steps := func(root string) []string {
		m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "steps", "*"))
		var names []string
		for _, p := range m {
			_, name, _ := strings.Cut(filepath.Base(p), "-")
			names = append(names, name)
		}
		return names
	}

	t.Run("host", func(t *testing.T) {
		t.Parallel()
		root, id := newSession(t)
		for _, c := range []struct {
			key  string
			want []string
		}{
			{"", []string{"agent-codex-login", "agent-codex"}},
			{"sk-inherited-FAKE", []string{"agent-codex-login", "agent-codex", "agent-codex"}},
		} {
			cmd := xmode(t, root, "agent", "run", id, "--agent", "codex", "--prompt", "p")
			signedOut(t, cmd, "XMODE_CODEX_BIN="+codex, "XMODE_AGENT_ENV=XMODE_TEST_NO_KEY", "OPENAI_API_KEY="+c.key)
			if r := runCmd(t, cmd); r.code != 0 {
				t.Fatalf("codex stand-in, OPENAI_API_KEY=%q: exit %d\n%s", c.key, r.code, r.stderr)
			}
			if got := steps(root); strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Fatalf("OPENAI_API_KEY=%q in xmode's environment: steps %q, want %q (no login check when a host step inherits the key)", c.key, got, c.want)
			}
		}
	})

	t.Run("docker", func(t *testing.T) {
		t.Parallel()
		dockertest.Require(t)
		img := dockertest.Image(t)
		repo := filepath.Join(t.TempDir(), "repo")
		if err := makeRepo(repo); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(t.TempDir(), "root")
		env := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
			"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}
		out, err := xmodeEnv(t, root, env, "sandbox", "create", "--repo", repo, "-q").Output()
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		id := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = xmodeEnv(t, root, env, "sandbox", "stop", id).Run() })
		// The image has no codex: the login check fails 127, naming the image.
		cmd := xmodeEnv(t, root, env, "agent", "run", id, "--agent", "codex", "--prompt", "p")
		signedOut(t, cmd, "XMODE_CODEX_BIN="+codex, "XMODE_AGENT_ENV=XMODE_TEST_NO_KEY", "OPENAI_API_KEY=sk-not-inherited-FAKE")
		r := runCmd(t, cmd)
		if got := steps(root); r.code != 127 || strings.Join(got, " ") != "agent-codex-login" || !strings.Contains(r.stderr, "is not installed in the sandbox image "+img) {
			t.Fatalf("docker, OPENAI_API_KEY in xmode's environment only: exit %d, steps %q; want 127 from the login check\n%s", r.code, got, r.stderr)
		}
	})
}
