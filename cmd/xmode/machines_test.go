package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mx starts xmode with project machines on and no session quota.
func mx(t *testing.T, root string, args ...string) *exec.Cmd {
	c := xmode(t, root, args...)
	c.Env = append(c.Env, "XMODE_PROJECT_MACHINES=1", "XMODE_SANDBOX_MAX_OPEN=0", "GIT_CONFIG_NOSYSTEM=1")
	return c
}

func mustRun(t *testing.T, c *exec.Cmd) string {
	t.Helper()
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(c.Args[1:], " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// warmMachine makes the test repository (with files more files, so that a
// checkout takes a while) and warms project demo from it.
func warmMachine(t *testing.T, files int) (root, repo, machine string) {
	t.Helper()
	dir := t.TempDir()
	repo = filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < files; i++ {
		p := filepath.Join(repo, "pkg"+strconv.Itoa(i%20), "f"+strconv.Itoa(i)+".txt")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(strings.Repeat("line\n", 20)+strconv.Itoa(i)), 0o644)
	}
	if files > 0 {
		gitOut(t, repo, "add", ".")
		gitOut(t, repo, "commit", "-qm", "many files")
	}
	root = filepath.Join(dir, "root")
	mustRun(t, mx(t, root, "machine", "warm", "demo", "--repo", repo, "-q"))
	return root, repo, filepath.Join(root, "project_machines", "demo", "repo")
}

// checkMachine asserts the git binary finds the machine sound: fsck passes,
// exactly the runs of open sessions are its worktrees, each clean, and
// prune finds nothing stale.
func checkMachine(t *testing.T, root, machine string, open []string) {
	t.Helper()
	gitOut(t, machine, "fsck", "--no-progress")
	list := gitOut(t, machine, "worktree", "list", "--porcelain")
	if n := strings.Count(list, "/runs/run_"); n != len(open) {
		t.Fatalf("%d run worktrees in the machine, want %d:\n%s", n, len(open), list)
	}
	var sessions []struct {
		ID       string `json:"id"`
		Worktree string `json:"worktree_path"`
	}
	json.Unmarshal([]byte(mustRun(t, mx(t, root, "sandbox", "list", "--json"))), &sessions)
	if len(sessions) != len(open) {
		t.Fatalf("%d open sessions, want %d", len(sessions), len(open))
	}
	for _, s := range sessions {
		if !strings.Contains(list, "worktree "+s.Worktree+"\n") {
			t.Fatalf("%s's worktree %s is not a worktree of the machine:\n%s", s.ID, s.Worktree, list)
		}
		if out := gitOut(t, s.Worktree, "status", "--porcelain"); out != "" {
			t.Fatalf("git status in %s: %s", s.ID, out)
		}
	}
	if out := gitOut(t, machine, "worktree", "prune", "--dry-run", "-v"); out != "" {
		t.Fatalf("prune finds stale worktrees: %s", out)
	}
}

// Eight creates and two warms (fetches of new upstream commits) on one
// machine at once, as separate processes: all succeed, the machine stays
// sound and every worktree is a clean checkout.
func TestMachineConcurrentCreatesAndWarms(t *testing.T) {
	t.Parallel()
	root, repo, machine := warmMachine(t, 300)
	gitOut(t, repo, "commit", "-q", "--allow-empty", "-m", "upstream moved")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids, errs []string
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			args := []string{"sandbox", "create", "--project", "demo", "-q"}
			switch i {
			case 3, 7:
				args = []string{"machine", "warm", "demo", "-q"}
			case 5:
				args = append(args, "--refresh")
			}
			c := mx(t, root, args...)
			var stderr bytes.Buffer
			c.Stderr = &stderr
			out, err := c.Output()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("%v: %v: %s", args, err, stderr.String()))
			} else if args[0] == "sandbox" {
				ids = append(ids, strings.TrimSpace(string(out)))
			}
		}(i)
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent commands failed:\n%s", strings.Join(errs, "\n"))
	}
	if len(ids) != 8 {
		t.Fatalf("%d sessions", len(ids))
	}
	checkMachine(t, root, machine, ids)
	var show struct {
		Commit       string `json:"commit"`
		OpenSessions int    `json:"open_sessions"`
	}
	json.Unmarshal([]byte(mustRun(t, mx(t, root, "machine", "show", "demo", "--json"))), &show)
	if show.OpenSessions != 8 || show.Commit != gitOut(t, repo, "rev-parse", "main") {
		t.Fatalf("machine after concurrent warms: %+v", show)
	}
}

// childGit returns the pid of a git process that pid started, or 0.
func childGit(pid int) int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			comm, _ := os.ReadFile("/proc/" + c + "/comm")
			if strings.TrimSpace(string(comm)) == "git" {
				n, _ := strconv.Atoi(c)
				return n
			}
		}
	}
	return 0
}

// killDuringGit starts xmode, waits until it runs git (with the machine
// locked) and SIGKILLs it. It reports the git pid, 0 when the command ended
// before it could be caught.
func killDuringGit(t *testing.T, c *exec.Cmd) int {
	t.Helper()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		select {
		case <-done:
			return 0
		default:
		}
		if g := childGit(c.Process.Pid); g != 0 {
			c.Process.Signal(syscall.SIGKILL)
			<-done
			return g
		}
		time.Sleep(500 * time.Microsecond)
	}
	c.Process.Kill()
	<-done
	t.Fatal("xmode never started git")
	return 0
}

// A create killed (SIGKILL) while git branches its worktree, and a warm
// killed while git fetches, leave nothing that blocks the next command: the
// kernel drops the machine's lock, git dies with its parent and cleans up,
// and the next create and warm succeed at once. Stopping the killed
// session leaves git nothing stale.
func TestMachineKilledCreateAndWarm(t *testing.T) {
	t.Parallel()
	root, repo, machine := warmMachine(t, 1500)
	var gitPid int
	for try := 0; try < 5 && gitPid == 0; try++ {
		gitPid = killDuringGit(t, mx(t, root, "sandbox", "create", "--project", "demo", "-q"))
	}
	if gitPid == 0 {
		t.Fatal("could not catch a create while it ran git")
	}
	waitGone(t, gitPid, "git that outlived the xmode that started it")

	for i := 0; i < 15; i++ { // something for the fetch to do
		os.WriteFile(filepath.Join(repo, "README"), []byte(strings.Repeat(strconv.Itoa(i), 50000)), 0o644)
		gitOut(t, repo, "commit", "-qam", "more "+strconv.Itoa(i))
	}
	gitPid = 0
	for try := 0; try < 5 && gitPid == 0; try++ {
		gitPid = killDuringGit(t, mx(t, root, "machine", "warm", "demo"))
	}
	if gitPid == 0 {
		t.Fatal("could not catch a warm while it ran git")
	}
	waitGone(t, gitPid, "git that outlived the xmode that started it")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mx(t, root, "sandbox", "create", "--project", "demo", "--refresh", "-q")
	c = exec.CommandContext(ctx, c.Path, c.Args[1:]...)
	c.Env = mx(t, root).Env
	next := mustRun(t, c)
	if ctx.Err() != nil {
		t.Fatal("the next create was blocked")
	}
	mustRun(t, mx(t, root, "machine", "warm", "demo", "-q"))

	var sessions []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	json.Unmarshal([]byte(mustRun(t, mx(t, root, "sandbox", "list", "--json"))), &sessions)
	for _, s := range sessions {
		if s.ID != next {
			mustRun(t, mx(t, root, "sandbox", "stop", s.ID))
		}
	}
	checkMachine(t, root, machine, []string{next})
	if got, want := gitOut(t, machine, "rev-parse", "HEAD"), gitOut(t, repo, "rev-parse", "main"); got != want {
		t.Fatalf("machine at %s after warm, want %s", got, want)
	}
}
