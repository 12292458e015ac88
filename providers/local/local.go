// Package local is the host provider ("host" engine, the design's
// LocalProcess): every step is a process on the host, started in the
// session's worktree, in a process group of its own so that a timeout, a
// cancellation or the end of the step can take down the whole process tree.
package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/internal/hostenv"
)

// EngineName is the name the provider registers under.
const EngineName = "host"

// drainTimeout bounds how long Exec waits for the output pipes to reach EOF
// once the step's process group is gone: a process that escaped the group
// (setsid) may hold them open for ever.
const drainTimeout = time.Second

// defaultPath is searched when the step's environment has no PATH at all
// (docker's default PATH, so both engines agree).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func init() {
	engine.Register(EngineName, func(cfg *config.Config) (engine.Provider, error) {
		p := New()
		p.noCgroup = cfg != nil && !cfg.HostCgroup
		return p, nil
	})
}

// Provider runs steps as host processes. One Provider may serve any number
// of sandboxes and concurrent Exec calls; its only state is where it makes
// the steps' cgroups, found at its first step.
type Provider struct {
	noCgroup bool // XMODE_HOST_CGROUP=off: process groups only

	cgOnce   sync.Once
	cgMount  string // the cgroup v2 hierarchy, "" when there is none
	cgParent string // where step cgroups are made, "" when they cannot be
	cgWhy    string // why steps run without a cgroup
	cgMu     sync.Mutex
}

// New returns the host provider.
func New() *Provider { return &Provider{} }

// The capabilities the host provider has: every one of them, so that
// dropping a method fails the build rather than turning a capability off.
var (
	_ engine.Provider      = (*Provider)(nil)
	_ engine.StepContainer = (*Provider)(nil)
	_ engine.HostRunner    = (*Provider)(nil)
	_ engine.StepSignaler  = (*Provider)(nil)
	_ engine.PortDialer    = (*Provider)(nil)
)

// Name returns "host".
func (*Provider) Name() string { return EngineName }

// RunsOnHost says yes (engine.HostRunner): a step is a process of this host,
// in the user's environment, with the host's files and PATH.
func (*Provider) RunsOnHost() bool { return true }

// Provision creates nothing: the host sandbox is the worktree itself, which
// must already exist.
func (*Provider) Provision(ctx context.Context, spec engine.Spec) (engine.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return engine.Sandbox{}, err
	}
	if spec.Worktree == "" {
		return engine.Sandbox{}, errors.New("host engine: no worktree to provision a sandbox in")
	}
	if spec.Egress != nil {
		// Host steps share the host's network: nothing would hold them to
		// the policy, so it is refused, never left open.
		return engine.Sandbox{}, engine.CheckEgress(nil, EngineName, spec.Egress.Mode)
	}
	st, err := os.Stat(spec.Worktree)
	if err != nil {
		return engine.Sandbox{}, fmt.Errorf("host engine: worktree: %w", err)
	}
	if !st.IsDir() {
		return engine.Sandbox{}, fmt.Errorf("host engine: worktree %s is not a directory", spec.Worktree)
	}
	return engine.Sandbox{
		Engine:    EngineName,
		Worktree:  spec.Worktree,
		RunID:     spec.RunID,
		SessionID: spec.SessionID,
		Project:   spec.Project,
	}, nil
}

// Destroy has nothing to remove: the worktree belongs to the caller, which
// reclaims it through fsguard.Guard.
func (*Provider) Destroy(context.Context, engine.Sandbox) error { return nil }

// Exec runs one step. See engine.Provider for the error/status split.
func (p *Provider) Exec(ctx context.Context, sb engine.Sandbox, req engine.ExecRequest) (engine.Status, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return engine.Status{}, errors.New("host engine: empty command")
	}
	if err := ctx.Err(); err != nil {
		return engine.Status{}, fmt.Errorf("host engine: not starting %q: %w", req.Argv[0], err)
	}
	stdout, stderr := req.Stdout, req.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}

	dir, err := filepath.Abs(filepath.Join(sb.Worktree, req.Workdir))
	if err != nil {
		return engine.Status{}, fmt.Errorf("host engine: workdir: %w", err)
	}
	if st, err := os.Stat(dir); err != nil {
		return engine.Status{}, fmt.Errorf("host engine: workdir: %w", err)
	} else if !st.IsDir() {
		return engine.Status{}, fmt.Errorf("host engine: workdir %s is not a directory", dir)
	}

	inherited, err := hostenv.Recorded(sb.HostEnv).Filter(os.Environ())
	if err != nil {
		return engine.Status{}, fmt.Errorf("host engine: the session's environment policy: %w", err)
	}
	// What the step is given by name (--env, an agent's keys) comes on top
	// of what the policy lets it inherit.
	env := mergeEnv(inherited, req.Env)
	if req.Tag != "" {
		// Last, so that it wins over a same-named entry of req.Env.
		env = mergeEnv(env, []string{engine.ExecTagEnv + "=" + req.Tag})
	}
	path, code, msg := lookPath(req.Argv[0], dir, envPath(env))
	if code != 0 {
		fmt.Fprintf(stderr, "xmode: exec: %q: %s\n", req.Argv[0], msg)
		return engine.Status{ExitCode: code}, nil
	}

	st, cgErr, err := run(ctx, runSpec{
		path: path, argv: req.Argv, dir: dir, env: env,
		timeout: req.Timeout, grace: req.Grace,
		stdin: req.Stdin, stdout: stdout, stderr: stderr,
		tty: req.TTY, resize: req.Resize,
		cgroup: p.stepCgroup(req.Tag), started: req.Started,
	})
	if cgErr != nil {
		p.noCgroups(cgErr)
	}
	return st, err
}

type runSpec struct {
	path           string
	argv           []string
	dir            string
	env            []string
	timeout, grace time.Duration
	stdin          io.Reader
	stdout, stderr io.Writer
	tty            bool
	resize         <-chan engine.WinSize
	cgroup         *stepCgroup // nil: the process group alone
	started        func()      // engine.ExecRequest.Started
}

// stdio is how a step's standard streams are wired: the child's three
// files, ours to close once it has them, the copies that carry its output,
// and what to close when it is over.
type stdio struct {
	child   [3]*os.File
	started []*os.File // the child's ends: closed in xmode once it started
	outputs []*os.File // read ends drained by copies; cut if EOF never comes
	input   *os.File   // our end of the child's input, nil for none
	copies  []func()
	term    *os.File // the pty's master (TTY steps)
}

// pipes gives the step our own pipes: the child gets the write ends as fds
// 1 and 2, we copy from the read ends with a fixed buffer, so memory stays
// bounded whatever the step prints, and we decide when to stop waiting for
// EOF.
func pipes(s runSpec) (*stdio, error) {
	sio := &stdio{}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("host engine: stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, fmt.Errorf("host engine: stderr pipe: %w", err)
	}
	var inR *os.File
	if s.stdin != nil {
		// Always through a pipe, even for an *os.File: the child runs in a
		// session of its own, and a terminal it could open would stop it.
		if inR, sio.input, err = os.Pipe(); err != nil {
			closeAll(outR, outW, errR, errW)
			return nil, fmt.Errorf("host engine: stdin pipe: %w", err)
		}
	} else if inR, err = os.Open(os.DevNull); err != nil {
		closeAll(outR, outW, errR, errW)
		return nil, fmt.Errorf("host engine: stdin: %w", err)
	}
	sio.child = [3]*os.File{inR, outW, errW}
	sio.started = []*os.File{inR, outW, errW}
	sio.outputs = []*os.File{outR, errR}
	sio.copies = []func(){func() { drain(s.stdout, outR) }, func() { drain(s.stderr, errR) }}
	return sio, nil
}

// terminal gives the step a pty: the slave as its three streams and its
// controlling terminal, the master copied to stdout (one stream, as on a
// terminal) and fed with stdin.
func terminal(s runSpec) (*stdio, error) {
	master, slave, err := openPty()
	if err != nil {
		return nil, fmt.Errorf("host engine: open a pty: %w", err)
	}
	sio := &stdio{term: master}
	sio.child = [3]*os.File{slave, slave, slave}
	sio.started = []*os.File{slave}
	sio.outputs = []*os.File{master}
	sio.copies = []func(){func() { drain(s.stdout, master) }}
	if s.stdin != nil {
		sio.input = master
	}
	return sio, nil
}

// run starts the process and supervises it to the end: deadline, cancel,
// reaping, killing what is left of its group and its cgroup, draining its
// output. cgErr says the step's cgroup could not be used (the step then ran
// without it).
func run(ctx context.Context, s runSpec) (st engine.Status, cgErr, err error) {
	grace := s.grace
	if grace <= 0 {
		grace = engine.DefaultGrace
	}
	open := pipes
	if s.tty {
		open = terminal
	}
	sio, err := open(s)
	if err != nil {
		if s.cgroup != nil {
			_ = s.cgroup.end()
		}
		return engine.Status{}, nil, err
	}
	newCmd := func(cg *stepCgroup) *exec.Cmd {
		// A session of its own: its process group is the step, and it has
		// no controlling terminal it could be stopped by (SIGTTIN/SIGTTOU
		// on `sh -i`), unless it is given one (TTY). The leader dies with
		// the xmode that started it, however xmode dies; in a cgroup, the
		// watcher ends the rest, else KillStep finds what it left behind
		// by the step's tag.
		attr := &syscall.SysProcAttr{Setsid: true, Setctty: s.tty, Pdeathsig: syscall.SIGKILL}
		if cg != nil {
			attr.UseCgroupFD, attr.CgroupFD = true, int(cg.fd.Fd())
		}
		return &exec.Cmd{
			Path: s.path, Args: s.argv, Dir: s.dir, Env: s.env,
			Stdin: sio.child[0], Stdout: sio.child[1], Stderr: sio.child[2],
			SysProcAttr: attr,
		}
	}
	if s.tty {
		resize(sio.term, s.resize, true)
	}
	cmd, cg, cgErr, startErr := start(newCmd, s.cgroup)
	// The child has its copies; ours would keep the output from reaching EOF.
	closeAll(sio.started...)
	if startErr != nil {
		if cg != nil {
			_ = cg.end()
		}
		closeAll(sio.outputs...)
		if sio.input != nil && sio.input != sio.term {
			closeAll(sio.input)
		}
		if code, msg, ok := classifyStartError(startErr); ok {
			fmt.Fprintf(s.stderr, "xmode: exec: %q: %s\n", s.argv[0], msg)
			return engine.Status{ExitCode: code}, cgErr, nil
		}
		return engine.Status{}, cgErr, fmt.Errorf("host engine: start %q: %w", s.argv[0], startErr)
	}
	if cg != nil {
		cg.watchLater()
	}
	pid := cmd.Process.Pid // also the process group id
	if s.started != nil {
		// execve has succeeded: the leader is the command, with its tag.
		s.started()
	}

	var copies sync.WaitGroup
	for _, c := range sio.copies {
		copies.Go(c)
	}
	if sio.input != nil {
		in := sio.input
		go func() {
			// Not waited for: a reader that blocks (a terminal) must not
			// hold up the step. Closing in below makes its writes fail.
			_, _ = io.Copy(in, s.stdin)
			if in != sio.term {
				_ = in.Close()
			}
		}()
	}
	if s.tty {
		go resize(sio.term, s.resize, false)
	}

	// Learn that the leader exited without reaping it: while it is a
	// zombie its pid, and so its process group id, cannot be reused, so
	// signalling the group stays safe until we reap it ourselves.
	exited := make(chan bool, 1) // true: already reaped by cmd.Wait
	var waitErr error
	go func() {
		if err := waitExitNoReap(pid); err != nil {
			waitErr = cmd.Wait()
			exited <- true
			return
		}
		exited <- false
	}()

	timedOut, reaped := supervise(ctx, stepProcs{p: cmd.Process, pgid: pid, cg: cg}, s.timeout, grace, exited)
	// The leader is gone: whatever it left behind in its group (`cmd &`)
	// goes with it, and in its cgroup whatever left the group too.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if cg != nil {
		_ = cg.end()
	}
	if !reaped {
		waitErr = cmd.Wait()
	}

	// The copies end at EOF once every holder of the child's ends is gone;
	// a process that escaped the group may keep them open, so wait only a
	// little, then cut them.
	if sio.input != nil && sio.input != sio.term {
		_ = sio.input.Close()
	}
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	drainTimer := time.NewTimer(drainTimeout)
	select {
	case <-copied:
		drainTimer.Stop()
	case <-drainTimer.C:
		closeAll(sio.outputs...)
		<-copied
	}
	closeAll(sio.outputs...)

	ps := cmd.ProcessState
	if ps == nil {
		return engine.Status{}, cgErr, fmt.Errorf("host engine: wait for %q: %w", s.argv[0], waitErr)
	}
	return statusOf(ps, timedOut), cgErr, nil
}

// start starts the step in its cgroup cg, if any. Should that fail, the
// step starts without it when it can: nothing of it ran the first time, so
// the cgroup was the trouble (clone3 refused it), which cgErr says.
func start(newCmd func(*stepCgroup) *exec.Cmd, cg *stepCgroup) (cmd *exec.Cmd, _ *stepCgroup, cgErr, err error) {
	cmd = newCmd(cg)
	err = cmd.Start()
	if err == nil || cg == nil {
		return cmd, cg, nil, err
	}
	bare := newCmd(nil)
	if bare.Start() != nil {
		return cmd, cg, nil, err
	}
	_ = cg.end()
	return bare, nil, fmt.Errorf("start a step in cgroup %s: %w", cg.dir, err), nil
}

// stepProcs is what a stop signal reaches: the step's leader, its process
// group and, when it has one, its cgroup — where a process that left the
// group (setsid) still is.
type stepProcs struct {
	p    *os.Process
	pgid int
	cg   *stepCgroup // nil: the process group alone
}

func (sp stepProcs) signal(sig syscall.Signal) {
	signalGroup(sp.p, sp.pgid, sig)
	if sp.cg != nil {
		signalCgroup(sp.cg.dir, sig)
	}
}

// supervise waits for the leader to exit, ending the step at the deadline
// or when ctx is done: TERM (or the signal that interrupted xmode,
// engine.Interrupt) and CONT to its group and its whole cgroup, KILL after
// the grace period or at once when the interrupt hurries. Once stopped, a
// step in a cgroup is over when the cgroup is empty, not when its leader
// exits: the rest get what is left of the grace period to act on the
// signal. reaped reports that cmd.Wait already ran.
func supervise(ctx context.Context, sp stepProcs, timeout, grace time.Duration, exited <-chan bool) (timedOut, reaped bool) {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	var (
		done      = ctx.Done()
		hurry     <-chan struct{}
		killT     *time.Timer
		killTimer <-chan time.Time
		killAt    time.Time
	)
	defer func() {
		if killT != nil {
			killT.Stop()
		}
	}()
	terminate := func(sig syscall.Signal) {
		deadline, done = nil, nil // one signal is enough
		sp.signal(sig)
		// A stopped process (SIGTSTP, SIGTTIN) only acts on it once
		// continued.
		sp.signal(syscall.SIGCONT)
		killAt = time.Now().Add(grace)
		killT = time.NewTimer(grace)
		killTimer = killT.C
	}
	for {
		select {
		case reaped = <-exited:
			if killT != nil && killTimer != nil && sp.cg != nil {
				waitEmpty(sp.cg.dir, time.Until(killAt))
			}
			return timedOut, reaped
		case <-deadline:
			timedOut = true
			terminate(syscall.SIGTERM)
		case <-done:
			var sig syscall.Signal
			sig, hurry = engine.StopSignal(ctx)
			terminate(sig)
		case <-hurry:
			hurry = nil
			killTimer = nil
			sp.signal(syscall.SIGKILL)
		case <-killTimer:
			killTimer = nil
			sp.signal(syscall.SIGKILL)
		}
	}
}

// openPty opens a pty whose master xmode reads through the runtime's
// poller (pty.Open leaves it blocking), so that closing it ends a read
// that a process escaped with the slave would otherwise keep for ever.
func openPty() (master, slave *os.File, err error) {
	m, slave, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Dup(int(m.Fd()))
	m.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		slave.Close()
		return nil, nil, err
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "/dev/ptmx"), slave, nil
}

// resize sets the pty's window size from sizes: only the first one when
// first (before the step starts, so it starts with the right size), else
// every later one until sizes closes or the pty is closed.
func resize(term *os.File, sizes <-chan engine.WinSize, first bool) {
	if sizes == nil {
		return
	}
	set := func(ws engine.WinSize) error {
		rc, err := term.SyscallConn()
		if err != nil {
			return err
		}
		var ierr error
		if err := rc.Control(func(fd uintptr) {
			ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
		}); err != nil {
			return err
		}
		return ierr
	}
	if first {
		select {
		case ws, ok := <-sizes:
			if ok {
				_ = set(ws)
			}
		default:
		}
		return
	}
	for ws := range sizes {
		if errors.Is(set(ws), os.ErrClosed) {
			return
		}
	}
}

// drain copies r to w with a fixed buffer until EOF or until r is closed.
// A failing writer does not stop the draining: the step must never block on
// a full pipe because its output has nowhere to go.
func drain(w io.Writer, r io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 && w != nil {
			if _, werr := w.Write(buf[:n]); werr != nil {
				w = nil
			}
		}
		if err != nil {
			return
		}
	}
}

// signalGroup signals the step's process group, and the leader itself if it
// moved to another group (setsid/setpgid), so that a deadline always reaches
// the process the caller started.
func signalGroup(p *os.Process, pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
	if g, err := syscall.Getpgid(pgid); err == nil && g != pgid {
		_ = p.Signal(sig)
	}
}

func statusOf(st *os.ProcessState, timedOut bool) engine.Status {
	var s engine.Status
	ws, ok := st.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		s.ExitCode = 128 + int(ws.Signal())
		s.Signal = SignalName(ws.Signal())
	default:
		s.ExitCode = st.ExitCode()
	}
	if timedOut {
		s.ExitCode = 124
		s.TimedOut = true
	}
	return s
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}

// mergeEnv appends extra to base so that the later of two entries for one
// key wins, and drops the earlier ones (what exec.Cmd would do too, but the
// lookup of the command needs the result).
func mergeEnv(base, extra []string) []string {
	all := make([]string, 0, len(base)+len(extra))
	all = append(all, base...)
	all = append(all, extra...)
	last := make(map[string]int, len(all))
	for i, kv := range all {
		k, _, _ := strings.Cut(kv, "=")
		last[k] = i
	}
	out := all[:0:0]
	for i, kv := range all {
		k, _, _ := strings.Cut(kv, "=")
		if last[k] == i {
			out = append(out, kv)
		}
	}
	return out
}

// envPath is the PATH of env; defaultPath when env has none.
func envPath(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	return defaultPath
}

// lookPath resolves name like execvp does in the step's directory and PATH.
// It returns the path to execute, or an exit code (127 not found, 126 found
// but not executable) with the message for stderr.
func lookPath(name, dir, pathEnv string) (string, int, string) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		st, err := os.Stat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return "", 127, "no such file or directory"
		case err != nil:
			return "", 126, errText(err)
		case st.IsDir():
			return "", 126, "is a directory"
		}
		return p, 0, "" // permissions are left to execve
	}
	denied := ""
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		st, err := os.Stat(p)
		if err != nil {
			if errors.Is(err, os.ErrPermission) && denied == "" {
				denied = p
			}
			continue
		}
		if st.IsDir() {
			continue
		}
		if st.Mode()&0o111 == 0 || syscall.Access(p, 1 /* X_OK */) != nil {
			if denied == "" {
				denied = p
			}
			continue
		}
		return p, 0, ""
	}
	if denied != "" {
		return "", 126, fmt.Sprintf("permission denied (%s)", denied)
	}
	return "", 127, "executable file not found in $PATH"
}

// classifyStartError maps an execve failure to docker's statuses: 127 when
// the file (or its interpreter) does not exist, 126 when it cannot be run.
func classifyStartError(err error) (int, string, bool) {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return 0, "", false
	}
	switch errno {
	case syscall.ENOENT:
		return 127, "no such file or directory (or its interpreter)", true
	case syscall.EACCES, syscall.EPERM, syscall.ENOEXEC, syscall.EISDIR, syscall.ETXTBSY,
		syscall.ELOOP, syscall.ENAMETOOLONG, syscall.ENOTDIR, syscall.E2BIG:
		return 126, errno.Error(), true
	}
	return 0, "", false
}

func errText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}
