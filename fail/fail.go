// Package fail carries the kind of an error, and the input it blames, up to
// the front end that shows it: the CLI turns the kind into an exit code
// (docs/reference.md, "Exit codes"), MCP into a tool error, the UI into an
// HTTP status. Packages wrap causes with fmt.Errorf as usual; only the
// outermost kind matters.
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

// kinds is the one table of what each kind means to each front end. The
// HTTP statuses are net/http's constants, written as numbers: every
// command links this package, and net/http costs start-up.
var kinds = [...]struct {
	name string // in --json errors and docs/reference.md, "Error kind"
	exit int    // the CLI's exit code
	http int    // the UI's status
	tool string // how an MCP tool error starts, so the model knows what to change
	fix  string // what an MCP tool error ends with
}{
	Failed:            {"failed", 1, 500, "failed: ", ""},
	Usage:             {"usage", 2, 400, "invalid input: ", ""},
	NotFound:          {"not_found", 3, 404, "not found: ", ""},
	Refused:           {"refused", 4, 409, "refused: ", ""},
	EngineUnavailable: {"engine", 5, 503, "the sandbox engine is unavailable: ", " — tell the user; `xmode doctor` checks the engine"},
}

// Kinds lists every kind.
func Kinds() []Kind {
	ks := make([]Kind, len(kinds))
	for i := range kinds {
		ks[i] = Kind(i)
	}
	return ks
}

// known is k, or Failed for a number that is no kind.
func (k Kind) known() Kind {
	if k < 0 || int(k) >= len(kinds) {
		return Failed
	}
	return k
}

// Name is k's name in --json errors: usage, not_found, refused, engine, failed.
func (k Kind) Name() string { return kinds[k.known()].name }

// ExitCode is the CLI's exit code for k.
func (k Kind) ExitCode() int { return kinds[k.known()].exit }

// HTTPStatus is the UI's status for k.
func (k Kind) HTTPStatus() int { return kinds[k.known()].http }

// ToolMessage is msg as an MCP tool error of kind k says it.
func (k Kind) ToolMessage(msg string) string {
	t := kinds[k.known()]
	return t.tool + msg + t.fix
}

// Error is an error with a Kind. Made by Usagef and its siblings, it also
// knows which inputs its message names (see Input).
type Error struct {
	Kind Kind
	Err  error

	// format and args made Err; kept to cut its message at the inputs.
	format string
	args   []any
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func newf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Err: fmt.Errorf(format, args...), format: format, args: args}
}

// Usagef reports a bad flag or value; the message must name the input
// (an Input argument) or the variable.
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
		return e.Kind.known()
	}
	return Failed
}

// OwnExitCode reports whether code is one of the codes xmode gives its own
// failures, 2 to 5 (a kind's other than Failed's): a command that exits
// with a step's status says 1 instead, so that a failing check never
// reads as a usage error of xmode's (docs/reference.md, "Commands that run
// steps").
func OwnExitCode(code int) bool {
	for _, k := range Kinds() {
		if k != Failed && k.ExitCode() == code {
			return true
		}
	}
	return false
}

// ExitCode maps an error to its exit code (docs/reference.md, "Exit codes").
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	return KindOf(err).ExitCode()
}
