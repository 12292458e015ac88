package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// dockerSession creates a cloud_worker session on the docker engine (bind
// mode, the local test image) with the real binary and returns its
// environment and ID.
func dockerSession(b *testing.B, dir string) ([]string, string, string) {
	dockertest.Require(b)
	img := dockertest.Image(b)
	repo := filepath.Join(dir, "repo")
	makeRepo(b, repo, 20, 2)
	env := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_SANDBOX_ENGINE=docker",
		"XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img, "XMODE_SANDBOX_MAX_OPEN=0"}
	return env, repo, img
}

// stopSessions stops the benchmark's sessions with the benchmark's own
// environment (its storage root): their containers must not outlive it.
func stopSessions(b *testing.B, env []string, bin string, ids ...string) {
	for _, id := range ids {
		c := exec.Command(bin, "sandbox", "stop", id)
		c.Env = append(os.Environ(), env...)
		if out, err := c.CombinedOutput(); err != nil {
			b.Errorf("stop %s: %v: %s", id, err, out)
		}
	}
}

// BenchmarkDockerExec: `xmode sandbox exec ID -- true` against `docker exec
// <container> true` by the docker CLI on the same container, side by side.
// Target: median ratio ≤ 1.0.
func BenchmarkDockerExec(b *testing.B) {
	bin := xmodeBin(b)
	dockerBin, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("SKIP: no docker CLI to compare with")
	}
	dir := b.TempDir()
	env, repo, _ := dockerSession(b, dir)
	id := output(b, env, bin, "sandbox", "create", "--repo", repo, "-q")
	b.Cleanup(func() { stopSessions(b, env, bin, id) })
	b.ResetTimer()
	med := sideBySide(rounds(b),
		func() { run(b, nil, dockerBin, "exec", "xmode-"+id, "true") },
		func() { run(b, env, bin, "sandbox", "exec", id, "--", "true") },
	)
	b.ReportMetric(ms(med[0]), "docker-exec-ms")
	b.ReportMetric(ms(med[1]), "xmode-exec-ms")
	b.ReportMetric(float64(med[1])/float64(med[0]), "xmode/docker")
}

// BenchmarkDockerCreate: `sandbox create` on the docker engine against
// `docker run -d` of the same image plus a shallow clone of the same repo.
func BenchmarkDockerCreate(b *testing.B) {
	bin := xmodeBin(b)
	dockerBin, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("SKIP: no docker CLI to compare with")
	}
	dir := b.TempDir()
	env, repo, img := dockerSession(b, dir)
	var ids, containers []string
	b.Cleanup(func() {
		stopSessions(b, env, bin, ids...)
		for _, c := range containers {
			exec.Command(dockerBin, "rm", "-f", c).Run()
		}
	})
	i := 0
	b.ResetTimer()
	med := sideBySide(rounds(b),
		func() {
			i++
			run(b, nil, "git", "clone", "-q", "--depth", "1", "file://"+repo, filepath.Join(dir, "clones", strconv.Itoa(i)))
			containers = append(containers, output(b, nil, dockerBin, "run", "-d", "--init", "--label", "xmode-bench=1", img, "sleep", "2147483647"))
		},
		func() { ids = append(ids, output(b, env, bin, "sandbox", "create", "--repo", repo, "-q")) },
	)
	b.ReportMetric(ms(med[0]), "docker-run+clone-ms")
	b.ReportMetric(ms(med[1]), "xmode-create-ms")
	b.ReportMetric(float64(med[1])/float64(med[0]), "create/(run+clone)")
}
