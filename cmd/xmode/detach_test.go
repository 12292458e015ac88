package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/store"
)

// A background step outlives the `exec --detach` that started it, and
// `logs --follow` streams its output as it comes — the first line before
// the step has ended — then says how it ended and exits 0.
func TestFollowBackgroundStep(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	out, err := xmode(t, root, "sandbox", "exec", id, "--detach", "--name", "slow", "--",
		"sh", "-c", "echo first; while test ! -e go; do sleep 0.05; done; echo second; exit 4").Output()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("exec --detach: %v, stdout %q; want the step's number", err, out)
	}
	f := xmode(t, root, "sandbox", "logs", id, "slow", "--follow")
	var stderr bytes.Buffer
	f.Stderr = &stderr
	pipe, err := f.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(pipe)
	if !lines.Scan() || lines.Text() != "first" {
		t.Fatalf("logs --follow printed %q first; want the running step's first line", lines.Text())
	}
	// The step is still waiting: what came was streamed, not read at its end.
	wt := filepath.Join(root, "runs", "*", "worktree")
	m, _ := filepath.Glob(wt)
	if len(m) != 1 {
		t.Fatalf("worktrees: %v", m)
	}
	if err := os.WriteFile(filepath.Join(m[0], "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || lines.Text() != "second" {
		t.Fatalf("logs --follow then printed %q; want the rest of the step's output", lines.Text())
	}
	for lines.Scan() {
		t.Errorf("logs --follow printed more: %q", lines.Text())
	}
	if err := f.Wait(); err != nil {
		t.Fatalf("logs --follow of a step that exited 4: %v; want exit 0 (stderr: %s)", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "xmode: step 1 ended: exit 4") {
		t.Errorf("logs --follow does not say how the step ended:\n%s", stderr.String())
	}
}

// kill -9 of a background step's supervisor leaves nothing of the step
// running — the step's cgroup watcher ends it, an escaped grandchild
// included — and the reaper records the step lost; `logs --follow` of it
// ends, saying its xmode is gone.
func TestKilledSupervisorLeavesNothing(t *testing.T) {
	t.Parallel()
	requireHostCgroup(t)
	root, id := newSession(t)
	if out, err := xmode(t, root, "sandbox", "exec", id, "-d", "--name", "escape", "--",
		"sh", "-c", "echo $PPID > sup.pid; "+escapedGrandchild).CombinedOutput(); err != nil {
		t.Fatalf("exec --detach: %v\n%s", err, out)
	}
	wt := filepath.Join(root, "runs", "*", "worktree")
	gc, _ := strconv.Atoi(waitFile(t, filepath.Join(wt, "gc.pid")))
	sup, _ := strconv.Atoi(waitFile(t, filepath.Join(wt, "sup.pid")))
	t.Cleanup(func() { syscall.Kill(gc, syscall.SIGKILL); syscall.Kill(sup, syscall.SIGKILL) })
	if b, _ := os.ReadFile("/proc/" + strconv.Itoa(sup) + "/cmdline"); !bytes.Contains(b, []byte("__supervise\x00"+id)) {
		t.Fatalf("the step's parent (%d) is not its supervisor: %q", sup, b)
	}
	watcherOf(t, stepCgroupOf(t, gc))
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, gc, "the escaped grandchild of a background step whose supervisor was killed")
	follow, _ := xmode(t, root, "sandbox", "logs", id, "escape", "--follow").CombinedOutput()
	if !strings.Contains(string(follow), "step 1's xmode is gone") {
		t.Errorf("logs --follow of a step whose supervisor died:\n%s", follow)
	}
	if out, err := xmode(t, root, "reap").CombinedOutput(); err != nil {
		t.Fatalf("reap: %v\n%s", err, out)
	}
	if show, _ := xmode(t, root, "sandbox", "logs", id).CombinedOutput(); !strings.Contains(string(show), "lost") {
		t.Errorf("the step is not recorded as lost:\n%s", show)
	}
}

// A background step that does not end keeps no expired session alive: the
// reaper tears the session down, which ends the step, where a step in the
// foreground would have held it. Time passes on the test clock, which the
// step's supervisor reads too: its heartbeats stay fresh, so the step ends
// as the teardown ended it (finished, 143), not as one whose xmode is gone.
func TestExpiryEndsBackgroundStep(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	if out, err := xmode(t, root, "sandbox", "exec", id, "-d", "--name", "forever", "--", "sh", "-c", "echo $$ > srv.pid; exec sleep 300").CombinedOutput(); err != nil {
		t.Fatalf("exec --detach: %v\n%s", err, out)
	}
	srv, _ := strconv.Atoi(waitFile(t, filepath.Join(root, "runs", "*", "worktree", "srv.pid")))
	t.Cleanup(func() { syscall.Kill(srv, syscall.SIGKILL) })
	advanceClock(t, root, 3*time.Hour) // past its TTL (2h)
	// The supervisor beats on the moved clock before the reaper looks.
	waitFor(t, "the supervisor's heartbeat on the moved clock", func() bool {
		row := stepRow(t, root, id, 1)
		return row.Heartbeat.After(time.Now().Add(2 * time.Hour))
	})
	out, err := xmode(t, root, "-v", "reap").CombinedOutput()
	if err != nil || !strings.Contains(string(out), id+" destroyed (expired)") {
		t.Fatalf("reap of an expired session with a background step: %v\n%s", err, out)
	}
	waitGone(t, srv, "the background step of an expired session")
	res := readResult(t, root, "0001-forever")
	if res.ExitCode != 143 {
		t.Errorf("the background step's result: %+v; want 143 (TERM)", res)
	}
	if row := stepRow(t, root, id, 1); row.State != "finished" {
		t.Errorf("the background step of an expired session is %s (%s); want finished", row.State, row.LostReason)
	}
}

// stepRow is step seq of session id as root's store records it.
func stepRow(t *testing.T, root, id string, seq int) store.StepRow {
	t.Helper()
	st, err := store.Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	row, err := st.Step(context.Background(), sess.RunID, seq)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// waitFor polls cond until it holds, for 20s at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
