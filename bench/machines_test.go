package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkMachineCreate: `sandbox create --project` on a warm project
// machine (1,700 files, 100 commits) against `git worktree add --detach` by
// the git binary on the same checkout, and against a `git clone --depth 1`
// per run (the way without machines), side by side. Target: create at most
// 1.3× worktree-add (median wall time); the speed-up over the clone is
// reported. CPU time (the process and the children it waited for: git) is
// reported too: on a busy machine it shows the cost better than wall time.
func BenchmarkMachineCreate(b *testing.B) {
	bin := xmodeBin(b)
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	makeRepo(b, repo, 1700, 100)
	root := filepath.Join(dir, "root")
	env := []string{"XMODE_STORAGE_ROOT=" + root, "XMODE_SANDBOX_MAX_OPEN=0", "XMODE_PROJECT_MACHINES=1"}
	run(b, env, bin, "machine", "warm", "bench", "--repo", repo, "-q")
	machine := filepath.Join(root, "project_machines", "bench", "repo")
	head := output(b, nil, "git", "-C", machine, "rev-parse", "HEAD")
	i := 0
	cmds := []func() *exec.Cmd{
		func() *exec.Cmd {
			return exec.Command("git", "-C", machine, "worktree", "add", "--quiet", "--detach", filepath.Join(dir, "plain", strconv.Itoa(i)), head)
		},
		func() *exec.Cmd {
			c := exec.Command(bin, "sandbox", "create", "--project", "bench", "-q")
			c.Env = append(os.Environ(), env...)
			return c
		},
		func() *exec.Cmd {
			return exec.Command("git", "clone", "-q", "--depth", "1", "file://"+repo, filepath.Join(dir, "clones", strconv.Itoa(i)))
		},
	}
	wall := make([][]time.Duration, len(cmds))
	cpu := make([][]time.Duration, len(cmds))
	b.ResetTimer()
	for n := rounds(b); i < n; i++ {
		for j, mk := range cmds {
			c := mk()
			start := time.Now()
			if out, err := c.CombinedOutput(); err != nil {
				b.Fatalf("%v: %v: %s", c.Args, err, out)
			}
			wall[j] = append(wall[j], time.Since(start))
			ru := c.ProcessState.SysUsage().(*syscall.Rusage)
			cpu[j] = append(cpu[j], time.Duration(ru.Utime.Nano()+ru.Stime.Nano()))
		}
	}
	b.StopTimer()
	w := []time.Duration{median(wall[0]), median(wall[1]), median(wall[2])}
	c := []time.Duration{median(cpu[0]), median(cpu[1]), median(cpu[2])}
	b.ReportMetric(ms(w[0]), "worktree-add-ms")
	b.ReportMetric(ms(w[1]), "create-ms")
	b.ReportMetric(ms(w[2]), "clone-depth1-ms")
	b.ReportMetric(float64(w[1])/float64(w[0]), "create/worktree-add")
	b.ReportMetric(float64(w[2])/float64(w[1]), "clone/create")
	b.ReportMetric(ms(c[0]), "worktree-add-cpu-ms")
	b.ReportMetric(ms(c[1]), "create-cpu-ms")
	b.ReportMetric(float64(c[1])/float64(c[0]), "create/worktree-add-cpu")
}
