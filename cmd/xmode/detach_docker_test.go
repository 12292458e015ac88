package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// A background server in a docker sandbox with no network is reachable
// from later steps over localhost (issue 21): `busybox httpd` started with
// --detach serves a file to `wget` in a later step; a later step that
// leaves a process behind has it ended, the server's spared (the sweep of
// docs/docker.md, "When a step ends"); `sandbox kill` ends the server and
// its result says so; and `sandbox stop` ends another one without --force,
// recorded as stopped.
func TestDockerBackgroundServer(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	dkRemoveSandboxes(t, cli, "", root)
	env := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}
	var s struct {
		dkSession
		Network string `json:"network"`
	}
	dkJSON(t, dkWant(t, dkXmode(t, root, env, "sandbox", "create", "--repo", repo, "--network", "none", "--json"), 0), &s)
	if s.Network != "none" {
		t.Fatalf("the session's network is %q, want none", s.Network)
	}
	x := func(code int, args ...string) dkResult {
		t.Helper()
		return dkWant(t, dkXmode(t, root, env, append([]string{"sandbox"}, args...)...), code)
	}
	x(0, "exec", s.ID, "--", "sh", "-c", `mkdir www && echo served > www/file && test "$(wc -l < /proc/net/route)" -le 1`)
	if r := x(0, "exec", s.ID, "--detach", "--name", "web", "--", "httpd", "-f", "-p", "8080", "-h", "www"); strings.TrimSpace(r.stdout) != "2" {
		t.Fatalf("exec --detach printed %q, want the step's number", r.stdout)
	}
	// wget until the server listens (its start is not instant), bounded.
	const fetch = `for i in $(seq 100); do wget -qO- localhost:8080/file && exit 0; sleep 0.1; done; exit 1`
	if r := x(0, "exec", s.ID, "--", "sh", "-c", fetch); r.stdout != "served\n" {
		t.Fatalf("wget of the background server: %q", r.stdout)
	}
	// A later step ends what it leaves behind, not the server.
	x(0, "exec", s.ID, "--", "sh", "-c", "sleep 300 & echo $! > left.pid")
	if r := x(0, "exec", s.ID, "--", "sh", "-c", `p=$(cat left.pid); if grep -qs '^State:.[^Z]' /proc/$p/status; then echo alive; fi; wget -qO- localhost:8080/file`); r.stdout != "served\n" {
		t.Fatalf("after a later step ended: %q; want its leftover gone and the server serving", r.stdout)
	}
	var web sandboxStep
	dkJSON(t, x(0, "logs", s.ID, "web", "--json"), &web)
	if web.State != "running" || !web.Detached {
		t.Fatalf("the server's step: %+v", web)
	}

	x(0, "kill", s.ID, "web")
	x(4, "kill", s.ID, "web")
	var res struct {
		dkStep
		Signal    string `json:"signal"`
		StoppedBy string `json:"stopped_by"`
		Detached  bool   `json:"detached"`
	}
	dkReadJSON(t, filepath.Join(s.RunDir, "steps", "0002-web", "result.json"), &res)
	if res.ExitCode != 143 || res.Signal != "SIGTERM" || res.StoppedBy != "sandbox kill" || !res.Detached {
		t.Fatalf("the killed server's result.json: %+v", res)
	}
	x(1, "exec", s.ID, "--", "wget", "-qO-", "localhost:8080/file")

	x(0, "exec", s.ID, "-d", "--name", "web2", "--", "httpd", "-f", "-p", "8081", "-h", "www")
	x(0, "exec", s.ID, "--", "sh", "-c", strings.ReplaceAll(fetch, "8080", "8081"))
	x(0, "stop", s.ID)
	dkReadJSON(t, filepath.Join(s.RunDir, "steps", "0007-web2", "result.json"), &res)
	if res.ExitCode != 143 || res.StoppedBy != "sandbox stop" || !res.Detached {
		t.Fatalf("the stopped server's result.json: %+v", res)
	}
	dkJSON(t, x(0, "logs", s.ID, "web2", "--json"), &web)
	if web.State != "finished" || web.StoppedBy != "sandbox stop" || !web.Detached {
		t.Fatalf("the stopped server's row: %+v", web)
	}
	if !dkGone(t, cli, s.ContainerID) {
		t.Fatal("the stopped session's container is still there")
	}
}

// sandboxStep is the part of a step's JSON (docs/reference.md, "Step")
// these tests read.
type sandboxStep struct {
	Seq       int    `json:"seq"`
	State     string `json:"state"`
	Detached  bool   `json:"detached"`
	StoppedBy string `json:"stopped_by"`
}
