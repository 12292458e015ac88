package docker

import (
	"strings"
	"testing"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
)

// shapeProvider is the provider a configuration of env opens (New contacts
// no daemon).
func shapeProvider(t *testing.T, env map[string]string) *Provider {
	t.Helper()
	all := map[string]string{"XMODE_STORAGE_ROOT": "/srv/x", "HOME": "/h", "XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker"}
	for k, v := range env {
		all[k] = v
	}
	cfg, err := config.Load(func(k string) string { return all[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// A pool hands an entry only to a create that would have made it: every
// setting that shapes a docker sandbox is in its shape, its owner and
// lifetime are not.
func TestShape(t *testing.T) {
	base := engine.Shape(shapeProvider(t, nil))
	if !strings.HasPrefix(base, "engine=docker\nmount=bind\n") {
		t.Fatalf("the shape of a bind-mode sandbox:\n%s", base)
	}
	if s := engine.Shape(shapeProvider(t, map[string]string{"XMODE_USER": "bob", "XMODE_SANDBOX_TTL": "5m", "XMODE_POOL_SIZE": "3"})); s != base {
		t.Fatalf("owner, lifetime or pool size changed the shape:\n%s\nwas\n%s", s, base)
	}
	for k, v := range map[string]string{
		"XMODE_SANDBOX_IMAGE": "other:1", "XMODE_SANDBOX_NETWORK": "bridge", "XMODE_SANDBOX_MEMORY": "1g",
		"XMODE_SANDBOX_STORAGE_VOLUME": "vol", "XMODE_SANDBOX_RUNTIME": "runsc", "XMODE_SANDBOX_DOCKER_HOST": "tcp://127.0.0.1:2375",
		"XMODE_SANDBOX_CPUS": "2", // the default, but set: bind mode applies it
		"XMODE_SANDBOX_USER": "1000:1000", "XMODE_PROJECT_CACHE_MOUNT": "/c", "XMODE_SANDBOX_BIND_HARDENED": "1",
	} {
		if engine.Shape(shapeProvider(t, map[string]string{k: v})) == base {
			t.Errorf("%s=%s does not change the shape", k, v)
		}
	}
}

// A move of a ready sandbox to another commit beats starting a container,
// except where the container works on a copy of the worktree.
func TestMoveCost(t *testing.T) {
	for env, want := range map[string]engine.MoveCost{
		"":                                 engine.MoveCheaper, // bind
		"XMODE_SANDBOX_STORAGE_VOLUME=vol": engine.MoveCheaper,
		"XMODE_SANDBOX_DOCKER_HOST=tcp://127.0.0.1:2375": engine.MoveNever, // sync
	} {
		k, v, _ := strings.Cut(env, "=")
		p := shapeProvider(t, map[string]string{k: v})
		if got := engine.Move(p); got != want {
			t.Errorf("%s (%s mode): move cost %d, want %d", env, p.MountMode(), got, want)
		}
	}
}
