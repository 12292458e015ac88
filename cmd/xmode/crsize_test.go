package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// quick is how long a refusal from a file's size may take at most, very
// loosely: reading the 50 GB file these tests make takes minutes.
const quick = 20 * time.Second

// TestSizeRefusedBeforeRead: a 50 GB sparse file in a sandbox's worktree
// makes `sandbox diff` (patch, --stat, --json), `cr create` and `xmode run`
// refuse from its size (exit 4, naming the file, its size, the limit and
// the variable to raise) instead of reading it first — on the host engine
// and in a docker sandbox.
func TestSizeRefusedBeforeRead(t *testing.T) {
	refused := func(t *testing.T, root string, env []string, args ...string) {
		t.Helper()
		r := dkWant(t, dkXmode(t, root, env, args...), 4)
		if r.took > quick {
			t.Fatalf("xmode %s took %s: it reads the file", strings.Join(args, " "), r.took)
		}
		if !strings.Contains(r.stderr, "the change is larger than XMODE_CR_MAX_BYTES (100.0 MiB): big.bin alone is 50.0 GiB") ||
			!strings.Contains(r.stderr, "raise XMODE_CR_MAX_BYTES") {
			t.Fatalf("xmode %s: the refusal does not name the file, its size, the limit and the variable\n%s", strings.Join(args, " "), r)
		}
	}
	check := func(t *testing.T, root string, env []string, id string) {
		dkWant(t, dkXmode(t, root, env, "sandbox", "exec", id, "--", "truncate", "-s", "50G", "big.bin"), 0)
		for _, args := range [][]string{{"sandbox", "diff", id}, {"sandbox", "diff", id, "--stat"}, {"sandbox", "diff", id, "--json"}, {"cr", "create", id}} {
			refused(t, root, env, args...)
		}
		if r := dkWant(t, dkXmode(t, root, env, "cr", "list", "-q"), 0); r.stdout != "" {
			t.Fatalf("a refused change request was recorded: %s", r.stdout)
		}
	}

	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "plan.yaml")
	os.WriteFile(plan, []byte("steps:\n  - name: big\n    run: [truncate, -s, 50G, big.bin]\n"), 0o644)

	t.Run("host", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "root")
		id := strings.TrimSpace(dkWant(t, dkXmode(t, root, nil, "sandbox", "create", "--repo", repo, "-q"), 0).stdout)
		check(t, root, nil, id)
		refused(t, root, nil, "run", "--repo", repo, "--objective", "a big file", "-f", plan)
	})

	t.Run("docker", func(t *testing.T) {
		cli := dockertest.Require(t)
		img := dockertest.Image(t)
		host := dockertest.Host()
		if !strings.HasPrefix(host, "unix://") {
			testenv.Skip(t, "bind mode needs a local daemon, the daemon is at %s", host)
		}
		root := filepath.Join(t.TempDir(), "root")
		dkRemoveSandboxes(t, cli, "", root)
		env := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img, "XMODE_SANDBOX_DOCKER_HOST=" + host}
		id := strings.TrimSpace(dkWant(t, dkXmode(t, root, env, "sandbox", "create", "--repo", repo, "-q"), 0).stdout)
		check(t, root, env, id)
		dkWant(t, dkXmode(t, root, env, "sandbox", "stop", id), 0)
	})
}

// TestCRCreateStopsOnSIGTERM: `cr create` reading a large file (50 GB,
// sparse, under a raised limit) stops at SIGTERM — exit 143, nothing
// recorded — instead of reading on for minutes.
func TestCRCreateStopsOnSIGTERM(t *testing.T) {
	root, id := newSession(t)
	if out, err := xmode(t, root, "sandbox", "exec", id, "--", "truncate", "-s", "50G", "big.bin").CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v\n%s", err, out)
	}
	c := xmode(t, root, "cr", "create", id)
	c.Env = append(c.Env, "XMODE_CR_MAX_BYTES=100g")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	// wait until it has big.bin open: it is reading it
	fds := "/proc/" + strconv.Itoa(c.Process.Pid) + "/fd"
	deadline := time.Now().Add(quick)
	for reading := false; !reading; {
		if time.Now().After(deadline) {
			c.Process.Kill()
			t.Fatalf("cr create never opened big.bin\n%s", stderr.String())
		}
		names, _ := os.ReadDir(fds)
		for _, n := range names {
			if target, _ := os.Readlink(filepath.Join(fds, n.Name())); strings.HasSuffix(target, "/worktree/big.bin") {
				reading = true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		ee, _ := err.(*exec.ExitError)
		if ee == nil || ee.ExitCode() != 128+int(syscall.SIGTERM) || !strings.Contains(stderr.String(), "interrupted (SIGTERM)") {
			t.Fatalf("after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(quick):
		c.Process.Kill()
		<-done
		t.Fatalf("cr create went on reading for %s after SIGTERM\n%s", quick, stderr.String())
	}
	if out, _ := xmode(t, root, "cr", "list", "-q").Output(); len(out) != 0 {
		t.Fatalf("an interrupted cr create recorded %s", out)
	}
}

// TestLargeTrackedFileCLI: a tracked file larger than XMODE_CR_MAX_BYTES
// that the sandbox left alone does not stop `sandbox diff` or `cr create`;
// grown to 50 GB, it is refused from its size at once.
func TestLargeTrackedFileCLI(t *testing.T) {
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "asset.bin"), bytes.Repeat([]byte("an asset that is larger than the limit\n"), 60000), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "asset.bin"}, {"commit", "-qm", "a 2 MB asset"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", args, err, out)
		}
	}
	root := filepath.Join(dir, "root")
	env := []string{"XMODE_CR_MAX_BYTES=1m"}
	id := strings.TrimSpace(dkWant(t, dkXmode(t, root, env, "sandbox", "create", "--repo", repo, "-q"), 0).stdout)
	dkWant(t, dkXmode(t, root, env, "sandbox", "exec", id, "--", "sh", "-c", "echo more >> README"), 0)
	if r := dkWant(t, dkXmode(t, root, env, "sandbox", "diff", id, "--stat"), 0); !strings.Contains(r.stdout, "README") || strings.Contains(r.stdout, "asset.bin") {
		t.Fatalf("sandbox diff --stat: want README alone\n%s", r)
	}
	dkWant(t, dkXmode(t, root, env, "cr", "create", id), 0)

	dkWant(t, dkXmode(t, root, env, "sandbox", "exec", id, "--", "truncate", "-s", "50G", "asset.bin"), 0)
	for _, args := range [][]string{{"sandbox", "diff", id, "--stat"}, {"cr", "create", id}} {
		r := dkWant(t, dkXmode(t, root, env, args...), 4)
		if r.took > quick || !strings.Contains(r.stderr, "asset.bin alone is 50.0 GiB") {
			t.Fatalf("xmode %s took %s: want a refusal from the size at once\n%s", strings.Join(args, " "), r.took, r)
		}
	}
}

// TestCRShowPatchTampered: `cr show --patch` (and --json --patch) of a
// package whose change.patch was grown to 50 GB fails at once, naming the
// tampering as `cr verify` does, and shows nothing; one of the recorded
// size with another content fails once read, naming it too. (Read whole,
// a 50 GB patch took minutes and all the memory there was.)
func TestCRShowPatchTampered(t *testing.T) {
	root, id := newSession(t)
	dkWant(t, dkXmode(t, root, nil, "sandbox", "exec", id, "--", "sh", "-c", "echo '<more>' >> README"), 0)
	cr := strings.TrimSpace(dkWant(t, dkXmode(t, root, nil, "cr", "create", id), 0).stdout)
	if r := dkWant(t, dkXmode(t, root, nil, "cr", "show", cr, "--patch"), 0); !strings.Contains(r.stdout, "+<more>\n") {
		t.Fatalf("cr show --patch of an intact package\n%s", r)
	}
	var v struct {
		ID    string `json:"id"`
		Patch string `json:"patch"`
	}
	dkJSON(t, dkWant(t, dkXmode(t, root, nil, "cr", "show", cr, "--patch", "--json"), 0), &v)
	if v.ID != cr || !strings.Contains(v.Patch, "+<more>\n") {
		t.Fatalf("cr show --patch --json of an intact package: %+v", v)
	}

	patches, _ := filepath.Glob(filepath.Join(root, "runs", "*", "change_requests", "1", "change.patch"))
	if len(patches) != 1 {
		t.Fatalf("change.patch: %v", patches)
	}
	intact, err := os.ReadFile(patches[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(patches[0], 50<<30); err != nil {
		t.Fatal(err)
	}
	verify := dkWant(t, dkXmode(t, root, nil, "cr", "verify", cr), 1)
	for _, args := range [][]string{{"cr", "show", cr, "--patch"}, {"cr", "show", cr, "--patch", "--json"}} {
		r := dkWant(t, dkXmode(t, root, nil, args...), 1)
		shown := r.stdout != "" && !strings.HasPrefix(r.stdout, `{"error":`) // --json reports an error on stdout
		if r.took > quick || shown ||
			!strings.Contains(r.stderr, "fails verification (change.patch: sha256 not computed (53687091200 bytes), the manifest says ") ||
			!strings.Contains(verify.stdout, "tampered: change.patch: sha256 not computed (53687091200 bytes), the manifest says ") {
			t.Fatalf("xmode %s took %s: want a refusal at once, in cr verify's words\n%s\ncr verify:\n%s", strings.Join(args, " "), r.took, r, verify)
		}
	}

	forged := bytes.Replace(intact, []byte("<more>"), []byte("<MORE>"), 1)
	if err := os.WriteFile(patches[0], forged, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"cr", "show", cr, "--patch"}, {"cr", "show", cr, "--patch", "--json"}} {
		r := dkWant(t, dkXmode(t, root, nil, args...), 1)
		if !strings.Contains(r.stderr, "fails verification (change.patch: sha256 ") || !strings.Contains(r.stderr, "the manifest says ") {
			t.Fatalf("xmode %s of a patch of the recorded size, forged\n%s", strings.Join(args, " "), r)
		}
	}
}
