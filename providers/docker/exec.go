package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/internal/stepshell"
)

// ExecTagEnv is set in every step's environment (engine.ExecRequest.Tag, or
// a random value); the step's processes inherit it, which is how xmode finds
// them inside the shared session container to end them at a timeout, on
// Ctrl-C, when the step's main process has exited and left children behind,
// and when the xmode that ran the step is gone (KillStep).
const ExecTagEnv = engine.ExecTagEnv

// Exec runs one step in the session's container and returns its status.
// Output streams to req.Stdout/req.Stderr as it comes (kept apart, bounded
// memory). A timeout or ctx cancellation ends the step's whole process tree
// inside the container (TERM, then KILL after req.Grace); a timeout reports
// 124. Leftover background processes of a finished step are ended too. An
// error means xmode could not run the step (daemon unreachable: exit 5;
// container gone; no /bin/sh in the image).
func (p *Provider) Exec(ctx context.Context, sb engine.Sandbox, req engine.ExecRequest) (engine.Status, error) {
	st, err := p.exec(ctx, sb, req)
	if err != nil && fail.KindOf(err) != fail.EngineUnavailable {
		// A container that died under the step says why it died.
		if ci, ierr := p.ownedContainer(context.WithoutCancel(ctx), sb); ierr == nil && diedAtStart(ci) {
			return st, diedError(ci)
		}
	}
	return st, err
}

func (p *Provider) exec(ctx context.Context, sb engine.Sandbox, req engine.ExecRequest) (engine.Status, error) {
	if len(req.Argv) == 0 {
		return engine.Status{}, fail.Usagef("no command to run: give one after --")
	}
	if _, err := p.Ping(ctx); err != nil {
		return engine.Status{}, err
	}
	ci, err := p.sessionContainer(ctx, sb)
	if err != nil {
		return engine.Status{}, err
	}
	dir, err := execDir(ci.Config.WorkingDir, sb.Worktree, req.Workdir)
	if err != nil {
		return engine.Status{}, err
	}
	tag := stepshell.Tag(req.Tag)
	// The tag comes last so that it wins over a same-named entry of req.Env.
	env := append(append([]string(nil), req.Env...), ExecTagEnv+"="+tag)
	wrapper := wrapperFor(ci.HostConfig)
	if req.TTY {
		// Ctrl-C on the terminal signals its foreground group, the wrapper
		// included: a handler (reset to the default in the command) keeps
		// the wrapper alive to sweep up and report the command's status.
		wrapper = "trap : INT QUIT; " + wrapper
	}
	cmd := append([]string{"/bin/sh", "-c", wrapper, "xmode-step"}, req.Argv...)
	opts := container.ExecOptions{
		Cmd:          cmd,
		Env:          env,
		WorkingDir:   dir,
		AttachStdin:  req.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Tty:          req.TTY,
	}
	var size *engine.WinSize
	if req.TTY {
		select {
		case ws, ok := <-req.Resize:
			if ok {
				size = &ws
				opts.ConsoleSize = &[2]uint{uint(ws.Rows), uint(ws.Cols)} // API 1.42+
				// Older daemons size the TTY only once the exec runs
				// (resizeExec): the step sets it itself before its command.
				opts.Cmd[2] = fmt.Sprintf("stty rows %d cols %d 2>/dev/null; %s", ws.Rows, ws.Cols, opts.Cmd[2])
			}
		default:
		}
	}

	cctx, cancel := p.call(ctx)
	created, err := p.cli.ContainerExecCreate(cctx, ci.ID, opts)
	cancel()
	if err != nil {
		return engine.Status{}, p.wrap(err, "create exec in "+ContainerName(sb.SessionID))
	}
	execID := created.ID
	started := time.Now()
	// The attach stream must outlive a cancelled ctx: the step's output
	// keeps flowing while its processes are being ended.
	actx, acancel := p.call(context.WithoutCancel(ctx))
	hr, err := p.execAttach(actx, execID, req.TTY)
	acancel()
	if err != nil {
		return engine.Status{}, p.wrap(err, "start exec in "+ContainerName(sb.SessionID))
	}
	if req.TTY {
		go p.resizeExec(context.WithoutCancel(ctx), execID, size, req.Resize)
	}
	s := &step{p: p, ctx: ctx, containerID: ci.ID, initPid: ci.State.Pid, execID: execID, tag: tag, req: req, started: started}
	if req.Started != nil {
		// Only once the runtime runs the step's wrapper can the kill
		// helper find it by its tag (a few exec inspects, for a caller
		// that asked: sandbox.ExecDetached).
		s.waitCommand(context.WithoutCancel(ctx))
		req.Started()
	}
	st, err := s.run(hr)
	if err == nil && sb.MountMode != MountSync && sb.Worktree != "" {
		// The step's processes are gone: nothing can race this.
		if serr := stripSetuid(sb.Worktree); serr != nil {
			p.warnf("could not clear setuid bits in %s: %v", sb.Worktree, serr)
		}
	}
	return st, err
}

// resizeExec sets a TTY exec's window size: first (again, for daemons
// before API 1.42, which ignore ConsoleSize) once the exec runs, then every
// size that comes until sizes closes.
func (p *Provider) resizeExec(ctx context.Context, execID string, first *engine.WinSize, sizes <-chan engine.WinSize) {
	set := func(ws engine.WinSize) error {
		cctx, cancel := p.call(ctx)
		defer cancel()
		return p.cli.ContainerExecResize(cctx, execID, container.ResizeOptions{Height: uint(ws.Rows), Width: uint(ws.Cols)})
	}
	if first != nil {
		// The exec may not have its TTY yet: retry briefly, as docker's CLI does.
		for i := 0; i < 20 && set(*first) != nil; i++ {
			time.Sleep(25 * time.Millisecond)
		}
	}
	for ws := range sizes {
		_ = set(ws)
	}
}

// sessionContainer finds the session's container, checks it is one of
// xmode's, and starts it again if it stopped (a daemon restart stops
// containers without a restart policy).
func (p *Provider) sessionContainer(ctx context.Context, sb engine.Sandbox) (container.InspectResponse, error) {
	ci, err := p.ownedContainer(ctx, sb)
	if err != nil {
		return ci, err
	}
	if !ci.State.Running {
		if ci.State.Paused {
			return ci, fail.Failedf("the container of session %s is paused: `docker unpause %s`", sb.SessionID, shortID(ci.ID))
		}
		if diedAtStart(ci) {
			return ci, diedError(ci)
		}
		cctx, cancel := p.call(ctx)
		defer cancel()
		if err := p.cli.ContainerStart(cctx, ci.ID, container.StartOptions{}); err != nil {
			return ci, p.wrap(err, "start the stopped container of session "+sb.SessionID)
		}
		p.warnf("the container of session %s had stopped (%s); started it again", sb.SessionID, ci.State.Status)
		if ci, err = p.cli.ContainerInspect(cctx, ci.ID); err != nil {
			return ci, p.wrap(err, "inspect container "+shortID(ci.ID))
		}
		if err := p.reapplyInside(ctx, sb, ci); err != nil {
			return ci, err
		}
	}
	return ci, nil
}

// ownedContainer inspects the session's container (by the ID on its row,
// else by its name) and checks that it is xmode's and the session's.
func (p *Provider) ownedContainer(ctx context.Context, sb engine.Sandbox) (container.InspectResponse, error) {
	ref := sb.ContainerID
	if ref == "" {
		ref = ContainerName(sb.SessionID)
	}
	if err := checkRef("container", ref); err != nil {
		return container.InspectResponse{}, err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	ci, err := p.cli.ContainerInspect(cctx, ref)
	if cerrdefs.IsNotFound(err) {
		return ci, fail.Failedf("the container of session %s (%s) %w: stop the session and create a new one", sb.SessionID, shortID(ref), errContainerGone)
	}
	if err != nil {
		return ci, p.wrap(err, "inspect container "+shortID(ref))
	}
	if ci.Config == nil || ci.State == nil || ci.ContainerJSONBase == nil {
		return ci, fmt.Errorf("inspect container %s: the daemon's answer lacks its config or state", shortID(ref))
	}
	if err := checkOwned(ci.Config.Labels, sb.SessionID); err != nil {
		return ci, err
	}
	return ci, nil
}

// errContainerGone: the session's container no longer exists.
var errContainerGone = errors.New("is gone")

// checkOwned refuses a container that is not the session's (a stale or
// tampered session row must not run commands in somebody else's container).
func checkOwned(labels map[string]string, sessionID string) error {
	if labels[LabelManaged] != "true" {
		return fail.Refusedf("container is not managed by xmode (no %s=true label): refusing to touch it", LabelManaged)
	}
	if sessionID != "" && labels[LabelSession] != sessionID {
		return fail.Refusedf("container belongs to session %q, not %s: refusing to touch it", labels[LabelSession], sessionID)
	}
	return nil
}

// execDir maps --workdir (relative to the worktree, or an absolute host path
// inside it as fsguard.ResolveWorkdir returns) into the container.
func execDir(root, worktree, rel string) (string, error) {
	if rel == "" || rel == "." {
		return root, nil
	}
	if filepath.IsAbs(rel) {
		r, err := filepath.Rel(worktree, rel)
		if worktree == "" || err != nil {
			return "", fail.Usagef("%s %q is not inside the worktree %s", fail.Workdir, rel, worktree)
		}
		rel = r
	}
	clean := path.Clean(filepath.ToSlash(rel))
	if clean == ".." || strings.HasPrefix(clean, "../") || path.IsAbs(clean) {
		return "", fail.Usagef("%s %q escapes the worktree", fail.Workdir, rel)
	}
	return path.Join(root, clean), nil
}

// wrapperFor is stepshell.Wrapper, preceded by the container's nofile soft limit
// where one is set: runc built with Go 1.19+ (runc < 1.1.10, as in Debian
// bookworm) hands exec'd processes a soft limit raised to the hard one, so
// the configured soft limit is applied again here (lowering a soft limit
// needs no privilege).
func wrapperFor(hc *container.HostConfig) string {
	if hc != nil {
		for _, u := range hc.Ulimits {
			if u != nil && u.Name == "nofile" && u.Soft > 0 {
				return "ulimit -S -n " + strconv.FormatInt(u.Soft, 10) + " 2>/dev/null; " + stepshell.Wrapper
			}
		}
	}
	return stepshell.Wrapper
}

func shortID(id string) string {
	if len(id) > 12 && !strings.HasPrefix(id, "xmode-") {
		return id[:12]
	}
	return id
}

// step is one running exec.
type step struct {
	p           *Provider
	ctx         context.Context
	containerID string
	initPid     int // the container's init, on the daemon's host
	execID      string
	tag         string
	req         engine.ExecRequest
	started     time.Time
}

type execState struct {
	exitCode int
	pid      int
	gone     bool // the exec vanished (its container was restarted)
	err      error
}

func (s *step) grace() time.Duration {
	if s.req.Grace > 0 {
		return s.req.Grace
	}
	return engine.DefaultGrace
}

// drainIdle is how long the output may stand still after a step's processes
// are gone before xmode stops waiting for it.
const drainIdle = 2 * time.Second

// drainMax bounds the wait for the output after the step's processes ended.
const drainMax = 30 * time.Second

func (s *step) run(hr types.HijackedResponse) (engine.Status, error) {
	p := s.p
	bg := context.WithoutCancel(s.ctx)
	var closeOnce sync.Once
	closeConn := func() { closeOnce.Do(hr.Close) }
	defer closeConn()

	if s.req.Stdin != nil {
		go func() {
			_, _ = io.Copy(hr.Conn, s.req.Stdin)
			if !s.req.TTY {
				// On a TTY the daemon takes the end of input for the end of
				// the session and closes the output with it; a terminal's
				// end of input is a key (Ctrl-D), already sent.
				_ = hr.CloseWrite()
			}
		}()
	}
	head := &headBuffer{limit: 1 << 10}
	stdout := &streamWriter{w: io.MultiWriter(head, orDiscard(s.req.Stdout))}
	stderr := &streamWriter{w: orDiscard(s.req.Stderr)}
	copyDone := make(chan struct{})
	go func() {
		if s.req.TTY {
			// A TTY exec's output is one raw stream, as on a terminal.
			_, _ = io.Copy(stdout, hr.Reader)
		} else {
			_, _ = stdcopy.StdCopy(stdout, stderr, hr.Reader)
		}
		close(copyDone)
	}()

	pollCtx, stopPoll := context.WithCancel(bg)
	defer stopPoll()
	exited := make(chan execState, 1)
	go s.poll(pollCtx, copyDone, exited)

	var timer <-chan time.Time
	if s.req.Timeout > 0 {
		t := time.NewTimer(s.req.Timeout)
		defer t.Stop()
		timer = t.C
	}
	var st execState
	timedOut, interrupted, restarted := false, false, false
	select {
	case st = <-exited:
	case <-timer:
		timedOut = true
	case <-s.ctx.Done():
		interrupted = true
	}
	if timedOut || interrupted {
		sig := syscall.SIGTERM
		var hurry <-chan struct{}
		if interrupted {
			sig, hurry = engine.StopSignal(s.ctx)
		}
		st, restarted = s.end(bg, exited, sig, hurry)
	} else if st.err == nil && !st.gone {
		restarted = s.sweep(bg, st, copyDone)
	}
	if st.err != nil {
		return engine.Status{}, st.err
	}

	// Let the output drain; stop waiting once it stands still, or when
	// something xmode could not find keeps writing.
	var last int64 = -1
	giveUp := time.Now().Add(drainMax)
	for done := false; !done; {
		select {
		case <-copyDone:
			done = true
		case <-time.After(drainIdle):
			if n := stdout.n.Load() + stderr.n.Load(); n != last && time.Now().Before(giveUp) {
				last = n
				continue
			}
			p.warnf("step output of %s still open after its processes ended; closing it", shortID(s.containerID))
			closeConn()
			<-copyDone
			done = true
		}
	}

	if st.pid == 0 && !st.gone && (st.exitCode == 126 || st.exitCode == 127) && !timedOut && !interrupted {
		return engine.Status{}, fail.Failedf("the sandbox could not start the step (%s): xmode runs every step through /bin/sh, which the image must have; the sandbox may also be out of processes (pids limit) or memory", strings.TrimSpace(head.String()))
	}

	// Docker reports a process killed by signal N as 128+N, like a shell;
	// the name is derived from that.
	status := engine.Status{ExitCode: st.exitCode}
	if st.exitCode > 128 && st.exitCode < 128+65 {
		status.Signal = signalName(st.exitCode - 128)
	}
	switch {
	case timedOut:
		status.ExitCode = 124
		status.TimedOut = true
	case st.exitCode == 137 && !interrupted && !restarted && !st.gone:
		status.OOMKilled = p.oomKilled(bg, s.containerID, s.execID, s.started)
	}
	return status, nil
}

// poll watches the exec until its main process has exited. An exec that
// has not started yet also reads "not running": it only counts as exited
// once it has a pid, or once its output streams closed.
func (s *step) poll(ctx context.Context, copyDone <-chan struct{}, out chan<- execState) {
	interval := 10 * time.Millisecond
	failures := 0
	nudged := false
	for {
		cctx, cancel := context.WithTimeout(ctx, s.p.callTimeout())
		ins, err := s.p.cli.ContainerExecInspect(cctx, s.execID)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case cerrdefs.IsNotFound(err):
			out <- execState{exitCode: 137, gone: true}
			return
		case err != nil:
			if failures++; failures >= 5 {
				out <- execState{err: s.p.wrap(err, "wait for the step in "+shortID(s.containerID))}
				return
			}
		case !ins.Running && (ins.Pid != 0 || closed(copyDone)):
			out <- execState{exitCode: ins.ExitCode, pid: ins.Pid}
			return
		}
		var nudge <-chan struct{}
		if !nudged {
			nudge = copyDone
		}
		select {
		case <-ctx.Done():
			return
		case <-nudge:
			nudged = true
			interval = 2 * time.Millisecond
		case <-time.After(interval):
			interval = min(interval*2, 250*time.Millisecond)
		}
	}
}

// end ends a step that timed out or was interrupted and waits for its main
// process; restarted reports that the container had to be restarted.
func (s *step) end(ctx context.Context, exited <-chan execState, sig syscall.Signal, hurry <-chan struct{}) (st execState, restarted bool) {
	// A deadline can come before the runtime has started the step, or
	// while it is still becoming the step's shell; ending it then finds
	// nothing, so it is ended again until its main process is gone.
	s.waitStarted(ctx)
	if hurry != nil {
		// A second Ctrl-C: KILL now, beside the helper still in its grace.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-hurry:
				_ = s.p.endProcesses(ctx, s.containerID, s.tag, 0, syscall.SIGKILL)
			case <-stop:
			}
		}()
	}
	giveUp := time.Now().Add(15*time.Second + s.grace())
	for {
		err := s.p.endProcesses(ctx, s.containerID, s.tag, s.grace(), sig)
		if err != nil && fail.KindOf(err) == fail.EngineUnavailable {
			return execState{err: err}, false
		}
		if err == nil && time.Now().Before(giveUp) {
			select {
			case st = <-exited:
				return st, false
			case <-time.After(time.Second):
				continue
			}
		}
		if err == nil {
			err = fmt.Errorf("the step's main process outlived KILL")
		}
		if rerr := s.p.restartContainer(ctx, s.containerID, err); rerr != nil {
			return execState{err: rerr}, true
		}
		select {
		case st = <-exited:
			return st, true
		case <-time.After(10 * time.Second):
			return execState{exitCode: 137, gone: true}, true
		}
	}
}

// waitStarted waits (briefly) until the runtime has started the exec.
func (s *step) waitStarted(ctx context.Context) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, s.p.callTimeout())
		ins, err := s.p.cli.ContainerExecInspect(cctx, s.execID)
		cancel()
		if err != nil || ins.Running || ins.Pid != 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitCommand waits (briefly) until the step's wrapper has forked its
// command: before that, a kill by the step's tag finds only the wrapper,
// which it spares, and the command would start after the kill. The child
// is seen through the daemon's ps (ContainerTop), so this costs no process
// in the container; it gives up when the exec has ended, when top is not
// available, or after 10 s.
func (s *step) waitCommand(ctx context.Context) {
	deadline := time.Now().Add(10 * time.Second)
	for interval := 5 * time.Millisecond; time.Now().Before(deadline); interval = min(interval*2, 100*time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, s.p.callTimeout())
		ins, err := s.p.cli.ContainerExecInspect(cctx, s.execID)
		cancel()
		if err != nil || ins.Pid != 0 && !ins.Running {
			return
		}
		if ins.Pid != 0 {
			cctx, cancel := context.WithTimeout(ctx, s.p.callTimeout())
			top, err := s.p.cli.ContainerTop(cctx, s.containerID, []string{"-o", "pid,ppid"})
			cancel()
			if err != nil {
				return
			}
			parent := strconv.Itoa(ins.Pid)
			for _, row := range top.Processes {
				if len(row) >= 2 && row[1] == parent {
					return
				}
			}
		}
		time.Sleep(interval)
	}
}

// sweep makes sure nothing of a step whose main process exited is left.
// The wrapper KILLs what its command left behind before it exits itself, so
// there is normally nothing to do; the daemon is asked (ContainerTop, no
// process in the container) only when the wrapper may have died before it
// could (status > 128) or when something still holds the output open. What
// is left is KILLed at once: the leader is gone, as on the host.
func (s *step) sweep(ctx context.Context, st execState, copyDone <-chan struct{}) (restarted bool) {
	if st.exitCode <= 128 {
		select {
		case <-copyDone:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	left, err := s.p.leftovers(ctx, s.containerID, s.initPid)
	if err == nil && !left {
		return false
	}
	if err := s.p.endProcesses(ctx, s.containerID, s.tag, 0, syscall.SIGKILL); err != nil {
		if fail.KindOf(err) == fail.EngineUnavailable {
			return false
		}
		if s.p.restartContainer(ctx, s.containerID, err) == nil {
			return true
		}
	}
	return false
}

// leftovers asks the daemon (ps on the daemon host, through `top`) whether
// anything is left that the step's sweep would end: a process outside the
// init's session (initPid's) that belongs to no live exec — not in the
// session or below an exec root (a process whose parent is not in the
// container), and not carrying a live root's tag. It costs no process in
// the container. An error means "cannot tell".
func (p *Provider) leftovers(ctx context.Context, containerID string, initPid int) (bool, error) {
	if p.topUnsupported.Load() {
		return false, fmt.Errorf("top unsupported")
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	top, err := p.cli.ContainerTop(cctx, containerID, []string{"-o", "pid,ppid,sid,stat,args", "ww", "e"})
	if err != nil {
		if !client.IsErrConnectionFailed(err) {
			p.topUnsupported.Store(true)
		}
		return false, err
	}
	col := map[string]int{}
	for i, t := range top.Titles {
		switch t {
		case "SESS":
			t = "SID"
		case "CMD":
			t = "COMMAND"
		}
		col[t] = i
	}
	for _, want := range []string{"PID", "PPID", "SID", "STAT", "COMMAND"} {
		if _, ok := col[want]; !ok {
			p.topUnsupported.Store(true)
			return false, fmt.Errorf("top gave columns %v", top.Titles)
		}
	}
	type proc struct{ pid, ppid, sid, args string }
	var procs []proc
	in := map[string]bool{}
	for _, row := range top.Processes {
		if len(row) < len(top.Titles) || strings.HasPrefix(row[col["STAT"]], "Z") {
			continue
		}
		pr := proc{row[col["PID"]], row[col["PPID"]], row[col["SID"]], row[col["COMMAND"]]}
		procs = append(procs, pr)
		in[pr.pid] = true
	}
	init := strconv.Itoa(initPid)
	live := map[string]bool{}
	var tags []string
	var rest []proc
	for _, pr := range procs {
		switch {
		case pr.sid == init:
		case !in[pr.ppid]:
			live[pr.pid] = true
			if t := lastTag(pr.args); t != "" {
				tags = append(tags, ExecTagEnv+"="+t)
			}
		default:
			rest = append(rest, pr)
		}
	}
	for more := true; more; {
		more = false
		var left []proc
		for _, pr := range rest {
			if live[pr.sid] || live[pr.ppid] || hasTag(pr.args, tags) {
				live[pr.pid], more = true, true
				continue
			}
			left = append(left, pr)
		}
		rest = left
	}
	return len(rest) > 0, nil
}

// lastTag is the value of the last XMODE_EXEC_TAG in a ps line's
// environment (the variables follow the command, separated by spaces).
func lastTag(args string) string {
	i := strings.LastIndex(args, ExecTagEnv+"=")
	if i < 0 {
		return ""
	}
	t, _, _ := strings.Cut(args[i+len(ExecTagEnv)+1:], " ")
	return t
}

// hasTag reports whether a ps line holds one of marks as a whole word.
func hasTag(args string, marks []string) bool {
	for _, f := range strings.Fields(args) {
		for _, m := range marks {
			if f == m {
				return true
			}
		}
	}
	return false
}

// endProcesses runs stepshell.Kill in the container: sig (TERM, or the signal
// that interrupted xmode) to every process of the step, KILL after grace. An error means it could not run (pids limit
// exhausted, memory) or something survived.
func (p *Provider) endProcesses(ctx context.Context, containerID, tag string, grace time.Duration, sig syscall.Signal) error {
	tenths := int((grace + 99*time.Millisecond) / (100 * time.Millisecond))
	cmd := []string{"/bin/sh", "-c", stepshell.Kill, "xmode-kill", tag, strconv.Itoa(tenths), strings.TrimPrefix(signalName(int(sig)), "SIG")}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
		}
		code, out, err := p.runHelper(ctx, containerID, cmd, grace+30*time.Second)
		switch {
		case err != nil && fail.KindOf(err) == fail.EngineUnavailable:
			return err
		case err != nil:
			last = err
		case code == 0:
			return nil
		case code == 3:
			return fmt.Errorf("processes of the step survived KILL (%s)", strings.TrimSpace(out))
		default:
			last = fmt.Errorf("the kill helper exited %d: %s", code, strings.TrimSpace(out))
		}
	}
	return last
}

// runHelper runs a short command of xmode's own in the container and
// returns its exit code and (bounded) output.
func (p *Provider) runHelper(ctx context.Context, containerID string, cmd []string, limit time.Duration) (int, string, error) {
	return p.runHelperAs(ctx, containerID, "", cmd, limit)
}

// runHelperAs is runHelper as another user ("" is the container's).
func (p *Provider) runHelperAs(ctx context.Context, containerID, user string, cmd []string, limit time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := checkRef("container", containerID); err != nil {
		return 0, "", err
	}
	created, err := p.cli.ContainerExecCreate(ctx, containerID, container.ExecOptions{User: user, Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return 0, "", p.wrap(err, "create helper exec")
	}
	execID := created.ID
	hr, err := p.execAttach(ctx, execID, false)
	if err != nil {
		return 0, "", p.wrap(err, "start helper exec")
	}
	defer hr.Close()
	out := &headBuffer{limit: 64 << 10}
	// The stream is not tied to ctx once started: the limit closes it.
	stop := context.AfterFunc(ctx, hr.Close)
	defer stop()
	if _, err := stdcopy.StdCopy(out, out, hr.Reader); err != nil && ctx.Err() != nil {
		return 0, out.String(), fmt.Errorf("helper exec did not finish within %s", limit)
	}
	for {
		ins, err := p.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, out.String(), p.wrap(err, "inspect helper exec")
		}
		if !ins.Running {
			if ins.Pid == 0 {
				return 0, out.String(), fmt.Errorf("helper exec could not start: %s", strings.TrimSpace(out.String()))
			}
			return ins.ExitCode, out.String(), nil
		}
		select {
		case <-ctx.Done():
			return 0, out.String(), fmt.Errorf("helper exec did not finish within %s", limit)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// restartContainer is the last resort when a step's processes cannot be
// ended from inside (no process slot left for an exec): KILL the container's
// init, which takes every process with it, and start it again.
func (p *Provider) restartContainer(ctx context.Context, containerID string, why error) error {
	p.warnf("could not end a step's processes inside container %s (%v); restarting the container to stop them — its tmpfs contents and any other running steps of the session are lost", shortID(containerID), why)
	zero := 0
	cctx, cancel := p.call(ctx)
	defer cancel()
	// The SDK leaves the signal out for daemons older than API 1.42, which
	// then send TERM and, after zero seconds, KILL.
	if err := p.cli.ContainerRestart(cctx, containerID, container.StopOptions{Signal: "KILL", Timeout: &zero}); err != nil {
		return p.wrap(err, "restart container "+shortID(containerID))
	}
	return nil
}

// oomKilled reports whether the memory cgroup's OOM killer struck while the
// exec ran. The container's State.OOMKilled only covers its main process;
// the daemon's "oom" event fires for any process in the container's cgroup
// (it watches the cgroup's OOM notification: memory.oom_control on v1,
// memory.events on v2). The event log, replayed in the daemon's own order,
// brackets it between this exec's exec_start and exec_die, without
// depending on the clocks of xmode's and the daemon's hosts agreeing, and
// without spending a process in the container.
func (p *Provider) oomKilled(ctx context.Context, containerID, execID string, started time.Time) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	msgs, errs := p.cli.Events(ctx, events.ListOptions{
		Since:   strconv.FormatInt(started.Add(-time.Minute).Unix(), 10),
		Filters: filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)), filters.Arg("container", containerID)),
	})
	seenStart, oom := false, false
	var late <-chan time.Time
	for {
		select {
		case m := <-msgs:
			action := string(m.Action)
			switch {
			case strings.HasPrefix(action, "exec_start") && m.Actor.Attributes["execID"] == execID:
				seenStart, oom = true, false
			case action == "oom" && seenStart:
				oom = true
				if late != nil {
					return true
				}
			case strings.HasPrefix(action, "exec_die") && m.Actor.Attributes["execID"] == execID:
				if oom {
					return true
				}
				// The oom event may trail the exit by a moment.
				late = time.After(300 * time.Millisecond)
			}
		case <-late:
			return oom
		case <-errs:
			return oom
		case <-ctx.Done():
			return oom
		}
	}
}

// signalName is the conventional name of signal n ("SIGTERM"), as the host
// provider reports it.
func signalName(n int) string {
	if name := unix.SignalName(syscall.Signal(n)); name != "" {
		return name
	}
	return "SIG" + strconv.Itoa(n)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// streamWriter passes output on and counts it; after the first write error
// (a closed terminal, a full disk) it drops the rest, so the step still runs
// to its end instead of stalling the stream.
type streamWriter struct {
	w      io.Writer
	n      atomic.Int64
	failed bool
}

func (s *streamWriter) Write(b []byte) (int, error) {
	s.n.Add(int64(len(b)))
	if !s.failed {
		if _, err := s.w.Write(b); err != nil {
			s.failed = true
		}
	}
	return len(b), nil
}

// headBuffer keeps the first limit bytes written to it and drops the rest:
// what a step or a helper prints is unbounded, a message needs its start.
type headBuffer struct {
	limit int
	mu    sync.Mutex
	buf   bytes.Buffer
}

func (h *headBuffer) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.limit - h.buf.Len(); room > 0 {
		h.buf.Write(b[:min(room, len(b))])
	}
	return len(b), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.String()
}

// KillStep ends the processes of one step in the session's container by
// its tag, as a timeout does: for a step whose xmode is gone (the reaper,
// teardown). A container that is gone or stopped has nothing left to end.
func (p *Provider) KillStep(ctx context.Context, sb engine.Sandbox, tag string) error {
	return p.SignalStep(ctx, sb, tag, syscall.SIGTERM, engine.DefaultGrace)
}

// SignalStep is KillStep with the first signal and the grace period of the
// caller's choosing (engine.StepSignaler): the kill helper sends sig and
// CONT to the step's processes, its wrapper spared so that the xmode
// running the step records how its command ended, and KILLs what is left
// after grace.
func (p *Provider) SignalStep(ctx context.Context, sb engine.Sandbox, tag string, sig syscall.Signal, grace time.Duration) error {
	if tag == "" || sb.ContainerID == "" && sb.SessionID == "" {
		return nil
	}
	if _, err := p.Ping(ctx); err != nil {
		return err
	}
	ci, err := p.ownedContainer(ctx, sb)
	if err != nil {
		if errors.Is(err, errContainerGone) {
			return nil
		}
		return err
	}
	if !ci.State.Running {
		return nil
	}
	return p.endProcesses(ctx, ci.ID, stepshell.Tag(tag), grace, sig)
}

// Containment says how a docker step is contained (engine.StepContainer):
// the container's PID namespace holds every process of every step, and a
// step's end KILLs whatever belongs to no live step.
func (p *Provider) Containment() engine.Containment {
	return engine.Containment{
		Method: "container",
		Detail: "each step runs in the session's container; when it ends, every process there that belongs to no running step is KILLed (tagged or not, in a session of its own or not), and a killed xmode's step is ended by `sandbox stop` or `xmode reap`",
	}
}
