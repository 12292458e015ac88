package codexcloud

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
)

// newCLI is a client whose codex is the stand-in (this test binary).
func newCLI(t *testing.T) (*CLI, *codexcloudtest.Fake, string) {
	t.Helper()
	bin := codexcloudtest.Install(t)
	f := codexcloudtest.New(t)
	env := append(os.Environ(), f.Env()...)
	env = append(env, "HOME="+t.TempDir())
	return &CLI{Bin: filepath.Join(bin, "codex"), StatusCommand: "codex cloud status {task_id}", Env: env}, f, bin
}

func classOf(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%v (%T) is not a classified *Error", err, err)
	}
	return e
}

// A task's whole life through the client: the prompt goes on standard input
// with the environment, branch and attempts as flags; status is read from
// codex's text whatever its exit code; the diff comes back verbatim.
func TestCLISubmitStatusDiff(t *testing.T) {
	c, f, _ := newCLI(t)
	ctx := context.Background()
	prompt := "Fix the README\n\nand say why; $(not a shell)"
	id, url, err := c.Submit(ctx, SubmitRequest{Env: "env_1", Branch: "feature", Attempts: 3, Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "task_e_") || url != "https://chatgpt.com/codex/tasks/"+id {
		t.Fatalf("id %q url %q", id, url)
	}
	task := f.Task(id)
	if task.Prompt != prompt || task.Env != "env_1" || task.Branch != "feature" || task.Attempts != 3 {
		t.Fatalf("codex got %+v", task)
	}
	for status, want := range map[string]State{"pending": Pending, "running": Pending, "error": Failed} {
		f.Update(id, func(t *codexcloudtest.Task) { t.Status = status })
		res, err := c.Status(ctx, id)
		if err != nil || res.State != want || res.Title != "Fix the README" {
			t.Fatalf("%s: %+v %v", status, res, err)
		}
	}
	patch := "diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-version two\n+version three\n"
	f.Update(id, func(t *codexcloudtest.Task) { t.Status, t.Diff, t.Added, t.Removed, t.Files = "ready", patch, 1, 1, 1 })
	res, err := c.Status(ctx, id)
	if err != nil || res.State != Ready || res.Summary != "+1/-1 • 1 file" {
		t.Fatalf("ready: %+v %v", res, err)
	}
	got, err := c.Diff(ctx, id)
	if err != nil || string(got) != patch {
		t.Fatalf("diff: %q %v", got, err)
	}
	// Finished without changes: codex says "No diff available": empty.
	f.Update(id, func(t *codexcloudtest.Task) { t.Diff = "" })
	if got, err := c.Diff(ctx, id); err != nil || len(got) != 0 {
		t.Fatalf("no changes: %q %v", got, err)
	}
}

// Every failure is classified: not signed in and output nobody understands
// are permanent (the first naming `codex login`, the second keeping the
// raw text); an unreachable backend is transient.
func TestCLIErrorsClassified(t *testing.T) {
	c, f, _ := newCLI(t)
	ctx := context.Background()
	id, _, err := c.Submit(ctx, SubmitRequest{Env: "env_1", Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}

	f.Configure(func(c *codexcloudtest.Config) { c.SignedIn = false })
	_, _, err = c.Submit(ctx, SubmitRequest{Env: "env_1", Prompt: "p"})
	if e := classOf(t, err); e.Class != Permanent || !strings.Contains(e.Error(), "codex login") {
		t.Errorf("submit, not signed in: %v", e)
	}
	_, err = c.Status(ctx, id)
	if e := classOf(t, err); e.Class != Permanent || !strings.Contains(e.Error(), "codex login") {
		t.Errorf("status, not signed in: %v", e)
	}
	_, err = c.Diff(ctx, id)
	if e := classOf(t, err); e.Class != Permanent || !strings.Contains(e.Error(), "codex login") {
		t.Errorf("diff, not signed in: %v", e)
	}

	f.Configure(func(c *codexcloudtest.Config) { c.SignedIn, c.Unreachable = true, true })
	_, _, err = c.Submit(ctx, SubmitRequest{Env: "env_1", Prompt: "p"})
	if e := classOf(t, err); e.Class != Transient || !strings.Contains(e.Error(), "unreachable") {
		t.Errorf("submit, unreachable: %v", e)
	}
	_, err = c.Status(ctx, id)
	if e := classOf(t, err); e.Class != Transient {
		t.Errorf("status, unreachable: %v", e)
	}

	f.Configure(func(c *codexcloudtest.Config) { c.Unreachable = false })
	_, _, err = c.Submit(ctx, SubmitRequest{Env: "nope", Prompt: "p"})
	if e := classOf(t, err); e.Class != Permanent || !strings.Contains(e.Raw, "environment 'nope' not found") {
		t.Errorf("unknown environment: %v", e)
	}
	_, err = c.Status(ctx, "task_e_missing")
	if e := classOf(t, err); e.Class != Permanent || !strings.Contains(e.Raw, "404") {
		t.Errorf("unknown task: %v", e)
	}

	// A status command that prints something else entirely.
	weird := *c
	weird.StatusCommand = "echo all good {task_id}"
	_, err = weird.Status(ctx, id)
	if e := classOf(t, err); e.Class != Permanent || e.Raw != "all good "+id || !strings.Contains(e.Error(), "CODEX_CLOUD_STATUS_COMMAND") {
		t.Errorf("unknown output: %v", e)
	}

	missing := *c
	missing.Bin = filepath.Join(t.TempDir(), "codex")
	_, err = missing.Status(ctx, id)
	if e := classOf(t, err); e.Class != Permanent || !strings.Contains(e.Error(), "XMODE_CODEX_BIN") {
		t.Errorf("missing codex: %v", e)
	}
}

// A status command printing the JSON Result (what a deploy host configures
// around a CLI whose text changed) brings the transcript; its exit code is
// ignored like codex's.
func TestCLIJSONStatusCommand(t *testing.T) {
	c, f, bin := newCLI(t)
	task := f.Put(codexcloudtest.Task{Title: "T", Status: "running", Transcript: []string{"reading", "editing"}})
	c.StatusCommand = filepath.Join(bin, "fakecodex") + " result {task_id}"
	res, err := c.Status(context.Background(), task.ID)
	if err != nil || res.State != Running || len(res.Transcript) != 2 || res.Transcript[1] != "editing" {
		t.Fatalf("%+v %v", res, err)
	}
}

// Every call is bounded: at the timeout the whole process group dies and
// the error is transient; xmode's own cancellation is no task error.
func TestCLITimeoutAndCancel(t *testing.T) {
	c, f, _ := newCLI(t)
	task := f.Put(codexcloudtest.Task{Title: "T", Status: "pending"})
	f.Configure(func(c *codexcloudtest.Config) { c.StatusDelay = time.Minute })
	c.Timeout = 300 * time.Millisecond
	start := time.Now()
	_, err := c.Status(context.Background(), task.ID)
	if e := classOf(t, err); e.Class != Transient || !strings.Contains(e.Msg, "timed out") {
		t.Fatalf("timeout: %v", e)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the timed-out call took %s", d)
	}
	calls := f.Calls()
	if len(calls) != 1 || calls[0].Finish {
		t.Fatalf("calls: %+v", calls)
	}
	waitGone(t, calls[0].PID)

	// Cancelled once the call has started: the process dies, the error
	// is the cancellation.
	c.Timeout = 0
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for deadline := time.Now().Add(20 * time.Second); len(f.Calls()) < 2 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err = c.Status(ctx, task.ID)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if calls = f.Calls(); len(calls) != 2 || calls[1].Finish {
		t.Fatalf("the cancelled call: %+v", calls)
	}
	waitGone(t, calls[1].PID)
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("codex %d outlived its call", pid)
}
