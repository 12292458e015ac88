package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/providers/docker/dockertest"
	_ "github.com/xmode/xmode/providers/local" // the host engine, for in-process claims
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// The pool benchmarks: `sandbox create --project` claiming a ready sandbox
// from a pool of 8 on a prometheus-sized machine (1,700 files, 100
// commits), side by side with what it replaces, in one run:
//
//   - docker engine, volume mode: the claim against `docker run -d` of the
//     same image (targets: median ≤ 50 ms and ≤ 0.2×);
//   - host engine: the claim against `git worktree add --detach` on the
//     machine (target ≤ 0.2×).
//
// Beside them: the Go hello-world and storefloor (any Go binary's start-up
// here, and the store's), the claim in-process (xmode without its
// start-up), 50 creates in a row draining a pool that a concurrent `reap`
// loop refills (p50, p95, how many were claims), and the time one `reap`
// takes to refill 8 entries.

// poolBench is a warmed machine "bench" with a pool of 8, for the real
// binary (env) and in-process (svc).
type poolBench struct {
	b       *testing.B
	bin     string
	env     []string
	root    string
	machine string
	svc     *sandbox.Service
	ids     []string
}

func newPoolBench(b *testing.B, root, repo string, env []string) *poolBench {
	p := &poolBench{b: b, bin: xmodeBin(b), root: root, machine: filepath.Join(root, "project_machines", "bench", "repo")}
	p.env = append([]string{"XMODE_STORAGE_ROOT=" + root, "XMODE_SANDBOX_MAX_OPEN=0", "XMODE_PROJECT_MACHINES=1", "XMODE_USER=bench"}, env...)
	run(b, p.env, p.bin, "machine", "warm", "bench", "--repo", repo, "--pool", "8", "-q")
	vars := map[string]string{}
	for _, kv := range p.env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	cfg, err := config.Load(func(k string) string { return vars[k] }, nil)
	if err != nil {
		b.Fatal(err)
	}
	st, err := store.Open(context.Background(), root)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	p.svc = &sandbox.Service{Cfg: cfg, Store: st, Guard: fsguard.Guard{Root: root}}
	b.Cleanup(func() {
		p.stopAll()
		run(b, p.env, p.bin, "machine", "rm", "bench", "--force", "-q")
	})
	return p
}

// create is `sandbox create --project bench` by the real binary.
func (p *poolBench) create() string {
	id := output(p.b, p.env, p.bin, "sandbox", "create", "--project", "bench", "-q")
	p.ids = append(p.ids, id)
	return id
}

// createInProcess is the same create through sandbox.Service, as a
// long-lived caller would make it.
func (p *poolBench) createInProcess() {
	sess, err := p.svc.Create(context.Background(), sandbox.CreateOptions{Project: "bench"})
	if err != nil {
		p.b.Fatal(err)
	}
	p.ids = append(p.ids, sess.ID)
}

// refill brings the pool back to 8 (untimed between rounds).
func (p *poolBench) refill() { run(p.b, p.env, p.bin, "reap") }

// stopAll stops the sessions made so far, a few at a time.
func (p *poolBench) stopAll() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, id := range p.ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c := exec.Command(p.bin, "sandbox", "stop", id, "-q")
			c.Env = append(os.Environ(), p.env...)
			c.Run()
		})
	}
	wg.Wait()
	p.ids = nil
}

// drain makes 50 creates in a row while a `reap` loop refills the pool,
// and reports their p50 and p95 and how many were claims (claimed: a
// session whose worktree existed before its create began).
func (p *poolBench) drain(prefix string) {
	stop := make(chan struct{})
	var loops atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			c := exec.Command(p.bin, "reap")
			c.Env = append(os.Environ(), p.env...)
			c.Run()
			loops.Add(1)
		}
	})
	var took []time.Duration
	claims := 0
	for range 50 {
		start := time.Now()
		id := p.create()
		took = append(took, time.Since(start))
		var s struct {
			CreatedAt time.Time `json:"created_at"`
			RunDir    string    `json:"run_dir"`
		}
		json.Unmarshal([]byte(output(p.b, p.env, p.bin, "sandbox", "show", id, "--json")), &s)
		if st, err := os.Stat(filepath.Join(s.RunDir, "worktree", ".git")); err == nil && st.ModTime().Before(start) {
			claims++
		}
	}
	close(stop)
	wg.Wait()
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	p.b.ReportMetric(ms(took[len(took)/2]), prefix+"drain-p50-ms")
	p.b.ReportMetric(ms(took[len(took)*95/100]), prefix+"drain-p95-ms")
	p.b.ReportMetric(float64(claims), prefix+"drain-claims/50")
	p.b.ReportMetric(float64(loops.Load()), prefix+"drain-reap-passes")
	p.stopAll()
}

// refillTime is how long one `reap` takes to make 8 entries of an empty
// pool.
func (p *poolBench) refillTime(prefix string) {
	ctx := context.Background()
	if err := p.svc.Store.SetPoolSize(ctx, "bench", 0); err != nil {
		p.b.Fatal(err)
	}
	p.refill()
	if err := p.svc.Store.SetPoolSize(ctx, "bench", 8); err != nil {
		p.b.Fatal(err)
	}
	start := time.Now()
	p.refill()
	p.b.ReportMetric(ms(time.Since(start)), prefix+"refill8-ms")
}

// BenchmarkPoolDocker: the docker engine, volume mode.
func BenchmarkPoolDocker(b *testing.B) {
	cli := dockertest.Require(b)
	img := dockertest.Image(b)
	vol, root := dockertest.StorageVolume(b, cli)
	dockerBin, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("SKIP: no docker CLI to compare with")
	}
	repo := filepath.Join(b.TempDir(), "repo")
	makeRepo(b, repo, 1700, 100)
	p := newPoolBench(b, root, repo, []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker",
		"XMODE_SANDBOX_IMAGE=" + img, "XMODE_SANDBOX_STORAGE_VOLUME=" + vol, "XMODE_SANDBOX_STORAGE_MOUNT=" + root})
	hello, floor := buildHelper(b, "hello"), buildHelper(b, "storefloor")
	var containers []string
	b.Cleanup(func() {
		if len(containers) > 0 {
			exec.Command(dockerBin, append([]string{"rm", "-f"}, containers...)...).Run()
		}
	})
	first := p.create()
	p.refill()
	b.ResetTimer()
	var dockerRun, claim, inproc, goHello, store []time.Duration
	for range rounds(b) {
		start := time.Now()
		containers = append(containers, output(b, nil, dockerBin, "run", "-d", "--init", "--label", "xmode-bench=1", img, "sleep", "2147483647"))
		dockerRun = append(dockerRun, time.Since(start))
		start = time.Now()
		p.create()
		claim = append(claim, time.Since(start))
		start = time.Now()
		p.createInProcess()
		inproc = append(inproc, time.Since(start))
		start = time.Now()
		run(b, nil, hello)
		goHello = append(goHello, time.Since(start))
		start = time.Now()
		run(b, nil, floor, root, first)
		store = append(store, time.Since(start))
		b.StopTimer()
		p.refill()
		b.StartTimer()
	}
	b.StopTimer()
	d, c := median(dockerRun), median(claim)
	b.ReportMetric(ms(d), "docker-run-ms")
	b.ReportMetric(ms(c), "claim-ms")
	b.ReportMetric(float64(c)/float64(d), "claim/docker-run")
	b.ReportMetric(ms(median(inproc)), "claim-inprocess-ms")
	b.ReportMetric(ms(median(goHello)), "go-hello-ms")
	b.ReportMetric(ms(median(store)), "store-only-ms")
	p.stopAll()
	p.drain("")
	p.refillTime("")
}

// BenchmarkPoolHost: the host engine.
func BenchmarkPoolHost(b *testing.B) {
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	makeRepo(b, repo, 1700, 100)
	p := newPoolBench(b, filepath.Join(dir, "root"), repo, nil)
	head := output(b, nil, "git", "-C", p.machine, "rev-parse", "HEAD")
	p.refill()
	b.ResetTimer()
	var add, claim, inproc []time.Duration
	for i := range rounds(b) {
		start := time.Now()
		run(b, nil, "git", "-C", p.machine, "worktree", "add", "--quiet", "--detach", filepath.Join(dir, "plain", strconv.Itoa(i)), head)
		add = append(add, time.Since(start))
		start = time.Now()
		p.create()
		claim = append(claim, time.Since(start))
		start = time.Now()
		p.createInProcess()
		inproc = append(inproc, time.Since(start))
		b.StopTimer()
		p.refill()
		b.StartTimer()
	}
	b.StopTimer()
	a, c := median(add), median(claim)
	b.ReportMetric(ms(a), "worktree-add-ms")
	b.ReportMetric(ms(c), "claim-ms")
	b.ReportMetric(float64(c)/float64(a), "claim/worktree-add")
	b.ReportMetric(ms(median(inproc)), "claim-inprocess-ms")
	p.stopAll()
	p.drain("")
	p.refillTime("")
	run(b, nil, "git", "-C", p.machine, "worktree", "prune")
}
