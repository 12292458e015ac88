package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/store"
)

// bigRepo makes a repository of files files with the git binary: worktrees
// that take long enough to clone and remove for a kill -9 to land mid-way.
func reapBigRepo(t *testing.T, dir string, files int) {
	t.Helper()
	for i := 0; i < files; i++ {
		p := filepath.Join(dir, "pkg"+strconv.Itoa(i%50), "f"+strconv.Itoa(i)+".txt")
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, bytes.Repeat([]byte("x"), 256), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "big"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
}

// run runs a real xmode process and returns its stdout, stderr and exit code.
func reapRun(t *testing.T, root string, env []string, args ...string) (string, string, int) {
	t.Helper()
	c := reapCmd(t, root, args...)
	c.Env = append(c.Env, env...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// reapCmd is xmode(...) without the race detector's one-second pause at
// exit, which would dominate tests that start many processes.
func reapCmd(t *testing.T, root string, args ...string) *exec.Cmd {
	c := xmode(t, root, args...)
	c.Env = append(c.Env, "GORACE=atexit_sleep_ms=0")
	return c
}

func reapMust(t *testing.T, root string, env []string, args ...string) string {
	t.Helper()
	out, errOut, code := reapRun(t, root, env, args...)
	if code != 0 {
		t.Fatalf("xmode %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return strings.TrimSpace(out)
}

func reapWorktrees(root string) int {
	m, _ := filepath.Glob(filepath.Join(root, "runs", "*", "worktree"))
	return len(m)
}

func reapStore(t *testing.T, root string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// kill -9 in the middle of a reap, twice over; then one more pass
// converges: every session destroyed/expired exactly as if nothing had
// happened, no worktree left, no claim left, exit 0.
func TestReapKilledMidPassConverges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	reapBigRepo(t, repo, 300)
	root := filepath.Join(dir, "root")
	env := []string{"XMODE_SANDBOX_MAX_OPEN=0", "XMODE_SANDBOX_TTL=1h"}
	const n = 10
	reapMust(t, root, nil, "sandbox", "list") // the database exists before the creates race
	var wg sync.WaitGroup
	ids := make([]string, n)
	for i := range ids {
		wg.Go(func() {
			out, errOut, code := reapRun(t, root, env, "sandbox", "create", "--repo", repo, "-q")
			if code != 0 {
				t.Errorf("create: %d %s", code, errOut)
			}
			ids[i] = strings.TrimSpace(out)
		})
		if i%5 == 4 {
			wg.Wait()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	advanceClock(t, root, 2*time.Hour) // they expire

	for kill := 1; kill <= 2; kill++ {
		before := reapWorktrees(root)
		if before == 0 {
			break
		}
		c := reapCmd(t, root, "reap")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		// kill it as soon as it has reclaimed something
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && reapWorktrees(root) == before {
			if st := reapProcState(c.Process.Pid); st == "Z" || st == "" {
				break // it finished on its own
			}
			time.Sleep(time.Millisecond)
		}
		c.Process.Signal(syscall.SIGKILL)
		c.Wait()
		after := reapWorktrees(root)
		t.Logf("kill %d: %d → %d worktrees", kill, before, after)
		if kill == 1 && (after == 0 || after == before) {
			t.Fatalf("the first kill did not land mid-pass (%d → %d worktrees): nothing here was killed mid-pass", before, after)
		}
	}
	out, errOut, code := reapRun(t, root, nil, "reap", "-v")
	if code != 0 || errOut != "" {
		t.Fatalf("the pass after the kills: exit %d\n%s\n%s", code, out, errOut)
	}
	st := reapStore(t, root)
	for _, id := range ids {
		s, err := st.Get(context.Background(), id)
		if err != nil || s.Status != store.StatusDestroyed || s.EndReason != store.ReasonExpired {
			t.Errorf("%s: %v %v", id, s, err)
		}
	}
	if w := reapWorktrees(root); w != 0 {
		t.Fatalf("%d worktrees left", w)
	}
	if cl, _ := st.Claims(context.Background()); len(cl) != 0 {
		t.Fatalf("claims left: %v", cl)
	}
	if out, _, _ := reapRun(t, root, nil, "reap", "--json"); !strings.Contains(out, `"expired": 0`) || !strings.Contains(out, `"orphans_removed": 0`) {
		t.Fatalf("a pass after convergence still did something: %s", out)
	}
}

func reapProcState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// kill -9 in the middle of a create (the clone running): the session stays
// provisioning with a half-made worktree; a pass within the grace period
// leaves it alone (it may be a slow create), one after it ends it
// failed/provision_failed and removes the worktree.
func TestCreateKilledThenReapConverges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	reapBigRepo(t, repo, 10)
	root := filepath.Join(dir, "root")
	reapMust(t, root, nil, "sandbox", "list") // the database exists
	// The repository is reached over "ssh" that runs git-upload-pack here:
	// the create's ls-remote is answered, its clone never is, so the kill
	// lands while the clone runs, however fast this machine is.
	ssh, cloning := filepath.Join(dir, "ssh"), filepath.Join(dir, "cloning")
	script := "#!/bin/sh\nif mkdir " + filepath.Join(dir, "served") + " 2>/dev/null; then\n  for cmd; do :; done\n  exec sh -c \"$cmd\"\nfi\ntouch " + cloning + "\nexec cat >/dev/null\n"
	if err := os.WriteFile(ssh, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := reapCmd(t, root, "sandbox", "create", "--repo", "ssh://localhost"+repo, "-q")
	c.Env = append(c.Env, "GIT_SSH_COMMAND="+ssh, "GIT_SSH_VARIANT=ssh")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, err := os.Stat(cloning); err != nil; _, err = os.Stat(cloning) {
		if time.Now().After(deadline) {
			c.Process.Kill()
			c.Wait()
			t.Fatalf("the create never started its clone\n%s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	list := reapMust(t, root, nil, "sandbox", "list", "--all", "--json")
	if !strings.Contains(list, `"status": "provisioning"`) {
		t.Fatalf("the create killed while cloning is not provisioning: %s", list)
	}
	id := list[strings.Index(list, `"id": "`)+7:]
	id = id[:strings.IndexByte(id, '"')]

	out := reapMust(t, root, nil, "reap", "-v")
	if out != "" || reapWorktrees(root) != 1 {
		t.Fatalf("a pass within the grace period touched the create: %q", out)
	}
	out = reapMust(t, root, nil, "reap", "-v", "--provision-grace", "1ms")
	if !strings.Contains(out, id+" failed (provision_failed)") || reapWorktrees(root) != 0 {
		t.Fatalf("after the grace period: %q, %d worktrees", out, reapWorktrees(root))
	}
	show := reapMust(t, root, nil, "sandbox", "show", id, "--json")
	if !strings.Contains(show, `"status": "failed"`) || !strings.Contains(show, `"end_reason": "provision_failed"`) {
		t.Fatalf("show: %s", show)
	}
	if out := reapMust(t, root, nil, "reap", "-v", "--provision-grace", "1ms"); out != "" {
		t.Fatalf("second pass: %q", out)
	}
}

// Tampered rows through the CLI: whatever worktree_path says — /, $HOME,
// ../.., an outside directory, another open session's worktree — `xmode
// reap` removes the session's own <root>/runs/<run>/worktree and nothing
// else. A malformed run id touches nothing, is reported, does not stop the
// pass, and makes it exit 1.
func TestReapTamperedRowsCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	home := filepath.Join(dir, "home")
	outside := filepath.Join(dir, "outside")
	var precious []string
	for _, p := range []string{filepath.Join(home, ".ssh", "id_ed25519"), filepath.Join(outside, "sub", "deep.txt"), filepath.Join(outside, "precious.txt")} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("keep me\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		precious = append(precious, p)
	}
	env := []string{"HOME=" + home, "XMODE_SANDBOX_MAX_OPEN=0"}
	create := func() string { return reapMust(t, root, env, "sandbox", "create", "--repo", repo, "-q") }
	bystander := create()
	st := reapStore(t, root)
	by, err := st.Get(context.Background(), bystander)
	if err != nil {
		t.Fatal(err)
	}
	claims := []string{"/", home, "../..", outside, by.WorktreePath, root}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(root, store.FileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ids []string
	for _, claim := range claims {
		id := create()
		ids = append(ids, id)
		if _, err := db.Exec(`UPDATE sessions SET worktree_path = ?, expires_at = 0 WHERE id = ?`, claim, id); err != nil {
			t.Fatal(err)
		}
	}
	badRun := create()
	if _, err := db.Exec(`UPDATE sessions SET run_id = '../../outside', expires_at = 0 WHERE id = ?`, badRun); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := reapRun(t, root, env, "reap", "-v")
	if code != 1 || !strings.Contains(errOut, badRun+": ") || !strings.Contains(errOut, "malformed") {
		t.Fatalf("exit %d, want 1 naming %s\n%s\n%s", code, badRun, out, errOut)
	}
	for _, id := range ids {
		if !strings.Contains(out, id+" destroyed (expired)") || !strings.Contains(out, id+" ignoring stored worktree path") {
			t.Errorf("%s not reaped, or its tampered path not reported:\n%s", id, out)
		}
	}
	for _, p := range precious {
		if b, err := os.ReadFile(p); err != nil || string(b) != "keep me\n" {
			t.Errorf("%s did not survive: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(by.WorktreePath, "README")); err != nil {
		t.Fatalf("another open session's worktree was touched: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, store.FileName)); err != nil {
		t.Fatal("the database is gone")
	}
	if n := reapWorktrees(root); n != 1 {
		t.Fatalf("%d worktrees left, want the bystander's only", n)
	}
	// The failure does not repeat: the session ended; its run's worktree
	// was reclaimed as an orphan.
	if out, errOut, code := reapRun(t, root, env, "reap"); code != 0 || out != "" || errOut != "" {
		t.Fatalf("next pass: exit %d %q %q", code, out, errOut)
	}
}

func reapManaged(t *testing.T, cli *client.Client, instance string) []container.Summary {
	t.Helper()
	cs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", "xmode.instance="+instance))})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Docker through the CLI: with the daemon down, `xmode reap` reports the
// failed teardown and exits 1, the session stays open and its container
// lives; with the daemon back the next pass removes it. Orphan containers of
// this install go, another install's stay. kill -9 of a create after its
// container started converges too.
func TestReapDockerCLI(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	px := dockertest.NewSocketProxy(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	env := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=unix://" + px.Path, "XMODE_SANDBOX_MAX_OPEN=0"}
	reapMust(t, root, env, "sandbox", "list")
	instance, err := reapStore(t, root).InstanceID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, instance) })
	other := dockertest.NewInstance(t, cli)

	id := reapMust(t, root, env, "sandbox", "create", "--repo", repo, "-q")
	if len(reapManaged(t, cli, instance)) != 1 {
		t.Fatal("no container for the session")
	}
	reapMust(t, root, env, "sandbox", "extend", id, "--ttl", "1ms")
	advanceClock(t, root, time.Second)

	px.Stop()
	out, errOut, code := reapRun(t, root, env, "reap", "--json")
	if code != 1 || !strings.Contains(errOut, id+": ") || !strings.Contains(errOut, "unreachable") || !strings.Contains(out, `"destroyed": 0`) {
		t.Fatalf("daemon down: exit %d\n%s\n%s", code, out, errOut)
	}
	if show := reapMust(t, root, env, "sandbox", "show", id, "--json"); !strings.Contains(show, `"status": "open"`) {
		t.Fatalf("marked ended while its container may live: %s", show)
	}
	if len(reapManaged(t, cli, instance)) != 1 {
		t.Fatal("the container went while the daemon was down")
	}
	if err := px.Start(); err != nil {
		t.Fatal(err)
	}

	// orphans: one of ours (its session never recorded), one of another install
	for _, inst := range []string{instance, other} {
		c, err := cli.ContainerCreate(context.Background(), &container.Config{Image: img, Cmd: []string{"sleep", "600"},
			Labels: dockertest.Labels(inst, store.NewSessionID(), store.NewRunID())}, nil, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		cli.ContainerStart(context.Background(), c.ID, container.StartOptions{})
	}
	out, errOut, code = reapRun(t, root, env, "reap", "-v")
	if code != 0 || errOut != "" || !strings.Contains(out, id+" destroyed (expired)") || !strings.Contains(out, "removed orphan container") {
		t.Fatalf("daemon back: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := len(reapManaged(t, cli, instance)); n != 0 {
		t.Fatalf("%d containers of this install left", n)
	}
	if n := len(reapManaged(t, cli, other)); n != 1 {
		t.Fatalf("another install's container was touched (%d left)", n)
	}

	// kill -9 of a create once its container exists
	c := reapCmd(t, root, "sandbox", "create", "--repo", repo, "-q")
	c.Env = append(c.Env, env...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(reapManaged(t, cli, instance)) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	out, errOut, code = reapRun(t, root, env, "reap", "-v", "--provision-grace", "1ms")
	if code != 0 || errOut != "" {
		t.Fatalf("after a killed create: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := len(reapManaged(t, cli, instance)); n != 0 {
		t.Fatalf("the killed create's container is still there (%d): %s", n, out)
	}
	if list := reapMust(t, root, env, "sandbox", "list", "-q"); list != "" {
		t.Fatalf("open sessions left: %s", list)
	}
	t.Logf("after the killed create: %s", out)
}
