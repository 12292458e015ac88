package local

import (
	"syscall"
	"unsafe"
)

const (
	pPID    = 1         // P_PID
	wNOWAIT = 0x1000000 // WNOWAIT
)

// waitExitNoReap blocks until process pid has exited, leaving it a zombie
// (waitid with WNOWAIT): its status is collected later by exec.Cmd.Wait.
func waitExitNoReap(pid int) error {
	var siginfo [128]byte
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&siginfo[0])), syscall.WEXITED|wNOWAIT, 0, 0)
		switch e {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return e
		}
	}
}

func init() {
	signalNames[syscall.SIGPWR] = "SIGPWR"
}
