package machines

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// gitSafety is passed to every git xmode runs on a machine: hooks and the
// fsmonitor are commands, and a sandboxed step can write the machine's
// .git (its worktree's git dir lives there), so xmode never runs them.
var gitSafety = []string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"}

// relocating variables would point git at another repository than -C's.
var relocating = map[string]bool{
	"GIT_DIR": true, "GIT_WORK_TREE": true, "GIT_INDEX_FILE": true, "GIT_COMMON_DIR": true,
	"GIT_OBJECT_DIRECTORY": true, "GIT_ALTERNATE_OBJECT_DIRECTORIES": true, "GIT_NAMESPACE": true,
	"GIT_CEILING_DIRECTORIES": true, "GIT_DISCOVERY_ACROSS_FILESYSTEM": true, "GIT_PREFIX": true,
}

func gitEnv(interactive bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !relocating[k] {
			env = append(env, kv)
		}
	}
	if !interactive {
		// Nobody can answer a credentials prompt: fail instead of hanging.
		env = append(env, "GIT_TERMINAL_PROMPT=0")
	}
	return env
}

// runGit runs the git binary in dir (when not empty) and returns its
// stdout. progress, when not nil, also receives git's stderr live (clone
// and fetch progress on a terminal). Ctrl-C sends git SIGTERM, so it
// cleans up its lock files and half-made worktrees before it exits.
func runGit(ctx context.Context, progress io.Writer, dir string, args ...string) (string, error) {
	argv := append([]string(nil), gitSafety...)
	if dir != "" {
		argv = append(argv, "-C", dir)
	}
	argv = append(argv, args...)
	c := exec.CommandContext(ctx, "git", argv...)
	c.Env = gitEnv(progress != nil)
	var stdout, stderr bytes.Buffer
	c.Stdout = &stdout
	c.Stderr = &stderr
	if progress != nil {
		c.Stderr = io.MultiWriter(&stderr, progress)
	}
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	c.WaitDelay = 10 * time.Second
	dieWithParent(c)
	if err := c.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, lastLines(stderr.String(), 5))
	}
	return strings.TrimSpace(stdout.String()), nil
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
