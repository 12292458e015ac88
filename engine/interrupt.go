package engine

import (
	"context"
	"errors"
	"syscall"
)

// Interrupt is the cause (context.Cause) of a step's context cancelled by a
// signal to xmode, Ctrl-C above all: the step's processes get that signal
// first instead of TERM, as they would from a terminal (so a step that dies
// of it exits 130, not 143), and once Hurry is closed (a second Ctrl-C) the
// grace period before KILL is cut short.
type Interrupt struct {
	Signal syscall.Signal
	Hurry  <-chan struct{}
}

func (i *Interrupt) Error() string { return "interrupted by " + i.Signal.String() }

// StopSignal is how a step whose ctx is done is ended: the interrupting
// signal and its hurry channel, or TERM and a channel that never closes.
func StopSignal(ctx context.Context) (syscall.Signal, <-chan struct{}) {
	var in *Interrupt
	if errors.As(context.Cause(ctx), &in) && in.Signal != 0 {
		return in.Signal, in.Hurry
	}
	return syscall.SIGTERM, nil
}
