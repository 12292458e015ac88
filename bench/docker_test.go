package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// dockerSession returns the environment of cloud_worker sessions on the
// docker engine (bind mode, the local test image) for the real binary, a
// repository to clone, and the image.
func dockerSession(b *testing.B, dir string) ([]string, string, string) {
	dockertest.Require(b)
	img := dockertest.Image(b)
	repo := filepath.Join(dir, "repo")
	makeRepo(b, repo, 20, 2)
	env := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_SANDBOX_ENGINE=docker",
		"XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img, "XMODE_SANDBOX_MAX_OPEN=0"}
	return env, repo, img
}

// tlsSession is dockerSession against the second daemon, reached over TCP
// with TLS (sync mode: the worktree is copied into the sandbox), and the
// environment the docker CLI needs to reach the same daemon.
func tlsSession(b *testing.B, dir string) (env, cliEnv []string, repo, img string) {
	d := dockertest.RequireTLSDaemon(b)
	d.Image(b)
	env, repo, img = dockerSession(b, dir)
	env = append(env, d.Env()...)
	cliEnv = []string{"DOCKER_HOST=" + d.Host, "DOCKER_TLS_VERIFY=1", "DOCKER_CERT_PATH=" + d.Certs}
	return env, cliEnv, repo, img
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
	dir := b.TempDir()
	env, repo, _ := dockerSession(b, dir)
	benchExec(b, env, nil, repo)
}

// BenchmarkDockerTLSExec: the same against the second daemon over TLS.
func BenchmarkDockerTLSExec(b *testing.B) {
	dir := b.TempDir()
	env, cliEnv, repo, _ := tlsSession(b, dir)
	benchExec(b, env, cliEnv, repo)
}

func benchExec(b *testing.B, env, cliEnv []string, repo string) {
	bin := xmodeBin(b)
	dockerBin, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("SKIP: no docker CLI to compare with")
	}
	id := output(b, env, bin, "sandbox", "create", "--repo", repo, "-q")
	b.Cleanup(func() { stopSessions(b, env, bin, id) })
	b.ResetTimer()
	med := sideBySide(rounds(b),
		func() { run(b, cliEnv, dockerBin, "exec", "xmode-"+id, "true") },
		func() { run(b, env, bin, "sandbox", "exec", id, "--", "true") },
	)
	b.ReportMetric(ms(med[0]), "docker-exec-ms")
	b.ReportMetric(ms(med[1]), "xmode-exec-ms")
	b.ReportMetric(float64(med[1])/float64(med[0]), "xmode/docker")
}

// BenchmarkDockerCreate: `sandbox create` on the docker engine against
// `docker run -d` of the same image plus a shallow clone of the same repo.
func BenchmarkDockerCreate(b *testing.B) {
	dir := b.TempDir()
	env, repo, img := dockerSession(b, dir)
	benchCreate(b, dir, env, nil, repo, img)
}

// BenchmarkDockerTLSCreate: the same against the second daemon over TLS,
// where create also copies the worktree into the sandbox's volume; so it is
// also compared with run + clone + `docker cp` of the clone into the
// container, what the docker CLI needs for a sandbox with the worktree in it
// on a daemon that cannot mount it.
func BenchmarkDockerTLSCreate(b *testing.B) {
	dir := b.TempDir()
	env, cliEnv, repo, img := tlsSession(b, dir)
	benchCreate(b, dir, env, cliEnv, repo, img)
}

func benchCreate(b *testing.B, dir string, env, cliEnv []string, repo, img string) {
	withCopy := cliEnv != nil
	bin := xmodeBin(b)
	dockerBin, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("SKIP: no docker CLI to compare with")
	}
	var ids, containers []string
	b.Cleanup(func() {
		stopSessions(b, env, bin, ids...)
		for _, c := range containers {
			rm := exec.Command(dockerBin, "rm", "-f", c)
			rm.Env = append(os.Environ(), cliEnv...)
			rm.Run()
		}
	})
	i := 0
	runClone := func() (string, string) {
		i++
		clone := filepath.Join(dir, "clones", strconv.Itoa(i))
		run(b, nil, "git", "clone", "-q", "--depth", "1", "file://"+repo, clone)
		c := output(b, cliEnv, dockerBin, "run", "-d", "--init", "--label", "xmode-bench=1", img, "sleep", "2147483647")
		containers = append(containers, c)
		return clone, c
	}
	fns := []func(){
		func() { runClone() },
		func() { ids = append(ids, output(b, env, bin, "sandbox", "create", "--repo", repo, "-q")) },
	}
	if withCopy {
		fns = append(fns, func() {
			clone, c := runClone()
			run(b, cliEnv, dockerBin, "cp", clone+"/.", c+":/tmp")
		})
	}
	b.ResetTimer()
	med := sideBySide(rounds(b), fns...)
	b.ReportMetric(ms(med[0]), "docker-run+clone-ms")
	b.ReportMetric(ms(med[1]), "xmode-create-ms")
	b.ReportMetric(float64(med[1])/float64(med[0]), "create/(run+clone)")
	if withCopy {
		b.ReportMetric(ms(med[2]), "docker-run+clone+cp-ms")
		b.ReportMetric(float64(med[1])/float64(med[2]), "create/(run+clone+cp)")
	}
}
