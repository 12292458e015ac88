package gitcli

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes git get SIGTERM when xmode dies, even by SIGKILL:
// git then removes its own lock files, half-made clone or worktree and
// exits, so it never keeps working on a machine whose lock the kernel has
// released.
func dieWithParent(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
