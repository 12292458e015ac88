package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// makeRepo generates a repository of about files files and commits commits
// with the git binary.
func makeRepo(b testing.TB, dir string, files, commits int) {
	b.Helper()
	run(b, nil, "git", "init", "-q", "-b", "main", dir)
	env := []string{"GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@example.com", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@example.com"}
	for c := 0; c < commits; c++ {
		per := files / commits
		for f := 0; f < per; f++ {
			n := c*per + f
			p := filepath.Join(dir, "pkg"+strconv.Itoa(n%40), "file"+strconv.Itoa(n)+".go")
			os.MkdirAll(filepath.Dir(p), 0o755)
			body := "package p\n\n// generated " + strconv.Itoa(n) + "\nfunc F" + strconv.Itoa(n) + "() int { return " + strconv.Itoa(n) + " }\n"
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		run(b, nil, "git", "-C", dir, "add", ".")
		run(b, env, "git", "-C", dir, "commit", "-qm", "commit "+strconv.Itoa(c))
	}
}

// BenchmarkExecOverhead: `xmode sandbox exec ID -- true` against `true`,
// side by side, in wall time and in CPU time (rusage: user + system, the
// step's own process included). Targets: at most 10 ms over `true`, and CPU
// per exec at most 0.6 of the release before issue 20's start-up work.
// Beside them run a Go hello-world (what any Go binary pays here) and
// storefloor, which does only exec's store work (what the embedded SQLite
// alone costs); the ratios to them are what to compare across machines.
func BenchmarkExecOverhead(b *testing.B) {
	bin := xmodeBin(b)
	hello := buildHelper(b, "hello")
	floor := buildHelper(b, "storefloor")
	dir := b.TempDir()
	makeRepo(b, filepath.Join(dir, "repo"), 20, 2)
	env := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root")}
	id := output(b, env, bin, "sandbox", "create", "--repo", filepath.Join(dir, "repo"), "-q")
	truePath, _ := exec.LookPath("true")
	ps := []proc{
		cmdline(nil, truePath),
		cmdline(env, bin, "sandbox", "exec", id, "--", "true"),
		cmdline(nil, hello),
		cmdline(nil, floor, filepath.Join(dir, "root"), id),
	}
	if base := baseline(); base != "" {
		// Its own root and session, made by itself: an older release
		// refuses a store whose schema is newer than it knows.
		benv := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "baseline-root")}
		bid := output(b, benv, base, "sandbox", "create", "--repo", filepath.Join(dir, "repo"), "-q")
		ps = append(ps, cmdline(benv, base, "sandbox", "exec", bid, "--", "true"))
	}
	b.ResetTimer()
	c := sideBySideCosts(b, rounds(b), ps...)
	tru, xm, hi, fl := c[0], c[1], c[2], c[3]
	reportCost(b, "true", tru)
	reportCost(b, "xmode-exec", xm)
	reportCost(b, "go-hello", hi)
	reportCost(b, "store-only", fl)
	b.ReportMetric(ms(xm.wall-tru.wall), "overhead-ms")
	b.ReportMetric(ms(xm.cpu-tru.cpu), "overhead-cpu-ms")
	reportRatio(b, "exec/true", xm, tru)
	reportRatio(b, "exec/hello", xm, hi)
	reportRatio(b, "exec/storefloor", xm, fl)
	if len(c) > 4 {
		reportCost(b, "baseline-exec", c[4])
		reportRatio(b, "exec/baseline", xm, c[4])
	}
}

// baseline is another xmode binary (a release) that the start-up
// benchmarks run side by side with the one built from this tree,
// reporting the ratios to it: XMODE_BENCH_BASELINE.
func baseline() string { return os.Getenv("XMODE_BENCH_BASELINE") }

// BenchmarkVersion: `xmode --version` start-up, in wall and CPU time.
// Target: at most 5 ms. The Go hello-world beside it is the floor of any Go
// binary on the machine: the ratio to it is what to compare.
func BenchmarkVersion(b *testing.B) {
	bin := xmodeBin(b)
	hello := buildHelper(b, "hello")
	truePath, _ := exec.LookPath("true")
	ps := []proc{cmdline(nil, truePath), cmdline(nil, bin, "--version"), cmdline(nil, hello)}
	if base := baseline(); base != "" {
		ps = append(ps, cmdline(nil, base, "--version"))
	}
	b.ResetTimer()
	c := sideBySideCosts(b, rounds(b), ps...)
	tru, v, hi := c[0], c[1], c[2]
	reportCost(b, "true", tru)
	reportCost(b, "version", v)
	reportCost(b, "go-hello", hi)
	b.ReportMetric(ms(v.wall-hi.wall), "over-hello-ms")
	b.ReportMetric(ms(v.cpu-hi.cpu), "over-hello-cpu-ms")
	reportRatio(b, "version/hello", v, hi)
	if len(c) > 3 {
		reportCost(b, "baseline-version", c[3])
		reportRatio(b, "version/baseline", v, c[3])
	}
}

// BenchmarkCreateVsClone: `sandbox create` from a local repository (1,700
// files, 100 commits) against `git clone --depth 1` of the same repository.
func BenchmarkCreateVsClone(b *testing.B) {
	bin := xmodeBin(b)
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	makeRepo(b, repo, 1700, 100)
	env := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_SANDBOX_MAX_OPEN=0"}
	i := 0
	b.ResetTimer()
	med := sideBySide(rounds(b),
		func() {
			i++
			run(b, nil, "git", "clone", "-q", "--depth", "1", "file://"+repo, filepath.Join(dir, "clones", strconv.Itoa(i)))
		},
		func() { run(b, env, bin, "sandbox", "create", "--repo", repo, "-q") },
	)
	b.ReportMetric(ms(med[0]), "git-clone-ms")
	b.ReportMetric(ms(med[1]), "xmode-create-ms")
	b.ReportMetric(float64(med[1])/float64(med[0]), "create/clone")
}
