package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// A background step (`sandbox exec --detach`, the MCP server's background
// sandbox_exec) is run by a supervisor: this xmode started again
// (/proc/self/exe) as `xmode __supervise SESSION`, in a session of its own
// (setsid), its standard streams /dev/null, so that neither the terminal
// nor the caller's exit reaches it. ExecDetached hands it the step over a
// pipe (fd 3: the configuration and the options, secrets included, which
// never appear in an argv or an environment), and it runs the step through
// Exec, the one exec path, with the output going only to the logs. Once
// the step is recorded it reports the step's number over a second pipe
// (fd 4) and ExecDetached returns it. The step's row names the supervisor
// as its owner process: a supervisor killed with -9 is a step whose xmode
// is gone, ended by its cgroup's watcher (host) or by the reaper
// (docs/flows.md, "Background steps").

// SupervisorCommand is the hidden command that makes xmode a background
// step's supervisor; cmd registers it and calls Supervise.
const SupervisorCommand = "__supervise"

// supervisorPath is the binary ExecDetached starts: this very one, even if
// its file was replaced since it started.
const supervisorPath = "/proc/self/exe"

// supervisorStartWait bounds how long ExecDetached waits for its supervisor
// to record the step (open the store, check the session, begin the step).
const supervisorStartWait = 2 * time.Minute

// handover is the step ExecDetached gives its supervisor.
type handover struct {
	Cfg       *config.Config `json:"cfg"`
	SessionID string         `json:"session_id"`
	Argv      []string       `json:"argv"`
	Env       []string       `json:"env"`
	// Lookup holds the caller's values of Env's bare NAMEs (LookupEnv):
	// the evidence records the name only, as for a step in the foreground.
	Lookup    map[string]string `json:"lookup"`
	SecretEnv []string          `json:"secret_env"`
	Name      string            `json:"name"`
	Workdir   string            `json:"workdir"`
	Timeout   time.Duration     `json:"timeout"`
	Grace     time.Duration     `json:"grace"`
	Prompt    string            `json:"prompt"`
}

// startReport is what a supervisor says back: the step's number, or why it
// could not record the step.
type startReport struct {
	Seq   int       `json:"seq,omitempty"`
	Error string    `json:"error,omitempty"`
	Kind  fail.Kind `json:"kind,omitempty"`
	// Parts is Error cut at the inputs it names (fail.Parts), so that each
	// front end still names them in its own words.
	Parts []fail.Part `json:"parts,omitempty"`
}

// ExecDetached runs one step in the background and returns its number as
// soon as it is recorded; the step goes on in a supervisor process of its
// own, its evidence kept as for any step (command.json, the capped logs,
// result.json and the row, secrets masked) and its processes contained as
// any step's. Its state and result are read with Step; it is ended by
// KillStep, by `sandbox stop` (stopped_by "sandbox stop"), by its
// --timeout, or when its session expires. Its output goes only to its logs:
// o.Live*, o.Stdin, o.TTY and o.Agent are refused, and o.OnStart is not
// called. A failure before the step is recorded (a bad workdir, a session
// not open) is the error, with its kind, and nothing is recorded; a
// failure after (the engine unreachable) is the step's result, 125.
func (s *Service) ExecDetached(ctx context.Context, sess *store.Session, o ExecOptions) (int, error) {
	switch {
	case len(o.Argv) == 0:
		return 0, fail.Usagef("no command: give the command to run in the background, e.g. `xmode sandbox exec --detach %s -- make serve`", sess.ID)
	case o.TTY:
		return 0, fail.Usagef("a background step has no terminal: leave out -t")
	case o.Stdin != nil:
		return 0, fail.Usagef("a background step reads no input: leave out -i")
	case o.Agent != nil:
		return 0, fail.Usagef("an agent step does not run in the background")
	case o.LiveStdout != nil || o.LiveStderr != nil:
		return 0, fail.Usagef("a background step's output goes to its logs only: follow it with `xmode sandbox logs %s STEP --follow`", sess.ID)
	case o.Timeout < 0:
		return 0, fail.Usagef("%s %s must be positive (or left out for none)", fail.Timeout, o.Timeout)
	}
	if _, err := o.environment(); err != nil {
		return 0, err
	}
	if err := store.CheckOpen(sess, s.Now()); err != nil {
		return 0, err
	}
	h := handover{Cfg: s.Cfg, SessionID: sess.ID, Argv: o.Argv, Env: o.Env, Lookup: map[string]string{}, SecretEnv: o.SecretEnv,
		Name: o.Name, Workdir: o.Workdir, Timeout: o.Timeout, Grace: o.Grace, Prompt: o.Prompt}
	lookup := o.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for _, kv := range o.Env {
		if !strings.Contains(kv, "=") {
			if v, ok := lookup(kv); ok {
				h.Lookup[kv] = v
			}
		}
	}
	return startSupervisor(ctx, sess.ID, h)
}

// startSupervisor starts the supervisor, hands it h and waits for its
// report.
func startSupervisor(ctx context.Context, sessionID string, h handover) (int, error) {
	handR, handW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("start a supervisor: %w", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		closeFiles(handR, handW)
		return 0, fmt.Errorf("start a supervisor: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		closeFiles(handR, handW, repR, repW)
		return 0, fmt.Errorf("start a supervisor: %w", err)
	}
	cmd := &exec.Cmd{
		Path: supervisorPath, Args: []string{os.Args[0], SupervisorCommand, sessionID},
		// Its environment is the caller's: a host step sees what it would
		// see in the foreground, and secrets in it are masked alike.
		Env: os.Environ(), Dir: "/",
		Stdin: null, Stdout: null, Stderr: null,
		ExtraFiles:  []*os.File{handR, repW}, // fd 3, fd 4
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	closeFiles(handR, repW, null)
	if err != nil {
		closeFiles(handW, repR)
		return 0, fmt.Errorf("start a supervisor (%s): %w", supervisorPath, err)
	}
	// Reaped whenever it ends, in a caller that outlives it (the MCP
	// server); a CLI exits first and leaves it to init.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	go func() {
		_ = json.NewEncoder(handW).Encode(h)
		handW.Close()
	}()
	got := make(chan startReport, 1)
	go func() {
		defer repR.Close()
		var r startReport
		if err := json.NewDecoder(repR).Decode(&r); err != nil {
			r = startReport{Error: "its supervisor ended before it recorded the step", Kind: fail.Failed}
			select {
			case werr := <-exited:
				if werr != nil {
					r.Error += " (" + werr.Error() + ")"
				}
			case <-time.After(time.Second):
			}
		}
		got <- r
	}()
	timer := time.NewTimer(supervisorStartWait)
	defer timer.Stop()
	select {
	case r := <-got:
		if r.Error != "" && len(r.Parts) > 0 {
			return 0, fail.FromParts(r.Kind, r.Parts)
		}
		if r.Error != "" {
			return 0, fail.As(r.Kind, errors.New(r.Error))
		}
		return r.Seq, nil
	case <-ctx.Done():
		// The caller gave up (Ctrl-C): the step it did not learn the
		// number of must not run on unseen. TERM ends it as Ctrl-C would.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return 0, ctx.Err()
	case <-timer.C:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return 0, fail.Failedf("the background step's supervisor did not record the step within %s (a busy store?); it was told to end", supervisorStartWait)
	}
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// SupervisorFiles are the two pipes a supervisor inherits from
// ExecDetached: the handover (fd 3) and the report (fd 4). Neither may
// reach the step's processes: they are made close-on-exec at once.
func SupervisorFiles() (handover io.ReadCloser, report io.WriteCloser) {
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	return os.NewFile(3, "handover"), os.NewFile(4, "report")
}

// SuperviseIfAsked makes a test binary a background step's supervisor when
// ExecDetached started it as one (os.Args[1] is SupervisorCommand) and
// exits when the step has ended; otherwise it returns at once. ExecDetached
// starts this very binary, so a test binary that calls it (in-process, not
// through xmode's cmd, whose hidden command does this) calls
// SuperviseIfAsked first in its TestMain. TERM or INT end the step as
// --timeout would.
func SuperviseIfAsked() {
	if len(os.Args) < 2 || os.Args[1] != SupervisorCommand {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	handover, report := SupervisorFiles()
	err := Supervise(ctx, handover, report, nil)
	stop()
	if err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// Supervise is a background step's supervisor (the hidden command
// SupervisorCommand): it reads the step ExecDetached handed over, runs it
// through Exec with its output going to the logs only, says the step's
// number on report once the step is recorded — or why it could not be —
// and returns when the step has ended. A cancelled ctx (a signal to the
// supervisor, with an engine.Interrupt cause) ends the step as Ctrl-C
// would. now is the clock its Service records by (nil: time.Now): the
// caller's, so that the step's heartbeats agree with the reaper's.
func Supervise(ctx context.Context, handoverR io.ReadCloser, report io.WriteCloser, now func() time.Time) (err error) {
	reported := false
	say := func(r startReport) {
		if !reported {
			reported = true
			_ = json.NewEncoder(report).Encode(r)
			report.Close()
		}
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("supervisor: panic: %v", p)
		}
		if err != nil {
			say(startReport{Error: err.Error(), Kind: fail.KindOf(err), Parts: fail.Parts(err)})
		}
		say(startReport{Error: "the supervisor ended without recording the step", Kind: fail.Failed})
	}()
	var h handover
	err = json.NewDecoder(handoverR).Decode(&h)
	handoverR.Close()
	if err != nil {
		return fmt.Errorf("read the background step: %w", err)
	}
	if h.Cfg == nil {
		return errors.New("read the background step: no configuration")
	}
	st, err := store.Open(ctx, h.Cfg.StorageRoot)
	if err != nil {
		return err
	}
	defer st.Close()
	svc := &Service{Cfg: h.Cfg, Store: st, Guard: fsguard.Guard{Root: h.Cfg.StorageRoot}, Clock: now}
	sess, err := st.Get(ctx, h.SessionID)
	if err != nil {
		return err
	}
	o := ExecOptions{
		Argv: h.Argv, Env: h.Env, SecretEnv: h.SecretEnv, Name: h.Name, Workdir: h.Workdir,
		Timeout: h.Timeout, Grace: h.Grace, Prompt: h.Prompt, detached: true,
		LookupEnv: func(k string) (string, bool) { v, ok := h.Lookup[k]; return v, ok },
		OnStart:   func(seq int) { say(startReport{Seq: seq}) },
	}
	// Once the step is recorded, how it ended (and what of its evidence was
	// lost) is on its row and in its result.json: nobody reads this error.
	_, err = svc.Exec(ctx, sess, o)
	return err
}
