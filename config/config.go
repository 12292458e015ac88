// Package config is xmode's one configuration loader: contract §6. Every
// value comes from a flag, else its XMODE_* variable, else the CODEX_DOCKER_*
// fallback, else the default, and remembers which one it came from so that
// `xmode config` can say so. A bad value is a usage error naming its source.
package config

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xmode/xmode/fail"
)

// Runner modes (contract §5).
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
	Engine             string // "" (host) or "docker"
	DockerHost         string // "" means the SDK's default local socket
	Image              string
	StorageVolume      string // "" means bind mode
	StorageMount       string
	CPUs               float64
	Memory             int64
	PidsLimit          int64
	TmpfsPath          string
	TmpfsOptions       string
	Network            string
	ReadonlyRoot       bool
	SandboxUser        string // "uid:gid"; "" when the storage root does not exist yet
	TTL                time.Duration
	MaxOpen            int
	ProjectMachines    bool
	ProjectCacheMount  string
	CloudStatusCommand string
	CodexBin           string
	CloudPollInterval  time.Duration
	CloudStaleAfter    time.Duration

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
		abs, err := filepath.Abs(v)
		if err != nil {
			return err
		}
		c.StorageRoot = filepath.Clean(abs)
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
		case "docker":
			c.Engine = v
			return nil
		}
		return fmt.Errorf("%q is not an engine: use docker, or leave it unset for host processes", v)
	}},
	{name: "XMODE_SANDBOX_DOCKER_HOST", fallback: "DOCKER_HOST", def: lit(""), apply: func(c *Config, v string) error {
		if v != "" && !strings.HasPrefix(v, "unix://") && !strings.HasPrefix(v, "tcp://") {
			return fmt.Errorf("%q is not a docker endpoint: use unix:///path/to/docker.sock or tcp://host:port", v)
		}
		c.DockerHost = v
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
		if err != nil || f <= 0 || f > 1024 {
			return fmt.Errorf("%q is not a CPU count: use a positive number such as 2 or 0.5", v)
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
		c.PidsLimit = n
		return nil
	}},
	{name: "XMODE_SANDBOX_TMPFS", fallback: "CODEX_DOCKER_TMPFS", def: lit("/tmp:rw,nosuid,nodev,size=1g"), apply: func(c *Config, v string) error {
		path, opts, _ := strings.Cut(v, ":")
		if !filepath.IsAbs(path) {
			return fmt.Errorf("%q is not a tmpfs mount: use PATH[:OPTIONS] with an absolute path, e.g. /tmp:rw,size=1g", v)
		}
		c.TmpfsPath, c.TmpfsOptions = filepath.Clean(path), opts
		return nil
	}},
	{name: "XMODE_SANDBOX_NETWORK", fallback: "CODEX_DOCKER_NETWORK", def: lit("none"), apply: func(c *Config, v string) error {
		switch {
		case v == "":
			return fmt.Errorf("the network may not be empty: use none, bridge or a network name")
		case v == "host" || strings.HasPrefix(v, "container:"):
			return fmt.Errorf("%q would share the host's or another container's network with untrusted code: use none, bridge or a user-defined network", v)
		}
		c.Network = v
		return nil
	}},
	{name: "XMODE_SANDBOX_READONLY_ROOT", def: lit("0"), apply: func(c *Config, v string) error {
		b, err := ParseBool(v)
		c.ReadonlyRoot = b
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
	{name: "XMODE_SANDBOX_TTL", def: lit("2h"), apply: func(c *Config, v string) error {
		d, err := ParseDuration(v)
		c.TTL = d
		return err
	}},
	{name: "XMODE_SANDBOX_MAX_OPEN", def: lit("10"), apply: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a limit: use a whole number, 0 for unlimited", v)
		}
		c.MaxOpen = n
		return nil
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
	// The Codex cloud loop (contract §9).
	{name: "XMODE_CODEX_BIN", def: lit("codex"), apply: func(c *Config, v string) error {
		if strings.TrimSpace(v) == "" {
			return fmt.Errorf("the codex binary may not be empty: use codex or a path")
		}
		c.CodexBin = v
		return nil
	}},
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

// defaultSandboxUser is the owner of the storage root, so files a sandboxed
// command writes into the worktree stay owned by whoever owns the rest.
func defaultSandboxUser(c *Config, _ Env) string {
	var st syscall.Stat_t
	if err := syscall.Stat(c.StorageRoot, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
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

func validVolumeName(v string) bool {
	for i, r := range v {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (i > 0 && (r == '_' || r == '.' || r == '-'))
		if !ok {
			return false
		}
	}
	return v != ""
}
