package proc

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Alive and Gone are each sure only of what they can see: this process
// is alive, an ended one (or a recycled pid) gone, and a name from another
// PID namespace or without a start time neither.
func TestAliveGone(t *testing.T) {
	self := Self()
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	start, ok := Start(pid)
	_ = c.Process.Kill()
	_ = c.Wait()
	if !ok {
		t.Fatalf("no start time for the running child %d", pid)
	}
	_, ns, _ := strings.Cut(self, "@")
	ended := strconv.Itoa(pid) + ":" + start + "@" + ns
	selfPid, rest, _ := strings.Cut(self, ":")
	recycled := selfPid + ":1" + rest // this pid, another start time
	foreign := strings.Split(self, "@")[0] + "@0"
	noStart := selfPid + ":@" + ns
	for _, c := range []struct {
		name        string
		alive, gone bool
	}{
		{self, true, false},
		{ended, false, true},
		{recycled, false, true},
		{foreign, false, false},
		{noStart, false, false},
		{"garbage", false, true},
	} {
		if got := Alive(c.name); got != c.alive {
			t.Errorf("Alive(%q) = %v, want %v", c.name, got, c.alive)
		}
		if got := Gone(c.name); got != c.gone {
			t.Errorf("Gone(%q) = %v, want %v", c.name, got, c.gone)
		}
	}
}
