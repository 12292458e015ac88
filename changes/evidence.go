package changes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// Evidence is evidence.json: every step of the run when the change request
// was made — what a reviewer needs to see whether the checks passed — with
// the sha256 of each finished step's logs, so a log changed later shows.
type Evidence struct {
	RunID       string         `json:"run_id"`
	GeneratedAt time.Time      `json:"generated_at"`
	Steps       []StepEvidence `json:"steps"`
	// Network is what the run's sandboxes reached through their egress
	// proxies and what they were refused (docs/network.md); absent when
	// no sandbox of the run had a proxied network.
	Network *evidence.NetworkSummary `json:"network,omitempty"`
}

// StepEvidence is one step: the store's record, what command.json asked
// for, and the agent summary result.json holds for agent steps.
type StepEvidence struct {
	Seq        int        `json:"seq"`
	Name       string     `json:"name"`
	SessionID  string     `json:"session_id"`
	Argv       []string   `json:"argv"`
	Status     string     `json:"status"` // passed, failed, timed_out, oom_killed, killed, running
	ExitCode   *int       `json:"exit_code"`
	Signal     string     `json:"signal"`
	TimedOut   bool       `json:"timed_out"`
	OOMKilled  bool       `json:"oom_killed"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	DurationMS int64      `json:"duration_ms"`
	Workdir    string     `json:"workdir"`
	Engine     string     `json:"engine"`
	TimeoutMS  int64      `json:"timeout_ms"`
	Dir        string     `json:"dir"`
	StdoutPath string     `json:"stdout_path"`
	StderrPath string     `json:"stderr_path"`
	Stdout     *FileHash  `json:"stdout,omitempty"` // finished steps only
	Stderr     *FileHash  `json:"stderr,omitempty"`
	// Agent is result.json's "agent" object, as the agent runtime wrote it.
	Agent json.RawMessage `json:"agent,omitempty"`
	// File is result.json's "file" object of a file step (an MCP client's
	// file_write, file_edit…): the path and its hashes before and after.
	File json.RawMessage `json:"file,omitempty"`
	// Network is what began while the step ran, of its session's network
	// log: a proxied sandbox's steps that made connections only.
	Network *evidence.StepNetwork `json:"network,omitempty"`
	// NetworkChange is result.json's "network" of a network step (a
	// change of the sandbox's egress policy): the policy it left.
	NetworkChange json.RawMessage `json:"network_change,omitempty"`
}

// FileHash is a file's sha256 and size.
type FileHash struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// An evidence step's status (docs/reference.md, "Evidence step status").
const (
	EvidencePassed    = "passed"
	EvidenceFailed    = "failed"
	EvidenceTimedOut  = "timed_out"
	EvidenceOOMKilled = "oom_killed"
	EvidenceKilled    = "killed"
	// EvidenceRunning: not finished when the package was made (running or lost).
	EvidenceRunning = "running"
)

// Passed reports a step that finished with status 0.
func (s StepEvidence) Passed() bool { return s.Status == EvidencePassed }

// StepStatus is how a step the store records ended, as evidence.json says
// it (EvidencePassed, …).
func StepStatus(r store.StepRow) string {
	switch {
	case r.State != store.StateFinished || r.ExitCode == nil:
		return EvidenceRunning
	case r.TimedOut:
		return EvidenceTimedOut
	case r.OOMKilled:
		return EvidenceOOMKilled
	case r.Signal != "":
		return EvidenceKilled
	case *r.ExitCode == 0:
		return EvidencePassed
	}
	return EvidenceFailed
}

// evidence collects the run's steps. Step directories are derived from the
// run and the step (never taken from the row) and read through an os.Root
// of the run directory, without following links out of it.
func (s *Service) evidence(ctx context.Context, runID string, now time.Time) (*Evidence, error) {
	rows, err := s.Store.Steps(ctx, runID)
	if err != nil {
		return nil, err
	}
	runDir, err := s.Guard.RunDir(runID)
	if err != nil {
		return nil, err
	}
	ev := &Evidence{RunID: runID, GeneratedAt: now, Steps: []StepEvidence{}}
	// The network logs of the run's proxied sandboxes, each step's share
	// by time.
	sessions, err := s.Store.RunSessions(ctx, runID)
	if err != nil {
		return nil, err
	}
	logs := map[string]string{}
	for _, sess := range sessions {
		if p, err := evidence.NetworkLog(ctx, s.Cfg, s.Guard, sess); err == nil && p != "" {
			logs[sess.ID] = p
		}
	}
	// A network log that cannot be read fails the package: its evidence
	// would say less than what happened.
	if ev.Network, err = evidence.SummarizeNetwork(ctx, s.Cfg, s.Guard, sessions, rows); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(runDir)
	if err != nil {
		return nil, fmt.Errorf("open run directory: %w", err)
	}
	defer root.Close()
	for _, r := range rows {
		rel := fmt.Sprintf("steps/%04d-%s", r.Seq, r.Name)
		se := StepEvidence{
			Seq: r.Seq, Name: r.Name, SessionID: r.SessionID, Argv: r.Argv, Status: StepStatus(r),
			ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, OOMKilled: r.OOMKilled,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
			Dir: runDir + "/" + rel, StdoutPath: runDir + "/" + rel + "/stdout.log", StderrPath: runDir + "/" + rel + "/stderr.log",
		}
		if se.Argv == nil {
			se.Argv = []string{}
		}
		if r.FinishedAt != nil {
			se.DurationMS = r.FinishedAt.Sub(r.StartedAt).Milliseconds()
		}
		var cmd struct {
			Workdir   string `json:"workdir"`
			Engine    string `json:"engine"`
			TimeoutMS int64  `json:"timeout_ms"`
		}
		if b, err := fsguard.ReadRegular(root, rel+"/command.json", 1<<20); err == nil {
			_ = json.Unmarshal(b, &cmd)
		}
		se.Workdir, se.Engine, se.TimeoutMS = cmd.Workdir, cmd.Engine, cmd.TimeoutMS
		var res struct {
			DurationMS int64           `json:"duration_ms"`
			Agent      json.RawMessage `json:"agent"`
			File       json.RawMessage `json:"file"`
			Network    json.RawMessage `json:"network"`
		}
		if b, err := fsguard.ReadRegular(root, rel+"/result.json", 1<<20); err == nil && json.Unmarshal(b, &res) == nil {
			if len(res.Agent) > 0 && string(res.Agent) != "null" {
				se.Agent = res.Agent
			}
			if len(res.File) > 0 && string(res.File) != "null" {
				se.File = res.File
			}
			if len(res.Network) > 0 && string(res.Network) != "null" {
				se.NetworkChange = res.Network
			}
			if res.DurationMS > 0 {
				se.DurationMS = res.DurationMS
			}
		}
		if p := logs[r.SessionID]; p != "" {
			se.Network, _ = evidence.SummarizeStep(p, r)
		}
		if se.Status != EvidenceRunning {
			se.Stdout, _ = hashFileIn(ctx, root, rel+"/stdout.log", -1)
			se.Stderr, _ = hashFileIn(ctx, root, rel+"/stderr.log", -1)
		}
		ev.Steps = append(ev.Steps, se)
	}
	return ev, nil
}

// hashFileIn is the sha256 and size of a regular file under root. A file
// whose size (fstat) is not want (when want >= 0) is not read: its
// SHA256 is left empty.
func hashFileIn(ctx context.Context, root *os.Root, name string, want int64) (*FileHash, error) {
	f, size, err := fsguard.OpenRegularSized(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if want >= 0 && size != want {
		return &FileHash{Size: size}, nil
	}
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx, f})
	if err != nil {
		return nil, err
	}
	return &FileHash{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}
