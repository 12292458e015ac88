package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/engine"
)

// stepRunning is set while a command runs a step (exec, shell): Ctrl-C is
// then the step's, as on a terminal.
var stepRunning atomic.Bool

// interrupts cancels the returned context when xmode gets SIGINT, SIGTERM
// or SIGHUP, with an engine.Interrupt as the cause: a running step gets
// that signal (so Ctrl-C ends it with 130), and at the second one KILL; any
// other command cleans up and, at the second, exits at once, leaving the
// rest to the reaper. Each time, stderr says what is happening.
func (a *App) interrupts(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 3)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	hurry := make(chan struct{})
	done := make(chan struct{})
	go func() {
		for n := 1; ; n++ {
			var sig syscall.Signal
			select {
			case s := <-ch:
				sig = s.(syscall.Signal)
			case <-done:
				return
			}
			step := stepRunning.Load()
			switch {
			case n == 1:
				cancel(&engine.Interrupt{Signal: sig, Hurry: hurry})
				if step {
					fmt.Fprintf(a.Err, "\nxmode: %s: the step gets %s now and KILL in %s; press Ctrl-C again to kill it now\n", sig, signame(sig), engine.DefaultGrace)
				} else {
					fmt.Fprintf(a.Err, "\nxmode: %s: stopping and cleaning up; press Ctrl-C again to quit at once\n", sig)
				}
			case n == 2 && step:
				close(hurry)
				fmt.Fprintf(a.Err, "xmode: %s again: killing the step now\n", sig)
			default:
				fmt.Fprintf(a.Err, "xmode: %s again: quitting at once; `xmode reap` removes what is left\n", sig)
				os.Exit(128 + int(sig))
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// interrupted reports a command that failed because a signal cancelled it:
// exit 128+N, as a shell reports it, and a message that says so (and what
// the command left, from its traits) instead of "context canceled".
func (a *App) interrupted(ctx context.Context, cmd *cobra.Command, err error) (int, string, bool) {
	if err == nil {
		return 0, "", false
	}
	if ctx.Err() == nil && diedOfSignal(err) {
		// The same Ctrl-C reached a child (git) of the terminal's job too,
		// which may have failed before xmode's own handler ran: wait for it.
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	var in *engine.Interrupt
	if !errors.As(context.Cause(ctx), &in) {
		return 0, "", false
	}
	msg := "interrupted (" + signame(in.Signal) + ")"
	if left := a.traitsOf(cmd).interrupted; left != "" {
		msg += ": " + left
	}
	return 128 + int(in.Signal), msg, true
}

// diedOfSignal reports an error of a child killed by one of the signals
// xmode takes as an interrupt (os/exec says "signal: interrupt").
func diedOfSignal(err error) bool {
	msg := err.Error()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if strings.Contains(msg, "signal: "+sig.String()) {
			return true
		}
	}
	return false
}

func signame(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}
