// Package evidence is the one step recorder: every caller that runs a step
// in a sandbox (the CLI's exec, pipeline steps, agent runtimes) records it
// here, as a row in the store and as files under
// <root>/runs/<run>/steps/<seq>-<name>/ that outlive the worktree.
package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/storage"
	"github.com/xmode/xmode/store"
)

// Result is contract §3's step shape, also written as result.json.
type Result struct {
	SessionID  string    `json:"session_id"`
	Seq        int       `json:"seq"`
	Name       string    `json:"name"`
	Argv       []string  `json:"argv"`
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
}

// command is command.json: what was asked, before it ran.
type command struct {
	SessionID string    `json:"session_id"`
	RunID     string    `json:"run_id"`
	Seq       int       `json:"seq"`
	Name      string    `json:"name"`
	Argv      []string  `json:"argv"`
	Env       []string  `json:"env"`
	Workdir   string    `json:"workdir"`
	Engine    string    `json:"engine"`
	TimeoutMS int64     `json:"timeout_ms"`
	StartedAt time.Time `json:"started_at"`
}

// Step is a step being recorded.
type Step struct {
	st      *store.Store
	res     Result
	runID   string
	Stdout  *os.File
	Stderr  *os.File
	started time.Time
}

// Request is what a caller is about to run.
type Request struct {
	Session *store.Session
	Name    string // "" derives it from argv[0]
	Argv    []string
	Env     []string
	Workdir string
	Timeout time.Duration
}

// Begin allocates the step, creates its directory, writes command.json and
// opens the two log files the caller streams output into.
func Begin(ctx context.Context, st *store.Store, g storage.Guard, req Request) (*Step, error) {
	runDir, err := g.RunDir(req.Session.RunID)
	if err != nil {
		return nil, err
	}
	name := StepName(req.Name, req.Argv)
	now := time.Now().UTC()
	seq, dir, err := st.BeginStep(ctx, req.Session.ID, req.Session.RunID, name, req.Argv, now, func(seq int) string {
		return filepath.Join(runDir, "steps", fmt.Sprintf("%04d-%s", seq, name))
	})
	if err != nil {
		return nil, err
	}
	s := &Step{st: st, runID: req.Session.RunID, started: now, res: Result{
		SessionID: req.Session.ID, Seq: seq, Name: name, Argv: req.Argv, StartedAt: now, Dir: dir,
		StdoutPath: filepath.Join(dir, "stdout.log"), StderrPath: filepath.Join(dir, "stderr.log"),
	}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create step directory: %w", err)
	}
	env := req.Env
	if env == nil {
		env = []string{}
	}
	if err := writeJSON(filepath.Join(dir, "command.json"), command{
		SessionID: req.Session.ID, RunID: req.Session.RunID, Seq: seq, Name: name, Argv: req.Argv,
		Env: env, Workdir: req.Workdir, Engine: req.Session.Engine, TimeoutMS: req.Timeout.Milliseconds(), StartedAt: now,
	}); err != nil {
		return nil, err
	}
	if s.Stdout, err = os.OpenFile(s.res.StdoutPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644); err != nil {
		return nil, fmt.Errorf("create stdout log: %w", err)
	}
	if s.Stderr, err = os.OpenFile(s.res.StderrPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644); err != nil {
		s.Stdout.Close()
		return nil, fmt.Errorf("create stderr log: %w", err)
	}
	return s, nil
}

// Seq is the step's number in its run.
func (s *Step) Seq() int { return s.res.Seq }

// Finish closes the logs, writes result.json and records the outcome.
func (s *Step) Finish(ctx context.Context, status engine.Status) (*Result, error) {
	now := time.Now().UTC()
	s.res.ExitCode, s.res.Signal, s.res.TimedOut, s.res.OOMKilled = status.ExitCode, status.Signal, status.TimedOut, status.OOMKilled
	s.res.FinishedAt = now
	s.res.DurationMS = now.Sub(s.started).Milliseconds()
	err1 := s.Stdout.Close()
	err2 := s.Stderr.Close()
	if err := writeJSON(filepath.Join(s.res.Dir, "result.json"), s.res); err != nil {
		return nil, err
	}
	if err := s.st.FinishStep(ctx, s.runID, s.res.Seq, now, status.ExitCode, status.Signal, status.TimedOut, status.OOMKilled); err != nil {
		return nil, err
	}
	for _, err := range []error{err1, err2} {
		if err != nil {
			return &s.res, fmt.Errorf("close step log: %w", err)
		}
	}
	return &s.res, nil
}

// StepName is the directory-safe name of a step: --name if given, else the
// base name of the command, lowercased, [a-z0-9._-] only, at most 40 bytes.
func StepName(name string, argv []string) string {
	if name == "" && len(argv) > 0 {
		name = filepath.Base(argv[0])
	}
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	out := strings.Trim(b.String(), "-.")
	if out == "" {
		return "step"
	}
	return out
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
