package codexcloud

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/xmode/xmode/store"
)

// Class says what retrying a failed call can do.
type Class int

const (
	// Transient: the same call may succeed later (the backend was
	// unreachable, the call timed out): retried with backoff.
	Transient Class = iota + 1
	// Permanent: nothing changes until a person acts (codex is not signed
	// in or not installed, its output was not understood).
	Permanent
)

func (c Class) String() string {
	if c == Transient {
		return store.ErrTransient
	}
	return store.ErrPermanent
}

// Error is a failed client call, classified.
type Error struct {
	Class Class
	Op    string // the command, e.g. "codex cloud status task_e_…"
	Msg   string // what went wrong, one line
	Fix   string // what a person should do ("" when retrying is the fix)
	Raw   string // the CLI's output, kept when xmode did not understand it
}

func (e *Error) Error() string {
	s := e.Op + ": " + e.Msg
	if e.Fix != "" {
		s += "; " + e.Fix
	}
	if e.Raw != "" {
		s += "; output: " + fmt.Sprintf("%q", e.Raw)
	}
	return s
}

// ClassOf classifies an error of the client or of a capture: an *Error
// says, a timeout is transient, anything else is permanent.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	return Permanent
}

// Fixes named in errors.
const (
	fixLogin   = "run `codex login` on this host, as the user xmode runs as (then `xmode cloud poll --sweep` resumes parked tasks)"
	fixInstall = "install the Codex CLI (npm install -g @openai/codex) or point XMODE_CODEX_BIN at it"
	fixStatus  = "if the CLI changed, correct CODEX_CLOUD_STATUS_COMMAND (see docs/codex-cloud.md)"
)

// maxRaw bounds the raw output kept in an error (and in last_error).
const maxRaw = 2000

// classify reads a failed call's output (codex 0.171 prints errors on
// stderr, after warnings, and exits 1). unknownFix is what to do about
// output it does not recognise.
func classify(op string, exit int, stdout, stderr []byte, unknownFix string) *Error {
	text := string(stderr) + string(stdout)
	switch {
	case strings.Contains(text, "Not signed in"):
		return &Error{Class: Permanent, Op: op, Msg: "codex is not signed in", Fix: fixLogin}
	case strings.Contains(text, "error sending request for url"):
		return &Error{Class: Transient, Op: op, Msg: "the Codex cloud backend is unreachable: " + errorLine(text)}
	}
	raw := strings.TrimSpace(text)
	if len(raw) > maxRaw {
		raw = raw[:maxRaw] + "…"
	}
	msg := errorLine(text)
	if msg == "" {
		msg = "no output"
	}
	return &Error{Class: Permanent, Op: op, Msg: fmt.Sprintf("unexpected output (exit %d): %s", exit, msg), Fix: unknownFix, Raw: raw}
}

// errorLine is the line of codex's output that says what failed: the first
// "Error: " line, else the first that is no warning.
func errorLine(text string) string {
	lines := textLines([]byte(text))
	for _, l := range lines {
		if strings.HasPrefix(l, "Error: ") {
			return strings.TrimPrefix(l, "Error: ")
		}
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "WARNING:") {
			return l
		}
	}
	return ""
}
