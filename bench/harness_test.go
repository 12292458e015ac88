// Package bench compares xmode against the tools it wraps (true, git,
// docker), measured side by side in the same run so machine noise hits both
// alike: `make bench`. Figures are medians; ratios are what to read.
package bench

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// xmodeBin builds the real, static xmode binary once per run (no race
// detector, no test harness: what users run).
func xmodeBin(b testing.TB) string {
	b.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "xmode-bench")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "xmode")
		c := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binPath+".built", "../cmd/xmode")
		c.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := c.CombinedOutput(); err != nil {
			buildErr = &runErr{"go build", out, err}
			return
		}
		buildErr = installCopy(binPath+".built", binPath)
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return binPath
}

// buildHelper builds one of bench/internal's commands, as xmode is built.
func buildHelper(b testing.TB, name string) string {
	b.Helper()
	dir := b.TempDir()
	out := filepath.Join(dir, name)
	c := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out+".built", "./internal/"+name)
	c.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := c.CombinedOutput(); err != nil {
		b.Fatal(&runErr{"go build " + name, msg, err})
	}
	if err := installCopy(out+".built", out); err != nil {
		b.Fatal(err)
	}
	return out
}

// installCopy copies a binary the linker just wrote to dst, as `make
// install` does, and the benchmarks run the copy: while the linker's pages
// stay cached, a process started from its output took ~15% more CPU (~20%
// for `--version`) than one started from a copy of the same bytes, on this
// project's VM (probably because the linker writes through a memory
// mapping). What users run is an installed copy.
func installCopy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Remove(src)
}

type runErr struct {
	what string
	out  []byte
	err  error
}

func (e *runErr) Error() string { return e.what + ": " + e.err.Error() + ": " + string(e.out) }

// run executes a command and fails the benchmark if it fails.
func run(b testing.TB, env []string, name string, args ...string) {
	b.Helper()
	c := exec.Command(name, args...)
	c.Env = append(os.Environ(), env...)
	if out, err := c.CombinedOutput(); err != nil {
		b.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// output runs a command and returns its trimmed stdout.
func output(b testing.TB, env []string, name string, args ...string) string {
	b.Helper()
	c := exec.Command(name, args...)
	c.Env = append(os.Environ(), env...)
	out, err := c.Output()
	if err != nil {
		b.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// sideBySide times fns alternately, n rounds each, and returns each one's
// median. Alternating keeps slow phases of a noisy machine from landing on
// one side only.
func sideBySide(n int, fns ...func()) []time.Duration {
	samples := make([][]time.Duration, len(fns))
	for i := 0; i < n; i++ {
		for j, f := range fns {
			start := time.Now()
			f()
			samples[j] = append(samples[j], time.Since(start))
		}
	}
	med := make([]time.Duration, len(fns))
	for j, s := range samples {
		med[j] = median(s)
	}
	return med
}

// proc is a command a start-up benchmark times: name and arguments, and
// what it adds to the environment.
type proc struct {
	env  []string
	argv []string
}

func cmdline(env []string, argv ...string) proc { return proc{env, argv} }

// cost is one command's median wall time and median CPU time over the
// rounds of a comparison, and the minor page faults of its last run.
type cost struct {
	wall, cpu time.Duration
	faults    float64
}

// runCost runs p once: its wall time, and its CPU time as the kernel
// accounts it (rusage of the child: user + system, the children it waited
// for included, as `time` reports it).
func runCost(b testing.TB, p proc) (wall, cpu time.Duration, faults float64) {
	b.Helper()
	c := exec.Command(p.argv[0], p.argv[1:]...)
	c.Env = append(os.Environ(), p.env...)
	start := time.Now()
	out, err := c.CombinedOutput()
	wall = time.Since(start)
	if err != nil {
		b.Fatalf("%s: %v: %s", strings.Join(p.argv, " "), err, out)
	}
	if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
		faults = float64(ru.Minflt)
	}
	return wall, c.ProcessState.UserTime() + c.ProcessState.SystemTime(), faults
}

// sideBySideCosts runs ps alternately, n rounds each, and returns each
// one's median wall and CPU time: machine noise hits all of them alike.
func sideBySideCosts(b testing.TB, n int, ps ...proc) []cost {
	b.Helper()
	walls := make([][]time.Duration, len(ps))
	cpus := make([][]time.Duration, len(ps))
	out := make([]cost, len(ps))
	for i := 0; i < n; i++ {
		for j, p := range ps {
			w, c, f := runCost(b, p)
			walls[j] = append(walls[j], w)
			cpus[j] = append(cpus[j], c)
			out[j].faults = f
		}
	}
	for j := range ps {
		out[j].wall, out[j].cpu = median(walls[j]), median(cpus[j])
	}
	return out
}

// reportCost reports c's wall and CPU milliseconds as name-ms and
// name-cpu-ms, and its page faults as name-faults.
func reportCost(b *testing.B, name string, c cost) {
	b.ReportMetric(ms(c.wall), name+"-ms")
	b.ReportMetric(ms(c.cpu), name+"-cpu-ms")
	b.ReportMetric(c.faults, name+"-faults")
}

// reportRatio reports a/b for wall time (name) and CPU time (name-cpu).
func reportRatio(b *testing.B, name string, a, base cost) {
	if base.wall > 0 {
		b.ReportMetric(float64(a.wall)/float64(base.wall), name)
	}
	if base.cpu > 0 {
		b.ReportMetric(float64(a.cpu)/float64(base.cpu), name+"-cpu")
	}
}

func median(s []time.Duration) time.Duration {
	c := append([]time.Duration(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[len(c)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rounds is how many side-by-side rounds a comparison takes: b.N, at least 5.
func rounds(b *testing.B) int {
	if b.N < 5 {
		return 5
	}
	return b.N
}
