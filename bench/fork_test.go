package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// BenchmarkFork: `sandbox fork` of a session of a warm project machine
// shaped like prometheus/prometheus (1,667 files, ~24 MB; promRepo) after
// an agent's work (promChanges: 40 files edited, 5 new, 5 deleted, and a
// commit of half of it), side by side with `sandbox create --project` on
// the same warm machine (no pool), on the host engine and on docker (bind
// mode, the local test image). Target: fork at most 1.5× create (median
// wall time); CPU time (the process and the children it waited for: git)
// is reported beside it, and so is what a plain copy of the parent's
// worktree (`cp -a`, a reflink where the filesystem has one) costs.
func BenchmarkFork(b *testing.B) {
	b.Run("host", func(b *testing.B) { benchFork(b, nil) })
	b.Run("docker", func(b *testing.B) {
		dockertest.Require(b)
		benchFork(b, []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + dockertest.Image(b)})
	})
}

func benchFork(b *testing.B, extra []string) {
	bin := xmodeBin(b)
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	promRepo(b, repo)
	env := append([]string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_SANDBOX_MAX_OPEN=0",
		"XMODE_PROJECT_MACHINES=1", "XMODE_USER=bench"}, extra...)
	run(b, env, bin, "machine", "warm", "bench", "--repo", repo, "-q")
	b.Cleanup(func() { run(b, env, bin, "machine", "rm", "bench", "--force", "-q") })
	parent := output(b, env, bin, "sandbox", "create", "--project", "bench", "-q")
	b.Cleanup(func() { stopSessions(b, env, bin, parent) })
	worktree := output(b, env, bin, "sandbox", "exec", parent, "--", "pwd")
	if extra != nil { // the container's path: the worktree on this host
		worktree = filepath.Join(dir, "root", "runs", strings.TrimSpace(jsonField(b, env, bin, parent, "run_id")), "worktree")
	}
	promChanges(b, worktree)
	run(b, env, bin, "sandbox", "exec", parent, "--", "sh", "-c",
		"git add tsdb && git -c user.name=agent -c user.email=agent@example.com commit -qm 'the agent, halfway'")

	copies := filepath.Join(dir, "copies")
	procs := []proc{
		cmdline(env, bin, "sandbox", "create", "--project", "bench", "-q"),
		cmdline(env, bin, "sandbox", "fork", parent, "-q"),
		// What a full copy of the worktree costs (cp picks a reflink where
		// the filesystem has them), its .git included.
		cmdline(nil, "cp", "-a", "--reflink=auto", worktree, copies),
	}
	walls := make([][]time.Duration, len(procs))
	cpus := make([][]time.Duration, len(procs))
	b.ResetTimer()
	for range rounds(b) {
		for j, p := range procs {
			c := exec.Command(p.argv[0], p.argv[1:]...)
			c.Env = append(os.Environ(), p.env...)
			start := time.Now()
			out, err := c.Output()
			wall := time.Since(start)
			if err != nil {
				b.Fatalf("%s: %v", strings.Join(p.argv, " "), err)
			}
			walls[j] = append(walls[j], wall)
			cpus[j] = append(cpus[j], c.ProcessState.UserTime()+c.ProcessState.SystemTime())
			b.StopTimer()
			if j < 2 {
				stopSessions(b, env, bin, strings.TrimSpace(string(out)))
			} else if err := os.RemoveAll(copies); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	create := cost{wall: median(walls[0]), cpu: median(cpus[0])}
	fork := cost{wall: median(walls[1]), cpu: median(cpus[1])}
	cp := cost{wall: median(walls[2]), cpu: median(cpus[2])}
	b.ReportMetric(ms(create.wall), "create-ms")
	b.ReportMetric(ms(create.cpu), "create-cpu-ms")
	b.ReportMetric(ms(fork.wall), "fork-ms")
	b.ReportMetric(ms(fork.cpu), "fork-cpu-ms")
	b.ReportMetric(ms(cp.wall), "copy-ms")
	b.ReportMetric(ms(cp.cpu), "copy-cpu-ms")
	reportRatio(b, "fork/create", fork, create)
	reportRatio(b, "fork/copy", fork, cp)
}

// jsonField is a string field of `sandbox show SESSION --json`.
func jsonField(b *testing.B, env []string, bin, session, field string) string {
	b.Helper()
	out := output(b, env, bin, "--json", "sandbox", "show", session)
	key := `"` + field + `": "`
	i := strings.Index(out, key)
	if i < 0 {
		b.Fatalf("no %s in %s", field, out)
	}
	rest := out[i+len(key):]
	return rest[:strings.IndexByte(rest, '"')]
}
