//go:build !linux

package gitcli

import "os/exec"

func dieWithParent(*exec.Cmd) {}
