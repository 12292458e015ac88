package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// xmode starts this test binary as a real xmode process.
func xmode(t *testing.T, root string, args ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(os.Args[0], args...)
	c.Env = append(os.Environ(), "XMODE_TEST_AS_MAIN=1", "XMODE_STORAGE_ROOT="+root, "NO_COLOR=1", "GORACE=atexit_sleep_ms=0",
		clockEnv+"="+root+".clock")
	return c
}

// advanceClock moves the clock of the xmode processes on root ahead by d
// (as if that much time had passed), for TTLs without sleeping.
func advanceClock(t *testing.T, root string, d time.Duration) {
	t.Helper()
	if err := moveClock(root+".clock", d); err != nil {
		t.Fatal(err)
	}
}

func newSession(t *testing.T) (root, id string) {
	t.Helper()
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(dir, "root")
	out, err := xmode(t, root, "sandbox", "create", "--repo", repo, "-q").Output()
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return root, strings.TrimSpace(string(out))
}

// alive reports whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	return !strings.Contains(string(b), "State:\tZ")
}

// Ctrl-C on `sandbox exec` ends the step's whole process group, background
// children included (SIGINT, as a terminal sends it: exit 130), and the
// step is still recorded.
func TestExecInterruptKillsProcessGroup(t *testing.T) {
	root, id := newSession(t)
	c := xmode(t, root, "sandbox", "exec", id, "--name", "sleepy", "--",
		"sh", "-c", "sleep 300 & echo $! > bg.pid; sleep 300")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pidFile := ""
	deadline := time.Now().Add(10 * time.Second)
	for pidFile == "" && time.Now().Before(deadline) {
		m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree", "bg.pid"))
		if len(m) == 1 {
			if b, _ := os.ReadFile(m[0]); len(bytes.TrimSpace(b)) > 0 {
				pidFile = m[0]
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pidFile == "" {
		c.Process.Kill()
		t.Fatal("the step never started")
	}
	b, _ := os.ReadFile(pidFile)
	bg, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !alive(bg) {
		t.Fatalf("background child %d not running before the interrupt", bg)
	}
	start := time.Now()
	c.Process.Signal(syscall.SIGINT)
	err := c.Wait()
	if time.Since(start) > 8*time.Second {
		t.Fatalf("exec took %s to end after Ctrl-C", time.Since(start))
	}
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 128+int(syscall.SIGINT) {
		t.Fatalf("exit: %v (want 130: Ctrl-C reaches the step as SIGINT, as from a terminal); stderr: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "the step gets SIGINT now") {
		t.Fatalf("stderr does not say what Ctrl-C does: %s", stderr.String())
	}
	for i := 0; alive(bg) && i < 100; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(bg) {
		syscall.Kill(bg, syscall.SIGKILL)
		t.Fatalf("background child %d survived Ctrl-C", bg)
	}
	res, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(pidFile)), "steps", "0001-sleepy", "result.json"))
	if err != nil || !bytes.Contains(res, []byte(`"exit_code": 130`)) {
		t.Fatalf("step not recorded: %v %s", err, res)
	}
}

// Hundreds of MB of output stream through xmode with bounded memory, to
// the terminal whole and into the log up to XMODE_EVIDENCE_MAX_BYTES.
func TestExecLargeOutputBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 300 MB")
	}
	root, id := newSession(t)
	const size, logCap = 300 << 20, 100 << 20
	c := xmode(t, root, "sandbox", "exec", id, "--name", "big", "--", "head", "-c", strconv.Itoa(size), "/dev/zero")
	c.Env = append(c.Env, "XMODE_EVIDENCE_MAX_BYTES=100m")
	counter := &countWriter{}
	c.Stdout = counter
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if counter.n != size {
		t.Fatalf("streamed %d bytes, want %d", counter.n, size)
	}
	logs, _ := filepath.Glob(filepath.Join(root, "runs", "*", "steps", "0001-big", "stdout.log"))
	if len(logs) != 1 {
		t.Fatal("no stdout.log")
	}
	b, err := os.ReadFile(logs[0])
	if err != nil || len(b) < logCap || !bytes.Equal(b[:logCap], make([]byte, logCap)) ||
		!strings.HasPrefix(string(b[logCap:]), "\n[xmode: stdout truncated after 104857600 bytes (XMODE_EVIDENCE_MAX_BYTES)") {
		t.Fatalf("stdout.log: %v, %d bytes, want the first 100 MiB and the marker", err, len(b))
	}
	if res := readResult(t, root, "0001-big"); !res.Truncated {
		t.Fatalf("result.json does not say truncated: %+v", res)
	}
	maxRSS := c.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024
	t.Logf("xmode peak RSS %d MB for %d MB of output", maxRSS>>20, size>>20)
	// The race detector's shadow memory inflates RSS; the bound is well
	// below the output size either way.
	if maxRSS > 150<<20 {
		t.Fatalf("peak RSS %d MB: output is being buffered", maxRSS>>20)
	}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
