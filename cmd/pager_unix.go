package cmd

import (
	"errors"
	"syscall"
)

func isEPIPE(err error) bool { return errors.Is(err, syscall.EPIPE) }
