// Package evidence is the one step recorder: every caller that runs a step
// in a sandbox (the CLI's exec, pipeline steps, agent runtimes) records it
// here, as a row in the store and as files under
// <root>/runs/<run>/steps/<seq>-<name>/ that outlive the worktree.
//
// Evidence is written through an os.Root confined to <root>/runs, into a
// step directory made fresh for the step, with files created exclusively:
// a host step that replaced a step directory with a symlink cannot make the
// next step's evidence land outside the storage root or overwrite anything.
// Directories are 0700 and files 0600: evidence holds what steps printed.
package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// DefaultMaxLogBytes caps each of a step's two logs (XMODE_EVIDENCE_MAX_BYTES).
const DefaultMaxLogBytes = 256 << 20

// Result is a step's outcome as --json prints it and result.json keeps it
// (docs/reference.md, "Step result").
type Result struct {
	SessionID string   `json:"session_id"`
	Seq       int      `json:"seq"`
	Name      string   `json:"name"`
	Argv      []string `json:"argv"`
	// ArgvB64 is argv byte for byte, when an argument is not valid UTF-8.
	ArgvB64    []string  `json:"argv_b64,omitempty"`
	ExitCode   int       `json:"exit_code"`
	Signal     string    `json:"signal"`
	TimedOut   bool      `json:"timed_out"`
	OOMKilled  bool      `json:"oom_killed"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS int64     `json:"duration_ms"`
	Dir        string    `json:"dir"`
	StdoutPath string    `json:"stdout_path"`
	StderrPath string    `json:"stderr_path"`
	// Truncated: a log reached XMODE_EVIDENCE_MAX_BYTES; the rest of that
	// stream was not kept (the terminal saw all of it).
	Truncated bool `json:"truncated"`
	// EvidenceIncomplete: some evidence could not be written (a full disk);
	// the status above is still the command's.
	EvidenceIncomplete bool `json:"evidence_incomplete,omitempty"`
	// StoppedBy names what ended the step while it ran: "sandbox stop"
	// (`xmode sandbox stop`: a background step, or any with --force) or
	// "sandbox kill"; absent when nothing did.
	StoppedBy string `json:"stopped_by,omitempty"`
	// Detached: a background step (`sandbox exec --detach`); absent
	// otherwise.
	Detached bool `json:"detached,omitempty"`
	// Agent summarises an agent step's event stream (docs/agents.md,
	// "Evidence of an agent step").
	Agent *Agent `json:"agent,omitempty"`
	// File is what a file step (read, list, write, edit, delete: the MCP
	// server's file tools) did to the worktree.
	File *FileOutcome `json:"file,omitempty"`
	// Network is the policy a network step (a change of the sandbox's
	// egress policy) left.
	Network *NetworkOutcome `json:"network,omitempty"`
	// Why is xmode's own line on a failure it recognised (an agent not
	// signed in, its CLI missing), for the caller to show; result.json
	// keeps the agent's own words in Agent.Error instead.
	Why string `json:"-"`
}

// Agent is the agent object of an agent step's result.json: what the
// agent's CLI reported, where it reported it (events.jsonl beside it has
// the whole stream).
type Agent struct {
	Kind         string   `json:"kind"`
	FinalMessage string   `json:"final_message"`
	Commands     []string `json:"commands"`
	FilesChanged []string `json:"files_changed"`
	Tokens       *Tokens  `json:"tokens"` // null when the CLI reported none
	Events       int      `json:"events"` // JSON events seen on stdout
	// Error is why the agent failed, in its CLI's words where it said so.
	Error string `json:"error,omitempty"`
}

// FileRequest is command.json's "file" for a file step: what was asked
// of which path of the worktree.
type FileRequest struct {
	Op   string `json:"op"`   // read, list, write, edit, delete
	Path string `json:"path"` // relative to the worktree
	// Pattern is a list's glob; StartLine and EndLine a read's range (0:
	// from the start, to the end); ContentBytes what a write was given;
	// ReplaceAll an edit's; Recursive a delete's.
	Pattern      string `json:"pattern,omitempty"`
	StartLine    int    `json:"start_line,omitempty"`
	EndLine      int    `json:"end_line,omitempty"`
	ContentBytes *int64 `json:"content_bytes,omitempty"`
	ReplaceAll   bool   `json:"replace_all,omitempty"`
	Recursive    bool   `json:"recursive,omitempty"`
}

// NetworkRequest is command.json's "network" for a network step: a change
// of a live sandbox's egress policy (docs/network.md), with the rules it
// adds and removes and the source the new ones are named by.
type NetworkRequest struct {
	Mode         string   `json:"mode,omitempty"`
	Allow        []string `json:"allow,omitempty"`
	Deny         []string `json:"deny,omitempty"`
	Credentials  []string `json:"credentials,omitempty"`
	Remove       []string `json:"remove,omitempty"`
	RemoveSource string   `json:"remove_source,omitempty"`
	Source       string   `json:"source"`
}

// NetworkOutcome is result.json's "network" for a network step: the
// policy in force once it ended (the one before it, when it failed).
type NetworkOutcome struct {
	Policy *store.NetworkPolicy `json:"policy"`
}

// FileOutcome is result.json's "file" for a file step: the path before
// and after it (null where there was no file), so the evidence shows
// every edit by its hashes.
type FileOutcome struct {
	Op     string    `json:"op"`
	Path   string    `json:"path"`
	Before *FileHash `json:"before"`
	After  *FileHash `json:"after"`
	// Replacements is how many places an edit changed; Entries how many a
	// list found; Removed how many entries a delete removed.
	Replacements int `json:"replacements,omitempty"`
	Entries      int `json:"entries,omitempty"`
	Removed      int `json:"removed,omitempty"`
}

// FileHash is a file's sha256 and size.
type FileHash struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Tokens is an agent's token usage.
type Tokens struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// command is command.json: what was asked, before it ran.
type command struct {
	SessionID string    `json:"session_id"`
	RunID     string    `json:"run_id"`
	Seq       int       `json:"seq"`
	Name      string    `json:"name"`
	Argv      []string  `json:"argv"`
	ArgvB64   []string  `json:"argv_b64,omitempty"`
	Env       []string  `json:"env"`
	Workdir   string    `json:"workdir"`
	Engine    string    `json:"engine"`
	TTY       bool      `json:"tty,omitempty"`
	Detached  bool      `json:"detached,omitempty"`
	TimeoutMS int64     `json:"timeout_ms"`
	StartedAt time.Time `json:"started_at"`
	// File: a file step's request; left out for a command.
	File *FileRequest `json:"file,omitempty"`
	// Network: a network step's request; left out for a command.
	Network *NetworkRequest `json:"network,omitempty"`
}

// Step is a step being recorded. Stdout and Stderr never fail and never
// block on anything but the disk: output past the cap, or after a write
// error, is dropped and the loss is recorded, so the step itself runs on.
type Step struct {
	st             *store.Store
	guard          fsguard.Guard
	res            Result
	runID          string
	dir            *os.Root // the step directory, opened once: its files are made in it
	rel            string   // the step directory, relative to <root>/runs
	stdout, stderr *capLog
	extra          []*capLog // AddLog's
	maxLog         int64
	Stdout         io.Writer
	Stderr         io.Writer
	started        time.Time
	now            func() time.Time
}

// Request is what a caller is about to run.
type Request struct {
	Session *store.Session
	Name    string // "" derives it from argv (StepName)
	Argv    []string
	Env     []string
	Workdir string
	Timeout time.Duration
	// Tag is the XMODE_EXEC_TAG the step's processes carry (engine.ExecRequest).
	Tag string
	// MaxLogBytes caps each log; DefaultMaxLogBytes when zero.
	MaxLogBytes int64
	// TTY: the step ran on a terminal; stdout.log is its transcript.
	TTY bool
	// File makes this a file step (no process runs): what it asks.
	File *FileRequest
	// Network makes this a network step (no process runs): the change of
	// the sandbox's egress policy it asks.
	Network *NetworkRequest
	// Now is the clock the step's times are read from (the service's, so
	// that they agree with its expiry and leases); nil is time.Now.
	Now func() time.Time
	// Detached: a background step, run by a supervisor xmode of its own.
	Detached bool
}

// Begin allocates the step, creates its directory, writes command.json and
// opens the two log files the caller streams output into.
func Begin(ctx context.Context, st *store.Store, g fsguard.Guard, req Request) (*Step, error) {
	runDir, err := g.RunDir(req.Session.RunID)
	if err != nil {
		return nil, err
	}
	name, err := StepName(req.Name, req.Argv)
	if err != nil {
		return nil, err
	}
	clock := req.Now
	if clock == nil {
		clock = time.Now
	}
	now := clock().UTC()
	rel := func(seq int) string {
		return filepath.Join(req.Session.RunID, "steps", fmt.Sprintf("%04d-%s", seq, name))
	}
	seq, dir, err := st.BeginStep(ctx, store.NewStep{
		SessionID: req.Session.ID, RunID: req.Session.RunID, Name: name, Argv: req.Argv, Tag: req.Tag, Detached: req.Detached, Started: now,
		DirFor: func(seq int) string { return filepath.Join(g.RunsDir(), rel(seq)) },
	})
	if err != nil {
		return nil, err
	}
	s := &Step{st: st, guard: g, runID: req.Session.RunID, rel: rel(seq), started: now, now: clock, res: Result{
		SessionID: req.Session.ID, Seq: seq, Name: name, Argv: req.Argv, ArgvB64: store.ArgvBase64(req.Argv), StartedAt: now, Dir: dir,
		StdoutPath: filepath.Join(dir, "stdout.log"), StderrPath: filepath.Join(dir, "stderr.log"), Detached: req.Detached,
	}}
	if err := s.open(runDir, req, now); err != nil {
		s.stdout.close()
		s.stderr.close()
		s.close()
		// The row says running; nothing will run: record it as xmode's own
		// failure (125), as far as the disk lets us.
		_, _ = st.FinishStep(context.WithoutCancel(ctx), store.StepEnd{RunID: s.runID, Seq: seq, Finished: clock(), ExitCode: 125, EvidenceIncomplete: true})
		return nil, fsguard.WriteError(g.Root, err)
	}
	return s, nil
}

func (s *Step) open(runDir string, req Request, now time.Time) error {
	if err := os.MkdirAll(runDir, fsguard.RunDirMode); err != nil {
		return fmt.Errorf("create run directory: %w", err)
	}
	runs, err := os.OpenRoot(s.guard.RunsDir())
	if err != nil {
		return fmt.Errorf("open %s: %w", s.guard.RunsDir(), err)
	}
	defer runs.Close()
	steps := filepath.Dir(s.rel)
	if err := runs.MkdirAll(steps, fsguard.EvidenceDirMode); err != nil {
		return fmt.Errorf("create %s: %w", steps, err)
	}
	// A fresh directory: Mkdir fails on anything already there, a symlink
	// a step planted included.
	if err := runs.Mkdir(s.rel, fsguard.EvidenceDirMode); err != nil {
		return fmt.Errorf("create step directory: %w", err)
	}
	// Opened once, through the confined root, for every file the step
	// keeps: each file is then one openat in it, not a walk from runs.
	if s.dir, err = runs.OpenRoot(s.rel); err != nil {
		return fmt.Errorf("open step directory: %w", err)
	}
	env := req.Env
	if env == nil {
		env = []string{}
	}
	if err := s.writeJSON("command.json", command{
		SessionID: req.Session.ID, RunID: req.Session.RunID, Seq: s.res.Seq, Name: s.res.Name, Argv: req.Argv, ArgvB64: s.res.ArgvB64,
		Env: env, Workdir: req.Workdir, Engine: req.Session.Engine, TTY: req.TTY, Detached: req.Detached, TimeoutMS: req.Timeout.Milliseconds(), StartedAt: now,
		File: req.File, Network: req.Network,
	}); err != nil {
		return err
	}
	max := req.MaxLogBytes
	if max <= 0 {
		max = DefaultMaxLogBytes
	}
	s.maxLog = max
	for _, l := range []struct {
		name string
		log  **capLog
	}{{"stdout", &s.stdout}, {"stderr", &s.stderr}} {
		f, err := s.create(l.name + ".log")
		if err != nil {
			return fmt.Errorf("create %s log: %w", l.name, err)
		}
		*l.log = &capLog{f: f, max: max, stream: l.name}
	}
	s.Stdout, s.Stderr = s.stdout, s.stderr
	return nil
}

// create makes a new file in the step directory, exclusively: O_EXCL
// follows no link and overwrites nothing.
func (s *Step) create(name string) (*os.File, error) {
	return s.dir.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
}

// AddLog creates one more file in the step directory (an agent step's
// events.jsonl, its prompt) and returns a writer for it that behaves like
// the two logs: created exclusively through the confined root, capped at
// XMODE_EVIDENCE_MAX_BYTES, never failing the writer; Finish closes it and
// records what it lost.
func (s *Step) AddLog(name string) (io.Writer, error) {
	switch name {
	case "", ".", "..", "command.json", "stdout.log", "stderr.log", "result.json":
		return nil, fmt.Errorf("evidence: %q is not a name for another file of the step", name)
	}
	if filepath.Base(name) != name {
		return nil, fmt.Errorf("evidence: %q is not a plain file name", name)
	}
	f, err := s.create(name)
	if err != nil {
		return nil, fsguard.WriteError(s.guard.Root, fmt.Errorf("create %s: %w", name, err))
	}
	l := &capLog{f: f, max: s.maxLog, stream: name}
	s.extra = append(s.extra, l)
	return l, nil
}

// SetAgent puts the agent summary into result.json (call before Finish).
func (s *Step) SetAgent(a *Agent) { s.res.Agent = a }

// SetFile puts a file step's outcome into result.json (call before Finish).
func (s *Step) SetFile(f *FileOutcome) { s.res.File = f }

// SetNetwork puts a network step's outcome into result.json (call before
// Finish).
func (s *Step) SetNetwork(n *NetworkOutcome) { s.res.Network = n }

// Dir is the step directory.
func (s *Step) Dir() string { return s.res.Dir }

// Seq is the step's number in its run.
func (s *Step) Seq() int { return s.res.Seq }

// Incomplete is Finish's error when the command ran but some of its
// evidence could not be kept; the Result still holds the command's status.
type Incomplete struct {
	Lost []string // what was lost, one phrase each
	Err  error    // the first cause
}

func (e *Incomplete) Error() string {
	return fmt.Sprintf("the step's evidence is incomplete (%s): %v", strings.Join(e.Lost, "; "), e.Err)
}

func (e *Incomplete) Unwrap() error { return e.Err }

// Finish closes the logs, writes result.json and records the outcome. Every
// part is attempted whatever failed before it; a failure makes the error an
// *Incomplete (and, where it can still be written, marks the row
// evidence_incomplete). The Result is returned whenever the step's status
// is known.
func (s *Step) Finish(ctx context.Context, status engine.Status) (*Result, error) {
	now := s.now().UTC()
	s.res.ExitCode, s.res.Signal, s.res.TimedOut, s.res.OOMKilled = status.ExitCode, status.Signal, status.TimedOut, status.OOMKilled
	s.res.FinishedAt = now
	s.res.DurationMS = now.Sub(s.started).Milliseconds()
	inc := &Incomplete{}
	lose := func(what string, err error) {
		inc.Lost = append(inc.Lost, what)
		if inc.Err == nil {
			inc.Err = fsguard.WriteError(s.guard.Root, err)
		}
	}
	for _, l := range []*capLog{s.stdout, s.stderr} {
		if err := l.close(); err != nil {
			lose(fmt.Sprintf("%s.log stops after %d bytes", l.stream, l.n), err)
		}
		s.res.Truncated = s.res.Truncated || l.truncated
	}
	for _, l := range s.extra {
		if err := l.close(); err != nil {
			lose(fmt.Sprintf("%s stops after %d bytes", l.stream, l.n), err)
		}
		s.res.Truncated = s.res.Truncated || l.truncated
	}
	s.res.EvidenceIncomplete = len(inc.Lost) > 0
	// The row first: it says whether the step was stopped (StopSteps),
	// which result.json records too.
	stoppedBy, err := s.st.FinishStep(ctx, store.StepEnd{
		RunID: s.runID, Seq: s.res.Seq, Finished: now, ExitCode: status.ExitCode, Signal: status.Signal,
		TimedOut: status.TimedOut, OOMKilled: status.OOMKilled, Truncated: s.res.Truncated, EvidenceIncomplete: s.res.EvidenceIncomplete,
	})
	s.res.StoppedBy = stoppedBy
	if err != nil {
		lose("the store still says the step is running (the reaper marks it lost)", err)
	}
	if err := s.writeResult(); err != nil {
		s.res.EvidenceIncomplete = true
		lose("no result.json", err)
		// Said on the row as well, where it can still be written.
		_ = s.st.SetEvidenceIncomplete(ctx, s.runID, s.res.Seq)
	}
	s.close()
	if len(inc.Lost) > 0 {
		return &s.res, inc
	}
	return &s.res, nil
}

// writeResult writes result.json. On a full disk (the step filled it) it
// takes a chunk of the store's reserve and tries again: the status of a
// step is the evidence that matters most, and the row written next has
// room left in that chunk.
func (s *Step) writeResult() error {
	err := s.writeJSON(ResultFile, s.res)
	if err != nil && fsguard.IsDiskFull(err) && s.st.MakeRoom() {
		_ = s.dir.Remove(ResultFile) // what the failed write left
		err = s.writeJSON(ResultFile, s.res)
	}
	return err
}

func (s *Step) close() {
	if s.dir != nil {
		s.dir.Close()
	}
}

// MaxNameLen bounds a step's name.
const MaxNameLen = 63

// CheckName refuses a step name a person gave (--name, a plan's name:) that
// is not one: 1 to 63 letters, digits, '.', '_' or '-', starting with a
// letter or digit — docker's rule for container names — and not a number,
// which `sandbox logs ID N` would take for step N. Names are kept as given,
// case included, and are the step directory's name as they are.
func CheckName(name string) error {
	if !dirName(name) || !isAlnum(rune(name[0])) || len(name) > MaxNameLen {
		return fail.Usagef("%q is not a step name: 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", name, MaxNameLen)
	}
	if strings.Trim(name, "0123456789") == "" {
		return fail.Usagef("%q is not a step name: a number would be taken for a step's number (`xmode sandbox logs ID 3`); add a letter", name)
	}
	return nil
}

// StepName is the step's name: name if given (checked by CheckName), else
// the command's words joined by '-' — `make test` is make-test, `go test
// ./...` go-test — cut to 40 characters at a word, as CI systems name a
// step after its command line.
func StepName(name string, argv []string) (string, error) {
	if name != "" {
		return name, CheckName(name)
	}
	var words []string
	for i, a := range argv {
		if i == 0 {
			a = filepath.Base(a)
		}
		for _, w := range strings.FieldsFunc(a, func(r rune) bool { return !isAlnum(r) && r != '.' && r != '_' }) {
			if w = strings.Trim(w, "._"); w != "" {
				words = append(words, w)
			}
		}
	}
	out := ""
	for _, w := range words {
		if out == "" {
			out = w[:min(len(w), 40)]
			continue
		}
		if len(out)+1+len(w) > 40 {
			break
		}
		out += "-" + w
	}
	out = strings.TrimRight(out, "._")
	if out == "" {
		return "step", nil
	}
	if strings.Trim(out, "0123456789") == "" {
		out = "step-" + out
	}
	return out, nil
}

// dirName reports whether name can be a step directory's name as it is:
// letters, digits, '.', '_' and '-', not starting with '.' (so never "."
// or ".."). Every name xmode ever recorded is one.
func dirName(name string) bool {
	if name == "" || len(name) > MaxNameLen+8 || name[0] == '.' {
		return false
	}
	for _, r := range name {
		if !isAlnum(r) && r != '.' && r != '_' && r != '-' {
			return false
		}
	}
	return true
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func (s *Step) writeJSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	f, err := s.create(name)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// capLog is one log file. It keeps at most max bytes, then one marker line,
// and stops at the first write error; either way it reports every write as
// done, so the copy feeding it (and the terminal beside it) goes on.
type capLog struct {
	f         *os.File
	max, n    int64
	stream    string
	truncated bool
	err       error
}

func (c *capLog) Write(p []byte) (int, error) {
	if c.err != nil || c.truncated {
		return len(p), nil
	}
	keep := p
	if room := c.max - c.n; int64(len(p)) > room {
		keep = p[:room]
	}
	n, err := c.f.Write(keep)
	c.n += int64(n)
	if err != nil {
		c.err = err
		return len(p), nil
	}
	if len(keep) < len(p) {
		c.truncated = true
		marker := fmt.Sprintf("\n[xmode: %s truncated after %d bytes (XMODE_EVIDENCE_MAX_BYTES); the rest was not kept]\n", c.stream, c.max)
		if _, err := io.WriteString(c.f, marker); err != nil {
			c.err = err
		}
	}
	return len(p), nil
}

func (c *capLog) close() error {
	if c == nil {
		return nil
	}
	err := c.f.Close()
	if c.err != nil {
		return c.err
	}
	return err
}
