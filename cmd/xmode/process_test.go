package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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

// procStat returns pid's command name (as of its last exec) and its
// parent's pid; "" when pid is gone.
func procStat(pid int) (comm string, ppid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 || j < i {
		return "", 0
	}
	f := strings.Fields(string(b[j+1:])) // state, ppid, ...
	if len(f) > 1 {
		ppid, _ = strconv.Atoi(f[1])
	}
	return string(b[i+1 : j]), ppid
}

// foregroundSleep reports whether leader has a child other than bg that
// has exec'd sleep.
func foregroundSleep(leader, bg int) bool {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(leader) + "/task/*/children")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			if n, _ := strconv.Atoi(c); n != bg {
				if comm, _ := procStat(n); comm == "sleep" {
					return true
				}
			}
		}
	}
	return false
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
	// Interrupt only once both sleeps run: bg.pid is written before the
	// shell starts the foreground sleep, and dash loses a SIGINT that comes
	// while it starts a command (its vfork child inherits the handler, which
	// drops the signal, then execs with SIGINT at default while the shell
	// waits for it), as it would lose a terminal's Ctrl-C; and the
	// background sleep ignores SIGINT only once its child has set that up,
	// which its exec ("sleep" in /proc) proves.
	var pidFile string
	var bg int
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree", "bg.pid")); len(m) == 1 {
			b, _ := os.ReadFile(m[0])
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				if comm, leader := procStat(n); comm == "sleep" && foregroundSleep(leader, n) {
					pidFile, bg = m[0], n
					break
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pidFile == "" {
		c.Process.Kill()
		t.Fatal("the step's two sleeps never both ran")
	}
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
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	// xmode's own peak (VmHWM), read while it runs: the wait's rusage
	// would add the largest of its descendants.
	var own atomic.Int64
	watched := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if n, ok := vmHWM(c.Process.Pid); ok && n > own.Load() {
				own.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	err := c.Wait()
	close(stop)
	<-watched
	if err != nil {
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
	maxRSS := own.Load()
	t.Logf("xmode peak RSS %d MB for %d MB of output (with its descendants: %d MB)", maxRSS>>20, size>>20, c.ProcessState.SysUsage().(*syscall.Rusage).Maxrss>>10)
	if maxRSS == 0 {
		t.Fatal("xmode's peak RSS was never read")
	}
	// The race detector's shadow memory inflates RSS; the bound is well
	// below the output size either way.
	if maxRSS > 150<<20 {
		t.Fatalf("peak RSS %d MB: output is being buffered", maxRSS>>20)
	}
}

// vmHWM is pid's peak resident memory so far; false once it is gone (or
// a zombie, whose status has none).
func vmHWM(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10, err == nil
		}
	}
	return 0, false
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
