package cmd

import (
	"errors"
	"io"
	"os"
	"os/exec"
)

// paged runs fn with a writer that reaches the user through a pager when
// stdout is a terminal (and --json is off), as git does: $PAGER, else
// less, with LESS=FRX unless LESS is set (quit when the text fits, keep
// colours, leave the screen alone). Otherwise fn writes straight to stdout.
func (a *App) paged(fn func(io.Writer) error) error {
	if a.json || !isTerminal(a.Out) {
		return fn(a.Out)
	}
	pager := a.Env("PAGER")
	if pager == "" {
		pager = "less"
	}
	if pager == "cat" {
		return fn(a.Out)
	}
	c := exec.Command("sh", "-c", pager)
	c.Env = os.Environ()
	if a.Env("LESS") == "" {
		c.Env = append(c.Env, "LESS=FRX")
	}
	if a.Env("LV") == "" {
		c.Env = append(c.Env, "LV=-c")
	}
	c.Stdout, c.Stderr = a.Out, a.Err
	in, err := c.StdinPipe()
	if err != nil {
		return fn(a.Out)
	}
	if err := c.Start(); err != nil {
		return fn(a.Out) // no pager here: print as is
	}
	pw := &pagerWriter{w: in}
	err = fn(pw)
	in.Close()
	c.Wait() //nolint:errcheck // the pager's own status is the user's business
	if pw.closed {
		return nil // the user quit the pager early
	}
	return err
}

type pagerWriter struct {
	w      io.Writer
	closed bool
}

func (p *pagerWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if err != nil && (errors.Is(err, os.ErrClosed) || isEPIPE(err)) {
		p.closed = true
	}
	return n, err
}
