package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/internal/testenv"
)

// hostMethod is the host engine's step containment as `xmode doctor
// --json` reports it, with its check's status.
func hostMethod(t *testing.T, env ...string) (method, status string) {
	t.Helper()
	c := xmode(t, t.TempDir(), "doctor", "--json")
	c.Env = append(c.Env, env...)
	out, _ := c.Output() // doctor fails for other engines' reasons too
	var checks []struct{ Name, Status, Method string }
	if err := json.Unmarshal(out, &checks); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	for _, ch := range checks {
		if ch.Name == "host steps" {
			return ch.Method, ch.Status
		}
	}
	t.Fatalf("doctor --json has no host steps check:\n%s", out)
	return "", ""
}

func requireHostCgroup(t *testing.T) {
	t.Helper()
	if m, _ := hostMethod(t); m != "cgroup" {
		testenv.Skip(t, "host steps get no cgroup on this machine (doctor: %s)", m)
	}
}

// doctor says which containment host steps get, and the fallback when
// cgroups are turned off.
func TestDoctorReportsHostContainment(t *testing.T) {
	t.Parallel()
	requireHostCgroup(t)
	if m, st := hostMethod(t, "XMODE_HOST_CGROUP=off"); m != "process-group" || st != "warn" {
		t.Errorf("with XMODE_HOST_CGROUP=off doctor says %s (%s), want process-group (warn)", m, st)
	}
}

// stepCgroupOf is the name of the cgroup pid runs in.
func stepCgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok && strings.Contains(p, "xmode-step-") {
			return filepath.Base(p)
		}
	}
	t.Fatalf("process %d is in no step cgroup:\n%s", pid, b)
	return ""
}

// watcherOf waits for the watcher of the named step cgroup and returns its
// pid.
func watcherOf(t *testing.T, name string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range m {
			if b, _ := os.ReadFile(f); strings.Contains(string(b), "xmode-watch") && strings.Contains(string(b), name) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no watcher for cgroup %s", name)
	return 0
}

// escapedGrandchild is a step whose grandchild leaves the step's session
// and process group, closes its files, clears its environment and sleeps.
const escapedGrandchild = `setsid sh -c 'echo $$ > gc.tmp && mv gc.tmp gc.pid; exec env -i sleep 300' </dev/null >/dev/null 2>&1 & sleep 300`

// kill -9 of `sandbox exec` ends a grandchild that escaped the step's
// session, group and environment, at once: no reap runs.
func TestKilledExecEndsEscapedGrandchild(t *testing.T) {
	t.Parallel()
	requireHostCgroup(t)
	root, id := newSession(t)
	c := xmode(t, root, "sandbox", "exec", id, "--name", "escape", "--", "sh", "-c", escapedGrandchild)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	gc, _ := strconv.Atoi(waitFile(t, filepath.Join(root, "runs", "*", "worktree", "gc.pid")))
	t.Cleanup(func() { syscall.Kill(gc, syscall.SIGKILL) })
	watcherOf(t, stepCgroupOf(t, gc))
	c.Process.Kill()
	c.Wait()
	waitGone(t, gc, "the escaped grandchild after its xmode was killed")
}

// A step whose xmode and watcher were both killed is ended by the reaper
// through its cgroup, untagged processes included.
func TestReapEndsDeadStepsCgroup(t *testing.T) {
	t.Parallel()
	requireHostCgroup(t)
	root, id := newSession(t)
	c := xmode(t, root, "sandbox", "exec", id, "--name", "escape", "--", "sh", "-c", escapedGrandchild)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	gc, _ := strconv.Atoi(waitFile(t, filepath.Join(root, "runs", "*", "worktree", "gc.pid")))
	t.Cleanup(func() { syscall.Kill(gc, syscall.SIGKILL) })
	syscall.Kill(watcherOf(t, stepCgroupOf(t, gc)), syscall.SIGKILL)
	c.Process.Kill()
	c.Wait()
	if !alive(gc) {
		t.Fatal("the grandchild died without its watcher: this test no longer tests the reaper")
	}
	if out, err := xmode(t, root, "reap").CombinedOutput(); err != nil {
		t.Fatalf("reap: %v\n%s", err, out)
	}
	waitGone(t, gc, "the escaped grandchild after reap")
	show, _ := xmode(t, root, "sandbox", "show", id).CombinedOutput()
	if !strings.Contains(string(show), "lost") {
		t.Errorf("the step is not recorded as lost:\n%s", show)
	}
}
