package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
)

// Each mistake gets its exit code, decided in App.Run: usage 2, not found
// 3; and sandbox exec says every failure of its own with 125, flag errors
// before its run function included.
func TestExitCodes(t *testing.T) {
	c := newTestCLI(t)
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"sandbox", "list", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"sandbox", "creat"}, 2, "did you mean create?"},
		{[]string{"sandbox", "show"}, 2, "expected one session, got 0 argument(s)"},
		{[]string{"sandbox", "show", "sbx_zzzzzzzz"}, 3, "no session sbx_zzzzzzzz"},
		{[]string{"sandbox", "show", "run_x"}, 3, "IDs look like sbx_"},
		{[]string{"cr", "review", "cr_x", "--approve", "--reject"}, 2, "exactly one of --approve, --request-changes and --reject"},
		{[]string{"sandbox", "exec"}, 2, "give a session and a command"},
		{[]string{"sandbox", "exec", "sbx_zzzzzzzz"}, 2, "no command: give one after --"},
		{[]string{"sandbox", "exec", "sbx_zzzzzzzz", "--"}, 2, "no command: give one after --"},
		{[]string{"sandbox", "exec", "--timeout", "1s", "sbx_zzzzzzzz"}, 2, "no command"},
		{[]string{"sandbox", "exec", "--bogus", "sbx_zzzzzzzz", "--", "true"}, 125, "unknown flag: --bogus"},
		{[]string{"sandbox", "exec", "sbx_zzzzzzzz", "--", "true"}, 125, "no session sbx_zzzzzzzz"},
		{[]string{"sandbox", "exec", "sbx_zzzzzzzz", "x", "--", "true"}, 125, `unexpected "x" before --`},
		// shell is a step command, but not docker's: its own failures keep their kinds.
		{[]string{"sandbox", "shell", "sbx_zzzzzzzz"}, 2, "needs a terminal"},
	} {
		c.fails(tc.code, tc.says, tc.args...)
		if c.stdout.Len() != 0 {
			t.Errorf("xmode %s printed on stdout without --json: %q", strings.Join(tc.args, " "), c.stdout.String())
		}
	}
}

// An unknown long flag comes with the flags it may have meant, by prefix
// or by two edits at most, inherited flags included; one too far from any
// gets none.
func TestFlagSuggestions(t *testing.T) {
	c := newTestCLI(t)
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"sandbox", "create", "--reop", "x"}, 2, "xmode: unknown flag: --reop: did you mean --repo? (see --help)\n"},
		{[]string{"sandbox", "list", "--jsno"}, 2, "unknown flag: --jsno: did you mean --json? (see --help)\n"},
		{[]string{"cr", "review", "cr_x", "--aprove"}, 2, "unknown flag: --aprove: did you mean --approve? (see --help)\n"},
		{[]string{"sandbox", "create", "--re"}, 2, "unknown flag: --re: did you mean --ref or --refresh or --repo? (see --help)\n"},
		{[]string{"sandbox", "exec", "--tiemout", "1s", "sbx_zzzzzzzz", "--", "true"}, 125, "unknown flag: --tiemout: did you mean --timeout? (see --help)\n"},
		{[]string{"sandbox", "list", "--bogus"}, 2, "xmode: unknown flag: --bogus (see --help)\n"},
		{[]string{"sandbox", "list", "-Z"}, 2, "xmode: unknown shorthand flag: 'Z' in -Z (see --help)\n"},
	} {
		c.fails(tc.code, tc.says, tc.args...)
	}
}

// Under --json a failure is also one object on stdout, with the exit code
// and the kind of the error: sandbox exec's 125 keeps the kind it
// replaces; a flag error found before --json was parsed is JSON too.
func TestJSONErrors(t *testing.T) {
	c := newTestCLI(t)
	for _, tc := range []struct {
		args []string
		code int
		kind string
	}{
		{[]string{"sandbox", "exec", "sbx_zzzzzzzz", "--json", "--", "true"}, 125, "not_found"},
		{[]string{"sandbox", "show", "sbx_zzzzzzzz", "--json"}, 3, "not_found"},
		{[]string{"sandbox", "list", "--bogus", "--json"}, 2, "usage"},
		{[]string{"sandbox", "extend", "sbx_zzzzzzzz", "--json"}, 2, "usage"},
	} {
		if got := c.run(tc.args...); got != tc.code {
			t.Fatalf("xmode %s: exit %d, want %d: %s", strings.Join(tc.args, " "), got, tc.code, c.stderr.String())
		}
		code, kind, msg := c.jsonError()
		if code != tc.code || kind != tc.kind || msg == "" || !strings.Contains(c.stderr.String(), msg) {
			t.Errorf("xmode %s: JSON error {%d %s %q}, want {%d %s} and the message of stderr (%q)",
				strings.Join(tc.args, " "), code, kind, msg, tc.code, tc.kind, c.stderr.String())
		}
	}
}

// exitCode is the one mapping: a status the command decided passes
// through (silently, or said, with statusError), an unclassified error is
// usage before a command ran and a failure after, and an interrupt is
// 128+N with what the command left.
func TestExitCodeMapping(t *testing.T) {
	a := &App{Out: &strings.Builder{}, Err: &strings.Builder{}, Env: func(string) string { return "" }}
	root := a.newRoot(nil)
	find := func(path ...string) *cobra.Command {
		c, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()

	if code, report := a.exitCode(ctx, nil, fmt.Errorf("pass: %w", exitStatus(7))); code != 7 || report != nil {
		t.Errorf("exitStatus(7): %d, %v; want 7 and nothing said", code, report)
	}
	refused := fail.Refusedf("the loop failed")
	if code, report := a.exitCode(ctx, find("run"), &statusError{err: refused, code: 9}); code != 9 || report != refused {
		t.Errorf("statusError{9}: %d, %v; want 9 and its error said", code, report)
	}
	if code, _ := a.exitCode(ctx, nil, errors.New("cobra: bad")); code != 2 {
		t.Errorf("an unclassified error before any command ran: %d, want 2", code)
	}
	a.started = true
	if code, _ := a.exitCode(ctx, find("sandbox", "list"), errors.New("disk full")); code != 1 {
		t.Errorf("an unclassified error of a running command: %d, want 1", code)
	}
	if code, _ := a.exitCode(ctx, find("sandbox", "exec"), fail.Refusedf("not open")); code != 125 {
		t.Errorf("sandbox exec refused: %d, want 125", code)
	}
	if code, _ := a.exitCode(ctx, find("sandbox", "shell"), fail.Refusedf("not open")); code != 4 {
		t.Errorf("sandbox shell refused: %d, want 4", code)
	}

	ictx, cancel := context.WithCancelCause(ctx)
	cancel(&engine.Interrupt{Signal: syscall.SIGINT})
	code, report := a.exitCode(ictx, find("sandbox", "create"), context.Canceled)
	if code != 130 || report == nil || !strings.HasPrefix(report.Error(), "interrupted (SIGINT): the sandbox was not created") {
		t.Errorf("create interrupted: %d, %v; want 130 and what it left", code, report)
	}
	code, report = a.exitCode(ictx, find("sandbox", "list"), context.Canceled)
	if code != 130 || report == nil || report.Error() != "interrupted (SIGINT)" {
		t.Errorf("list interrupted: %d, %v; want 130, interrupted (SIGINT)", code, report)
	}
}

// A reader that went away ends a command with 141, silently; a step
// command keeps its step's status.
func TestClosedPipe(t *testing.T) {
	c := newTestCLI(t)
	id := c.session()
	closed := func() *pipeWriter {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		t.Cleanup(func() { w.Close() })
		return newPipeWriter(w)
	}
	run := func(args ...string) int {
		a := c.app()
		a.Out = closed()
		return a.Run(context.Background(), args)
	}
	if code := run("sandbox", "list"); code != exitBrokenPipe || c.stderr.Len() != 0 {
		t.Errorf("sandbox list into a closed pipe: exit %d, stderr %q; want 141 and nothing said", code, c.stderr.String())
	}
	if code := run("sandbox", "exec", id, "--", "echo", "hello"); code != 0 {
		t.Errorf("sandbox exec into a closed pipe: exit %d (stderr %q); want the step's 0", code, c.stderr.String())
	}
	if code := run("sandbox", "exec", id, "--", "sh", "-c", "echo hello; exit 3"); code != 3 {
		t.Errorf("sandbox exec into a closed pipe: exit %d (stderr %q); want the step's 3", code, c.stderr.String())
	}
}

// A step's status is xmode's, and xmode says nothing about it.
func TestStepStatusPassesThrough(t *testing.T) {
	c := newTestCLI(t)
	id := c.session()
	if code := c.run("sandbox", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 7"); code != 7 {
		t.Fatalf("exit %d, want the step's 7: %s", code, c.stderr.String())
	}
	if c.stdout.String() != "out\n" || c.stderr.String() != "err\n" {
		t.Errorf("stdout %q, stderr %q: want the step's own output and nothing of xmode's", c.stdout.String(), c.stderr.String())
	}
}
