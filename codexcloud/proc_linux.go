package codexcloud

import (
	"os/exec"
	"syscall"
)

// ownGroup runs codex in a process group of its own, killed whole when the
// call is cancelled or times out, and killed too when xmode dies (kill -9
// included), so no codex outlives the poll that started it.
func ownGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
}
