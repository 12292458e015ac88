package pool_test

import (
	"testing"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/pool"
	_ "github.com/xmode/xmode/providers/docker" // the docker engine (opening it contacts no daemon)
)

// A pool entry is claimed only by a create of its shape. The shape is the
// hash of what the provider lists (engine.Shape) and, for an engine that
// mounts the project's cache, of the user whose cache it mounts; it must
// stay what it is, so that entries made before an upgrade stay claimable
// and a reaper of another version does not retire them as made for other
// settings. (Docker's changed once, deliberately, when caches became per
// user: an entry of before mounts the cache all users shared, and must not
// be claimed.)
func TestShapeIsStable(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "2095f2c1e5601d5d"},
		{map[string]string{"XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker"}, "6960b853eff10627"},
		{map[string]string{"XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker",
			"XMODE_SANDBOX_STORAGE_VOLUME": "vol", "XMODE_SANDBOX_MEMORY": "1g"}, "fdb07169953d1595"},
		{map[string]string{"XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker",
			"XMODE_SANDBOX_DOCKER_HOST": "tcp://127.0.0.1:2375", "XMODE_SANDBOX_IMAGE": "other:1"}, "41be3d78d5e6e056"},
	} {
		all := map[string]string{"XMODE_STORAGE_ROOT": "/srv/x", "HOME": "/h"}
		for k, v := range c.env {
			all[k] = v
		}
		cfg, err := config.Load(func(k string) string { return all[k] }, nil)
		if err != nil {
			t.Fatal(err)
		}
		provider, err := engine.For(cfg.RunnerMode, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := pool.Shape(provider, "alice"); got != c.want {
			t.Errorf("%v (%s engine): shape %s, want %s", c.env, provider.Name(), got, c.want)
		}
		other := pool.Shape(provider, "bob")
		if _, keeps := engine.Volumes(provider); keeps == (other == c.want) {
			t.Errorf("%v (%s engine): bob's shape %s beside alice's %s; want them apart exactly when the engine mounts a cache", c.env, provider.Name(), other, c.want)
		}
		engine.Close(provider)
	}
}

// A setting that came after pools (the egress policy's) changes the shape
// only once it is set.
func TestShapeOfLaterSettings(t *testing.T) {
	shape := func(env map[string]string) string {
		all := map[string]string{"XMODE_STORAGE_ROOT": "/srv/x", "HOME": "/h", "XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker"}
		for k, v := range env {
			all[k] = v
		}
		cfg, err := config.Load(func(k string) string { return all[k] }, nil)
		if err != nil {
			t.Fatal(err)
		}
		provider, err := engine.For(cfg.RunnerMode, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer engine.Close(provider)
		return pool.Shape(provider, "alice")
	}
	if plain, allow := shape(nil), shape(map[string]string{"XMODE_SANDBOX_ALLOW": "mirror.example"}); plain == allow {
		t.Errorf("an allow rule leaves the shape as it was: %s", plain)
	}
}
