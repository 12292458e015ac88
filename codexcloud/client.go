// Package codexcloud is the Codex cloud loop (docs/codex-cloud.md; the
// design's CodexCloud::Client and CodexCloud::Poller, docs/design.md): a
// cloud_subscription session's work is submitted to the Codex cloud as a task,
// and a poller follows the task, streams its transcript into the session's
// thread and, once it ends, marks the session ready (the task's diff captured
// for review) or failed.
//
// The Client is a thin wrapper over the codex binary; the Poller depends on
// its Result contract only, so a deploy host corrects how the status is asked
// (CODEX_CLOUD_STATUS_COMMAND) without a new xmode.
package codexcloud

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/xmode/xmode/config"
)

// Client talks to the Codex cloud. Every call runs under the context and the
// client's timeout, and fails with an *Error that says whether retrying can
// help.
type Client interface {
	// Submit creates a task and returns its ID and URL.
	Submit(ctx context.Context, r SubmitRequest) (taskID, url string, err error)
	// Status reports a task: its state, title, summary and transcript.
	Status(ctx context.Context, taskID string) (Result, error)
	// Diff returns a finished task's unified diff (empty: no changes).
	Diff(ctx context.Context, taskID string) ([]byte, error)
}

// SubmitRequest is one `codex cloud exec`.
type SubmitRequest struct {
	Env      string // the Codex cloud environment ID
	Branch   string // the branch the cloud checks out
	Attempts int    // best-of-N, 1-4
	Prompt   string
}

// DefaultTimeout bounds every codex call.
const DefaultTimeout = 2 * time.Minute

// Output limits: a status is small; a diff is bounded like a change request.
const (
	maxStatusBytes = 16 << 20
	maxDiffBytes   = 100 << 20
	maxStderrBytes = 64 << 10
)

// CLI is the Client over the codex binary (codex 0.171's `cloud exec`,
// `cloud diff`, and the status command of CODEX_CLOUD_STATUS_COMMAND).
type CLI struct {
	Bin           string        // XMODE_CODEX_BIN
	StatusCommand string        // CODEX_CLOUD_STATUS_COMMAND, with {task_id}
	Timeout       time.Duration // per call; DefaultTimeout when zero
	Env           []string      // the calls' environment; nil: xmode's
}

// NewCLI is the client the configuration describes.
func NewCLI(cfg *config.Config) *CLI {
	return &CLI{Bin: cfg.CodexBin, StatusCommand: cfg.CloudStatusCommand}
}

// StatusArgv expands the status command for a task: the template split on
// white space (no shell, no quoting), {task_id} replaced in each word, and a
// first word "codex" meaning XMODE_CODEX_BIN.
func (c *CLI) StatusArgv(taskID string) ([]string, error) {
	if !ValidTaskID(taskID) {
		return nil, fmt.Errorf("%q is not a Codex cloud task ID", taskID)
	}
	words := strings.Fields(c.StatusCommand)
	if len(words) == 0 || !strings.Contains(c.StatusCommand, "{task_id}") {
		return nil, fmt.Errorf("CODEX_CLOUD_STATUS_COMMAND %q must name the task with {task_id}", c.StatusCommand)
	}
	for i, w := range words {
		words[i] = strings.ReplaceAll(w, "{task_id}", taskID)
	}
	if words[0] == "codex" {
		words[0] = c.bin()
	}
	return words, nil
}

func (c *CLI) bin() string {
	if c.Bin == "" {
		return "codex"
	}
	return c.Bin
}

// Submit runs `codex cloud exec --env ENV --attempts N --branch B -` with the
// prompt on standard input (no argv length limit, nothing in ps), and takes
// the task ID from the URL codex prints.
func (c *CLI) Submit(ctx context.Context, r SubmitRequest) (string, string, error) {
	argv := []string{c.bin(), "cloud", "exec", "--env", r.Env, "--attempts", strconv.Itoa(max(r.Attempts, 1))}
	if r.Branch != "" {
		argv = append(argv, "--branch", r.Branch)
	}
	argv = append(argv, "-")
	op := strings.Join(argv[:len(argv)-1], " ")
	out, err := c.run(ctx, op, argv, r.Prompt, 1<<20)
	if err != nil {
		return "", "", err
	}
	if out.exit != 0 {
		return "", "", classify(op, out.exit, out.stdout, out.stderr, "")
	}
	id, url, ok := taskIDFromURL(out.stdout)
	if !ok {
		e := classify(op, out.exit, out.stdout, out.stderr, "")
		e.Msg = "no task URL in its output: " + e.Msg
		return "", "", e
	}
	return id, url, nil
}

// Status runs the status command and reads its output as the Result.
func (c *CLI) Status(ctx context.Context, taskID string) (Result, error) {
	argv, err := c.StatusArgv(taskID)
	if err != nil {
		return Result{}, &Error{Class: Permanent, Op: "status of " + taskID, Msg: err.Error(), Fix: fixStatus}
	}
	op := strings.Join(argv, " ")
	out, err := c.run(ctx, op, argv, "", maxStatusBytes)
	if err != nil {
		return Result{}, err
	}
	res, ok, perr := parseStatus(out.stdout)
	if perr != nil {
		e := classify(op, out.exit, out.stdout, out.stderr, fixStatus)
		e.Class, e.Msg = Permanent, perr.Error()
		return Result{}, e
	}
	if !ok {
		return Result{}, classify(op, out.exit, out.stdout, out.stderr, fixStatus)
	}
	return res, nil
}

// Diff runs `codex cloud diff TASK_ID`. codex says "No diff available" both
// for a task still running and for one that finished without changes; the
// poller asks only about finished tasks, so that is an empty diff.
func (c *CLI) Diff(ctx context.Context, taskID string) ([]byte, error) {
	if !ValidTaskID(taskID) {
		return nil, &Error{Class: Permanent, Op: "diff of " + taskID, Msg: "not a Codex cloud task ID"}
	}
	argv := []string{c.bin(), "cloud", "diff", taskID}
	op := strings.Join(argv, " ")
	out, err := c.run(ctx, op, argv, "", maxDiffBytes)
	if err != nil {
		return nil, err
	}
	if out.exit == 0 {
		return out.stdout, nil
	}
	if bytes.Contains(out.stderr, []byte("No diff available for task")) {
		return []byte{}, nil
	}
	return nil, classify(op, out.exit, out.stdout, out.stderr, "")
}

type output struct {
	stdout, stderr []byte
	exit           int
}

// run starts one codex process in its own process group, under the timeout,
// and kills the whole group when the context ends (codex from npm is a
// node launcher with the real binary as its child).
func (c *CLI) run(ctx context.Context, op string, argv []string, stdin string, limit int) (output, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
	cmd.Dir = "/" // codex reads git state from its directory: give it none
	cmd.Env = c.Env
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	stdout := &capped{max: limit}
	stderr := &capped{max: maxStderrBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	ownGroup(cmd)
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return output{}, ctx.Err() // xmode is stopping: not the task's failure
	}
	if cctx.Err() != nil {
		return output{}, &Error{Class: Transient, Op: op, Msg: "timed out after " + timeout.String()}
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		if ee.ExitCode() < 0 {
			return output{}, &Error{Class: Transient, Op: op, Msg: "codex was killed: " + ee.Error()}
		}
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return output{}, &Error{Class: Permanent, Op: op, Msg: "cannot run " + argv[0] + ": " + err.Error(), Fix: fixInstall}
	default:
		return output{}, &Error{Class: Permanent, Op: op, Msg: err.Error(), Fix: fixInstall}
	}
	if stdout.over {
		return output{}, &Error{Class: Permanent, Op: op, Msg: fmt.Sprintf("printed more than %d bytes", limit)}
	}
	exit := 0
	if ee != nil {
		exit = ee.ExitCode()
	}
	return output{stdout: stdout.buf.Bytes(), stderr: stderr.buf.Bytes(), exit: exit}, nil
}

// capped keeps the first max bytes written and notes whether more came.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

// ReadFrom lets os/exec copy a pipe straight into the buffer, without the
// 32 KB copy buffer io.Copy would allocate per stream per call.
func (c *capped) ReadFrom(r io.Reader) (int64, error) {
	n, err := c.buf.ReadFrom(io.LimitReader(r, int64(c.max-c.buf.Len())))
	rest, rerr := io.Copy(io.Discard, r)
	if rest > 0 {
		c.over = true
	}
	return n + rest, cmp.Or(err, rerr)
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if len(p) > room {
		c.over = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}
