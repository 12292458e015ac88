package kubernetes

import (
	"testing"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/engine/enginetest"
)

// The shared engine conformance suite on the real test cluster, for each
// way a sandbox is made (a pod of xmode's, a Sandbox, a warm pool's pod
// taken by a SandboxClaim): every subtest provisions a sandbox of its own
// in the test's namespace.
func TestConformance(t *testing.T) {
	eachAPI(t, func(t *testing.T, via string) {
		e := newEnvVia(t, via, nil)
		enginetest.Run(t, enginetest.Harness{Spec: func(t *testing.T) (engine.Provider, engine.Spec) {
			return e.p, e.spec(t)
		}})
	})
}
