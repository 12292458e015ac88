package engine

import (
	"fmt"
	"sort"
	"sync"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
)

// Factory builds a provider from the configuration.
type Factory func(cfg *config.Config) (Provider, error)

var (
	mu        sync.Mutex
	factories = map[string]Factory{}
)

// Register makes a provider available under name ("host", "docker",
// "kubernetes"); the
// providers call it from init, and the binary imports the ones it ships.
func Register(name string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	factories[name] = f
}

// Cloud is the engine of cloud_subscription sessions: the Codex cloud runs
// their work (`xmode cloud submit`), so it has no provider and Open refuses it.
const Cloud = "cloud"

// Choose is the table of docs/reference.md, "Runner modes and engines":
// which engine runs a runner mode.
func Choose(runnerMode, configuredEngine string) (string, error) {
	switch runnerMode {
	case config.ModeLocalWorktree:
		return "host", nil
	case config.ModeCloudWorker:
		// The configured engine (docker, kubernetes); config checked the
		// name, and Open refuses one this binary lacks.
		if configuredEngine != "" && configuredEngine != "host" {
			return configuredEngine, nil
		}
		return "host", nil
	case config.ModeCloudSubscription:
		return Cloud, nil
	}
	return "", fail.Usagef("unknown runner mode %q: use local_worktree, cloud_worker or cloud_subscription", runnerMode)
}

// Configured is the engine XMODE_SANDBOX_ENGINE names ("host" when it is
// unset), whatever the runner mode: the one that owns what outlives a
// session, such as a project machine's cache volume, which `machine rm`
// removes even when the next session would run elsewhere.
func Configured(cfg *config.Config) string {
	if cfg.Engine == "" {
		return "host"
	}
	return cfg.Engine
}

// Open returns the provider of an engine named by Choose, by Configured, or
// by a session's record: the only way to a provider.
func Open(name string, cfg *config.Config) (Provider, error) {
	if name == Cloud {
		return nil, fail.Refusedf("a cloud_subscription session runs nothing locally: submit its work to the Codex cloud with `xmode cloud submit SESSION --env ENV_ID --prompt TEXT`")
	}
	mu.Lock()
	f, ok := factories[name]
	var names []string
	for n := range factories {
		names = append(names, n)
	}
	mu.Unlock()
	if !ok {
		sort.Strings(names)
		return nil, fmt.Errorf("engine %q is not built into this xmode (have %v)", name, names)
	}
	return f(cfg)
}

// For chooses and opens the provider for a runner mode in one call.
func For(runnerMode string, cfg *config.Config) (Provider, error) {
	name, err := Choose(runnerMode, cfg.Engine)
	if err != nil {
		return nil, err
	}
	return Open(name, cfg)
}
