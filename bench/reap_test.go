package bench

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/providers/docker"
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// reapSeed is a storage root whose sessions are written through the store
// API (creating them with `sandbox create` would take most of the run) with
// real worktrees: a copy of a clone of a small repository, made by the git
// binary, ~20 files each.
type reapSeed struct {
	b        testing.TB
	root     string
	template string
	st       *store.Store
	guard    fsguard.Guard
}

func newReapSeed(b testing.TB, dir string) *reapSeed {
	b.Helper()
	repo := filepath.Join(dir, "repo")
	makeRepo(b, repo, 12, 2)
	tmpl := filepath.Join(dir, "template")
	run(b, nil, "git", "clone", "-q", repo, tmpl)
	root := filepath.Join(dir, "root")
	st, err := store.Open(context.Background(), root)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return &reapSeed{b: b, root: root, template: tmpl, st: st, guard: fsguard.Guard{Root: root}}
}

// session inserts one open session on a new run, expired, or ended when
// ended is set; with worktree it gets a real worktree, with evidence a step
// directory.
func (s *reapSeed) session(ended, worktree, evidence bool) *store.Session {
	ctx := context.Background()
	now := time.Now()
	n := store.NewSession{NewRun: true, Session: store.Session{
		ID: store.NewSessionID(), RunID: store.NewRunID(), User: "bench", RunnerMode: "local_worktree", Engine: "host",
		CreatedAt: now.Add(-3 * time.Hour), ExpiresAt: now.Add(-time.Hour),
	}}
	n.WorktreePath, _ = s.guard.Worktree(n.RunID)
	if err := s.st.CreateSession(ctx, n); err != nil {
		s.b.Fatal(err)
	}
	if err := s.st.Provisioned(ctx, n.ID, "", "", "", "", nil, time.Time{}); err != nil {
		s.b.Fatal(err)
	}
	if worktree {
		copyTree(s.b, s.template, n.WorktreePath)
	}
	if evidence {
		d := filepath.Join(s.root, "runs", n.RunID, "steps", "0001-test")
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "result.json"), []byte("{}\n"), 0o644)
	}
	if ended {
		// ended an hour ago, as most of a busy install's sessions did
		if _, _, err := s.st.End(ctx, n.ID, store.StatusDestroyed, store.ReasonExpired, "", now.Add(-time.Hour)); err != nil {
			s.b.Fatal(err)
		}
	}
	return &n.Session
}

// copyTree copies a directory of regular files (hard links: what is timed
// is the removal, and a link is a file to unlink like any other).
func copyTree(b testing.TB, from, to string) {
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		return os.Link(p, dst)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReapExpiredHost: one `xmode reap` over 250 and over 1,000 expired
// host sessions with real worktrees, against `rm -rf` of the same 1,000
// worktrees. Reports each median, the time per session and the growth from
// 250 to 1,000 (linear: about 4).
func BenchmarkReapExpiredHost(b *testing.B) {
	bin := xmodeBin(b)
	n := rounds(b)
	if n > 3 {
		n = 3
	}
	var t250, t1000, trm []time.Duration
	b.ResetTimer()
	for i := 0; i < n; i++ {
		for _, size := range []int{250, 1000} {
			b.StopTimer()
			s := newReapSeed(b, b.TempDir())
			for j := 0; j < size; j++ {
				s.session(false, true, true)
			}
			env := []string{"XMODE_STORAGE_ROOT=" + s.root}
			b.StartTimer()
			start := time.Now()
			run(b, env, bin, "reap")
			d := time.Since(start)
			b.StopTimer()
			if m, _ := filepath.Glob(filepath.Join(s.root, "runs", "*", "worktree")); len(m) != 0 {
				b.Fatalf("%d worktrees left", len(m))
			}
			if size == 250 {
				t250 = append(t250, d)
			} else {
				t1000 = append(t1000, d)
			}
		}
		s := newReapSeed(b, b.TempDir())
		for j := 0; j < 1000; j++ {
			s.session(false, true, true)
		}
		b.StartTimer()
		start := time.Now()
		run(b, nil, "sh", "-c", "rm -rf "+filepath.Join(s.root, "runs")+"/*/worktree")
		trm = append(trm, time.Since(start))
	}
	b.ReportMetric(ms(median(t250)), "reap250-ms")
	b.ReportMetric(ms(median(t1000)), "reap1000-ms")
	b.ReportMetric(ms(median(trm)), "rm1000-ms")
	b.ReportMetric(ms(median(t1000))/1000, "ms/session")
	b.ReportMetric(float64(median(t1000))/float64(median(t250)), "growth-250-to-1000")
}

// BenchmarkReapNothingToDo: a pass over 10,000 ended sessions (their run
// directories hold evidence, no worktree) with nothing to do, as cron runs
// it most of the time: `xmode reap` as a process against `true` and
// `xmode --version` (the binary's own start-up), and the in-process pass.
// Target: at most 50 ms.
func BenchmarkReapNothingToDo(b *testing.B) {
	bin := xmodeBin(b)
	s := newReapSeed(b, b.TempDir())
	for j := 0; j < 10000; j++ {
		s.session(true, false, true)
	}
	env := []string{"XMODE_STORAGE_ROOT=" + s.root}
	run(b, env, bin, "reap") // warm the page cache
	cfg, err := config.Load(func(k string) string {
		if k == "XMODE_STORAGE_ROOT" {
			return s.root
		}
		return ""
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	r := &reaper.Reaper{Cfg: cfg, Store: s.st, Guard: s.guard}
	truePath, _ := exec.LookPath("true")
	b.ResetTimer()
	med := sideBySide(rounds(b),
		func() { run(b, nil, truePath) },
		func() { run(b, nil, bin, "--version") },
		func() { run(b, env, bin, "reap") },
		func() {
			sum, err := r.Pass(context.Background(), reaper.PassOptions{})
			if err != nil || sum.Destroyed != 0 || sum.OrphansRemoved != 0 || len(sum.Errors) != 0 {
				b.Fatalf("pass: %+v %v", sum, err)
			}
		},
	)
	b.ReportMetric(ms(med[0]), "true-ms")
	b.ReportMetric(ms(med[1]), "xmode-version-ms")
	b.ReportMetric(ms(med[2]), "xmode-reap-ms")
	b.ReportMetric(ms(med[3]), "pass-ms")
}

// BenchmarkReapDocker: reaping 50 expired docker sessions (the containers
// made by the docker provider, as `sandbox create` makes them) against
// `docker rm -f` of 50 such containers. Skips without a daemon.
func BenchmarkReapDocker(b *testing.B) {
	cli := dockertest.Require(b)
	img := dockertest.Image(b)
	dockerBin, err := exec.LookPath("docker")
	if err != nil {
		b.Skip("SKIP: no docker CLI to compare with")
	}
	bin := xmodeBin(b)
	const size = 50
	n := rounds(b)
	if n > 2 {
		n = 2
	}
	var treap, trm []time.Duration
	for i := 0; i < n; i++ {
		s := newReapSeed(b, b.TempDir())
		vars := map[string]string{"XMODE_STORAGE_ROOT": s.root, "XMODE_SANDBOX_ENGINE": "docker",
			"XMODE_RUNNER_MODE": "cloud_worker", "XMODE_SANDBOX_IMAGE": img, "XMODE_SANDBOX_DOCKER_HOST": dockertest.Host()}
		cfg, err := config.Load(func(k string) string { return vars[k] }, nil)
		if err != nil {
			b.Fatal(err)
		}
		p, err := docker.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		instance, _ := s.st.InstanceID(context.Background())
		b.Cleanup(func() { dockertest.CleanupInstance(b, cli, instance) })
		provision := func() engine.Sandbox {
			sess := s.session(false, true, false)
			sb, err := p.Provision(context.Background(), engine.Spec{
				SessionID: sess.ID, RunID: sess.RunID, Worktree: sess.WorktreePath, Image: img,
				Labels: map[string]string{"xmode.managed": "true", "xmode.session": sess.ID, "xmode.run": sess.RunID, "xmode.instance": instance},
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.st.RecordEngine(context.Background(), sess.ID, sb.ContainerID, sb.MountMode, sb.Image, nil); err != nil {
				b.Fatal(err)
			}
			return sb
		}
		b.StopTimer()
		for j := 0; j < size; j++ {
			provision()
		}
		env := []string{"XMODE_STORAGE_ROOT=" + s.root, "XMODE_SANDBOX_ENGINE=docker", "XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}
		b.StartTimer()
		start := time.Now()
		run(b, env, bin, "reap")
		treap = append(treap, time.Since(start))
		b.StopTimer()
		ids := []string{"rm", "-f"}
		for j := 0; j < size; j++ {
			ids = append(ids, provision().ContainerID)
		}
		b.StartTimer()
		start = time.Now()
		run(b, []string{"DOCKER_HOST=" + dockertest.Host()}, dockerBin, ids...)
		trm = append(trm, time.Since(start))
		p.Close()
	}
	b.ReportMetric(ms(median(treap)), "reap50-ms")
	b.ReportMetric(ms(median(trm)), "docker-rm50-ms")
	b.ReportMetric(float64(median(treap))/float64(median(trm)), "reap/rm")
}
