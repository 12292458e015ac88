package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// A terminal driven by a test: xmode runs on the slave side of a real pty,
// as under a person's terminal emulator; the test types into the master
// and reads what the screen would show.
type terminal struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	read chan struct{} // the screen has everything: the pty reached EOF
	err  error
}

func startTerminal(t *testing.T, c *exec.Cmd, rows, cols uint16) *terminal {
	t.Helper()
	f, err := pty.StartWithSize(c, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, cmd: c, pty: f, done: make(chan struct{}), read: make(chan struct{})}
	go func() {
		defer close(term.read)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		term.err = c.Wait()
		close(term.done)
	}()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		<-term.done
		f.Close()
	})
	return term
}

func (term *terminal) screen() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

func (term *terminal) typeIn(s string) {
	term.t.Helper()
	if _, err := term.pty.Write([]byte(s)); err != nil {
		term.t.Fatalf("type %q: %v", s, err)
	}
}

// waitFor waits until the screen matches re.
func (term *terminal) waitFor(re string) {
	term.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if rx.MatchString(term.screen()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	term.t.Fatalf("the terminal never showed %q; it shows:\n%q", re, term.screen())
}

// retype types s until the screen shows re (once more than before): for
// what takes effect after the keys were typed, as a window size xmode
// passes on when its SIGWINCH arrives.
func (term *terminal) retype(s, re string) {
	term.t.Helper()
	rx := regexp.MustCompile(re)
	before := len(rx.FindAllStringIndex(term.screen(), -1))
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		term.typeIn(s)
		for try := time.Now().Add(time.Second); time.Now().Before(try); time.Sleep(20 * time.Millisecond) {
			if len(rx.FindAllStringIndex(term.screen(), -1)) > before {
				return
			}
		}
	}
	term.t.Fatalf("the terminal never showed %q; it shows:\n%q", re, term.screen())
}

// exit waits for xmode to end and returns its exit code.
func (term *terminal) exit() int {
	term.t.Helper()
	select {
	case <-term.done:
	case <-time.After(20 * time.Second):
		term.t.Fatalf("xmode did not end; the terminal shows:\n%q", term.screen())
	}
	select { // what it printed last
	case <-term.read:
	case <-time.After(2 * time.Second):
	}
	var ee *exec.ExitError
	if errors.As(term.err, &ee) {
		return ee.ExitCode()
	}
	if term.err != nil {
		term.t.Fatal(term.err)
	}
	return 0
}

// shellSession drives `sandbox shell` through a real pty: the terminal
// size and its changes, Ctrl-C to the process inside, the exit status,
// and the transcript kept as the step's log.
func shellSession(t *testing.T, root, id string, env []string) {
	c := xmode(t, root, "sandbox", "shell", id)
	c.Env = append(c.Env, env...)
	term := startTerminal(t, c, 30, 100)
	term.typeIn("stty size; echo hello-$((6*7))\r")
	term.waitFor(`30 100\r?\n(.|\n)*hello-42`)
	if err := pty.Setsize(term.pty, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	// SIGWINCH reaches xmode, which passes the size on (docker: through
	// the API) when the signal arrives: ask until the shell sees it.
	term.retype("stty size\r", `40 120`)
	// Ctrl-C goes to the process inside, not to xmode: a command that
	// traps SIGINT says it got it (once it is ready for it), the shell and
	// the session go on.
	term.typeIn(`sh -c 'trap "echo got-int-$((2*4)); exit 7" INT; echo ready-$((3*3)); while :; do sleep 0.1; done'; echo status-$?` + "\r")
	term.waitFor(`ready-9`)
	term.typeIn("\x03")
	term.waitFor(`got-int-8\r?\n(.|\n)*status-7`)
	term.typeIn("echo after-$((2+3))\r")
	term.waitFor(`after-5`)
	term.typeIn("exit 3\r")
	if code := term.exit(); code != 3 {
		t.Fatalf("shell exit 3: xmode exited %d\n%q", code, term.screen())
	}
	// One step, through the one recorder: its transcript is its log.
	out, err := xmodeEnv(t, root, env, "sandbox", "logs", id, "shell").Output()
	if err != nil || !strings.Contains(string(out), "hello-42") || !strings.Contains(string(out), "after-5") {
		t.Fatalf("the shell's transcript: %v %q", err, out)
	}
	out, err = xmodeEnv(t, root, env, "sandbox", "logs", id).Output()
	if err != nil || !regexp.MustCompile(`(?m)^\d+ +shell +3 `).Match(out) {
		t.Fatalf("the shell step in the table: %v\n%s", err, out)
	}
}

func xmodeEnv(t *testing.T, root string, env []string, args ...string) *exec.Cmd {
	c := xmode(t, root, args...)
	c.Env = append(c.Env, env...)
	return c
}

func TestShellOnHostThroughAPty(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	shellSession(t, root, id, []string{"SHELL=/bin/sh"})
}

func TestShellInDockerThroughAPty(t *testing.T) {
	t.Parallel()
	dockertest.Require(t)
	img := dockertest.Image(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	env := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}
	out, err := xmodeEnv(t, root, env, "sandbox", "create", "--repo", repo, "-q").Output()
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = xmodeEnv(t, root, env, "sandbox", "stop", id).Run() })
	shellSession(t, root, id, env)
}

// `exec -i -- sh -i` from a terminal used to leave sh stopped (state T) on
// the host engine: it took the terminal for job control from a background
// process group. The step now runs in a session of its own, told that -t
// gives it a terminal; with -t it gets one.
func TestExecInteractiveFromATerminal(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	term := startTerminal(t, xmode(t, root, "sandbox", "exec", "-i", id, "--", "sh", "-i"), 24, 80)
	term.waitFor(`add -t to give it one`)
	// What is typed reaches the shell and its output comes back: an
	// interactive shell ($- has i), not stopped, with no terminal, leading
	// a session of its own.
	term.typeIn("echo hi-$((1+1))\n")
	term.waitFor(`hi-2`)
	term.typeIn(`case $- in *i*) echo interactive-$((1+1));; esac; test -t 0 || echo no-tty-$((1+2)); ` +
		`read -r _ _ _ _ _ sid _ < /proc/$$/stat; [ "$sid" = $$ ] && echo own-session-$((2+2))` + "\n")
	term.waitFor(`interactive-2\r?\n(.|\n)*no-tty-3\r?\n(.|\n)*own-session-4`)
	term.typeIn("exit 4\n")
	if code := term.exit(); code != 4 {
		t.Fatalf("exec -i -- sh -i: exit %d, want 4\n%q", code, term.screen())
	}

	term = startTerminal(t, xmode(t, root, "sandbox", "exec", "-it", id, "--", "sh", "-c", `test -t 0 && echo on-a-tty; read x; echo "got $x"`), 24, 80)
	term.typeIn("typed\r")
	term.waitFor(`on-a-tty(.|\n)*got typed`)
	if code := term.exit(); code != 0 {
		t.Fatalf("exec -it: exit %d\n%q", code, term.screen())
	}
}

// Ctrl-C during exec: the step gets SIGINT and xmode exits 130, saying what
// happens; a second Ctrl-C KILLs a step that ignores it, without waiting
// out the grace period.
func TestExecSecondInterruptKills(t *testing.T) {
	t.Parallel()
	root, id := newSession(t)
	c := xmode(t, root, "sandbox", "exec", id, "--", "sh", "-c", `trap "" INT TERM; echo ready; while :; do sleep 0.1; done`)
	var stdout, stderr syncBuf
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; !strings.Contains(stdout.String(), "ready"); i++ {
		if i > 500 {
			c.Process.Kill()
			t.Fatal("the step never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Process.Signal(syscall.SIGINT)
	// the first Ctrl-C was taken: xmode says what the second does
	for i := 0; !strings.Contains(stderr.String(), "press Ctrl-C again"); i++ {
		if i > 500 {
			c.Process.Kill()
			t.Fatalf("the first Ctrl-C was not taken: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	c.Process.Signal(syscall.SIGINT)
	err := c.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 137 {
		t.Fatalf("exit %v, want 137 (KILLed at the second Ctrl-C); stderr: %s", err, stderr.String())
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the second Ctrl-C took %s to end the step: the grace period was not cut short", took)
	}
	for _, want := range []string{"the step gets SIGINT now and KILL in 5s; press Ctrl-C again", "killing the step now"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
}

// Ctrl-C while create or machine warm waits on a remote says so (exit 130)
// instead of "context canceled", and leaves nothing behind.
func TestCreateAndWarmInterrupted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- conn // never answered: git waits
		}
	}()
	url := "http://" + ln.Addr().String() + "/repo.git"
	root := filepath.Join(t.TempDir(), "root")
	for _, args := range [][]string{
		{"sandbox", "create", "--repo", url},
		{"machine", "warm", "demo", "--repo", url},
	} {
		c := xmode(t, root, args...)
		var stderr syncBuf
		c.Stderr = &stderr
		// A process group of its own, as a terminal's foreground job: Ctrl-C
		// reaches xmode and the git it runs.
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case conn := <-accepted:
			defer conn.Close()
		case <-time.After(20 * time.Second):
			c.Process.Kill()
			t.Fatalf("%v never reached the remote", args)
		}
		start := time.Now()
		syscall.Kill(-c.Process.Pid, syscall.SIGINT)
		err := c.Wait()
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%v took %s to end after Ctrl-C", args, took)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Fatalf("%v interrupted: %v, want exit 130; stderr: %s", args, err, stderr.String())
		}
		if s := stderr.String(); !strings.Contains(s, "xmode: interrupted (SIGINT)") || strings.Contains(s, "context canceled") {
			t.Fatalf("%v interrupted: stderr %q, want it to say it was interrupted", args, s)
		}
	}
	out, err := xmode(t, root, "sandbox", "list", "--all", "-q").Output()
	if err != nil || len(out) != 0 {
		t.Fatalf("an interrupted create left sessions: %q %v", out, err)
	}
	if m, _ := filepath.Glob(filepath.Join(root, "project_machines", "*")); len(m) != 0 {
		t.Fatalf("an interrupted first warm left %v", m)
	}
}

// Progress shows on a terminal and nowhere else: not with --json, not
// with -q, not when stderr is a pipe.
func TestProgressOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	term := startTerminal(t, xmode(t, root, "machine", "warm", "shown", "--repo", repo), 24, 100)
	if code := term.exit(); code != 0 {
		t.Fatalf("warm: exit %d\n%q", code, term.screen())
	}
	if s := term.screen(); !strings.Contains(s, "Receiving objects 100%") || !strings.Contains(s, "█") {
		t.Fatalf("no progress bar on a terminal:\n%q", s)
	}
	for _, args := range [][]string{{"--json"}, {"-q"}} {
		term := startTerminal(t, xmode(t, root, append([]string{"machine", "warm", "quiet" + args[0][1:2], "--repo", repo}, args...)...), 24, 100)
		if code := term.exit(); code != 0 {
			t.Fatalf("warm %v: exit %d\n%q", args, code, term.screen())
		}
		if s := term.screen(); strings.Contains(s, "objects") {
			t.Fatalf("progress with %v:\n%q", args, s)
		}
	}
	out, err := xmode(t, root, "machine", "warm", "piped", "--repo", repo).CombinedOutput()
	if err != nil || strings.Contains(string(out), "objects") {
		t.Fatalf("progress into a pipe: %v\n%s", err, out)
	}

	// A reap pass with teardowns to do: a bar on a terminal; with -v the
	// action lines instead; nothing for cron.
	for range 2 {
		if err := xmode(t, root, "sandbox", "create", "--repo", repo, "--ttl", "1ms", "-q").Run(); err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	advanceClock(t, root, time.Second)
	term = startTerminal(t, xmode(t, root, "reap"), 24, 100)
	if code := term.exit(); code != 0 {
		t.Fatalf("reap: exit %d\n%q", code, term.screen())
	}
	if s := term.screen(); !strings.Contains(s, "reaping 100%") || !strings.Contains(s, "(2/2)") {
		t.Fatalf("no progress bar over a reap pass on a terminal:\n%q", s)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
