package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// agentRun starts `agent run` of the stand-in agent that prints its prompt.
func agentRun(t *testing.T, root, id string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	c := xmode(t, root, append([]string{"agent", "run", id, "--agent", "command"}, args...)...)
	c.Env = append(c.Env, "XMODE_AGENT_COMMAND_TEMPLATE=cat {prompt_file}")
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	return c, &out
}

// waitIn waits until a thread of pid sleeps in the kernel in a function
// whose name has wchan in it: wait_for_partner is open(2) of a FIFO waiting
// for its writer, a read of a pipe is in *pipe_read or pipe_wait.
func waitIn(t *testing.T, pid int, wchan string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/wchan")
		for _, w := range tasks {
			if b, _ := os.ReadFile(w); strings.Contains(string(b), wchan) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("xmode (pid %d) never waited in %s", pid, wchan)
}

// endsOn143 sends c one SIGTERM and checks that it ends promptly, as an
// interrupted command: exit 143, saying so. (A second SIGTERM would quit
// at once whatever the command was doing: one must do.)
func endsOn143(t *testing.T, c *exec.Cmd, out *bytes.Buffer) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	start := time.Now()
	c.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		c.Process.Kill()
		<-done
		t.Fatalf("agent run still reads its --prompt-file 15s after SIGTERM:\n%s", out)
	}
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 143 || !strings.Contains(out.String(), "xmode: interrupted (SIGTERM)") {
		t.Fatalf("exit %v after %s, want 143 saying it was interrupted:\n%s", err, time.Since(start), out)
	}
}

// A FIFO given as --prompt-file that nobody writes to — nobody opens it, or
// its writer never writes — does not hold `agent run` past SIGTERM.
func TestPromptFileFIFOHonoursSIGTERM(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	dir := t.TempDir()

	t.Run("no writer", func(t *testing.T) {
		fifo := filepath.Join(dir, "nobody.fifo")
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		c, out := agentRun(t, root, id, "--prompt-file", fifo)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitIn(t, c.Process.Pid, "wait_for_partner")
		endsOn143(t, c, out)
	})

	t.Run("silent writer", func(t *testing.T) {
		fifo := filepath.Join(dir, "silent.fifo")
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		c, out := agentRun(t, root, id, "--prompt-file", fifo)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		// Opening the writing end returns once xmode has opened the
		// reading one; it then waits in its read.
		opened := make(chan *os.File, 1)
		go func() {
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				t.Error(err)
			}
			opened <- w
		}()
		var w *os.File
		select {
		case w = <-opened:
		case <-time.After(20 * time.Second):
			c.Process.Kill()
			t.Fatalf("xmode never opened the FIFO:\n%s", out)
		}
		defer w.Close()
		endsOn143(t, c, out)
	})
}

// Nor does a standard input that never ends (`agent run ID -`).
func TestPromptOnStdinHonoursSIGTERM(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	c, out := agentRun(t, root, id, "-")
	c.Stdin = pr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	waitIn(t, c.Process.Pid, "pipe_")
	endsOn143(t, c, out)
}

// A FIFO with a prompt in it is read as any file: --prompt-file <(…), and
// a named FIFO that a writer fills.
func TestPromptFileFromFIFO(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)

	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	probe := xmode(t, root)
	c := exec.Command(bash, "-c", `"$0" agent run "$1" --agent command --prompt-file <(echo "hi from a process substitution")`, probe.Path, id)
	c.Env = append(probe.Env, "XMODE_AGENT_COMMAND_TEMPLATE=cat {prompt_file}")
	if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "hi from a process substitution") {
		t.Fatalf("--prompt-file <(echo …): %v\n%s", err, out)
	}

	fifo := filepath.Join(t.TempDir(), "prompt.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		w.WriteString("hi through a named FIFO\n")
		w.Close()
	}()
	run, _ := agentRun(t, root, id, "--prompt-file", fifo)
	if code, out := runQuick(t, run, time.Minute); code != 0 || !strings.Contains(out, "hi through a named FIFO") {
		t.Fatalf("--prompt-file FIFO: exit %d\n%s", code, out)
	}
}
