// Package config is xmode's one configuration loader: docs/configuration.md.
// Every value comes from a flag, else its XMODE_* variable, else the
// CODEX_DOCKER_* fallback, else the default, and remembers which one it came
// from so that `xmode config` can say so. A bad value is a usage error naming
// its source.
package config

import (
	"fmt"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/hostenv"
)

// Runner modes (docs/reference.md, "Runner modes and engines").
const (
	ModeLocalWorktree     = "local_worktree"
	ModeCloudWorker       = "cloud_worker"
	ModeCloudSubscription = "cloud_subscription"
)

// Config holds the effective, validated configuration.
type Config struct {
	StorageRoot        string
	User               string
	RunnerMode         string
	Engine             string // "" (host), "docker" or "kubernetes"
	DockerHost         string // "" means the local socket; checked when the docker engine opens
	DockerCertPath     string // TLS files for the daemon (ca.pem, cert.pem, key.pem)
	DockerTLSVerify    bool   // DOCKER_TLS_VERIFY: TLS to a tcp:// daemon even without a cert path
	DockerAPIVersion   string // DOCKER_API_VERSION: pins the Engine API version
	DockerInsecure     bool   // plain TCP off loopback, or TLS without verifying the daemon
	DockerRemote       string // "auto", "on" or "off": whether sandboxes get a copy of the worktree
	SyncMaxBytes       int64  // largest worktree copy accepted back from a remote sandbox
	Runtime            string // OCI runtime of docker sandboxes (kubernetes: the RuntimeClass); "" for the default
	KubeConfig         string // KUBECONFIG: kubeconfig files (a path list); "" for ~/.kube/config, or the pod's service account
	KubeContext        string // the kubeconfig context; "" for its current one
	KubeNamespace      string // where sandbox pods go; "" for the context's namespace (in a pod: its own)
	KubePullPolicy     string // imagePullPolicy of sandbox pods
	KubeStartTimeout   time.Duration
	KubeEphemeral      int64         // ephemeral-storage limit of a sandbox pod
	KubeDeadlineGrace  time.Duration // how long after its session's expiry a pod ends by itself
	KubeAPI            string        // "auto", "pods" or "agent-sandbox": what a sandbox is on the cluster
	KubeEgressImage    string        // the egress proxy's image on kubernetes (xmode's static binary); "": allow/open refused
	Image              string
	StorageVolume      string // "" means bind mode
	StorageMount       string
	CPUs               float64
	Memory             int64
	PidsLimit          int64
	TmpfsPath          string
	TmpfsOptions       string
	Network            string
	SandboxAllow       []string     // XMODE_SANDBOX_ALLOW: egress allow rules, each as written
	SandboxResolve     string       // XMODE_SANDBOX_RESOLVE: name=address,… the egress proxy resolves itself
	EgressNetwork      string       // the docker network the egress proxy reaches upstreams through
	EgressSubnets      netip.Prefix // where sandboxes' own egress networks are carved from
	EgressBinary       string       // the static xmode binary of the egress proxy's image; "": this one
	EgressCA           string       // PEM roots the egress proxy trusts for upstreams besides the system's
	ReadonlyRoot       bool
	BindHardened       bool           // bind mode gets volume mode's limits and hardening
	HostCgroup         bool           // host steps each get a cgroup v2 of their own where the machine allows it
	HostEnv            hostenv.Policy // what host steps inherit of xmode's environment (HostEnvFor)
	SandboxUser        string         // "uid:gid"; "" when the storage root does not exist yet
	TTL                time.Duration
	MaxTTL             time.Duration
	MaxOpen            int
	EvidenceMaxBytes   int64
	MinFree            int64
	ProjectMachines    bool
	ProjectCacheMount  string
	CRMaxBytes         int64         // largest change request accepted
	SnapshotTTL        time.Duration // lifetime of a new snapshot
	SnapshotMax        int           // live snapshots per user (0: unlimited)
	PoolSize           int           // ready sandboxes kept per project machine (0: no pool)
	PoolMaxAge         time.Duration // a pool entry older than this is replaced
	PoolUsers          []string      // whose pools upkeep fills (nil: who used the project lately)
	CloudStatusCommand string
	CloudPollInterval  time.Duration
	CloudStaleAfter    time.Duration

	// The MCP server (docs/mcp.md): the repositories its clients may name
	// besides their roots and the server's directory, and the variables
	// of its environment they may ask for by name (path.Match patterns).
	MCPRepos []string
	MCPEnv   []string

	// Agents (docs/agents.md).
	AgentCommandTemplate []string // XMODE_AGENT_COMMAND_TEMPLATE split into argv elements; nil when unset
	AgentEnv             []string // variable names passed to agent steps
	CodexBin, ClaudeBin  string

	// Values lists every setting in table order with its raw value and source.
	Values []Value
}

// Value is one setting as `xmode config` shows it.
type Value struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Flag is a command-line value that overrides a variable.
type Flag struct {
	Name  string // "--ttl"
	Value string
}

// Env reads one variable; os.Getenv in production, a map in tests.
type Env func(string) string

type setting struct {
	name     string
	fallback string
	def      func(c *Config, env Env) string
	apply    func(c *Config, raw string) error
}

func lit(s string) func(*Config, Env) string { return func(*Config, Env) string { return s } }

var settings = []setting{
	{name: "XMODE_STORAGE_ROOT", def: defaultStorageRoot, apply: func(c *Config, v string) error {
		if strings.TrimSpace(v) == "" {
			return fmt.Errorf("the storage root may not be empty")
		}
		if !filepath.IsAbs(v) {
			// cron and CI run from other directories: a relative root would
			// silently be a new, empty one there.
			return fmt.Errorf("%q must be an absolute path (e.g. %s)", v, filepath.Join("$PWD", v))
		}
		c.StorageRoot = ResolveExisting(filepath.Clean(v))
		return nil
	}},
	{name: "XMODE_USER", def: defaultUser, apply: func(c *Config, v string) error {
		if err := ValidUser(v); err != nil {
			return err
		}
		c.User = v
		return nil
	}},
	{name: "XMODE_RUNNER_MODE", def: lit(ModeLocalWorktree), apply: func(c *Config, v string) error {
		switch v {
		case ModeLocalWorktree, ModeCloudWorker, ModeCloudSubscription:
			c.RunnerMode = v
			return nil
		}
		return fmt.Errorf("%q is not a runner mode: use local_worktree, cloud_worker or cloud_subscription", v)
	}},
	{name: "XMODE_SANDBOX_ENGINE", def: lit(""), apply: func(c *Config, v string) error {
		switch v {
		case "", "host":
			c.Engine = ""
			return nil
		case "docker", "kubernetes":
			c.Engine = v
			return nil
		}
		return fmt.Errorf("%q is not an engine: use docker or kubernetes, or leave it unset for host processes", v)
	}},
	// The docker variables are checked where the docker engine is opened:
	// a DOCKER_HOST meant for the docker CLI (ssh://…) must not break
	// commands that never talk to docker.
	{name: "XMODE_SANDBOX_DOCKER_HOST", fallback: "DOCKER_HOST", def: lit(""), apply: func(c *Config, v string) error {
		c.DockerHost = strings.TrimSpace(v)
		return nil
	}},
	{name: "XMODE_SANDBOX_DOCKER_CERT_PATH", fallback: "DOCKER_CERT_PATH", def: lit(""), apply: func(c *Config, v string) error {
		c.DockerCertPath = v
		return nil
	}},
	{name: "DOCKER_TLS_VERIFY", def: lit(""), apply: func(c *Config, v string) error {
		// Any value turns it on, as for the docker CLI.
		c.DockerTLSVerify = v != ""
		return nil
	}},
	{name: "DOCKER_API_VERSION", def: lit(""), apply: func(c *Config, v string) error {
		c.DockerAPIVersion = strings.TrimPrefix(strings.TrimSpace(v), "v")
		return nil
	}},
	{name: "XMODE_SANDBOX_DOCKER_INSECURE", def: lit("0"), apply: func(c *Config, v string) error {
		b, err := ParseBool(v)
		c.DockerInsecure = b
		return err
	}},
	{name: "XMODE_SANDBOX_DOCKER_REMOTE", def: lit("auto"), apply: func(c *Config, v string) error {
		if strings.EqualFold(strings.TrimSpace(v), "auto") {
			c.DockerRemote = "auto"
			return nil
		}
		b, err := ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not auto, 1 or 0", v)
		}
		c.DockerRemote = map[bool]string{true: "on", false: "off"}[b]
		return nil
	}},
	{name: "XMODE_SANDBOX_SYNC_MAX_BYTES", def: lit("2g"), apply: func(c *Config, v string) error {
		n, err := ParseSize(v)
		if err == nil && n <= 0 {
			err = fmt.Errorf("%q must be larger than zero", v)
		}
		c.SyncMaxBytes = n
		return err
	}},
	{name: "XMODE_SANDBOX_RUNTIME", def: lit(""), apply: func(c *Config, v string) error {
		if v != "" && !validVolumeName(v) {
			return fmt.Errorf("%q is not a runtime name: use letters, digits, '_', '.' or '-', as registered with the daemon (runsc, sysbox-runc)", v)
		}
		c.Runtime = v
		return nil
	}},
	// The kubernetes engine (docs/kubernetes.md). KUBECONFIG is read here,
	// not by client-go, so that `xmode config` shows it like every other.
	{name: "KUBECONFIG", def: lit(""), apply: func(c *Config, v string) error {
		c.KubeConfig = v
		return nil
	}},
	{name: "XMODE_KUBE_CONTEXT", def: lit(""), apply: func(c *Config, v string) error {
		c.KubeContext = strings.TrimSpace(v)
		return nil
	}},
	{name: "XMODE_KUBE_NAMESPACE", def: lit(""), apply: func(c *Config, v string) error {
		if v != "" && !ValidKubeName(v) {
			return fmt.Errorf("%q is not a namespace name: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit", v)
		}
		c.KubeNamespace = v
		return nil
	}},
	{name: "XMODE_KUBE_IMAGE_PULL_POLICY", def: lit("IfNotPresent"), apply: func(c *Config, v string) error {
		switch v {
		case "Always", "IfNotPresent", "Never":
			c.KubePullPolicy = v
			return nil
		}
		return fmt.Errorf("%q is not an image pull policy: use Always, IfNotPresent or Never", v)
	}},
	{name: "XMODE_KUBE_START_TIMEOUT", def: lit("2m"), apply: func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.KubeStartTimeout = d
		return err
	}},
	{name: "XMODE_KUBE_EPHEMERAL_STORAGE", def: lit("10g"), apply: func(c *Config, v string) error {
		n, err := ParseSize(v)
		if err == nil && n < 64<<20 {
			err = fmt.Errorf("%q is below 64m: a sandbox's worktree and logs need room", v)
		}
		c.KubeEphemeral = n
		return err
	}},
	{name: "XMODE_KUBE_DEADLINE_GRACE", def: lit("10m"), apply: func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.KubeDeadlineGrace = d
		return err
	}},
	{name: "XMODE_KUBE_API", def: lit("auto"), apply: func(c *Config, v string) error {
		switch v {
		case "auto", "pods", "agent-sandbox":
			c.KubeAPI = v
			return nil
		}
		return fmt.Errorf("%q is not a kubernetes API: use auto (agent-sandbox where the cluster serves it, else pods), pods or agent-sandbox", v)
	}},
	{name: "XMODE_KUBE_EGRESS_IMAGE", def: lit(""), apply: func(c *Config, v string) error {
		if strings.ContainsAny(v, " \t\n") {
			return fmt.Errorf("%q is not an image reference", v)
		}
		c.KubeEgressImage = v
		return nil
	}},
	{name: "XMODE_SANDBOX_IMAGE", fallback: "CODEX_DOCKER_IMAGE", def: lit("ruby:3.4-bookworm"), apply: func(c *Config, v string) error {
		if v == "" || strings.ContainsAny(v, " \t\n") {
			return fmt.Errorf("%q is not an image reference", v)
		}
		c.Image = v
		return nil
	}},
	{name: "XMODE_SANDBOX_STORAGE_VOLUME", fallback: "CODEX_DOCKER_STORAGE_VOLUME", def: lit(""), apply: func(c *Config, v string) error {
		if v != "" && !validVolumeName(v) {
			return fmt.Errorf("%q is not a volume name: use letters, digits, '_', '.' or '-'", v)
		}
		c.StorageVolume = v
		return nil
	}},
	{name: "XMODE_SANDBOX_STORAGE_MOUNT", def: func(c *Config, _ Env) string { return c.StorageRoot }, apply: func(c *Config, v string) error {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("%q must be an absolute path", v)
		}
		c.StorageMount = filepath.Clean(v)
		return nil
	}},
	{name: "XMODE_SANDBOX_CPUS", fallback: "CODEX_DOCKER_CPUS", def: lit("2"), apply: func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		// NaN fails every comparison: only a number in range passes.
		if err != nil || !(f >= 0.01 && f <= 1024) {
			return fmt.Errorf("%q is not a CPU count: use a number from 0.01 to 1024, such as 2 or 0.5", v)
		}
		c.CPUs = f
		return nil
	}},
	{name: "XMODE_SANDBOX_MEMORY", fallback: "CODEX_DOCKER_MEMORY", def: lit("4g"), apply: func(c *Config, v string) error {
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		if n < 6<<20 {
			return fmt.Errorf("%q is below docker's minimum of 6m", v)
		}
		c.Memory = n
		return nil
	}},
	{name: "XMODE_SANDBOX_PIDS_LIMIT", fallback: "CODEX_DOCKER_PIDS_LIMIT", def: lit("512"), apply: func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a process limit: use a positive whole number", v)
		}
		if n < MinPids {
			// The init, the keep-alive, a step's shell and its command, and
			// the helper that ends a step: below this a sandbox cannot run.
			return fmt.Errorf("%q is below %d: a sandbox needs its init, keep-alive and a step's processes", v, MinPids)
		}
		c.PidsLimit = n
		return nil
	}},
	{name: "XMODE_SANDBOX_TMPFS", fallback: "CODEX_DOCKER_TMPFS", def: defaultTmpfs, apply: func(c *Config, v string) error {
		path, opts, _ := strings.Cut(v, ":")
		if !filepath.IsAbs(path) {
			return fmt.Errorf("%q is not a tmpfs mount: use PATH[:OPTIONS] with an absolute path, e.g. /tmp:rw,size=1g", v)
		}
		// A tmpfs is charged to the sandbox's memory: one at or above the
		// limit lets a full /tmp get every later step OOM-killed.
		size, err := tmpfsSize(opts)
		if err != nil {
			return fmt.Errorf("%q: %v", v, err)
		}
		if size == 0 || size >= c.Memory {
			return fmt.Errorf("%q: give the tmpfs a size= below the memory limit XMODE_SANDBOX_MEMORY (%d MiB): a full /tmp counts against it and would get every later step OOM-killed", v, c.Memory>>20)
		}
		c.TmpfsPath, c.TmpfsOptions = filepath.Clean(path), opts
		return nil
	}},
	{name: "XMODE_SANDBOX_NETWORK", fallback: "CODEX_DOCKER_NETWORK", def: lit("none"), apply: func(c *Config, v string) error {
		switch {
		case v == "":
			return fmt.Errorf("the network may not be empty: use none, allow, open, bridge or a network name")
		case v == "host" || strings.HasPrefix(v, "container:"):
			return fmt.Errorf("%q would share the host's or another container's network with untrusted code: use none, allow, open, bridge or a user-defined network", v)
		}
		c.Network = v
		return nil
	}},
	// A sandbox's egress policy (docs/network.md): the rules configuration
	// gives every proxied sandbox (XMODE_SANDBOX_NETWORK=allow or open).
	{name: "XMODE_SANDBOX_ALLOW", def: lit(""), apply: func(c *Config, v string) error {
		rules, err := egress.ParseRules(strings.Join(strings.Fields(v), ","), "XMODE_SANDBOX_ALLOW", false)
		if err != nil {
			return err
		}
		c.SandboxAllow = nil
		for _, r := range rules {
			c.SandboxAllow = append(c.SandboxAllow, r.Text)
		}
		return nil
	}},
	{name: "XMODE_SANDBOX_RESOLVE", def: lit(""), apply: func(c *Config, v string) error {
		if _, err := egress.ParseResolve(v, "XMODE_SANDBOX_RESOLVE"); err != nil {
			return err
		}
		c.SandboxResolve = v
		return nil
	}},
	{name: "XMODE_SANDBOX_EGRESS_NETWORK", def: lit("bridge"), apply: func(c *Config, v string) error {
		if v == "none" || v == "host" || strings.HasPrefix(v, "container:") || !validVolumeName(v) {
			return fmt.Errorf("%q is not a network the egress proxy can reach upstreams through: use bridge or a user-defined bridge network", v)
		}
		c.EgressNetwork = v
		return nil
	}},
	{name: "XMODE_SANDBOX_EGRESS_BINARY", def: lit(""), apply: func(c *Config, v string) error {
		if v != "" && !filepath.IsAbs(v) {
			return fmt.Errorf("%q must be an absolute path to a static xmode binary", v)
		}
		c.EgressBinary = v
		return nil
	}},
	{name: "XMODE_SANDBOX_EGRESS_CA", def: lit(""), apply: func(c *Config, v string) error {
		if v != "" && !filepath.IsAbs(v) {
			return fmt.Errorf("%q must be an absolute path to a PEM file of CA certificates", v)
		}
		c.EgressCA = v
		return nil
	}},
	{name: "XMODE_SANDBOX_EGRESS_SUBNETS", def: lit("10.213.0.0/16"), apply: func(c *Config, v string) error {
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil || !p.Addr().Is4() || p.Bits() > 28 || p.Masked() != p {
			return fmt.Errorf("%q is not an IPv4 prefix of /28 or wider (each sandbox takes a /29 of it), e.g. 10.213.0.0/16", v)
		}
		c.EgressSubnets = p
		return nil
	}},
	{name: "XMODE_SANDBOX_READONLY_ROOT", def: lit("0"), apply: func(c *Config, v string) error {
		b, err := ParseBool(v)
		c.ReadonlyRoot = b
		return err
	}},
	{name: "XMODE_HOST_CGROUP", def: lit("auto"), apply: func(c *Config, v string) error {
		switch v {
		case "auto":
			c.HostCgroup = true
		case "off":
			c.HostCgroup = false
		default:
			return fmt.Errorf("%q is not auto or off", v)
		}
		return nil
	}},
	// The environment policy of host steps (internal/hostenv), recorded on
	// each host session at create.
	{name: "XMODE_HOST_ENV", def: lit(hostenv.All), apply: func(c *Config, v string) error {
		inherit, err := hostenv.ParseInherit(v)
		c.HostEnv.Inherit = inherit
		return err
	}},
	{name: "XMODE_HOST_ENV_INCLUDE", def: lit(""), apply: func(c *Config, v string) error {
		pats, err := hostenv.ParsePatterns(v)
		c.HostEnv.Include = pats
		return err
	}},
	{name: "XMODE_HOST_ENV_EXCLUDE", def: lit(""), apply: func(c *Config, v string) error {
		pats, err := hostenv.ParsePatterns(v)
		c.HostEnv.Exclude = pats
		return err
	}},
	{name: "XMODE_SANDBOX_BIND_HARDENED", def: lit("0"), apply: func(c *Config, v string) error {
		b, err := ParseBool(v)
		c.BindHardened = b
		return err
	}},
	{name: "XMODE_SANDBOX_USER", def: defaultSandboxUser, apply: func(c *Config, v string) error {
		if v == "" {
			c.SandboxUser = ""
			return nil
		}
		uid, gid, ok := strings.Cut(v, ":")
		if _, err := strconv.ParseUint(uid, 10, 32); err != nil {
			return fmt.Errorf("%q is not uid:gid: use numbers, e.g. 1000:1000", v)
		}
		if ok {
			if _, err := strconv.ParseUint(gid, 10, 32); err != nil {
				return fmt.Errorf("%q is not uid:gid: use numbers, e.g. 1000:1000", v)
			}
		} else {
			v += ":" + uid
		}
		c.SandboxUser = v
		return nil
	}},
	{name: "XMODE_SANDBOX_MAX_TTL", def: lit("168h"), apply: func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.MaxTTL = d
		return err
	}},
	{name: "XMODE_SANDBOX_TTL", def: lit("2h"), apply: func(c *Config, v string) error {
		d, err := ParseDuration(v)
		if err != nil {
			return err
		}
		if err := c.CheckTTL(d); err != nil {
			return err
		}
		c.TTL = d
		return nil
	}},
	{name: "XMODE_SANDBOX_MAX_OPEN", def: lit("10"), apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a limit: use a whole number, 0 for unlimited", v)
		}
		c.MaxOpen = n
		return nil
	}},
	{name: "XMODE_SNAPSHOT_TTL", def: lit("168h"), apply: func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.SnapshotTTL = d
		return err
	}},
	{name: "XMODE_SNAPSHOT_MAX", def: lit("10"), apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a limit: use a whole number, 0 for unlimited", v)
		}
		c.SnapshotMax = n
		return nil
	}},
	{name: "XMODE_EVIDENCE_MAX_BYTES", def: lit("256m"), apply: func(c *Config, v string) error {
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		if n < 1<<10 {
			return fmt.Errorf("%q is below 1k: a step's log must keep at least its start", v)
		}
		c.EvidenceMaxBytes = n
		return nil
	}},
	{name: "XMODE_MIN_FREE", def: lit("1g"), apply: func(c *Config, v string) error {
		n, err := ParseSize(v)
		c.MinFree = n
		return err
	}},
	{name: "XMODE_PROJECT_MACHINES", def: lit("0"), apply: func(c *Config, v string) error {
		b, err := ParseBool(v)
		c.ProjectMachines = b
		return err
	}},
	{name: "XMODE_PROJECT_CACHE_MOUNT", def: lit("/cache"), apply: func(c *Config, v string) error {
		if !filepath.IsAbs(v) || filepath.Clean(v) == "/" {
			return fmt.Errorf("%q must be an absolute path other than /", v)
		}
		c.ProjectCacheMount = filepath.Clean(v)
		return nil
	}},
	{name: "XMODE_CR_MAX_BYTES", def: lit("100m"), apply: func(c *Config, v string) error {
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("%q must be larger than zero", v)
		}
		c.CRMaxBytes = n
		return nil
	}},
	// Agents (docs/agents.md): the command agent's argv template, the host
	// variables agent steps get by name, and the agent CLIs.
	{name: "XMODE_AGENT_COMMAND_TEMPLATE", def: lit(""), apply: func(c *Config, v string) error {
		if strings.TrimSpace(v) == "" {
			c.AgentCommandTemplate = nil
			return nil
		}
		argv, err := SplitTemplate(v)
		c.AgentCommandTemplate = argv
		return err
	}},
	{name: "XMODE_AGENT_ENV", def: lit("OPENAI_API_KEY,CODEX_API_KEY,ANTHROPIC_API_KEY"), apply: func(c *Config, v string) error {
		names, err := ParseEnvNames(v)
		c.AgentEnv = names
		return err
	}},
	{name: "XMODE_CODEX_BIN", def: lit("codex"), apply: func(c *Config, v string) error {
		c.CodexBin = v
		return checkBin(v)
	}},
	{name: "XMODE_CLAUDE_BIN", def: lit("claude"), apply: func(c *Config, v string) error {
		c.ClaudeBin = v
		return checkBin(v)
	}},
	// Warm pools (docs/project-machines.md, "The pool").
	{name: "XMODE_POOL_SIZE", def: lit("0"), apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxPoolSize {
			return fmt.Errorf("%q is not a pool size: use a whole number from 0 (no pool) to %d", v, MaxPoolSize)
		}
		c.PoolSize = n
		return nil
	}},
	{name: "XMODE_POOL_MAX_AGE", def: lit("24h"), apply: func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.PoolMaxAge = d
		return err
	}},
	{name: "XMODE_POOL_USERS", def: lit(""), apply: func(c *Config, v string) error {
		c.PoolUsers = nil
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u == "" {
				continue
			}
			if err := ValidUser(u); err != nil {
				return fmt.Errorf("%w (XMODE_POOL_USERS is a comma-separated list of users)", err)
			}
			if !slices.Contains(c.PoolUsers, u) {
				c.PoolUsers = append(c.PoolUsers, u)
			}
		}
		return nil
	}},
	{name: "CODEX_CLOUD_STATUS_COMMAND", def: lit("codex cloud status {task_id}"), apply: func(c *Config, v string) error {
		if strings.TrimSpace(v) == "" {
			return fmt.Errorf("the status command may not be empty")
		}
		if !strings.Contains(v, "{task_id}") {
			return fmt.Errorf("%q does not name the task: put {task_id} where the task ID goes, e.g. codex cloud status {task_id}", v)
		}
		c.CloudStatusCommand = v
		return nil
	}},
	// The Codex cloud loop (docs/codex-cloud.md); XMODE_CODEX_BIN is above.
	{name: "XMODE_CLOUD_POLL_INTERVAL", def: lit("15s"), apply: func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.CloudPollInterval = d
		return err
	}},
	{name: "XMODE_CLOUD_STALE_AFTER", def: lit("10m"), apply: func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.CloudStaleAfter = d
		return err
	}},
	// The MCP server (docs/mcp.md, "Security model").
	{name: "XMODE_MCP_REPOS", def: lit(""), apply: func(c *Config, v string) error {
		pats, err := ParseRepoPatterns(v)
		c.MCPRepos = pats
		return err
	}},
	{name: "XMODE_MCP_ENV", def: lit(""), apply: func(c *Config, v string) error {
		pats, err := ParseEnvPatterns(v)
		c.MCPEnv = pats
		return err
	}},
}

// Load builds the effective configuration. flags maps a variable name to the
// flag that overrides it for this invocation.
func Load(env Env, flags map[string]Flag) (*Config, error) {
	if env == nil {
		env = os.Getenv
	}
	c := &Config{}
	for _, s := range settings {
		raw, source := "", ""
		if f, ok := flags[s.name]; ok {
			raw, source = f.Value, "flag "+f.Name
		} else if v, ok := lookup(env, s.name); ok {
			raw, source = v, "env "+s.name
		} else if v, ok := lookup(env, s.fallback); s.fallback != "" && ok {
			raw, source = v, "env "+s.fallback+" (fallback)"
		} else {
			raw, source = s.def(c, env), "default"
		}
		if err := s.apply(c, raw); err != nil {
			what := source
			if source == "default" {
				what = "default of " + s.name
			}
			return nil, fail.Usagef("%s: %v", what, err)
		}
		c.Values = append(c.Values, Value{Name: s.name, Value: raw, Source: source})
	}
	return c, nil
}

// lookup treats an empty variable as unset, as shells and docker do.
func lookup(env Env, name string) (string, bool) {
	if name == "" {
		return "", false
	}
	v := env(name)
	return v, v != ""
}

func defaultStorageRoot(_ *Config, env Env) string {
	if x := env("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "xmode")
	}
	home := env("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".local", "share", "xmode")
}

func defaultUser(_ *Config, _ Env) string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// MaxPoolSize bounds a project machine's pool: each entry of the docker
// engine holds a running container.
const MaxPoolSize = 256

// MinPids is the lowest XMODE_SANDBOX_PIDS_LIMIT a sandbox can run under.
const MinPids = 8

// NonRootUser is who docker steps run as when the storage root belongs to
// root: an unprivileged uid that owns nothing else (distroless's nonroot).
const NonRootUser = "65532:65532"

// defaultSandboxUser is the owner of the storage root, so files a sandboxed
// command writes into the worktree stay owned by whoever owns the rest —
// unless that is root: sandboxes never run as root on the host's files.
func defaultSandboxUser(c *Config, _ Env) string {
	var st syscall.Stat_t
	if err := syscall.Stat(c.StorageRoot, &st); err != nil || st.Uid == 0 {
		return NonRootUser
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

// EgressMode is the egress mode of a proxied sandbox network
// (XMODE_SANDBOX_NETWORK=allow or open: docs/network.md), and false for
// any other network (none, bridge, a network name), which no proxy decides.
func (c *Config) EgressMode() (egress.Mode, bool) {
	switch m := egress.Mode(c.Network); m {
	case egress.ModeAllow, egress.ModeOpen:
		return m, true
	}
	return "", false
}

// EgressSources are the configuration's part of a sandbox's egress
// policy, last in egress.Merge's order (flags, a plan and an agent come
// first): XMODE_SANDBOX_ALLOW's rules and XMODE_SANDBOX_RESOLVE's names.
func (c *Config) EgressSources() []egress.Source {
	var out []egress.Source
	if len(c.SandboxAllow) > 0 {
		out = append(out, egress.Source{Name: "XMODE_SANDBOX_ALLOW", Allow: c.SandboxAllow})
	}
	if c.SandboxResolve != "" {
		out = append(out, egress.Source{Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{c.SandboxResolve}})
	}
	return out
}

// LimitSettings are the variables of a docker sandbox's limits.
var LimitSettings = []string{"XMODE_SANDBOX_CPUS", "XMODE_SANDBOX_MEMORY", "XMODE_SANDBOX_PIDS_LIMIT",
	"XMODE_SANDBOX_TMPFS", "XMODE_SANDBOX_NETWORK", "XMODE_SANDBOX_READONLY_ROOT"}

// BindLeaves reports whether a docker sandbox in bind mode leaves the limit
// name at docker's default: bind mode keeps the design's lightweight argv,
// but a value the user set explicitly is applied, and
// XMODE_SANDBOX_BIND_HARDENED applies them all.
func (c *Config) BindLeaves(name string) bool { return !c.BindHardened && !c.Explicit(name) }

// HostEnvFor is the environment policy a new host session of origin
// ("mcp", or "" and "cli" for the command line) records: the configured
// one, except that a session an MCP client makes inherits only the core
// variables unless XMODE_HOST_ENV was set explicitly — an agent's server
// should not hand its steps everything of the shell that started it.
func (c *Config) HostEnvFor(origin string) hostenv.Policy {
	p := c.HostEnv
	if origin == "mcp" && !c.Explicit("XMODE_HOST_ENV") {
		p.Inherit = hostenv.Core
	}
	return p
}

// Unapplied lists the limits that new docker sandboxes will not get as
// configured: in bind mode (docker engine, no storage volume, a daemon on
// this machine), those BindLeaves. `config` and `doctor` say so.
func (c *Config) Unapplied() []string {
	if c.Engine != "docker" || c.StorageVolume != "" || c.DockerRemote == "on" ||
		c.DockerRemote == "auto" && (strings.HasPrefix(c.DockerHost, "tcp://") || strings.HasPrefix(c.DockerHost, "http")) {
		return nil
	}
	var out []string
	for _, n := range LimitSettings {
		if c.BindLeaves(n) {
			out = append(out, n)
		}
	}
	return out
}

// Explicit reports whether a setting was given (a flag, its variable or
// the fallback) rather than left at its default.
func (c *Config) Explicit(name string) bool {
	for _, v := range c.Values {
		if v.Name == name {
			return v.Source != "default"
		}
	}
	return false
}

// CheckTTL refuses a lifetime beyond XMODE_SANDBOX_MAX_TTL.
func (c *Config) CheckTTL(d time.Duration) error {
	if c.MaxTTL > 0 && d > c.MaxTTL {
		return fmt.Errorf("%s is longer than XMODE_SANDBOX_MAX_TTL (%s): ask for less, or raise the limit", d, c.MaxTTL)
	}
	return nil
}

// ResolveExisting resolves the symlinks of the longest part of p that
// exists, so that a storage root reached through a symlink is one path for
// every command, and the paths derived from it match what is on disk.
func ResolveExisting(p string) string {
	rest := ""
	for cur := p; ; cur = filepath.Dir(cur) {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(real, rest)
		}
		if filepath.Dir(cur) == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
	}
}

// defaultTmpfs is docs/configuration.md's /tmp of 1g, or half the memory limit
// when that is 2g or less: the tmpfs must stay below the limit it counts
// against. It is exec (docker mounts a tmpfs noexec otherwise): builds run
// what they compile under /tmp (go test, cargo, node-gyp); nosuid and nodev
// stay.
func defaultTmpfs(c *Config, _ Env) string {
	size := "1g"
	if c.Memory <= 2<<30 {
		size = strconv.FormatInt(c.Memory/2>>10, 10) + "k"
	}
	return "/tmp:rw,exec,nosuid,nodev,size=" + size
}

// tmpfsSize is the size= of docker tmpfs options, 0 when there is none.
func tmpfsSize(opts string) (int64, error) {
	for _, o := range strings.Split(opts, ",") {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			return ParseSize(v)
		}
	}
	return 0, nil
}

// ValidUser checks an owner name: printable, no spaces, at most 64 bytes.
func ValidUser(v string) error {
	if v == "" || len(v) > 64 {
		return fmt.Errorf("%q is not a user name: use 1 to 64 characters", v)
	}
	for _, r := range v {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%q is not a user name: no spaces or control characters", v)
		}
	}
	return nil
}

// ValidKubeName reports whether v is a DNS-1123 label, as Kubernetes
// names namespaces (and xmode's pods, NetworkPolicies).
func ValidKubeName(v string) bool {
	if v == "" || len(v) > 63 || v[0] == '-' || v[len(v)-1] == '-' {
		return false
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func validVolumeName(v string) bool {
	for i, r := range v {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (i > 0 && (r == '_' || r == '.' || r == '-'))
		if !ok {
			return false
		}
	}
	return v != ""
}
