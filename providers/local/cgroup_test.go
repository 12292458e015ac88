package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/engine/enginetest"
	"github.com/xmode/xmode/internal/testenv"
)

// requireCgroup skips a test (fails it in CI) where this machine gives host
// steps no cgroup.
func requireCgroup(t *testing.T) {
	t.Helper()
	if c := New().Containment(); c.Method != MethodCgroup {
		testenv.Skip(t, "host steps get no cgroup here: %s", c.Detail)
	}
}

// fallback is a provider on the process-group path (XMODE_HOST_CGROUP=off).
func fallback() *Provider {
	p := New()
	p.noCgroup = true
	return p
}

// The fallback path passes the conformance suite too.
func TestConformanceProcessGroup(t *testing.T) {
	enginetest.Run(t, enginetest.Harness{Spec: func(t *testing.T) (engine.Provider, engine.Spec) {
		return fallback(), newSpec(t)
	}})
}

// running reports whether pid runs (a zombie is gone).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	return !strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z")
}

// gone waits (a bounded poll) for pid to end.
func gone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for running(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// escapeStep is a step whose grandchild leaves its session and process
// group, closes the step's files, clears its environment (no tag) and
// sleeps; the step ends once the grandchild has written its pid.
func escapeStep(pidfile string) []string {
	return []string{"sh", "-c", `setsid sh -c 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; exec env -i sleep 300' "$0" </dev/null >/dev/null 2>&1 &
while [ ! -s "$0" ]; do sleep 0.01; done`, pidfile}
}

func readPid(t *testing.T, pidfile string) int {
	t.Helper()
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatalf("the step's grandchild never wrote its pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file: %q", b)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// In a cgroup, a grandchild that escaped everything else ends with its
// step, and the step's cgroup goes.
func TestEscapedGrandchildEndsWithStep(t *testing.T) {
	requireCgroup(t)
	p, sb := newSandbox(t)
	pidfile := filepath.Join(t.TempDir(), "gc.pid")
	st, err := p.Exec(context.Background(), sb, engine.ExecRequest{Argv: escapeStep(pidfile), Tag: "0123456789abcdef"})
	if err != nil || st != (engine.Status{}) {
		t.Fatalf("status %+v err %v", st, err)
	}
	gc := readPid(t, pidfile)
	if running(gc) {
		t.Errorf("the step's grandchild %d outlived its step", gc)
	}
	if dir := findCgroup(p.(*Provider).cgMount, "", cgroupName("0123456789abcdef")); dir != "" {
		t.Errorf("the step's cgroup %s is left", dir)
	}
}

// On the fallback path the escaped grandchild outlives the step (that is
// the path's limit, which doctor names), and KillStep ends it by its tag.
func TestFallbackEndsEscapeeByTag(t *testing.T) {
	_, sb := newSandbox(t)
	p := fallback()
	pidfile := filepath.Join(t.TempDir(), "gc.pid")
	argv := []string{"sh", "-c", `setsid sh -c 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; exec sleep 300' "$0" </dev/null >/dev/null 2>&1 &
while [ ! -s "$0" ]; do sleep 0.01; done`, pidfile}
	if st, err := p.Exec(context.Background(), sb, engine.ExecRequest{Argv: argv, Tag: "fallbacktag1"}); err != nil || st != (engine.Status{}) {
		t.Fatalf("status %+v err %v", st, err)
	}
	gc := readPid(t, pidfile)
	if !running(gc) {
		t.Fatal("the escapee ended with its step on the process-group path: this test no longer tests the fallback")
	}
	if c := p.Containment(); c.Method != MethodProcessGroup || !c.Weak {
		t.Errorf("containment %+v, want the process-group method, weak", c)
	}
	if err := p.KillStep(context.Background(), sb, "fallbacktag1"); err != nil {
		t.Fatal(err)
	}
	if !gone(gc, 5*time.Second) {
		t.Errorf("KillStep left the escapee %d", gc)
	}
}

// KillStep from another xmode ends a running step through its cgroup,
// including a process with no tag.
func TestKillStepEndsCgroup(t *testing.T) {
	requireCgroup(t)
	p, sb := newSandbox(t)
	pidfile := filepath.Join(t.TempDir(), "gc.pid")
	argv := escapeStep(pidfile)
	argv[2] += "; sleep 300"
	done := make(chan engine.Status, 1)
	go func() {
		st, _ := p.Exec(context.Background(), sb, engine.ExecRequest{Argv: argv, Tag: "killsteptag0001"})
		done <- st
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, _ := os.ReadFile(pidfile); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the step never started its grandchild")
		}
		time.Sleep(10 * time.Millisecond)
	}
	gc := readPid(t, pidfile)
	if err := New().KillStep(context.Background(), sb, "killsteptag0001"); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-done:
		if st.ExitCode == 0 {
			t.Errorf("the killed step: %+v", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the step still runs after KillStep")
	}
	if !gone(gc, 5*time.Second) {
		t.Errorf("KillStep left the untagged grandchild %d", gc)
	}
}

func TestContainmentReportsCgroup(t *testing.T) {
	requireCgroup(t)
	c := New().Containment()
	if c.Weak || !strings.Contains(c.Detail, "cgroup") {
		t.Errorf("containment %+v", c)
	}
}

// At the timeout, TERM reaches every process of the step's cgroup, one that
// left the step's session and process group included, and it gets the
// grace period to act on it before the KILL.
func TestTimeoutTermsWholeCgroup(t *testing.T) {
	requireCgroup(t)
	_, sb := newSandbox(t)
	dir := t.TempDir()
	ready, termed := filepath.Join(dir, "ready"), filepath.Join(dir, "termed")
	// The escapee traps TERM (and writes termed) while it waits; the
	// leader waits for it to be ready, then sleeps into the timeout.
	argv := []string{"sh", "-c", `setsid sh -c 'trap "echo term > \"$1\"; exit 0" TERM; : > "$0"; sleep 300 & wait' "$0" "$1" </dev/null >/dev/null 2>&1 &
while [ ! -e "$0" ]; do sleep 0.01; done
sleep 300`, ready, termed}
	st, _, _ := runStep(t, context.Background(), sb, engine.ExecRequest{
		Argv: argv, Tag: "timeoutcgroup01", Timeout: time.Second, Grace: 5 * time.Second,
	})
	if !st.TimedOut {
		t.Fatalf("status %+v, want timed out", st)
	}
	b, err := os.ReadFile(termed)
	if err != nil || strings.TrimSpace(string(b)) != "term" {
		t.Errorf("the process that left the step's group got no TERM at the timeout (termed: %q, %v)", b, err)
	}
}

// A process that ignores the TERM is KILLed after the grace period: the
// step does not wait for it for ever.
func TestTimeoutKillsCgroupAfterGrace(t *testing.T) {
	requireCgroup(t)
	_, sb := newSandbox(t)
	pidfile := filepath.Join(t.TempDir(), "gc.pid")
	argv := []string{"sh", "-c", `setsid sh -c 'trap "" TERM; echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; while :; do sleep 0.05; done' "$0" </dev/null >/dev/null 2>&1 &
while [ ! -s "$0" ]; do sleep 0.01; done
sleep 300`, pidfile}
	start := time.Now()
	st, _, _ := runStep(t, context.Background(), sb, engine.ExecRequest{
		Argv: argv, Tag: "timeoutcgroup02", Timeout: 200 * time.Millisecond, Grace: 300 * time.Millisecond,
	})
	if !st.TimedOut {
		t.Fatalf("status %+v, want timed out", st)
	}
	gc := readPid(t, pidfile)
	if !gone(gc, 5*time.Second) {
		t.Errorf("the process that ignored TERM (%d) outlived its step", gc)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the step took %v to end; its grace was 300ms", d)
	}
}
