package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkRunAttempts: `xmode run --attempts 4` with a no-op agent (the
// command agent running `true`) and one `true` check, against a single
// `xmode run` of the same plan, side by side, on a warm prometheus-sized
// project machine (1,700 files, 100 commits) whose pool holds 4 ready
// sandboxes before each of them (refilled by `machine warm`, not timed).
// Target: the four attempts at most 1.5× the single run's wall time on 2
// cores (median). Reported with the default --parallel and with
// --parallel 1 and 4, wall and CPU, so the default's rule can be read off.
// Measured (docs/agents.md, "Attempts"): 1.5–2.4× wall, 3.3–3.9× CPU at
// load 14–25 on the shared 2-core VM.
func BenchmarkRunAttempts(b *testing.B) {
	bin := xmodeBin(b)
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	makeRepo(b, repo, 1700, 100)
	root := filepath.Join(dir, "root")
	plan := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(plan, []byte("steps:\n  - name: agent\n    agent: command\n    prompt: \"{objective}\"\n  - name: check\n    run: [\"true\"]\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	env := []string{"XMODE_STORAGE_ROOT=" + root, "XMODE_SANDBOX_MAX_OPEN=0", "XMODE_PROJECT_MACHINES=1", "XMODE_AGENT_COMMAND_TEMPLATE=true"}
	run(b, env, bin, "machine", "warm", "bench", "--repo", repo, "--pool", "4", "-q")
	b.Cleanup(func() { run(b, env, bin, "machine", "rm", "bench", "--force", "-q") })
	refill := func() { run(b, env, bin, "machine", "warm", "bench", "--pool", "4", "-q") }
	loop := func(extra ...string) proc {
		return cmdline(env, append([]string{bin, "run", "--project", "bench", "-f", plan, "--objective", "nothing", "-q"}, extra...)...)
	}
	ps := []proc{loop(), loop("--attempts", "4"), loop("--attempts", "4", "--parallel", "1"), loop("--attempts", "4", "--parallel", "4")}
	walls := make([][]time.Duration, len(ps))
	cpus := make([][]time.Duration, len(ps))
	b.ResetTimer()
	for i := 0; i < rounds(b); i++ {
		for j, p := range ps {
			b.StopTimer()
			refill()
			b.StartTimer()
			w, c, _ := runCost(b, p)
			walls[j], cpus[j] = append(walls[j], w), append(cpus[j], c)
		}
	}
	b.StopTimer()
	costs := make([]cost, len(ps))
	for j := range ps {
		costs[j] = cost{wall: median(walls[j]), cpu: median(cpus[j])}
	}
	reportCost(b, "run", costs[0])
	reportCost(b, "attempts4", costs[1])
	reportCost(b, "attempts4-parallel1", costs[2])
	reportCost(b, "attempts4-parallel4", costs[3])
	reportRatio(b, "attempts4/run", costs[1], costs[0])
	reportRatio(b, "parallel1/run", costs[2], costs[0])
	reportRatio(b, "parallel4/run", costs[3], costs[0])
}

// BenchmarkCRInterdiff: `xmode cr diff CR --from 1 --to 2` against `git
// range-diff` of the same two versions' commits, side by side, on a
// prometheus-shaped repository (1,667 files, ~24 MB): version 1 edits 40
// files and adds 5, version 2 (`run continue`) edits 10 of them again and
// 10 others. Target: at most 2× range-diff (median wall time). Both read
// only objects: xmode from the run's object store (verified packages),
// git from a clone holding the two commits. Measured: 0.34–0.36× (wall).
func BenchmarkCRInterdiff(b *testing.B) {
	bin := xmodeBin(b)
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	promRepo(b, repo)
	root := filepath.Join(dir, "root")
	// The agent edits files as its version asks: version 1 the first 40
	// .go files and 5 new ones; version 2 ten of those and ten others.
	agent := filepath.Join(dir, "agent.sh")
	if err := os.WriteFile(agent, []byte(`set -e
files=$(find . -name '*.go' -not -path './.git/*' | sort)
if [ "$XMODE_VERSION" = 1 ]; then
	for f in $(echo "$files" | head -40); do printf '// version 1 of %s\n' "$f" >> "$f"; done
	for i in 1 2 3 4 5; do echo "new $i" > "new-$i.txt"; done
else
	for f in $(echo "$files" | sed -n '31,50p'); do printf '// version 2 of %s\n' "$f" >> "$f"; done
fi
`), 0o644); err != nil {
		b.Fatal(err)
	}
	plan := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(plan, []byte("steps:\n  - name: agent\n    agent: command\n    prompt: \"{objective}\"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	env := []string{"XMODE_STORAGE_ROOT=" + root, "XMODE_SANDBOX_MAX_OPEN=0", "XMODE_AGENT_COMMAND_TEMPLATE=sh " + agent}
	runID := output(b, env, bin, "run", "--repo", repo, "-f", plan, "--objective", "edit", "--keep", "-q")
	show := output(b, env, bin, "run", "show", runID, "--json")
	cr := jsonString(b, show, "cr_id")
	run(b, env, bin, "cr", "review", cr, "--request-changes", "-m", "again")
	run(b, env, bin, "run", "continue", runID, "-q")

	// The same two versions as commits git's range-diff compares.
	check := filepath.Join(dir, "check")
	run(b, nil, "git", "clone", "-q", repo, check)
	base := output(b, nil, "git", "-C", check, "rev-parse", "HEAD")
	var commits []string
	for n := 1; n <= 2; n++ {
		patch := filepath.Join(root, "runs", runID, "change_requests", strconv.Itoa(n), "change.patch")
		run(b, nil, "git", "-C", check, "checkout", "-q", "--detach", base)
		run(b, nil, "git", "-C", check, "apply", "--index", patch)
		run(b, []string{"GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@b", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@b"}, "git", "-C", check, "commit", "-qm", "version "+strconv.Itoa(n))
		commits = append(commits, output(b, nil, "git", "-C", check, "rev-parse", "HEAD"))
	}
	costs := sideBySideCosts(b, rounds(b),
		cmdline(env, bin, "cr", "diff", cr, "--from", "1", "--to", "2"),
		cmdline(nil, "git", "-C", check, "range-diff", "--no-color", "--creation-factor=100", base+".."+commits[0], base+".."+commits[1]),
		cmdline(nil, "git", "-C", check, "diff", "--no-color", commits[0], commits[1]),
	)
	reportCost(b, "cr-diff", costs[0])
	reportCost(b, "range-diff", costs[1])
	reportCost(b, "git-diff", costs[2])
	reportRatio(b, "cr-diff/range-diff", costs[0], costs[1])
	reportRatio(b, "cr-diff/git-diff", costs[0], costs[2])
}

// jsonString is the first "key": "value" of a JSON document.
func jsonString(b testing.TB, doc, key string) string {
	b.Helper()
	_, rest, ok := strings.Cut(doc, `"`+key+`": "`)
	v, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 {
		b.Fatalf("no %q in %s", key, doc)
	}
	return v
}
