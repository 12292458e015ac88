package engine

import (
	"fmt"
	"sort"
	"sync"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
)

// Factory builds an adapter from the configuration.
type Factory func(cfg *config.Config) (Adapter, error)

var (
	mu        sync.Mutex
	factories = map[string]Factory{}
)

// Register makes a provider available under name ("host", "docker"); the
// providers call it from init, and the binary imports the ones it ships.
func Register(name string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	factories[name] = f
}

// Choose is contract §5's table: which engine runs a runner mode.
func Choose(runnerMode, configuredEngine string) (string, error) {
	switch runnerMode {
	case config.ModeLocalWorktree:
		return "host", nil
	case config.ModeCloudWorker:
		if configuredEngine == "docker" {
			return "docker", nil
		}
		return "host", nil
	case config.ModeCloudSubscription:
		return "", fail.Refusedf("runner mode cloud_subscription does not run locally: the Codex cloud loop runs it (contract §9); use local_worktree or cloud_worker to run here")
	}
	return "", fail.Usagef("unknown runner mode %q: use local_worktree, cloud_worker or cloud_subscription", runnerMode)
}

// Open returns the adapter named by Choose.
func Open(name string, cfg *config.Config) (Adapter, error) {
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

// For chooses and opens the adapter for a runner mode in one call.
func For(runnerMode string, cfg *config.Config) (Adapter, error) {
	name, err := Choose(runnerMode, cfg.Engine)
	if err != nil {
		return nil, err
	}
	return Open(name, cfg)
}
