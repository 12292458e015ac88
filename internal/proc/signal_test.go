package proc

import (
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Signal reaches the process a name stands for, and no process whose PID
// the name's start time does not match (a recycled PID).
func TestSignal(t *testing.T) {
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	start, ok := Start(c.Process.Pid)
	if !ok {
		t.Fatal("no start time")
	}
	name := strconv.Itoa(c.Process.Pid) + ":" + start + "@" + namespace()
	n, _ := strconv.Atoi(start)
	if Signal(strconv.Itoa(c.Process.Pid)+":"+strconv.Itoa(n+1)+"@"+namespace(), syscall.SIGTERM) {
		t.Fatal("a name whose start time is another process's was signalled")
	}
	select {
	case <-done:
		t.Fatal("the process ended from a signal meant for another")
	case <-time.After(50 * time.Millisecond):
	}
	if !Signal(name, syscall.SIGTERM) {
		t.Fatal("Signal did not reach the process")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not end")
	}
	if Signal(name, syscall.SIGTERM) || !Gone(name) {
		t.Fatal("a process that ended is still signalled or not gone")
	}
}
