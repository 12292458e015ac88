package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// Helpers of the real-daemon CLI tests (docker_e2e_test.go, topology_test.go).
// Names start with dk so they stay apart from the other tests' helpers.

// dkSession is the part of the session JSON (docs/reference.md, "Session")
// these tests check.
type dkSession struct {
	ID           string `json:"id"`
	RunID        string `json:"run_id"`
	RunnerMode   string `json:"runner_mode"`
	Engine       string `json:"engine"`
	Status       string `json:"status"`
	EndReason    string `json:"end_reason"`
	WorktreePath string `json:"worktree_path"`
	RunDir       string `json:"run_dir"`
	ContainerID  string `json:"container_id"`
	MountMode    string `json:"mount_mode"`
	Image        string `json:"image"`
}

// dkStep is the part of a step's result.json these tests check.
type dkStep struct {
	Seq       int      `json:"seq"`
	Name      string   `json:"name"`
	Argv      []string `json:"argv"`
	ExitCode  int      `json:"exit_code"`
	TimedOut  bool     `json:"timed_out"`
	OOMKilled bool     `json:"oom_killed"`
}

// dkCheck is one line of `xmode doctor --json`.
type dkCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

// dkResult is what one xmode process did.
type dkResult struct {
	args           []string
	stdout, stderr string
	code           int
	took           time.Duration
}

func (r dkResult) String() string {
	return "xmode " + strings.Join(r.args, " ") + ": exit " + strconv.Itoa(r.code) + " after " + r.took.Round(time.Millisecond).String() +
		"\nstdout: " + r.stdout + "\nstderr: " + r.stderr
}

// dkXmode runs the real xmode CLI (this test binary, see TestMain) against
// root with exactly the given XMODE_* variables: whatever XMODE_*, CODEX_*
// or CI variables the caller's environment holds do not leak in. A process
// that has not ended after a minute is killed (and the test fails).
func dkXmode(t *testing.T, root string, env []string, args ...string) dkResult {
	t.Helper()
	c := xmode(t, root, args...)
	var keep []string
	for _, kv := range c.Env {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "XMODE_") && k != "XMODE_TEST_AS_MAIN" && k != "XMODE_STORAGE_ROOT" && k != clockEnv) ||
			strings.HasPrefix(k, "CODEX_") || k == "CI" {
			continue
		}
		keep = append(keep, kv)
	}
	c.Env = append(append(keep, "XMODE_USER=tester"), env...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	start := time.Now()
	if err := c.Start(); err != nil {
		t.Fatalf("start xmode %s: %v", strings.Join(args, " "), err)
	}
	timer := time.AfterFunc(time.Minute, func() { _ = c.Process.Kill() })
	err := c.Wait()
	hung := !timer.Stop()
	r := dkResult{args: args, stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("xmode %s: %v", strings.Join(args, " "), err)
	}
	if hung {
		t.Fatalf("xmode %s hung for a minute and was killed\n%s", strings.Join(args, " "), r)
	}
	return r
}

// dkWant fails the test unless r exited with code.
func dkWant(t *testing.T, r dkResult, code int) dkResult {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d\n%s", code, r)
	}
	return r
}

// dkJSON decodes r's stdout into v.
func dkJSON(t *testing.T, r dkResult, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("stdout is not the JSON expected (%v)\n%s", err, r)
	}
}

// dkReadJSON decodes a file into v.
func dkReadJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
}

// dkGone reports whether the daemon has no container by that name or ID.
func dkGone(t *testing.T, cli *client.Client, ref string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cli.ContainerInspect(ctx, ref)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect %s: %v", ref, err)
	}
	return cerrdefs.IsNotFound(err)
}

// dkRemoveSandboxes removes, when the test ends, every container xmode
// created (xmode.managed=true) that mounts something under one of roots or
// the volume vol: the sandboxes of this test's storage roots, whatever
// their instance, even when the test failed before it learned their IDs.
// Register it after the volume (cleanups run last-in, first-out), so the
// sandboxes go before the volume they use.
func dkRemoveSandboxes(t *testing.T, cli *client.Client, vol string, roots ...string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "xmode.managed=true"))})
		if err != nil {
			t.Logf("cleanup: list xmode containers: %v", err)
			return
		}
		for _, c := range cs {
			if !dkMountsUnder(c.Mounts, vol, roots) {
				continue
			}
			if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Logf("cleanup: remove %s: %v", strings.Join(c.Names, ","), err)
			}
		}
	})
}

func dkMountsUnder(mounts []container.MountPoint, vol string, roots []string) bool {
	for _, m := range mounts {
		if vol != "" && m.Name == vol {
			return true
		}
		for _, r := range roots {
			if r != "" && (m.Source == r || strings.HasPrefix(m.Source, strings.TrimSuffix(r, "/")+"/")) {
				return true
			}
		}
	}
	return false
}

// dkIsDockerSocket reports whether a mount's source or target looks like a
// docker socket (or a directory holding one).
func dkIsDockerSocket(m container.MountPoint) bool {
	for _, p := range []string{m.Source, m.Destination} {
		p = filepath.Clean(p)
		if strings.Contains(p, "docker.sock") || p == "/var/run" || p == "/run" || p == "/var" {
			return true
		}
	}
	return false
}
