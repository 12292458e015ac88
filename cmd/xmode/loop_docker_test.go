package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/client"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// TestLoopDocker runs the iterating loop in docker sandboxes of both mount
// models with the stand-in agent of examples/: two attempts from one base
// that differ as the agent saw its number, their comparison, a review with
// a comment on a line, and `run continue` of the run of attempts, whose
// sandboxes have ended — a fork of the attempt's tree in a new container,
// where the agent answers the comment — making version 2; the versions
// verify as a chain, the interdiff holds the answer, and the real git makes
// of version 2's patch the tree xmode recorded.
func TestLoopDocker(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	host := dockertest.Host()
	repo := filepath.Join(t.TempDir(), "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("..", "..", "examples", "agent.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(repo, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "tools", "agent.sh"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, a := range [][]string{{"add", "."}, {"commit", "-qm", "agent"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, a...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", a, err, out)
		}
	}
	plan := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(plan, []byte("steps:\n  - name: implement\n    agent: command\n    prompt: \"{objective}\"\n  - name: notes\n    run: [test, -s, AGENT_NOTES.md]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + host,
		"XMODE_AGENT_COMMAND_TEMPLATE=sh {worktree}/tools/agent.sh {prompt_file}",
	}
	t.Run("bind", func(t *testing.T) {
		t.Parallel()
		if !strings.HasPrefix(host, "unix://") {
			testenv.Skip(t, "bind mode needs a local daemon, the daemon is at %s", host)
		}
		root := filepath.Join(t.TempDir(), "root")
		dkRemoveSandboxes(t, cli, "", root)
		dkLoop(t, cli, root, repo, plan, env)
	})
	t.Run("volume", func(t *testing.T) {
		t.Parallel()
		vol, mountpoint := dockertest.StorageVolume(t, cli)
		dkRemoveSandboxes(t, cli, vol, mountpoint)
		dkLoop(t, cli, mountpoint, repo, plan, append(slices.Clone(env), "XMODE_SANDBOX_STORAGE_VOLUME="+vol, "XMODE_SANDBOX_STORAGE_MOUNT="+mountpoint))
	})
}

func dkLoop(t *testing.T, _ *client.Client, root, repo, plan string, env []string) {
	x := func(args ...string) dkResult { t.Helper(); return dkXmode(t, root, env, args...) }
	var res struct {
		RunID   string `json:"id"`
		Status  string `json:"status"`
		Ranking []struct {
			Attempt int    `json:"attempt"`
			RunID   string `json:"id"`
			CR      string `json:"cr_id"`
		} `json:"ranking"`
	}
	dkJSON(t, dkWant(t, x("run", "--repo", repo, "-f", plan, "--objective", "Write the notes", "--attempts", "2", "--json"), 0), &res)
	if res.Status != "review" || len(res.Ranking) != 2 || res.Ranking[0].CR == "" || res.Ranking[1].CR == "" {
		t.Fatalf("two attempts: %+v", res)
	}
	cr := map[int]string{}
	for _, a := range res.Ranking {
		cr[a.Attempt] = a.CR
	}
	// Each attempt's agent saw its number; both start from one base.
	var bases []string
	for n, id := range cr {
		r := dkWant(t, x("cr", "show", id, "--patch"), 0)
		if !strings.Contains(r.stdout, "+attempt "+string(rune('0'+n))+", line 1\n") {
			t.Fatalf("attempt %d's change:\n%s", n, r.stdout)
		}
		var show struct {
			BaseCommit string `json:"base_commit"`
		}
		dkJSON(t, dkWant(t, x("cr", "show", id, "--json"), 0), &show)
		bases = append(bases, show.BaseCommit)
	}
	if bases[0] != bases[1] || bases[0] == "" {
		t.Fatalf("the attempts' bases: %q", bases)
	}
	if r := dkWant(t, x("cr", "compare", cr[1], cr[2]), 0); !strings.Contains(r.stdout, "+attempt 2, line 2\n") {
		t.Fatalf("compare:\n%s", r.stdout)
	}
	// A comment on attempt 2's first line; its sandbox has ended, so the
	// continue forks its tree into a new container.
	dkWant(t, x("cr", "review", cr[2], "--request-changes", "--comment", "AGENT_NOTES.md:1: (from docker)"), 0)
	r := dkWant(t, x("run", "continue", res.RunID), 0)
	if !strings.Contains(r.stderr, "a fork of its tree") || !strings.Contains(r.stdout, cr[2]+" (version 2)") {
		t.Fatalf("run continue:\n%s", r)
	}
	if d := dkWant(t, x("cr", "diff", cr[2], "--from", "1", "--to", "2"), 0); !strings.Contains(d.stdout, "+Write the notes (from docker)\n") {
		t.Fatalf("the interdiff:\n%s", d.stdout)
	}
	if v := dkWant(t, x("cr", "verify", cr[2]), 0); !strings.Contains(v.stdout, "2 versions as a chain") {
		t.Fatalf("verify:\n%s", v.stdout)
	}
	var v2 struct {
		Tree string `json:"tree"`
		Dir  string `json:"dir"`
	}
	dkJSON(t, dkWant(t, x("cr", "show", cr[2], "--json"), 0), &v2)
	check := filepath.Join(t.TempDir(), "check")
	for _, a := range [][]string{{"clone", "-q", repo, check}, {"-C", check, "checkout", "-q", "--detach", bases[0]},
		{"-C", check, "apply", "--index", filepath.Join(v2.Dir, "change.patch")}} {
		if out, err := exec.Command("git", a...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", a, err, out)
		}
	}
	if out, err := exec.Command("git", "-C", check, "write-tree").Output(); err != nil || strings.TrimSpace(string(out)) != v2.Tree {
		t.Fatalf("git write-tree of version 2's patch: %s %v, xmode recorded %s", out, err, v2.Tree)
	}
	if r := dkWant(t, x("sandbox", "list", "-q"), 0); strings.TrimSpace(r.stdout) != "" {
		t.Fatalf("sandboxes left open: %s", r.stdout)
	}
}
