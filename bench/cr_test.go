package bench

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// crFixture is a session on a 1,700-file repository whose worktree has 50
// files changed: 35 text files edited, 5 deleted, 10 binary files (5 new,
// 5 replacing text files).
func crFixture(b *testing.B) (bin string, env []string, id, worktree string) {
	f := sessionFixture(b, func(repo string) { makeRepo(b, repo, 1700, 100) }, smallChanges)
	return f.bin, f.env, f.id, f.worktree
}

// session is a host session of a benchmark: the binary, its environment,
// the session's ID, its worktree and its run's directory.
type session struct {
	bin      string
	env      []string
	id       string
	worktree string
	runDir   string
}

// sessionFixture creates a host session on the repository makeRepo makes,
// then changes its worktree with change and lets the files age.
func sessionFixture(b *testing.B, makeRepo func(repo string), change func(b *testing.B, worktree string)) *session {
	return sessionFixtureOf(b, xmodeBin(b), makeRepo, change)
}

// sessionFixtureOf is sessionFixture made by the xmode binary bin (a
// baseline release keeps a storage root of its own: it refuses a store
// whose schema is newer than it knows).
func sessionFixtureOf(b *testing.B, bin string, makeRepo func(repo string), change func(b *testing.B, worktree string)) *session {
	f := &session{bin: bin}
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	makeRepo(repo)
	root := filepath.Join(dir, "root")
	f.env = []string{"XMODE_STORAGE_ROOT=" + root, "XMODE_SANDBOX_MAX_OPEN=0"}
	f.id = output(b, f.env, f.bin, "sandbox", "create", "--repo", repo, "-q")
	matches, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree"))
	if len(matches) != 1 {
		b.Fatalf("worktrees: %v", matches)
	}
	f.worktree = matches[0]
	f.runDir = filepath.Dir(f.worktree)
	change(b, f.worktree)
	// xmode reuses the hash of a file only once its timestamps are two
	// seconds old (git's racy-clean problem): let the fixture age like a
	// worktree does between an agent's last write and the review.
	time.Sleep(2500 * time.Millisecond)
	return f
}

// smallChanges changes 50 files of makeRepo's 1,700: 35 text files edited,
// 5 deleted, 10 binary files (5 new, 5 replacing text files).
func smallChanges(b *testing.B, worktree string) {
	rnd := rand.New(rand.NewSource(1))
	binary := func() []byte {
		p := make([]byte, 2000+rnd.Intn(20000))
		rnd.Read(p)
		return p
	}
	for i := 0; i < 50; i++ {
		p := filepath.Join(worktree, "pkg"+fmt.Sprint(i%40), "file"+fmt.Sprint(i*30)+".go")
		var err error
		switch {
		case i < 35:
			err = os.WriteFile(p, []byte(fmt.Sprintf("package p\n\n// edited %d\nfunc G%d() int { return %d }\n", i, i, i)), 0o644)
		case i < 40:
			err = os.Remove(p)
		case i < 45:
			err = os.WriteFile(p, binary(), 0o644)
		default:
			err = os.WriteFile(filepath.Join(worktree, "assets", fmt.Sprintf("blob%d.bin", i)), binary(), 0o644)
		}
		if os.IsNotExist(err) {
			os.MkdirAll(filepath.Join(worktree, "assets"), 0o755)
			err = os.WriteFile(filepath.Join(worktree, "assets", fmt.Sprintf("blob%d.bin", i)), binary(), 0o644)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCRCreate: `xmode cr create` against the git binary doing the
// same snapshot (`git add -A` into a fresh temporary index, then `git diff
// --cached --binary` against the base), side by side on a 1,700-file
// repository with 50 files changed. Target: at most 2×. xmode's stat cache
// is warm after the first run (as after a `sandbox diff`); the cold figure
// (cache removed before each run, every file hashed, like git's fresh
// index) is reported beside it.
func BenchmarkCRCreate(b *testing.B) {
	bin, env, id, wt := crFixture(b)
	base := output(b, nil, "git", "-C", wt, "rev-parse", "HEAD")
	idx := filepath.Join(b.TempDir(), "index")
	cache, _ := filepath.Glob(filepath.Join(filepath.Dir(wt), "objects.git"))
	run(b, env, bin, "sandbox", "diff", id, "--stat") // the object store exists, the cache is warm
	b.ResetTimer()
	med := sideBySide(rounds(b),
		func() {
			os.Remove(idx)
			run(b, []string{"GIT_INDEX_FILE=" + idx}, "sh", "-c", "git -C "+wt+" add -A && git -C "+wt+" diff --cached --binary "+base+" > /dev/null")
		},
		func() { run(b, env, bin, "cr", "create", id, "-q") },
		func() {
			if len(cache) == 1 {
				os.Remove(filepath.Join(cache[0], "xmode-stat-cache"))
			}
			run(b, env, bin, "cr", "create", id, "-q")
		},
	)
	b.ReportMetric(ms(med[0]), "git-add-diff-ms")
	b.ReportMetric(ms(med[1]), "cr-create-ms")
	b.ReportMetric(ms(med[2]), "cr-create-cold-ms")
	b.ReportMetric(float64(med[1])/float64(med[0]), "create/git")
	b.ReportMetric(float64(med[2])/float64(med[0]), "create-cold/git")
}
