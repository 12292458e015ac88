package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// A codex API key in xmode's environment reaches a step that runs on this
// host (engine.OnHost) only when the session's environment policy lets it
// through (its keys are left out unless included), so the login check is
// skipped only then; a container does not inherit it, so a docker session
// checks the login first. XMODE_AGENT_ENV names another variable: the key
// is not passed by name.
func TestCodexKeyInheritedOnlyOnHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A stand-in codex on the host: its login check succeeds; its run
	// succeeds only when the key reached it.
	codex := filepath.Join(dir, "codex")
	if err := os.WriteFile(codex, []byte("#!/bin/sh\n[ \"$1\" = login ] && exit 0\n[ -n \"$OPENAI_API_KEY\" ] || exit 7\n"), 0o755); err != nil {
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
		for _, c := range []struct {
			name   string
			policy []string // the session's environment policy, at create
			key    string
			code   int
			want   []string
		}{
			{"no key", nil, "", 7, []string{"agent-codex-login", "agent-codex"}},
			// The default policy (all) leaves *KEY* out: the step would not
			// get the key, so codex's login is checked.
			{"key left out by the policy", nil, "sk-not-inherited-FAKE", 7, []string{"agent-codex-login", "agent-codex"}},
			{"key left out by core", []string{"XMODE_HOST_ENV=core"}, "sk-not-inherited-FAKE", 7, []string{"agent-codex-login", "agent-codex"}},
			{"key included", []string{"XMODE_HOST_ENV_INCLUDE=OPENAI_API_KEY"}, "sk-inherited-FAKE", 0, []string{"agent-codex"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				repo := filepath.Join(t.TempDir(), "repo")
				if err := makeRepo(repo); err != nil {
					t.Fatal(err)
				}
				root := filepath.Join(t.TempDir(), "root")
				out, err := xmodeEnv(t, root, c.policy, "sandbox", "create", "--repo", repo, "-q").Output()
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				cmd := xmode(t, root, "agent", "run", strings.TrimSpace(string(out)), "--agent", "codex", "--prompt", "p")
				signedOut(t, cmd, "XMODE_CODEX_BIN="+codex, "XMODE_AGENT_ENV=XMODE_TEST_NO_KEY", "OPENAI_API_KEY="+c.key)
				r := runCmd(t, cmd)
				if got := steps(root); r.code != c.code || strings.Join(got, " ") != strings.Join(c.want, " ") {
					t.Fatalf("OPENAI_API_KEY=%q in xmode's environment, policy %q: exit %d, steps %q; want exit %d, steps %q (no login check only when the step inherits the key)\n%s",
						c.key, c.policy, r.code, got, c.code, c.want, r.stderr)
				}
			})
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
