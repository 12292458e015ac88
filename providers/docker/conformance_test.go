package docker

import (
	"os"
	"testing"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/engine/enginetest"
)

// The shared engine conformance suite, in both mount models. In volume mode
// the worktree belongs to a non-root user, so steps run as that user (the
// production shape: the storage root's owner is not root).
func TestConformanceVolume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	enginetest.Run(t, enginetest.Harness{Spec: func(t *testing.T) (engine.Provider, engine.Spec) {
		spec := e.spec(newRun())
		if err := os.Chown(spec.Worktree, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		return e.p, spec
	}})
}

func TestConformanceBind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	enginetest.Run(t, enginetest.Harness{Spec: func(t *testing.T) (engine.Provider, engine.Spec) {
		return e.p, e.spec(newRun())
	}})
}
