package bench

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// BenchmarkSandboxDiffStat: `xmode sandbox diff --stat` against `git
// status --porcelain` plus `git diff --stat BASE` in the worktree (git's
// index as the clone made it), side by side in the same run, in wall and
// CPU time. Target: at most 1.5×. Two repositories: 1,700 small files
// (crFixture's), and one shaped like prometheus/prometheus (promRepo: 1,667
// files of real sizes, ~24 MB) with 50 files changed. Two figures each:
// first, the first diff after the create (the run's object store put back
// as the create left it before each round: what the create seeded), and
// warm, a diff after another (xmode's stat cache and object store warm).
// With XMODE_BENCH_BASELINE, an older xmode's first and warm diffs beside
// them.
func BenchmarkSandboxDiffStat(b *testing.B) {
	b.Run("small", func(b *testing.B) {
		benchDiffStat(b, func(bin string) *session {
			return sessionFixtureOf(b, bin, func(repo string) { makeRepo(b, repo, 1700, 100) }, smallChanges)
		})
	})
	b.Run("prometheus", func(b *testing.B) {
		benchDiffStat(b, func(bin string) *session {
			return sessionFixtureOf(b, bin, func(repo string) { promRepo(b, repo) }, promChanges)
		})
	})
}

// benchDiffStat runs the comparison on the session fixture makes with this
// tree's xmode (and, with XMODE_BENCH_BASELINE, on a second one made the
// same way by the baseline).
func benchDiffStat(b *testing.B, fixture func(bin string) *session) {
	f := fixture(xmodeBin(b))
	base := output(b, nil, "git", "-C", f.worktree, "rev-parse", "HEAD")
	store := filepath.Join(f.runDir, "objects.git")
	created := filepath.Join(b.TempDir(), "objects.git")
	if _, err := os.Stat(store); err == nil {
		run(b, nil, "cp", "-a", store, created)
	}
	// Back to what the create left: the object store it made, if any,
	// written out (sync) so that its copy does not slow what follows.
	reset := func() {
		run(b, nil, "rm", "-rf", store)
		if _, err := os.Stat(created); err == nil {
			run(b, nil, "cp", "-a", created, store)
		}
		run(b, nil, "sync")
	}
	gitSide := cmdline(nil, "sh", "-c", "git -C "+f.worktree+" status --porcelain > /dev/null && git -C "+f.worktree+" diff --stat "+base+" > /dev/null")
	xmode := cmdline(f.env, f.bin, "sandbox", "diff", f.id, "--stat")
	// XMODE_BENCH_BASELINE (an older xmode) diffs its own session, made
	// and changed the same way, in the same rounds, each from no object
	// store (what an older create left).
	var old proc
	var oldStore string
	if base := baseline(); base != "" {
		of := fixture(base)
		old = cmdline(of.env, base, "sandbox", "diff", of.id, "--stat")
		oldStore = filepath.Join(of.runDir, "objects.git")
	}
	samples := map[string][]float64{}
	add := func(name string, p proc) {
		w, c, _ := runCost(b, p)
		samples[name+"-ms"] = append(samples[name+"-ms"], ms(w))
		samples[name+"-cpu-ms"] = append(samples[name+"-cpu-ms"], ms(c))
	}
	b.ResetTimer()
	for range rounds(b) {
		reset()
		add("git", gitSide)
		add("first", xmode)
		add("warm", xmode)
		if old.argv != nil {
			run(b, nil, "rm", "-rf", oldStore)
			run(b, nil, "sync")
			add("baseline-first", old)
			add("baseline-warm", old)
		}
	}
	b.StopTimer()
	med := map[string]float64{}
	for name, s := range samples {
		med[name] = medianF(s)
		b.ReportMetric(med[name], name)
	}
	for _, name := range []string{"first", "warm", "baseline-first", "baseline-warm"} {
		if _, ok := med[name+"-ms"]; ok {
			b.ReportMetric(med[name+"-ms"]/med["git-ms"], name+"/git")
			b.ReportMetric(med[name+"-cpu-ms"]/med["git-cpu-ms"], name+"/git-cpu")
		}
	}
}

func medianF(s []float64) float64 {
	c := append([]float64(nil), s...)
	sort.Float64s(c)
	return c[len(c)/2]
}

// promRepo makes, in one commit, a repository shaped like
// prometheus/prometheus (v2.5x): 1,667 files in ~230 directories up to
// five deep — Go sources and their tests, test data, documentation, a web
// UI — sized by a log-normal draw (median ~6 KB, mean ~14 KB) plus the few
// large files such a repository has (a lock file, test data), ~24 MB of
// text in all. Generated, so `make bench` needs no network.
func promRepo(b testing.TB, dir string) {
	b.Helper()
	rnd := rand.New(rand.NewSource(20))
	run(b, nil, "git", "init", "-q", "-b", "main", dir)
	dirs := []string{"cmd", "config", "discovery", "docs", "documentation", "model", "notifier", "plugins",
		"prompb", "promql", "rules", "scrape", "storage", "template", "tsdb", "util", "web", "tracing"}
	depth := map[string]int{}
	for len(dirs) < 230 {
		parent := dirs[rnd.Intn(len(dirs))]
		if depth[parent] >= 4 {
			continue
		}
		d := parent + "/" + promWords[rnd.Intn(len(promWords))]
		if depth[d] == 0 && !contains(dirs, d) {
			dirs = append(dirs, d)
			depth[d] = depth[parent] + 1
		}
	}
	exts := []string{".go", ".go", ".go", ".go", "_test.go", "_test.go", ".md", ".yml", ".json", ".txt", ".ts", ".tsx", ".css"}
	files := map[string]int{
		"go.mod": 6 << 10, "go.sum": 120 << 10, "web/ui/package-lock.json": 1100 << 10,
		"tsdb/testdata/20kseries.json": 2400 << 10, "promql/testdata/functions.test": 60 << 10,
	}
	for len(files) < 1667 {
		d := dirs[int(float64(len(dirs))*math.Pow(rnd.Float64(), 1.6))] // some directories hold many files
		p := fmt.Sprintf("%s/%s%s", d, promWords[rnd.Intn(len(promWords))], exts[rnd.Intn(len(exts))])
		if _, ok := files[p]; ok {
			continue
		}
		size := int(math.Exp(math.Log(6000) + 1.3*rnd.NormFloat64()))
		files[p] = min(max(size, 40), 400<<10)
	}
	for p, size := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(full, promText(rnd, size), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	env := []string{"GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@example.com", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@example.com"}
	run(b, nil, "git", "-C", dir, "add", "-A")
	run(b, env, "git", "-C", dir, "commit", "-qm", "prometheus-shaped")
}

// promChanges changes 50 files of a promRepo worktree as an agent's task
// would: 40 files edited (a line changed in the middle, one added at the
// end), 5 new, 5 deleted.
func promChanges(b *testing.B, worktree string) {
	var paths []string
	err := filepath.WalkDir(worktree, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	sort.Strings(paths)
	rnd := rand.New(rand.NewSource(7))
	rnd.Shuffle(len(paths), func(i, j int) { paths[i], paths[j] = paths[j], paths[i] })
	for i, p := range paths[:45] {
		if i >= 40 {
			if err := os.Remove(p); err != nil {
				b.Fatal(err)
			}
			continue
		}
		body, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		lines := strings.Split(string(body), "\n")
		lines[len(lines)/2] = fmt.Sprintf("\t// changed by the agent (%d)", i)
		body = []byte(strings.Join(lines, "\n") + fmt.Sprintf("// added %d\n", i))
		if err := os.WriteFile(p, body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 5 {
		p := filepath.Join(worktree, "tsdb", fmt.Sprintf("agent_new_%d.go", i))
		if err := os.WriteFile(p, promText(rnd, 3000+rnd.Intn(6000)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

var promWords = strings.Fields(`api v1 labels relabel textparse rulefmt exemplar histogram chunkenc chunks
encoding index record wlog tombstones fileutil remote azure consul dns ec2 file gce kubernetes marathon
openstack triton zookeeper hetzner linode eureka scaleway uyuni vultr ionos nomad puppetdb parser engine
functions value manager group alerting recording scrape target manager cache query head block compact
querier db storage series merge fanout notifier config tracing template web ui react module codemirror
strutil testutil stats logging netconnlimit runtime treecache jsonutil zeropool httputil annotations`)

// promText is size bytes of Go-like text.
func promText(rnd *rand.Rand, size int) []byte {
	var sb strings.Builder
	sb.Grow(size + 80)
	for sb.Len() < size {
		indent := strings.Repeat("\t", rnd.Intn(3))
		w := func() string { return promWords[rnd.Intn(len(promWords))] }
		switch rnd.Intn(5) {
		case 0:
			fmt.Fprintf(&sb, "%sfunc (%c *%s) %s(%s %s) error {\n", indent, 'a'+rune(rnd.Intn(26)), w(), strings.ToUpper(w()[:1])+w(), w(), w())
		case 1:
			fmt.Fprintf(&sb, "%s// %s %s the %s of %s when %s.\n", indent, w(), w(), w(), w(), w())
		case 2:
			fmt.Fprintf(&sb, "%sif err := %s.%s(ctx, %d); err != nil {\n", indent, w(), w(), rnd.Intn(1000))
		case 3:
			fmt.Fprintf(&sb, "%s%s := %s[%q]\n", indent, w(), w(), w())
		default:
			fmt.Fprintf(&sb, "%s}\n", indent)
		}
	}
	return []byte(sb.String()[:size])
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}
