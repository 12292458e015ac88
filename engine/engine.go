// Package engine is the one seam every command that runs inside a sandbox
// goes through (the design's Sandboxes::Engine). It defines the provider
// interface the providers implement and chooses the provider for a runner
// mode. The storage-root guard is package fsguard's.
package engine

import (
	"context"
	"io"
	"path"
	"path/filepath"
	"time"

	"github.com/xmode/xmode/egress"
)

// DefaultGrace is how long a step gets between TERM and KILL.
const DefaultGrace = 5 * time.Second

// Spec describes the sandbox a provider provisions for one session.
type Spec struct {
	SessionID string
	RunID     string
	Project   string
	Worktree  string // <root>/runs/<run>/worktree, already guarded
	Image     string
	Labels    map[string]string // for everything the engine creates: docs/reference.md, "Docker objects and labels"
	// User is the session's owner (XMODE_USER), for an engine that labels
	// its objects with it (kubernetes); Expires is when the session ends
	// (zero: no end known yet), for an engine with a dead-man switch
	// (Extender) that ends the sandbox should xmode die.
	User    string
	Expires time.Time
	// Pool is the project whose warm pool the sandbox is made for (a pool
	// entry: package pool), "" for a session's own: an engine with pools
	// of its own (WarmPooler) takes the sandbox from the project's.
	Pool string

	// Project machines (docs/project-machines.md); empty for a clone per run.
	// MachineGitDir is the machine's .git directory: the worktree's .git file
	// points into it by a relative path, so a container must see it at the
	// same position relative to the worktree (GitDirIn).
	MachineGitDir string
	// CacheVolume is the project's dependency-cache volume (xmode_proj_<id>),
	// to mount at CacheMount; it outlives the session (never in Volumes).
	CacheVolume string
	CacheMount  string
	// Env is KEY=VALUE for every step of a sandbox that mounts CacheVolume:
	// the cache locations under CacheMount. A provider that keeps volumes
	// (VolumeRemover) mounts the cache; one whose steps see the host's
	// files ignores CacheVolume, CacheMount and Env (its steps use the
	// user's own caches).
	Env []string

	// Egress is the sandbox's egress policy (docs/network.md) when its
	// network is proxied (XMODE_SANDBOX_NETWORK=allow or open): a provider
	// with EgressEnforcer gives the sandbox no way out but a proxy that
	// enforces it, and fills in where the proxy listens and what it blocks;
	// any other provider refuses the spec. nil: the engine's own network.
	Egress *egress.Policy
	// Getenv reads the host variables the policy's credentials name (the
	// secrets the proxy adds); nil: os.Getenv.
	Getenv func(string) string
}

// GitDirIn is where a sandbox that sees the worktree at containerWorktree
// must see MachineGitDir for git to work in the worktree; "" when the
// worktree is not from a project machine.
func (s Spec) GitDirIn(containerWorktree string) string {
	if s.MachineGitDir == "" {
		return ""
	}
	rel, err := filepath.Rel(s.Worktree, s.MachineGitDir)
	if err != nil {
		return ""
	}
	return path.Join(containerWorktree, filepath.ToSlash(rel))
}

// Sandbox is what a provider provisioned; it is stored on the session row
// and handed back for every Exec and for Destroy.
type Sandbox struct {
	Engine      string // "host", "docker" or "kubernetes"
	ContainerID string // docker: the container's ID; kubernetes: the pod's UID
	MountMode   string // how it sees its worktree (MountModer: docker's bind, volume or sync); "" for the host
	Image       string
	Volumes     []string // per-session volumes Destroy removes
	Worktree    string
	RunID       string
	SessionID   string
	Project     string
	// HostEnv is the environment policy of a step that runs on the host
	// (HostRunner; internal/hostenv's String form, as the session recorded
	// it): which of xmode's variables it inherits. "" inherits them all.
	HostEnv string
}

// ExecRequest is one step for a provider to run.
type ExecRequest struct {
	Argv    []string
	Env     []string // KEY=VALUE, added to the sandbox's environment
	Workdir string   // relative to the worktree, already checked by ResolveWorkdir
	Timeout time.Duration
	Grace   time.Duration // TERM→KILL; DefaultGrace when zero
	Stdin   io.Reader     // nil: no input
	Stdout  io.Writer
	Stderr  io.Writer
	// Tag is put in the step's environment as XMODE_EXEC_TAG, which its
	// processes inherit: how a provider finds them to end them, even when
	// the xmode that started them is gone (Provider.KillStep). A provider may
	// carry a value derived from it (docker: 16 hex digits) and names what
	// else it keeps of the step by it (the host: the step's cgroup).
	Tag string
	// TTY runs the step on a terminal of its own (a pty on the host, an
	// exec with a TTY in docker), as `docker exec -t` does: its output is
	// one stream, written to Stdout; Stdin is what the user types. Resize
	// delivers the window size, the first value being the initial one.
	TTY    bool
	Resize <-chan WinSize
	// Started, if set, is called once the step runs — its processes exist
	// and carry Tag, so KillStep or SignalStep from another xmode finds
	// them — before Exec returns; not when Exec fails before it could
	// start it (an error). A background step reports its number then
	// (sandbox.ExecDetached).
	Started func()
}

// WinSize is a terminal's size in characters.
type WinSize struct {
	Rows, Cols uint16
}

// ExecTagEnv is the variable that carries ExecRequest.Tag.
const ExecTagEnv = "XMODE_EXEC_TAG"

// Status is the "status" of the design's raw (stdout, stderr, status) triple.
type Status struct {
	ExitCode  int    `json:"exit_code"`
	Signal    string `json:"signal"`
	TimedOut  bool   `json:"timed_out"`
	OOMKilled bool   `json:"oom_killed"`
}

// Provider runs commands in sandboxes. Providers return the raw triple (output
// goes to the writers, the status is returned); callers keep the evidence.
//
// Exec returns an error only when xmode itself failed before the command
// could start (exit 125); a command that could not be found or executed is a
// Status (127, 126), like docker.
type Provider interface {
	Name() string
	Provision(ctx context.Context, spec Spec) (Sandbox, error)
	Exec(ctx context.Context, sb Sandbox, req ExecRequest) (Status, error)
	// Destroy removes what Provision created. Destroying something already
	// gone is not an error, so teardown can be retried until it converges.
	Destroy(ctx context.Context, sb Sandbox) error
	// KillStep ends every process of one step, found by the tag its
	// processes carry (ExecRequest.Tag), whether or not the xmode that
	// started it still runs: teardown calls it before a session's worktree
	// goes, the reaper for a step whose heartbeat went stale. Ending a step
	// that is already gone is not an error. Every provider has it: one that
	// could not end a step's processes could not keep the promise that
	// nothing outlives its step.
	KillStep(ctx context.Context, sb Sandbox, tag string) error
}
