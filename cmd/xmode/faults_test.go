package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/internal/testenv"
)

// waitFile waits for a file the step writes, and returns its trimmed
// content.
func waitFile(t *testing.T, pattern string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m, _ := filepath.Glob(pattern); len(m) == 1 {
			if b, _ := os.ReadFile(m[0]); len(bytes.TrimSpace(b)) > 0 && bytes.HasSuffix(b, []byte("\n")) {
				return string(bytes.TrimSpace(b))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", pattern)
	return ""
}

func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for i := 0; alive(pid) && i < 500; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("%s (pid %d) is still alive", what, pid)
	}
}

type stepJSON struct {
	ExitCode           int    `json:"exit_code"`
	Truncated          bool   `json:"truncated"`
	EvidenceIncomplete bool   `json:"evidence_incomplete"`
	State              string `json:"state"`
}

func readResult(t *testing.T, root, step string) stepJSON {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "steps", step, "result.json"))
	if len(m) != 1 {
		t.Fatalf("no result.json for step %s", step)
	}
	b, err := os.ReadFile(m[0])
	if err != nil {
		t.Fatal(err)
	}
	var r stepJSON
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("result.json: %v: %s", err, b)
	}
	return r
}

// kill -9 of `sandbox exec` takes the step's leader with it at once
// (Pdeathsig), and `sandbox stop` ends what the leader left behind and
// records the step as lost instead of running for ever. This is the
// process-group path (XMODE_HOST_CGROUP=off, or a machine without
// cgroups); in a cgroup the watcher ends the rest at once
// (TestKilledExecEndsEscapedGrandchild).
func TestKilledExecLeavesNoStepRunning(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	c := xmode(t, root, "sandbox", "exec", id, "--name", "orphaned", "--",
		"sh", "-c", "sleep 1000 & echo $$ $! > pids; wait")
	c.Env = append(c.Env, "XMODE_HOST_CGROUP=off")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(waitFile(t, filepath.Join(root, "runs", "*", "worktree", "pids")))
	leader, _ := strconv.Atoi(pids[0])
	bg, _ := strconv.Atoi(pids[1])
	c.Process.Kill()
	c.Wait()
	waitGone(t, leader, "the step's leader after its xmode was killed")
	if !alive(bg) {
		t.Fatal("the background child died with the leader: this test no longer tests stop")
	}
	out, err := xmode(t, root, "sandbox", "stop", id).CombinedOutput()
	if err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	waitGone(t, bg, "the step's background child after sandbox stop")
	show, err := xmode(t, root, "sandbox", "show", id).CombinedOutput()
	if err != nil {
		t.Fatalf("show: %v\n%s", err, show)
	}
	if strings.Contains(string(show), "running") || !strings.Contains(string(show), "lost") {
		t.Fatalf("the step is not recorded as lost:\n%s", show)
	}
}

// A closed terminal (`| head -1`) costs neither the evidence nor the
// status: xmode is not killed by SIGPIPE, the log is whole, result.json
// holds the command's status.
func TestClosedPipeKeepsEvidenceAndStatus(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	c := xmode(t, root, "sandbox", "exec", id, "--name", "chatty", "--",
		"sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done; exit 3")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout = w
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	buf := make([]byte, 16)
	r.Read(buf)
	r.Close() // what `head -1` does once it has its line
	err = c.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("exit %v, want the command's status 3 (141 is SIGPIPE killing xmode)", err)
	}
	res := readResult(t, root, "0001-chatty")
	if res.ExitCode != 3 {
		t.Fatalf("result.json exit_code %d, want 3", res.ExitCode)
	}
	m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "steps", "0001-chatty", "stdout.log"))
	b, _ := os.ReadFile(m[0])
	if !bytes.HasSuffix(b, []byte("line 19999\n")) {
		t.Fatalf("stdout.log stops early (%d bytes)", len(b))
	}
}

// A reader that never reads costs neither the deadline nor the log.
func TestStalledReaderKeepsTheDeadline(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	// 8 MB: twice what the live queue holds, so the stream must stall;
	// written in milliseconds, well inside the deadline on any machine.
	c := xmode(t, root, "sandbox", "exec", id, "--name", "flood", "--timeout", "8s", "--",
		"sh", "-c", "yes xmode-stalled-reader-test | head -c 8000000; sleep 100")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() // open, never read
	c.Stdout = w
	start := time.Now()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(60 * time.Second):
		c.Process.Kill()
		t.Fatal("exec with --timeout 8s still running after 60s behind a reader that never reads")
	}
	took := time.Since(start)
	ee, ok := werr.(*exec.ExitError)
	if !ok || ee.ExitCode() != 124 {
		t.Fatalf("exit %v, want 124", werr)
	}
	// The deadline fired at 8 s; the stalled stream may add its one wait
	// (2 s) and the end of the step its flush (2 s) — never the 30 s of old.
	if took > 30*time.Second {
		t.Fatalf("took %s", took)
	}
	m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "steps", "0001-flood", "stdout.log"))
	if st, err := os.Stat(m[0]); err != nil || st.Size() != 8000000 {
		t.Fatalf("stdout.log: %v (want all 8000000 bytes while the terminal was stalled)", err)
	}
}

// One sandbox filling the disk does not wedge the root: the step's status
// is its own (evidence marked incomplete), stop and reap succeed and free
// the space, and create refuses below XMODE_MIN_FREE.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		testenv.Skip(t, "mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mnt).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(mnt, "root")
	run := func(env []string, args ...string) (string, int) {
		c := xmode(t, root, args...)
		c.Env = append(c.Env, env...)
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	small := []string{"XMODE_MIN_FREE=1m", "XMODE_EVIDENCE_MAX_BYTES=64k"}
	out, code := run(small, "sandbox", "create", "--repo", repo, "-q")
	if code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	id := strings.TrimSpace(out)
	// 1 MB of output is kept up to the cap, with a marker.
	if out, code = run(small, "sandbox", "exec", id, "--name", "loud", "--json", "--", "head", "-c", "1000000", "/dev/zero"); code != 0 {
		t.Fatalf("loud: %d %s", code, out)
	}
	if r := readResult(t, root, "0001-loud"); !r.Truncated {
		t.Fatalf("a 1 MB log under a 64k cap is not marked truncated: %+v", r)
	}
	// The step fills the filesystem, then prints: its status is its own.
	out, code = run(small, "sandbox", "exec", id, "--name", "fill", "--", "sh", "-c",
		"dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; i=0; while [ $i -lt 3000 ]; do echo after the disk filled $i; i=$((i+1)); done; exit 7")
	if code != 7 {
		t.Fatalf("exec on a full disk: exit %d, want the command's 7\n%s", code, out)
	}
	if !strings.Contains(out, "evidence is incomplete") || !strings.Contains(out, "disk full on") {
		t.Fatalf("exec did not say what evidence was lost:\n%s", out)
	}
	// create refuses below the floor (exit 4), and changes nothing; the
	// floor is above the store's 8 MiB reserve, which the step's end used
	if out, code = run([]string{"XMODE_MIN_FREE=12m"}, "sandbox", "create", "--repo", repo); code != 4 || !strings.Contains(out, "XMODE_MIN_FREE") {
		t.Fatalf("create on a full disk: exit %d, want 4 naming XMODE_MIN_FREE\n%s", code, out)
	}
	if out, code = run(nil, "sandbox", "stop", id); code != 0 {
		t.Fatalf("stop on a full disk: exit %d\n%s", code, out)
	}
	if out, code = run(nil, "sandbox", "show", id, "--json"); code != 0 || !strings.Contains(out, `"status": "destroyed"`) {
		t.Fatalf("show after stop: %d\n%s", code, out)
	}
	if m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree")); len(m) != 0 {
		t.Fatalf("the worktree is still there: %v", m)
	}
	if out, code = run(small, "sandbox", "create", "--repo", repo, "-q"); code != 0 {
		t.Fatalf("create after stop freed the disk: %d %s", code, out)
	}
	// ...and a reap on a full disk succeeds too
	id = strings.TrimSpace(out)
	run(small, "sandbox", "exec", id, "--", "sh", "-c", "dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; true")
	if out, code = run(small, "sandbox", "extend", id, "--ttl", "1ms"); code != 0 {
		t.Fatalf("extend: %d %s", code, out)
	}
	time.Sleep(10 * time.Millisecond)
	if out, code = run(nil, "reap", "--json"); code != 0 || !strings.Contains(out, `"worktrees_reclaimed": 1`) {
		t.Fatalf("reap on a full disk: exit %d\n%s", code, out)
	}
}

// An empty storage root on a read-only filesystem says so.
func TestReadOnlyRoot(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		testenv.Skip(t, "mounting a read-only tmpfs needs root")
	}
	root := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", root).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount a read-only tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", root).Run() })
	out, err := xmode(t, root, "sandbox", "list").CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "storage root "+root+" is read-only") {
		t.Fatalf("list on a read-only root: %v\n%s", err, out)
	}
}
