package docker

import (
	"context"
	"os/exec"
	"testing"

	"github.com/xmode/xmode/engine"
)

// BenchmarkExecTrue is one `true` step through the provider — the engine's
// share of `xmode sandbox exec <id> -- true`. BenchmarkDockerCLIExecTrue is
// `docker exec <container> true` by the docker CLI on the same kind of
// sandbox, for the ratio `make bench` reports.
func BenchmarkExecTrue(b *testing.B) {
	e := newEnv(b, MountVolume, nil)
	sb := e.provision()
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		st, err := e.p.Exec(ctx, sb, engine.ExecRequest{Argv: []string{"true"}})
		if err != nil || st.ExitCode != 0 {
			b.Fatalf("%+v %v", st, err)
		}
	}
}

func BenchmarkDockerCLIExecTrue(b *testing.B) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("no docker CLI")
	}
	e := newEnv(b, MountVolume, nil)
	sb := e.provision()
	b.ResetTimer()
	for b.Loop() {
		if out, err := exec.Command(docker, "exec", sb.ContainerID, "true").CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}
