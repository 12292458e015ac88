package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// One follower for every front end (evidence.Follower): a background step
// whose xmode was killed has ended for MCP's step_logs (eof, though the
// store says running until a reap records it lost) and step_status, as
// for `sandbox logs --follow` (TestKilledSupervisorLeavesNothing).
func TestStepLogsOfAStepWhoseXmodeIsGone(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	cs := r.stdio(nil, nil)
	created := ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo})
	id, wt := str(created, "session", "id"), str(created, "session", "worktree")
	ok(t, cs, "sandbox_exec", map[string]any{"session": id, "background": true, "name": "server",
		"command": "echo ready; echo $PPID > sup.pid; exec sleep 300"})
	sup := waitPids(t, filepath.Join(wt, "sup.pid"))[0]
	t.Cleanup(func() { syscall.Kill(sup, syscall.SIGKILL) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		lg := ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "offset": 0})
		if str(lg, "content") == "ready\n" {
			if str(lg, "eof") != "false" {
				t.Fatalf("step_logs of the running step: %v", lg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the step's first line never reached its log: %v", lg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, sup, "the killed supervisor")
	lg := ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "offset": 0})
	if str(lg, "content") != "ready\n" || str(lg, "eof") != "true" || str(lg, "state") != "running" {
		t.Errorf("step_logs of a step whose xmode is gone: %v; want all of its log, eof, state still running", lg)
	}
	if st := ok(t, cs, "step_status", map[string]any{"session": id, "step": 1}); str(st, "running") != "false" {
		t.Errorf("step_status of a step whose xmode is gone: %v", st)
	}
	out, _ := r.cli(nil, "sandbox", "logs", id, "1", "--follow").CombinedOutput()
	if !strings.Contains(string(out), "ready\n") || !strings.Contains(string(out), "step 1's xmode is gone") {
		t.Errorf("logs --follow: %s", out)
	}
}
