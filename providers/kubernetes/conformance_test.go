package kubernetes

import (
	"testing"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/engine/enginetest"
)

// The shared engine conformance suite on the real test cluster: every
// subtest provisions a pod of its own in the test's namespace.
func TestConformance(t *testing.T) {
	e := newEnv(t, nil)
	enginetest.Run(t, enginetest.Harness{Spec: func(t *testing.T) (engine.Provider, engine.Spec) {
		return e.p, e.spec(t)
	}})
}
