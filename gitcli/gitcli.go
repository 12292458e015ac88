// Package gitcli is xmode's one way of running the git binary, for the
// run clones of package sandbox and the project machines of package
// machines. xmode does not link a Go git implementation: its package init
// alone would cost every xmode command milliseconds of page faults, and the
// local transports need git installed anyway (docs/dependencies.md, "git:
// the git binary").
package gitcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// safety is passed to every git xmode runs: hooks, the fsmonitor and the
// ext:: transport run commands, and a sandboxed step can write a
// repository's .git, so xmode never runs them. The configuration git reads
// is xmode's own besides (see env): no system or global file, so no filter,
// diff or merge driver, textconv, sshCommand or credential helper is
// defined that xmode did not define.
var safety = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.attributesFile=/dev/null",
	"-c", "protocol.ext.allow=never",
}

// relocating variables would point git at another repository than -C's;
// GIT_CONFIG* (GIT_CONFIG_COUNT/KEY/VALUE, GIT_CONFIG_PARAMETERS) would add
// configuration xmode does not own, and are dropped too.
var relocating = map[string]bool{
	"GIT_DIR": true, "GIT_WORK_TREE": true, "GIT_INDEX_FILE": true, "GIT_COMMON_DIR": true,
	"GIT_OBJECT_DIRECTORY": true, "GIT_ALTERNATE_OBJECT_DIRECTORIES": true, "GIT_NAMESPACE": true,
	"GIT_CEILING_DIRECTORIES": true, "GIT_DISCOVERY_ACROSS_FILESYSTEM": true, "GIT_PREFIX": true,
}

// waitDelay bounds how long a cancelled git may take to clean up after
// SIGTERM (and how long its children may hold its pipes) before it is
// killed.
const waitDelay = 10 * time.Second

func env(interactive bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !relocating[k] && !strings.HasPrefix(k, "GIT_CONFIG") {
			env = append(env, kv)
		}
	}
	// Only configuration xmode owns: the repository's own (a checkout xmode
	// made, which no sandbox can write: docs/docker.md) and the -c above.
	env = append(env, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1")
	if !interactive {
		// Nobody can answer a credentials prompt: fail instead of hanging.
		env = append(env, "GIT_TERMINAL_PROMPT=0")
	}
	return env
}

// Error is a git command that failed: its arguments (as given to Run), how
// it ended, and the last lines of its stderr.
type Error struct {
	Args   []string
	Err    error  // usually an *exec.ExitError
	Stderr string // git's last stderr lines, "; "-joined, progress dropped
}

func (e *Error) Error() string {
	why := e.Stderr
	if why == "" {
		why = "(git printed nothing on stderr)"
	}
	return fmt.Sprintf("git %s: %v: %s", strings.Join(e.Args, " "), e.Err, why)
}

func (e *Error) Unwrap() error { return e.Err }

// Run runs the git binary in dir (when not empty) and returns its stdout,
// trimmed. progress, when not nil, also receives git's stderr live (clone
// and fetch progress on a terminal) and lets git prompt for credentials;
// when nil, git must not prompt. Cancelling ctx sends git SIGTERM, so it
// cleans up its lock files and half-made clones or worktrees before it
// exits; Run then returns ctx.Err().
func Run(ctx context.Context, progress io.Writer, dir string, args ...string) (string, error) {
	argv := append([]string(nil), safety...)
	if dir != "" {
		argv = append(argv, "-C", dir)
	}
	return run(ctx, progress, env(progress != nil), nil, nil, append(argv, args...), args)
}

// RunIO is Run without progress, with stdin as git's input (nil: none)
// and its output written, untrimmed, to stdout: for NUL-separated output
// whose first or last path may start or end with a space.
func RunIO(ctx context.Context, dir string, stdin io.Reader, stdout io.Writer, args ...string) error {
	argv := append([]string(nil), safety...)
	if dir != "" {
		argv = append(argv, "-C", dir)
	}
	_, err := run(ctx, nil, env(false), stdin, stdout, append(argv, args...), args)
	return err
}

// run runs git with argv and env; stdin and out (instead of capturing
// stdout) may be nil. args is what an Error reports.
func run(ctx context.Context, progress io.Writer, env []string, stdin io.Reader, out io.Writer, argv, args []string) (string, error) {
	wait, err := start(ctx, progress, env, stdin, out, argv, args)
	if err != nil {
		return "", err
	}
	return wait()
}

// start starts git as run does and returns the function that waits for it.
func start(ctx context.Context, progress io.Writer, env []string, stdin io.Reader, out io.Writer, argv, args []string) (func() (string, error), error) {
	c := exec.CommandContext(ctx, "git", argv...)
	c.Env = env
	c.Stdin = stdin
	var stdout, stderr bytes.Buffer
	c.Stdout = &stdout
	if out != nil {
		c.Stdout = out
	}
	c.Stderr = &stderr
	if progress != nil {
		c.Stderr = io.MultiWriter(&stderr, progress)
	}
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	c.WaitDelay = waitDelay
	dieWithParent(c)
	failed := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			// git did not start (not installed?): say so, not "exit status".
			return fmt.Errorf("run git %s: %w", strings.Join(args, " "), err)
		}
		return &Error{Args: args, Err: err, Stderr: lastLines(stderr.String(), 5)}
	}
	if err := c.Start(); err != nil {
		return nil, failed(err)
	}
	return func() (string, error) {
		if err := c.Wait(); err != nil {
			return "", failed(err)
		}
		return strings.TrimSpace(stdout.String()), nil
	}, nil
}

// lastLines keeps the end of git's stderr for an error message, without
// the progress lines (they end in \r).
func lastLines(s string, n int) string {
	var keep []string
	for _, l := range strings.Split(strings.ReplaceAll(s, "\r", "\n"), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.Contains(l, "% (") {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "; ")
}
