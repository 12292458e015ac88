package cmd

import (
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
	// The pager writes to the terminal itself, not through a pipe of ours.
	c.Stdout, c.Stderr = a.Out, a.Err
	if f, ok := osFile(a.Out); ok {
		c.Stdout = f
	}
	if f, ok := osFile(a.Err); ok {
		c.Stderr = f
	}
	in, err := c.StdinPipe()
	if err != nil {
		return fn(a.Out)
	}
	if err := c.Start(); err != nil {
		return fn(a.Out) // no pager here: print as is
	}
	pw := newPipeWriter(in)
	err = fn(pw)
	in.Close()
	c.Wait() //nolint:errcheck // the pager's own status is the user's business
	if pw.closed.Load() {
		return nil // the user quit the pager early
	}
	return err
}
