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
// side by side. Target: at most 15 ms median overhead. Beside them run a
// Go hello-world (what any Go binary pays here) and storefloor, which does
// only exec's store work (what the embedded SQLite alone costs).
func BenchmarkExecOverhead(b *testing.B) {
	bin := xmodeBin(b)
	hello := buildHelper(b, "hello")
	floor := buildHelper(b, "storefloor")
	dir := b.TempDir()
	makeRepo(b, filepath.Join(dir, "repo"), 20, 2)
	env := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root")}
	id := output(b, env, bin, "sandbox", "create", "--repo", filepath.Join(dir, "repo"), "-q")
	truePath, _ := exec.LookPath("true")
	b.ResetTimer()
	med := sideBySide(rounds(b),
		func() { run(b, nil, truePath) },
		func() { run(b, env, bin, "sandbox", "exec", id, "--", "true") },
		func() { run(b, nil, hello) },
		func() { run(b, nil, floor, filepath.Join(dir, "root"), id) },
	)
	b.ReportMetric(ms(med[0]), "true-ms")
	b.ReportMetric(ms(med[1]), "xmode-exec-ms")
	b.ReportMetric(ms(med[1]-med[0]), "overhead-ms")
	b.ReportMetric(ms(med[2]), "go-hello-ms")
	b.ReportMetric(ms(med[3]), "store-only-ms")
	b.ReportMetric(pageFaults(b, env, bin, "sandbox", "exec", id, "--", "true"), "xmode-exec-faults")
	b.ReportMetric(pageFaults(b, nil, floor, filepath.Join(dir, "root"), id), "store-only-faults")
	b.ReportMetric(pageFaults(b, nil, hello), "go-hello-faults")
}

// BenchmarkVersion: `xmode --version` start-up. Target: under 10 ms. The
// Go hello-world beside it is the floor of any Go binary on the machine.
func BenchmarkVersion(b *testing.B) {
	bin := xmodeBin(b)
	hello := buildHelper(b, "hello")
	truePath, _ := exec.LookPath("true")
	b.ResetTimer()
	med := sideBySide(rounds(b),
		func() { run(b, nil, truePath) },
		func() { run(b, nil, bin, "--version") },
		func() { run(b, nil, hello) },
	)
	b.ReportMetric(ms(med[0]), "true-ms")
	b.ReportMetric(ms(med[1]), "version-ms")
	b.ReportMetric(ms(med[2]), "go-hello-ms")
	b.ReportMetric(ms(med[1]-med[2]), "over-hello-ms")
	b.ReportMetric(pageFaults(b, nil, bin, "--version"), "version-faults")
	b.ReportMetric(pageFaults(b, nil, hello), "go-hello-faults")
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
