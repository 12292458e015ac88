package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	clock := filepath.Join(dir, "clock") // not on the disk that fills
	run := func(env []string, args ...string) (string, int) {
		c := xmode(t, root, args...)
		c.Env = append(c.Env, clockEnv+"="+clock)
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
	// floor is above what the disk has left (a chunk of the store's
	// reserve, which the step's end took)
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
	if err := moveClock(clock, time.Second); err != nil {
		t.Fatal(err)
	}
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

// smallRoot mounts a tmpfs of size as a storage root's filesystem and
// returns the root and a repository beside it.
func smallRoot(t *testing.T, size string) (root, repo string) {
	t.Helper()
	if os.Getuid() != 0 {
		testenv.Skip(t, "mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	repo = filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(mnt, "root"), repo
}

// A full disk twice, and more, is survivable: each fill costs the store
// one chunk of its reserve, not all of it, so every step's status reaches
// its row and its result.json; stop and reap then succeed, freeing the
// worktree before they write; the reserve is whole again as soon as there
// is room (after the teardown, or at the next command after an `rm`); and
// with the reserve spent, a teardown still gets through by freeing the
// worktree first.
func TestFullDiskTwice(t *testing.T) {
	t.Parallel()
	root, repo := smallRoot(t, "24m")
	env := []string{"XMODE_MIN_FREE=1m", "XMODE_EVIDENCE_MAX_BYTES=64k"}
	run := func(args ...string) (string, int) {
		t.Helper()
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
	reserve := filepath.Join(root, "xmode.reserve")
	whole := func(when string) {
		t.Helper()
		if st, err := os.Stat(reserve); err != nil || st.Size() != 8<<20 {
			t.Fatalf("%s: the reserve is not whole: %v %v", when, st, err)
		}
	}
	fill := func(id, name string, code int) {
		t.Helper()
		out, got := run("sandbox", "exec", id, "--name", name, "--", "sh", "-c",
			"dd if=/dev/zero of="+name+" bs=1M count=100 2>/dev/null; echo filled; exit "+strconv.Itoa(code))
		if got != code || !strings.Contains(out, "disk full on") {
			t.Fatalf("%s: exit %d, want the command's %d and what was lost:\n%s", name, got, code, out)
		}
		if r := readResult(t, root, "*-"+name); r.ExitCode != code || !r.EvidenceIncomplete {
			t.Fatalf("%s: result.json %+v, want exit %d and evidence_incomplete", name, r, code)
		}
	}
	steps := func(id string) map[string]string {
		t.Helper()
		out, code := run("sandbox", "show", id, "--json")
		var s struct {
			Status string `json:"status"`
			Steps  []struct {
				Name     string `json:"name"`
				State    string `json:"state"`
				ExitCode *int   `json:"exit_code"`
			} `json:"steps"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
			t.Fatalf("show %s: %d\n%s", id, code, out)
		}
		m := map[string]string{"status": s.Status}
		for _, st := range s.Steps {
			m[st.Name] = st.State
			if st.ExitCode != nil {
				m[st.Name] += " " + strconv.Itoa(*st.ExitCode)
			}
		}
		return m
	}
	worktrees := func() []string {
		m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree"))
		return m
	}

	// Two fills in a row, nothing freed between them: both recorded.
	out, code := run("sandbox", "create", "--repo", repo, "-q")
	if code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	a := strings.TrimSpace(out)
	whole("after create")
	fill(a, "fill1", 7)
	fill(a, "fill2", 8)
	if got := steps(a); got["fill1"] != "finished 7" || got["fill2"] != "finished 8" {
		t.Fatalf("the steps' rows after two fills: %v", got)
	}
	if out, code = run("sandbox", "stop", a); code != 0 {
		t.Fatalf("stop after two fills: exit %d\n%s", code, out)
	}
	whole("right after the stop that freed the disk")
	if got := steps(a); got["status"] != "destroyed" || got["fill1"] != "finished 7" || got["fill2"] != "finished 8" {
		t.Fatalf("after stop: %v", got)
	}
	if wt := worktrees(); len(wt) != 0 {
		t.Fatalf("stop left the worktree: %v", wt)
	}

	// Fill twice again; an `rm` frees the disk, and the next command makes
	// the reserve whole; two more fills; the reaper tears it down.
	if out, code = run("sandbox", "create", "--repo", repo, "-q"); code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	b := strings.TrimSpace(out)
	fill(b, "fill3", 3)
	fill(b, "fill4", 4)
	if out, code = run("sandbox", "exec", b, "--name", "rm", "--", "rm", "fill3", "fill4"); code != 0 {
		t.Fatalf("rm: %d %s", code, out)
	}
	run("sandbox", "list")
	whole("at the first command after the rm")
	fill(b, "fill5", 5)
	fill(b, "fill6", 6)
	if out, code = run("sandbox", "extend", b, "--ttl", "1ms"); code != 0 {
		t.Fatalf("extend: %d %s", code, out)
	}
	// The disk is full: the reaper frees the worktree before it writes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, code = run("reap", "-v")
		if code != 0 || strings.Contains(out, "reclaimed worktree of") || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 || !regexp.MustCompile(`disk full: removed the worktree of run_\w+ \(\d+ MiB\) before recording the end\n(.*\n)*.*destroyed \(expired\)\n(.*\n)*.*reclaimed worktree of`).MatchString(out) {
		t.Fatalf("reap after two fills: exit %d, want the worktree freed before the end is recorded:\n%s", code, out)
	}
	whole("right after the reap that freed the disk")
	got := steps(b)
	for name, want := range map[string]string{"status": "destroyed", "fill3": "finished 3", "fill4": "finished 4", "fill5": "finished 5", "fill6": "finished 6"} {
		if got[name] != want {
			t.Fatalf("after reap: %s is %q, want %q (%v)", name, got[name], want, got)
		}
	}

	// Fill after fill until the reserve is spent (each takes a chunk of its
	// eight): at least four are recorded; the one that finds nothing left
	// loses its result.json, and stop still succeeds.
	if out, code = run("sandbox", "create", "--repo", repo, "-q"); code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	c := strings.TrimSpace(out)
	spent := 0
	for i := 1; i <= 12 && spent == 0; i++ {
		name := "again" + strconv.Itoa(i)
		out, code = run("sandbox", "exec", c, "--name", name, "--", "sh", "-c",
			"dd if=/dev/zero of="+name+" bs=1M count=100 2>/dev/null; exit 9")
		if code != 9 {
			t.Fatalf("%s: exit %d, want 9\n%s", name, code, out)
		}
		if strings.Contains(out, "no result.json") {
			spent = i
		}
	}
	if spent <= 4 {
		t.Fatalf("the reserve was spent at fill %d (0: never), want after more than 4", spent)
	}
	if out, code = run("sandbox", "stop", c); code != 0 {
		t.Fatalf("stop with the reserve spent: exit %d\n%s", code, out)
	}
	whole("after the last stop")
	got = steps(c)
	for i := 1; i < spent; i++ {
		if name := "again" + strconv.Itoa(i); got[name] != "finished 9" {
			t.Fatalf("after stop with the reserve spent: %s is %q (%v)", name, got[name], got)
		}
	}
	if got["status"] != "destroyed" {
		t.Fatalf("after stop with the reserve spent: %v", got)
	}
	if wt := worktrees(); len(wt) != 0 {
		t.Fatalf("stop left the worktree: %v", wt)
	}
}
