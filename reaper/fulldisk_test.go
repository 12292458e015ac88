package reaper_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// A step whose xmode lives is not reaped because its heartbeat is stale:
// on a full disk the heartbeat's write fails while the step runs on. The
// reaper asks whether the step's owner process lives (it does: this test
// process runs the step) and leaves the step, and its expired session,
// alone; the step runs to its end and records it.
func TestFullDiskStaleHeartbeatLiveOwnerKeepsStep(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.Skip(t, "mounting a small tmpfs needs root")
	}
	mnt := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mnt).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	old := sandbox.HeartbeatInterval
	sandbox.HeartbeatInterval = 20 * time.Millisecond
	t.Cleanup(func() { sandbox.HeartbeatInterval = old })

	e := newEnv(t, map[string]string{"XMODE_STORAGE_ROOT": filepath.Join(mnt, "root"), "XMODE_MIN_FREE": "1m"})
	s := e.create("")
	gate := filepath.Join(e.worktree(s), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(gate, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	filled := filepath.Join(e.worktree(s), "filled")
	done := make(chan error, 1)
	go func() {
		// The step fills the disk, then waits for the gate.
		res, err := e.svc.Exec(context.Background(), s, sandbox.ExecOptions{Name: "fill", Argv: []string{"sh", "-c",
			"dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; : > filled; read x < gate; rm big"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		done <- err
	}()
	waitFor(t, func() bool { _, err := os.Stat(filled); return err == nil })
	// Its heartbeats now fail (or, where the WAL still has room, land):
	// either way the reaper's clock is past the stale mark.
	time.Sleep(5 * sandbox.HeartbeatInterval)
	e.expire(s.ID)
	r := e.reaper()
	r.Now = func() time.Time { return time.Now().Add(reaper.DefaultStaleAfter + time.Minute) }
	for i := range 3 {
		sum := e.pass(r, false)
		if sum.StepsLost != 0 || sum.Destroyed != 0 {
			t.Fatalf("pass %d on a full disk reaped a step whose xmode lives: %+v\n%s", i, sum, e.log)
		}
	}
	if got := e.get(s.ID); got.Status != store.StatusOpen {
		t.Fatalf("the session under a live step is %s", got.Status)
	}
	f, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the step did not run to its end: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the step never ended")
	}
	steps, _ := e.st.Steps(context.Background(), s.RunID)
	if len(steps) != 1 || steps[0].State != "finished" || steps[0].ExitCode == nil || *steps[0].ExitCode != 0 {
		t.Fatalf("the step's row: %+v", steps)
	}
	// The step over, the expired session goes (and frees the disk).
	want(t, e.pass(r, false), reaper.Summary{Expired: 1, Destroyed: 1, WorktreesReclaimed: 1})
}
