package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"sort"
	"syscall"
	"time"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/fail"
)

// Optional capabilities, in the manner of Nomad's task drivers: a provider
// implements the ones its engine has, and callers ask for them through the
// helpers below instead of naming a provider or comparing an engine's name
// (engine/seam_test.go fails when anything above the seam does). An engine
// without one is simply an engine that needs nothing of the kind (the host
// engine has no orphans, no daemon to check, no copy of the worktree).
// What every provider must do is engine.Provider itself (KillStep
// included); the conformance suite, engine/enginetest, checks it, and
// checks the answers of the capabilities below that a step can see
// (StepWorktree, OnHost, Alive).

// Object kinds an OrphanLister lists.
const (
	KindContainer = "container"
	KindVolume    = "volume"
	KindNetwork   = "network" // a sandbox's own network (docker: its egress network)
	KindPod       = "pod"     // a Kubernetes pod: a session's sandbox, like a container
)

// Object is one thing an engine created for an install, found by its labels
// (docs/reference.md, "Docker objects and labels").
type Object struct {
	Kind      string // KindContainer, KindPod or KindVolume
	ID        string // container ID; pod UID; volume name
	Name      string // container name; pod name; volume name
	State     string // a container's state (created, running, exited, …), a pod's ("running" or its phase); "" for a volume
	SessionID string // its xmode.session label ("" when it has none)
	Instance  string // its xmode.instance label
	Snapshot  string // an image's xmode.snapshot label ("" when it has none)
}

// OrphanLister is an engine whose objects can outlive a crashed xmode: the
// reaper lists them and removes those whose session is not open.
type OrphanLister interface {
	// ListObjects returns the objects labelled xmode.managed=true and
	// xmode.instance=instance, and nothing else; an unreachable engine is
	// an error.
	ListObjects(ctx context.Context, instance string) ([]Object, error)
	// RemoveObject removes one of them with the checks Destroy makes (only
	// xmode's objects, a container only with its own session's label); one
	// already gone is success.
	RemoveObject(ctx context.Context, o Object) error
}

// LivenessChecker is an engine whose sandboxes can die behind xmode's back
// (a container removed or stopped by hand, a daemon restarted): Alive says
// whether sb's engine objects are there and running, so that a pool claim
// never hands out a dead sandbox. It is one cheap query (a pool claim is
// budgeted in milliseconds); an engine it cannot reach is an error.
type LivenessChecker interface {
	Alive(ctx context.Context, sb Sandbox) (bool, error)
}

// Alive asks the provider whether sb's engine objects live; an engine
// without them (the host) has nothing that can die apart from the worktree,
// and says yes.
func Alive(ctx context.Context, a Provider, sb Sandbox) (bool, error) {
	if l, ok := a.(LivenessChecker); ok {
		return l.Alive(ctx, sb)
	}
	return true, nil
}

// Check statuses.
const (
	CheckOK   = "ok"
	CheckWarn = "warn"
	CheckFail = "fail"
)

// Check is one line of a health report (`xmode doctor`).
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // CheckOK, CheckWarn or CheckFail
	// Method is what a check found in force, where it names one (a step
	// containment method: Containment.Method).
	Method string `json:"method,omitempty"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// HealthChecker is an engine that can check its deployment: the daemon
// answers, its API version, the image, volumes, isolation, runtimes. Health
// never fails as a call: what is wrong is a CheckFail line with a fix.
type HealthChecker interface {
	Health(ctx context.Context) []Check
}

// ProgressSink is an engine with something slow to show (an image pull):
// SetProgress gives it the writer, before the first Provision.
type ProgressSink interface {
	SetProgress(w io.Writer)
}

// VolumeRemover is an engine that keeps volumes outliving sessions: it
// mounts a project machine's cache volume (Spec.CacheVolume) in the
// project's sandboxes, and `xmode machine rm` removes it through it.
type VolumeRemover interface {
	// RemoveVolume removes a volume of this install (instance is the
	// storage root's ID) and refuses anyone else's; one that does not exist
	// is success.
	RemoveVolume(ctx context.Context, name, instance string) error
	// ProjectVolumes lists the cache volumes of a project of this install
	// (one per user whose sandboxes ran it), found by their labels.
	ProjectVolumes(ctx context.Context, project, instance string) ([]string, error)
}

// WorktreeSyncer is an engine whose sandboxes work on a copy of the
// worktree rather than on the host's directory (a docker daemon on another
// machine). SyncBack makes the host's worktree what the sandbox's copy is
// now; whoever reads the worktree on the host (a diff, a change request)
// calls SyncBack first. The copy is hostile input: SyncBack never writes
// outside the worktree and leaves it unchanged when it refuses the copy.
type WorktreeSyncer interface {
	SyncBack(ctx context.Context, sb Sandbox) error
}

// WorktreePusher is a WorktreeSyncer that can also bring one path of the
// host's worktree into the sandbox's copy (`sandbox cp` into a session on a
// remote daemon, a file step). PushPath copies rel (a file, a link or a
// directory, as the host's worktree has it now) over the sandbox's, or
// removes it there when the host's worktree no longer has it; it refuses a
// destination whose directories in the sandbox's copy are symlinks.
type WorktreePusher interface {
	PushPath(ctx context.Context, sb Sandbox, rel string) error
}

// PushPath brings rel of the host's worktree into the sandbox's copy when
// the provider works on a copy; for every other provider the host's worktree
// is the sandbox's and this does nothing.
func PushPath(ctx context.Context, a Provider, sb Sandbox, rel string) error {
	if p, ok := a.(WorktreePusher); ok {
		return p.PushPath(ctx, sb, rel)
	}
	return nil
}

// SetProgress hands w to the provider if it shows progress; a nil w leaves it
// silent.
func SetProgress(a Provider, w io.Writer) {
	if s, ok := a.(ProgressSink); ok && w != nil {
		s.SetProgress(w)
	}
}

// SyncBack brings the sandbox's copy of the worktree back to the host when
// the provider works on a copy; for every other provider the host's worktree
// is the sandbox's and this does nothing.
func SyncBack(ctx context.Context, a Provider, sb Sandbox) error {
	if s, ok := a.(WorktreeSyncer); ok {
		return s.SyncBack(ctx, sb)
	}
	return nil
}

// Orphans returns the provider's orphan lister, if it has objects that can
// outlive a session.
func Orphans(a Provider) (OrphanLister, bool) {
	o, ok := a.(OrphanLister)
	return o, ok
}

// Health returns the provider's health report, and false when it has none.
func Health(ctx context.Context, a Provider) ([]Check, bool) {
	h, ok := a.(HealthChecker)
	if !ok {
		return nil, false
	}
	return h.Health(ctx), true
}

// Volumes returns the provider's volume remover, if it keeps volumes.
func Volumes(a Provider) (VolumeRemover, bool) {
	v, ok := a.(VolumeRemover)
	return v, ok
}

// Close releases what the provider holds (a daemon client's connections).
func Close(a Provider) error {
	if c, ok := a.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Names lists the engines built into this binary, sorted.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// KillStep ends a step's processes through the provider (Provider.KillStep);
// a step without a tag (recorded before steps had one) has nothing to find.
func KillStep(ctx context.Context, a Provider, sb Sandbox, tag string) error {
	if tag == "" {
		return nil
	}
	return a.KillStep(ctx, sb, tag)
}

// StepSignaler is an engine that can end a step, found by its tag, with a
// first signal of the caller's choosing, as Ctrl-C (SIGINT) or `--timeout`
// (TERM) end one: that signal and CONT to the step's processes, KILL to
// whatever is left after grace (at once when grace is 0). `sandbox kill`
// and the MCP server's step_kill end a step this way from outside the xmode
// that runs it. Ending a step that is already gone is not an error.
type StepSignaler interface {
	SignalStep(ctx context.Context, sb Sandbox, tag string, sig syscall.Signal, grace time.Duration) error
}

// SignalStep ends a step with sig first, KILL after grace (StepSignaler).
// A provider without the capability can end a step with TERM only
// (Provider.KillStep); another signal is refused.
func SignalStep(ctx context.Context, a Provider, sb Sandbox, tag string, sig syscall.Signal, grace time.Duration) error {
	if tag == "" {
		return nil
	}
	if s, ok := a.(StepSignaler); ok {
		return s.SignalStep(ctx, sb, tag, sig, grace)
	}
	if sig == syscall.SIGTERM {
		return a.KillStep(ctx, sb, tag)
	}
	return fail.Refusedf("the %s engine ends steps with TERM only, not %s: leave out %s", a.Name(), sig, fail.Signal)
}

// ErrClaimed is what Claimer.Claim says when another claimer took the
// sandbox first.
var ErrClaimed = errors.New("claimed by another")

// Claimer is an engine whose sandboxes more than one xmode can reach (pods
// of a cluster that several hosts share): a pool claim also marks the
// entry's sandbox taken in the engine itself, by an update that fails when
// anyone marked it first, so that two claimers never share a sandbox,
// whatever store each keeps its pool in. Engines whose sandboxes only one
// store knows (the host, docker) need nothing of the kind: the store's
// transaction serializes their claims.
type Claimer interface {
	// Claim marks sb taken by session and, in the same update, moves its
	// deadline to expires as Extend would (a claim is budgeted in
	// milliseconds); an error wrapping ErrClaimed when someone else's mark
	// is there (sb is then theirs: leave it alone).
	Claim(ctx context.Context, sb Sandbox, session string, expires time.Time) error
}

// Claim is a pool claim's part in the engine: a Claimer's mark with the
// session's deadline; for every other engine the store's claim is the
// whole claim, and the engine-side deadline moves (Extend).
func Claim(ctx context.Context, a Provider, sb Sandbox, session string, expires time.Time) error {
	if c, ok := a.(Claimer); ok {
		return c.Claim(ctx, sb, session, expires)
	}
	return Extend(ctx, a, sb, expires)
}

// WarmPooler is an engine with warm pools of its own
// (kubernetes-sigs/agent-sandbox's SandboxWarmPool): the engine keeps
// sandboxes of a shape running, and a pool entry's sandbox (Spec.Pool) is
// taken from there instead of being started. KeepWarm makes the engine's
// pool for spec's project hold size sandboxes shaped as spec (a pool
// entry's spec; its session fields are not used) and removes the project's
// pools of other shapes; size 0 removes them all. An engine whose
// configuration does not use such pools does nothing.
type WarmPooler interface {
	KeepWarm(ctx context.Context, spec Spec, size int) error
}

// WarmPools returns the provider's warm pools, if it has pools of its own.
func WarmPools(a Provider) (WarmPooler, bool) {
	w, ok := a.(WarmPooler)
	return w, ok
}

// Extender is an engine whose sandboxes carry a deadline of their own, so
// that the engine ends a sandbox whose xmode (and its reaper) died: a dead-man
// switch (kubernetes: docs/kubernetes.md, "The dead-man switch"). Extend
// moves it to the session's new expiry; `sandbox extend` and a pool claim
// call it before they record the new expiry, so the engine never ends a
// sandbox its session still owns.
type Extender interface {
	Extend(ctx context.Context, sb Sandbox, expires time.Time) error
}

// Extend moves sb's engine-side deadline to expires; a provider without one
// (the host, docker: the reaper alone ends their sandboxes) has nothing to
// move.
func Extend(ctx context.Context, a Provider, sb Sandbox, expires time.Time) error {
	if e, ok := a.(Extender); ok {
		return e.Extend(ctx, sb, expires)
	}
	return nil
}

// MountModer is an engine with more than one way to give a sandbox its
// worktree (docker: bind, volume, sync); sessions record the mode.
type MountModer interface {
	MountMode() string
}

// MountMode is the mount mode a new sandbox of the provider gets; "" for an
// engine that has one way only (the host).
func MountMode(a Provider) string {
	if m, ok := a.(MountModer); ok {
		return m.MountMode()
	}
	return ""
}

// WorktreeMounter is an engine whose steps see the worktree at a path of
// their own (a container's mount), not where it lies on this host. The
// provider computes it once, for its sandboxes and for whoever asks.
type WorktreeMounter interface {
	// WorktreeIn is where sb's steps see its worktree; an error when sb
	// cannot be one of this provider's (a mount mode it does not know, a
	// malformed run ID).
	WorktreeIn(sb Sandbox) (string, error)
}

// StepWorktree is where sb's steps see its worktree, the directory an agent
// is pointed at (codex -C, {worktree}): the provider's answer, or, for an
// engine whose steps see the host's files, sb.Worktree itself.
func StepWorktree(a Provider, sb Sandbox) (string, error) {
	if m, ok := a.(WorktreeMounter); ok {
		return m.WorktreeIn(sb)
	}
	return sb.Worktree, nil
}

// HostRunner is an engine whose steps are processes of this host: they see
// its files and its PATH and inherit xmode's environment.
type HostRunner interface {
	RunsOnHost() bool
}

// OnHost reports whether the provider's steps run on this host, as the user
// runs programs: a step then has the user's $SHELL, an API key in xmode's
// environment, and the CLIs on the host's PATH. An engine without the
// capability runs steps in an environment of its own (a container's).
func OnHost(a Provider) bool {
	h, ok := a.(HostRunner)
	return ok && h.RunsOnHost()
}

// Networker is an engine whose sandboxes have a network of their own that
// xmode chooses (docker: none, bridge, …), so that a session can be cut off
// from the network; an engine without it runs steps in the host's network.
type Networker interface {
	// Network is the network a new sandbox gets, as its session records it:
	// "" when the engine's default is left in place.
	Network() string
}

// Network returns the network a new sandbox of the provider gets, and
// false when the provider's steps use the host's network (so --network
// means nothing for it).
func Network(a Provider) (string, bool) {
	if n, ok := a.(Networker); ok {
		return n.Network(), true
	}
	return "", false
}

// ImageRunner is an engine whose sandboxes run an image (docker).
type ImageRunner interface {
	// Image is the image a new sandbox runs when its spec names none.
	Image() string
}

// Image is the image a new sandbox of the provider runs, recorded on its
// session before it is provisioned, and false for an engine that runs none
// (and would ignore --image).
func Image(a Provider) (string, bool) {
	if i, ok := a.(ImageRunner); ok {
		return i.Image(), true
	}
	return "", false
}

// Shaper is a provider whose sandboxes differ by more than their engine:
// Shape lists, one "name=value" a line and always in one order, everything
// of its configuration that shapes a sandbox it makes (docker: the mount
// mode and every setting that shapes a container), and nothing that does
// not (an owner, a lifetime). A warm pool hands an entry only to a create
// of the same shape.
type Shaper interface {
	Shape() string
}

// Shape describes the sandboxes the provider makes under its
// configuration: its engine, then a Shaper's shape; an engine without
// settings of its own (the host) is its name alone.
func Shape(a Provider) string {
	s := "engine=" + a.Name() + "\n"
	if sh, ok := a.(Shaper); ok {
		s += sh.Shape()
	}
	return s
}

// MoveCost is how a warm pool weighs moving a ready sandbox's worktree to
// another commit (a checkout of what differs) against making a new one.
type MoveCost int

const (
	// MoveByFiles: the sandbox is its worktree (the host): moving wins
	// while fewer paths change than a new worktree checks out.
	MoveByFiles MoveCost = iota
	// MoveCheaper: making a sandbox also starts something (a container)
	// that costs more than any checkout.
	MoveCheaper
	// MoveNever: the sandbox works on a copy of its worktree taken when it
	// was made (docker's sync mode), which a checkout on the host does not
	// reach.
	MoveNever
)

// Mover is a provider whose sandboxes are more than their worktree.
type Mover interface {
	MoveCost() MoveCost
}

// Move says how the provider's sandboxes weigh a move; MoveByFiles for a
// provider without the capability.
func Move(a Provider) MoveCost {
	if m, ok := a.(Mover); ok {
		return m.MoveCost()
	}
	return MoveByFiles
}

// Containment is how an engine keeps a step's processes together so that
// none outlives the step (`xmode doctor` shows it).
type Containment struct {
	// Method names it: "cgroup" or "process-group" (host), "container"
	// (docker).
	Method string
	Detail string
	// Fix says how to get a stronger method; Weak marks a method that lets
	// some processes outlive a killed xmode until `xmode reap`.
	Fix  string
	Weak bool
}

// StepContainer is an engine that can say how it contains steps.
type StepContainer interface {
	Containment() Containment
}

// StepContainment returns how the provider contains steps, and false when
// it cannot say.
func StepContainment(a Provider) (Containment, bool) {
	if c, ok := a.(StepContainer); ok {
		return c.Containment(), true
	}
	return Containment{}, false
}

// PathChecker is an engine whose sandboxes see a filesystem of their own
// (a container's image and mounts) rather than the host's: PathPresent says
// whether a path exists there. A step that names a host path its sandbox
// does not have is warned about before it runs (an agent template naming
// a script of this host).
type PathChecker interface {
	PathPresent(ctx context.Context, sb Sandbox, path string) (bool, error)
}

// PathPresent reports whether path exists in the sandbox; known is false
// when the provider cannot tell, because its steps see the host's files.
func PathPresent(ctx context.Context, a Provider, sb Sandbox, path string) (present, known bool, err error) {
	p, ok := a.(PathChecker)
	if !ok {
		return false, false, nil
	}
	present, err = p.PathPresent(ctx, sb, path)
	return present, err == nil, err
}

// IsolationReporter is an engine that can say, in words for the user, what
// the sandboxes it makes under its configuration lack of an isolated,
// bounded sandbox: limits left at the engine's defaults, a network open to
// the outside, hardening not applied — or, for the host, isolation itself.
// Each gap is what is lacking ("limits", "network isolation"), then, after
// a colon, why and what would close it. `xmode mcp` tells an agent's user.
type IsolationReporter interface {
	IsolationGaps() []string
}

// IsolationGaps lists what the provider's new sandboxes lack; none for a
// provider that cannot say (or lacks nothing).
func IsolationGaps(a Provider) []string {
	if r, ok := a.(IsolationReporter); ok {
		return r.IsolationGaps()
	}
	return nil
}

// KindImage is an image an engine made of a sandbox's filesystem
// (Snapshotter): labelled like the other objects, with the session it was
// made for (a fork) or the snapshot it belongs to.
const KindImage = "image"

// ErrInUse is what RemoveObject says of an object something still uses
// (an image a container runs): not a failure, it goes once its last user
// has gone.
var ErrInUse = errors.New("in use")

// Snapshotter is an engine whose sandboxes have a filesystem of their own
// outside the worktree (a container's): SnapshotImage keeps it as an image
// a new sandbox starts from (Spec.Image) — what `sandbox fork` and `sandbox
// snapshot` take along with the worktree. The image is one of the engine's
// objects: listed and removed through OrphanLister as KindImage.
type Snapshotter interface {
	// SnapshotImage commits sb's filesystem outside its worktree (not its
	// mounts) as the image ref, labelled labels, and returns the reference
	// a Spec.Image takes.
	SnapshotImage(ctx context.Context, sb Sandbox, ref string, labels map[string]string) (string, error)
}

// SnapshotImage keeps sb's filesystem outside the worktree as an image
// (Snapshotter); ok is false for an engine whose sandboxes have none (the
// host: its steps see the host's files), which keeps only the worktree.
func SnapshotImage(ctx context.Context, a Provider, sb Sandbox, ref string, labels map[string]string) (image string, ok bool, err error) {
	s, ok := a.(Snapshotter)
	if !ok {
		return "", false, nil
	}
	image, err = s.SnapshotImage(ctx, sb, ref, labels)
	return image, true, err
}

// EgressEnforcer is an engine that can hold a sandbox to an egress policy
// (docs/network.md): the sandbox has no way out but an egress proxy that
// decides every connection by the policy (Spec.Egress) and records it.
type EgressEnforcer interface {
	// SetEgress serves p as sb's policy from now on: every connection that
	// starts after it returns meets p; connections already open keep the
	// policy they started with. getenv reads the variables p's credentials
	// name (nil: os.Getenv). p's Listen, DNS and Block are the engine's to
	// fill in, as at Provision.
	SetEgress(ctx context.Context, sb Sandbox, p egress.Policy, getenv func(string) string) error
	// EgressLog is a path on this host where sb's network log can be read
	// now (egress.Record lines): the live log while the sandbox lives, the
	// copy its teardown left in the run's evidence after. "" when the
	// sandbox never had a policy.
	EgressLog(ctx context.Context, sb Sandbox) (string, error)
}

// Egress returns the provider's egress enforcer, if it can enforce a policy.
func Egress(a Provider) (EgressEnforcer, bool) {
	e, ok := a.(EgressEnforcer)
	return e, ok
}

// EgressReadier is an EgressEnforcer that can lack what it needs to
// enforce a policy where it runs (a setting): EgressReady says why, as the
// refusal of a proxied network, before anything is made or recorded.
type EgressReadier interface {
	EgressReady() error
}

// EgressEngines names the engines that enforce egress policies, for the
// messages of those that do not.
const EgressEngines = "docker or kubernetes"

// CheckEgress refuses a proxied network (mode allow or open) on a provider
// that cannot enforce it — the host engine, whose steps share the host's
// network, or the cloud (a nil provider): nothing would hold the sandbox
// to the policy, so it is refused rather than left open.
func CheckEgress(a Provider, engineName string, mode egress.Mode) error {
	if a != nil {
		if _, ok := Egress(a); ok {
			if r, ok := a.(EgressReadier); ok {
				return r.EgressReady()
			}
			return nil
		}
	}
	return fail.Refusedf("network %s needs an engine that enforces an egress policy, and the %s engine cannot (its sandboxes share the network of where they run): use the %s engine (XMODE_SANDBOX_ENGINE=docker or kubernetes, with XMODE_RUNNER_MODE=cloud_worker), or XMODE_SANDBOX_NETWORK=none", mode, engineName, EgressEngines)
}

// EgressCheck is `xmode doctor`'s line on whether the provider enforces
// egress policies; proxied says the configuration asks for one.
func EgressCheck(name string, a Provider, proxied bool) Check {
	c := Check{Name: name + " network policy", Status: CheckOK}
	if _, ok := Egress(a); ok {
		c.Method = "proxy"
		c.Detail = "enforced: a sandbox of XMODE_SANDBOX_NETWORK=allow or open has no way out but xmode's egress proxy (docs/network.md)"
		if r, ok := a.(EgressReadier); ok {
			if err := r.EgressReady(); err != nil {
				c.Method, c.Detail = "none", "not enforced here: "+err.Error()
				if proxied {
					c.Status = CheckWarn
				}
			}
		}
		return c
	}
	c.Method = "none"
	c.Detail = "not enforced: the " + name + " engine's sandboxes share the network of where they run, so XMODE_SANDBOX_NETWORK=allow or open is refused for them; the " + EgressEngines + " engine enforces it"
	if proxied {
		c.Status = CheckWarn
		c.Fix = "XMODE_SANDBOX_ENGINE=docker (or kubernetes) with XMODE_RUNNER_MODE=cloud_worker for sessions with an egress policy"
	}
	return c
}

// PortDialer is an engine that can reach a port of a sandbox from this
// host, whatever the sandbox's network (none included): `sandbox port`
// publishes it on a port of the host through a forwarder that dials it
// for each connection (docs/network.md, "Ports"). The connection's
// CloseWrite, when it has one, ends what goes to the sandbox.
type PortDialer interface {
	DialPort(ctx context.Context, sb Sandbox, port int) (net.Conn, error)
}

// Ports returns the provider's port dialer, if it can reach a sandbox's
// ports.
func Ports(a Provider) (PortDialer, bool) {
	d, ok := a.(PortDialer)
	return d, ok
}
