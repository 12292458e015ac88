package cmd

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"syscall"
)

// exitBrokenPipe is the status of a command whose reader went away before
// it had written everything (`xmode cr show ID | head`): 128+SIGPIPE, what
// git, cat and every program killed by SIGPIPE give, and like them xmode
// says nothing. (xmode handles SIGPIPE so that `sandbox exec` keeps its
// step's evidence; see Main.)
const exitBrokenPipe = 128 + int(syscall.SIGPIPE)

// pipeWriter is a stream whose reader can go away: xmode's stdout and
// stderr, the pager's input. It notes that it did (EPIPE), so that App.Run
// ends the command quietly instead of printing "write /dev/stdout: broken
// pipe", whichever write saw it first and whatever error that became (git
// killed by SIGPIPE under a `sandbox diff`, an io.Copy of a log).
type pipeWriter struct {
	w      io.Writer
	f      *os.File // w, when it is a file: for isTerminal and child processes
	closed atomic.Bool
}

func newPipeWriter(w io.Writer) *pipeWriter {
	p := &pipeWriter{w: w}
	p.f, _ = w.(*os.File)
	return p
}

func (p *pipeWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if err != nil && readerGone(err) {
		p.closed.Store(true)
	}
	return n, err
}

// readerGone reports whether err says that the reader of a pipe went away.
func readerGone(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed)
}

// osFile is the file under w (xmode's own stdout is one behind its
// pipeWriter), for what needs a file: a terminal check, a child process
// that should get the file itself rather than a pipe xmode copies.
func osFile(w io.Writer) (*os.File, bool) {
	switch f := w.(type) {
	case *os.File:
		return f, true
	case *pipeWriter:
		return f.f, f.f != nil
	}
	return nil, false
}

// brokenPipe reports whether stdout or stderr lost its reader, or a
// command's failure (err, when not nil) is that.
func (a *App) brokenPipe(err error) bool {
	if errors.Is(err, syscall.EPIPE) {
		return true
	}
	for _, w := range []io.Writer{a.Out, a.Err} {
		if p, ok := w.(*pipeWriter); ok && p.closed.Load() {
			return true
		}
	}
	return false
}
