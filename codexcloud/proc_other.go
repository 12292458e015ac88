//go:build !linux

package codexcloud

import (
	"os/exec"
	"syscall"
)

// ownGroup runs codex in a process group of its own, killed whole when the
// call is cancelled or times out.
func ownGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
}
