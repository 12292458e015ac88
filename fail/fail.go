// Package fail carries the kind of an error up to the one place that turns it
// into an exit code (docs/reference.md, "Exit codes"). Packages wrap causes
// with fmt.Errorf as usual; only the outermost classification matters.
package fail

import (
	"errors"
	"fmt"
)

// Kind classifies an error by what the user can do about it.
type Kind int

const (
	// Failed: the operation failed (exit 1).
	Failed Kind = iota
	// Usage: a bad flag or value (exit 2).
	Usage
	// NotFound: no such session, run or project machine (exit 3).
	NotFound
	// Refused: quota, session not open, path outside the storage root (exit 4).
	Refused
	// EngineUnavailable: docker daemon unreachable, image missing (exit 5).
	EngineUnavailable
)

// Error is an error with a Kind.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func newf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Err: fmt.Errorf(format, args...)}
}

// Usagef reports a bad flag or value; the message must name the flag or variable.
func Usagef(format string, args ...any) error { return newf(Usage, format, args...) }

// NotFoundf reports a missing session, run or machine.
func NotFoundf(format string, args ...any) error { return newf(NotFound, format, args...) }

// Refusedf reports an operation xmode will not do.
func Refusedf(format string, args ...any) error { return newf(Refused, format, args...) }

// Enginef reports an unreachable or unusable engine.
func Enginef(format string, args ...any) error { return newf(EngineUnavailable, format, args...) }

// Failedf reports a plain failure (exit 1).
func Failedf(format string, args ...any) error { return newf(Failed, format, args...) }

// As gives err the kind k unless it already carries one.
func As(k Kind, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Kind: k, Err: err}
}

// KindOf returns the kind of err, Failed when it carries none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Failed
}

// ExitCode maps an error to its exit code (docs/reference.md, "Exit codes").
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	switch KindOf(err) {
	case Usage:
		return 2
	case NotFound:
		return 3
	case Refused:
		return 4
	case EngineUnavailable:
		return 5
	default:
		return 1
	}
}
