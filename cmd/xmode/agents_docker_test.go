package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// TestAgentsDocker runs the loop, agent steps and plans in docker sessions
// of both mount models with the stand-in agent of examples/ (a POSIX sh
// script, so the busybox test image runs it): the worktree is edited
// inside the container, the steps are recorded, the prompt reaches the
// agent verbatim, secrets are masked, an agent that needs the network is
// refused on a session without one, and a CLI missing from the image is
// 127 naming the image.
func TestAgentsDocker(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	host := dockertest.Host()
	repo := filepath.Join(t.TempDir(), "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	// The stand-in agent and a check travel with the repository: the
	// container sees nothing of the host but the worktree.
	script, err := os.ReadFile(filepath.Join("..", "..", "examples", "agent.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"tools/agent.sh": string(script),
		"xmode.yaml":     "steps:\n  - name: notes\n    run: [test, -s, AGENT_NOTES.md]\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755)
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range [][]string{{"add", "."}, {"commit", "-qm", "agent"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, a...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", a, err, out)
		}
	}
	env := []string{
		"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + host,
		"XMODE_AGENT_COMMAND_TEMPLATE=sh {worktree}/tools/agent.sh {prompt_file}",
		"X_SERVICE_TOKEN=xst-PLANTED-docker-31",
	}

	t.Run("bind", func(t *testing.T) {
		t.Parallel()
		if !strings.HasPrefix(host, "unix://") {
			testenv.Skip(t, "bind mode needs a local daemon, the daemon is at %s", host)
		}
		root := filepath.Join(t.TempDir(), "root")
		dkRemoveSandboxes(t, cli, "", root)
		dkAgents(t, cli, root, repo, img, env, "bind")
	})
	t.Run("volume", func(t *testing.T) {
		t.Parallel()
		vol, mountpoint := dockertest.StorageVolume(t, cli)
		dkRemoveSandboxes(t, cli, vol, mountpoint)
		dkAgents(t, cli, mountpoint, repo, img, append(slices.Clone(env), "XMODE_SANDBOX_STORAGE_VOLUME="+vol, "XMODE_SANDBOX_STORAGE_MOUNT="+mountpoint), "volume")
	})
}

func dkAgents(t *testing.T, cli *client.Client, root, repo, img string, env []string, mode string) {
	x := func(args ...string) dkResult { t.Helper(); return dkXmode(t, root, env, args...) }
	const objective = "docker: $(touch pwned) `touch pwned` {worktree} {prompt_file} \"q\" 'q' \\ *"

	// The loop end to end, the session kept to look at it.
	var res struct {
		RunID     string `json:"id"`
		SessionID string `json:"session_id"`
		Status    string `json:"status"`
		ExitCode  int    `json:"exit_code"`
		Steps     []struct {
			Step, Status string
			ExitCode     *int `json:"exit_code"`
		} `json:"steps"`
	}
	r := dkWant(t, x("run", "--repo", repo, "--agent", "command", "--objective", objective, "--keep", "--json"), 0)
	dkJSON(t, r, &res)
	if res.Status != "review" || len(res.Steps) != 2 || res.Steps[0].Step != "agent-command" || res.Steps[1].Step != "notes" || res.Steps[1].Status != "passed" {
		t.Fatalf("%s: xmode run: %+v\n%s", mode, res, r)
	}
	var s dkSession
	dkJSON(t, dkWant(t, x("sandbox", "show", res.SessionID, "--json"), 0), &s)
	if s.Engine != "docker" || s.MountMode != mode || s.Status != "open" {
		t.Fatalf("%s: the run's session: %+v", mode, s)
	}
	// The agent wrote inside the container; the host sees it in the worktree,
	// verbatim; nothing in the prompt ran; the prompt file is gone.
	if r := dkWant(t, x("sandbox", "exec", s.ID, "--", "cat", "AGENT_NOTES.md"), 0); r.stdout != objective {
		t.Fatalf("%s: the notes the agent wrote in the container: %q, want the objective verbatim %q", mode, r.stdout, objective)
	}
	if b, err := os.ReadFile(filepath.Join(s.WorktreePath, "AGENT_NOTES.md")); err != nil || string(b) != objective {
		t.Fatalf("%s: AGENT_NOTES.md on the host: %q %v", mode, b, err)
	}
	for _, p := range []string{"pwned", ".xmode-agent"} {
		if _, err := os.Lstat(filepath.Join(s.WorktreePath, p)); err == nil {
			t.Fatalf("%s: %s exists in the worktree", mode, p)
		}
	}
	var step struct {
		dkStep
		Agent struct {
			Kind         string   `json:"kind"`
			FinalMessage string   `json:"final_message"`
			FilesChanged []string `json:"files_changed"`
		} `json:"agent"`
	}
	dkReadJSON(t, filepath.Join(s.RunDir, "steps", "0001-agent-command", "result.json"), &step)
	wantWT := "/workspace"
	if mode == "volume" {
		wantWT = s.WorktreePath
	}
	if step.Agent.Kind != "command" || !slices.Equal(step.Agent.FilesChanged, []string{"AGENT_NOTES.md"}) ||
		!slices.Equal(step.Argv[:2], []string{"sh", wantWT + "/tools/agent.sh"}) || !strings.HasPrefix(step.Argv[2], wantWT+"/.xmode-agent/.git/prompt-") {
		t.Fatalf("%s: the agent step: %+v", mode, step)
	}

	// A template that names a host path the image lacks (the README's host
	// template, in a docker session) is warned about before the step runs,
	// naming the fix; the step then fails as it must. A template whose
	// paths are in the worktree or the image gets no warning.
	if strings.Contains(r.stderr, "warning:") {
		t.Fatalf("%s: a warning for a template naming {worktree}\n%s", mode, r)
	}
	hostAgent, err := filepath.Abs(filepath.Join("..", "..", "examples", "agent.sh"))
	if err != nil {
		t.Fatal(err)
	}
	r = dkXmode(t, root, append(slices.Clone(env), "XMODE_AGENT_COMMAND_TEMPLATE=sh "+hostAgent+" {prompt_file}"),
		"agent", "run", s.ID, "--agent", "command", "--prompt", "p")
	want := "xmode: warning: XMODE_AGENT_COMMAND_TEMPLATE names " + hostAgent + ", which the sandbox's image " + img +
		" does not have (it is a file on this host, and the sandbox sees only the worktree and its image): copy it into the repository and name it {worktree}/agent.sh in the template, or build it into the image\n"
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Fatalf("%s: a host path the image lacks: want a failure and the warning\n%s\n%s", mode, want, r)
	}
	r = dkWant(t, dkXmode(t, root, append(slices.Clone(env), "XMODE_AGENT_COMMAND_TEMPLATE=/bin/cat {prompt_file}"),
		"agent", "run", s.ID, "--agent", "command", "--prompt", "in the image"), 0)
	if r.stdout != "in the image" || strings.Contains(r.stderr, "warning:") {
		t.Fatalf("%s: a path the image has\n%s", mode, r)
	}

	// A plan run again in the same session: the steps are numbered on.
	r = dkWant(t, x("pipeline", "run", s.ID), 0)
	if !strings.Contains(r.stdout, "notes") || !strings.Contains(r.stdout, "passed") {
		t.Fatalf("%s: pipeline run\n%s", mode, r)
	}

	// A secret passed by name reaches the step and nothing records it.
	r = dkWant(t, dkXmode(t, root, append(slices.Clone(env), "XMODE_AGENT_COMMAND_TEMPLATE=sh -c 'echo tok=$X_SERVICE_TOKEN'"),
		"agent", "run", s.ID, "--agent", "command", "--env-pass", "X_SERVICE_TOKEN", "--prompt", "p"), 0)
	if strings.TrimSpace(r.stdout) != "tok=***" {
		t.Fatalf("%s: the secret in the terminal: %q", mode, r.stdout)
	}
	r = dkWant(t, x("sandbox", "exec", s.ID, "--env", "API_KEY=ak-PLANTED-docker-77", "--", "sh", "-c", "echo key=$API_KEY"), 0)
	if strings.TrimSpace(r.stdout) != "key=***" {
		t.Fatalf("%s: a secret --env in the terminal: %q", mode, r.stdout)
	}
	if out, _ := exec.Command("grep", "-r", "-l", "PLANTED", root).Output(); len(out) > 0 {
		t.Fatalf("%s: a planted secret is in %s", mode, out)
	}

	// codex: a CLI the image lacks is 127, naming the image and the fix;
	// in volume mode (network none by default) it is refused before that.
	if mode == "volume" {
		r = dkWant(t, x("agent", "run", s.ID, "--agent", "codex", "--prompt", "p"), 4)
		if !strings.Contains(r.stderr, "network none") || !strings.Contains(r.stderr, "sandbox create --network allow --agent codex") {
			t.Fatalf("%s: codex on a session without network\n%s", mode, r)
		}
		before := dkWant(t, x("sandbox", "show", s.ID), 0).stdout
		if strings.Contains(before, "agent-codex") {
			t.Fatalf("%s: a refused agent left a step\n%s", mode, before)
		}
		var b dkSession
		dkJSON(t, dkWant(t, x("sandbox", "create", "--repo", repo, "--network", "bridge", "--json"), 0), &b)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ci, err := cli.ContainerInspect(ctx, b.ContainerID)
		if err != nil || string(ci.HostConfig.NetworkMode) != "bridge" {
			t.Fatalf("%s: --network bridge: %v %v", mode, err, ci.HostConfig)
		}
		r = dkWant(t, x("agent", "run", b.ID, "--agent", "codex", "--prompt", "p"), 127)
		dkWant(t, x("sandbox", "stop", b.ID), 0)
	} else {
		// bind mode honours a network asked for, and records it
		var n dkSession
		dkJSON(t, dkWant(t, x("sandbox", "create", "--repo", repo, "--network", "none", "--json"), 0), &n)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if ci, err := cli.ContainerInspect(ctx, n.ContainerID); err != nil || string(ci.HostConfig.NetworkMode) != "none" {
			t.Fatalf("%s: --network none: %v %v", mode, err, ci.HostConfig)
		}
		if r := dkWant(t, x("agent", "run", n.ID, "--agent", "codex", "--prompt", "p"), 4); !strings.Contains(r.stderr, "network none") {
			t.Fatalf("%s: codex on a bind session with --network none\n%s", mode, r)
		}
		dkWant(t, x("sandbox", "stop", n.ID), 0)
		r = dkWant(t, x("agent", "run", s.ID, "--agent", "codex", "--prompt", "p"), 127)
	}
	if !strings.Contains(r.stderr, "is not installed in the sandbox image "+img) || !strings.Contains(r.stderr, "npm install -g @openai/codex") {
		t.Fatalf("%s: codex missing from the image\n%s", mode, r)
	}
	dkWant(t, x("sandbox", "stop", s.ID), 0)
	if r := dkWant(t, x("run", "show", res.RunID), 0); !strings.Contains(r.stdout, "destroyed (stopped)") || !strings.Contains(r.stdout, "0002-notes") {
		t.Fatalf("%s: run show\n%s", mode, r)
	}
}
