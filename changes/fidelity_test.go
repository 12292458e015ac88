package changes_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/xmode/xmode/changes"
	_ "github.com/xmode/xmode/providers/docker" // the docker engine
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/sandbox"
)

// fidelityRepo is the base every case starts from: text, binary, exec,
// symlinks (to a file, to a directory), names with spaces and non-ASCII
// characters, CRLF, a file that looks like a patch, an empty file, a
// submodule pointer, ignore rules and tracked files they would ignore.
func fidelityRepo(e *env) {
	e.makeRepo(map[string]string{
		"README":                   "hello\nworld\n",
		"docs/guide.md":            strings.Repeat("a line of the guide\n", 30),
		"src/main.go":              "package main\n\nfunc main() {}\n",
		"src/util/helper.go":       "package util\n",
		"link-to-readme":           "-> README",
		"dir link":                 "-> docs",
		"with space/file name.txt": "spaces\n",
		"ünïcødé/naïve.txt":        "unicode\n",
		"crlf.txt":                 "one\r\ntwo\r\nthree\r\n",
		"looks-like.patch":         "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n",
		"empty":                    "",
		".gitignore":               "*.log\nbuild/\n/tmp-*\n!keep.log\n",
		"vendor/.gitignore":        "*\n!.gitignore\n",
	})
	bin := make([]byte, 3000)
	rand.New(rand.NewSource(1)).Read(bin)
	write(e.t, filepath.Join(e.repo, "assets", "logo.png"), string(bin))
	write(e.t, filepath.Join(e.repo, "bin", "run.sh"), "#!/bin/sh\necho run\n")
	os.Chmod(filepath.Join(e.repo, "bin", "run.sh"), 0o755)
	write(e.t, filepath.Join(e.repo, "tracked.log"), "tracked although ignored\n")
	write(e.t, filepath.Join(e.repo, "vendor", "lib.c"), "int lib;\n")
	git(e.t, e.repo, "add", "-A")
	git(e.t, e.repo, "add", "-f", "tracked.log", "vendor/lib.c")
	head := git(e.t, e.repo, "rev-parse", "HEAD")
	git(e.t, e.repo, "update-index", "--add", "--cacheinfo", "160000,"+head+",sub")
	git(e.t, e.repo, "commit", "-qm", "fixture")
}

// script is a random edit script: shell (POSIX, busybox-compatible) run as
// steps in a sandbox, commits between steps when git is there.
type script struct {
	rnd   *rand.Rand
	files map[string]string // path → "file", "exec" or "link"
	steps []string
	cur   []string
}

func newScript(rnd *rand.Rand) *script {
	s := &script{rnd: rnd, files: map[string]string{
		"README": "file", "docs/guide.md": "file", "src/main.go": "file", "src/util/helper.go": "file",
		"link-to-readme": "link", "dir link": "link", "with space/file name.txt": "file", "ünïcødé/naïve.txt": "file",
		"crlf.txt": "file", "looks-like.patch": "file", "empty": "file", ".gitignore": "file", "assets/logo.png": "file",
		"bin/run.sh": "exec", "tracked.log": "file", "vendor/lib.c": "file",
	}}
	return s
}

func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// printf writes data exactly, every byte outside a few safe ones as an
// octal escape.
func printf(data []byte, to string) string {
	var b strings.Builder
	b.WriteString("printf '")
	for _, c := range data {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == ' ' || c == '.' || c == ',' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\%03o", c)
		}
	}
	b.WriteString("' > " + q(to))
	return b.String()
}

var newNames = []string{"new.txt", "a b.txt", "dir/new file.go", "deep/er/still/x.md", "émoji-✓.txt", "-dash.txt",
	"src/added.go", "with space/another one", "x.log", "build/out.o", "tmp-junk", "keep.log", "vendor/new.c", "notes/ñ/a.txt"}

func (s *script) pick() string {
	var keys []string
	for k := range s.files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "README"
	}
	return keys[s.rnd.Intn(len(keys))]
}

func (s *script) content() []byte {
	switch s.rnd.Intn(6) {
	case 0: // binary
		b := make([]byte, 50+s.rnd.Intn(500))
		s.rnd.Read(b)
		return b
	case 1:
		return []byte("crlf line\r\nanother\r\n")
	case 2:
		return []byte("diff --git a/f b/f\nindex 0000000..1111111 100644\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
	case 3:
		return nil
	case 4:
		return []byte("no newline at the end")
	}
	var b strings.Builder
	for i := 0; i < 1+s.rnd.Intn(20); i++ {
		fmt.Fprintf(&b, "line %d of %d\n", i, s.rnd.Intn(1000))
	}
	return []byte(b.String())
}

func (s *script) add(cmd string) { s.cur = append(s.cur, cmd) }

// mkdirFor makes p's directory, replacing files and symlinks in the way.
func (s *script) mkdirFor(p string) {
	d := filepath.Dir(p)
	if d == "." {
		return
	}
	parts := strings.Split(d, "/")
	for i := range parts {
		a := q(strings.Join(parts[:i+1], "/"))
		s.add("{ [ -d " + a + " ] && [ ! -L " + a + " ] || rm -f -- " + a + "; }")
		for k := range s.files {
			if k == strings.Join(parts[:i+1], "/") {
				delete(s.files, k)
			}
		}
	}
	s.add("mkdir -p -- " + q(d))
}

// clearFor makes room for a new entry at p: its directories made (files and
// symlinks in their way replaced) before p itself is removed, as busybox rm
// -rf fails with ENOTDIR under a file where GNU rm -f does not.
func (s *script) clearFor(p string) {
	s.mkdirFor(p)
	s.add("rm -rf -- " + q(p))
	for k := range s.files {
		if k == p || strings.HasPrefix(k, p+"/") {
			delete(s.files, k)
		}
	}
}

// op appends one random edit.
func (s *script) op() {
	switch s.rnd.Intn(11) {
	case 0, 1: // modify or create a file
		p := s.pick()
		if s.rnd.Intn(2) == 0 {
			p = newNames[s.rnd.Intn(len(newNames))]
		}
		s.clearFor(p)
		s.add(printf(s.content(), p))
		s.files[p] = "file"
	case 2: // append
		p := s.pick()
		if s.files[p] != "link" {
			s.add("printf 'appended\\n' >> " + q(p))
		}
	case 3: // delete
		p := s.pick()
		s.add("rm -f -- " + q(p))
		delete(s.files, p)
	case 4: // rename
		p := s.pick()
		to := newNames[s.rnd.Intn(len(newNames))]
		// Not into its own subtree, nor onto a directory holding it.
		if to != p && !strings.HasPrefix(to, p+"/") && !strings.HasPrefix(p, to+"/") {
			s.clearFor(to)
			s.add("mv -- " + q(p) + " " + q(to))
			s.files[to] = s.files[p]
			delete(s.files, p)
		}
	case 5: // mode
		p := s.pick()
		if s.files[p] == "file" {
			s.add("chmod +x -- " + q(p))
			s.files[p] = "exec"
		} else if s.files[p] == "exec" {
			s.add("chmod -x -- " + q(p))
			s.files[p] = "file"
		}
	case 6: // a symlink, maybe in place of a file
		p := s.pick()
		if s.rnd.Intn(2) == 0 {
			p = newNames[s.rnd.Intn(len(newNames))]
		}
		targets := []string{"README", "no/such/target", "../outside", "/etc/passwd", "docs", "ünïcødé/naïve.txt"}
		s.clearFor(p)
		s.add("ln -s -- " + q(targets[s.rnd.Intn(len(targets))]) + " " + q(p))
		s.files[p] = "link"
	case 7: // a file becomes a directory
		p := s.pick()
		s.clearFor(p + "/inside.txt")
		s.add(printf(s.content(), p+"/inside.txt"))
		delete(s.files, p)
		s.files[p+"/inside.txt"] = "file"
	case 8: // a directory becomes a file
		dirs := []string{"src/util", "docs", "with space", "ünïcødé", "assets"}
		d := dirs[s.rnd.Intn(len(dirs))]
		s.add("rm -rf -- " + q(d))
		s.add(printf(s.content(), d))
		for p := range s.files {
			if strings.HasPrefix(p, d+"/") {
				delete(s.files, p)
			}
		}
		s.files[d] = "file"
	case 9: // an empty file
		p := newNames[s.rnd.Intn(len(newNames))]
		s.clearFor(p)
		s.add(": > " + q(p))
		s.files[p] = "file"
	case 10: // ignored files, an ignored directory, an empty directory
		s.add("mkdir -p build/sub void/dir && printf 'x' > build/sub/o.o && printf 'y' > z.log && printf 'w' > tmp-1")
	}
}

func (s *script) endStep() {
	if len(s.cur) > 0 {
		s.steps = append(s.steps, strings.Join(s.cur, " && "))
		s.cur = nil
	}
}

// fidelityCase runs one random edit script in a new session and checks the
// package it makes.
func fidelityCase(t *testing.T, e *env, seed int64, o sandbox.CreateOptions, commits bool, mount string) {
	t.Helper()
	ctx := context.Background()
	rnd := rand.New(rand.NewSource(seed))
	s := newScript(rnd)
	for step := 0; step < 1+rnd.Intn(3); step++ {
		for i := 0; i < 1+rnd.Intn(8); i++ {
			s.op()
		}
		if commits && rnd.Intn(2) == 0 {
			s.add("git add -A && git commit -q --allow-empty -m " + q(fmt.Sprintf("agent commit %d\n\nbody of %d", step, seed)))
		}
		s.endStep()
	}
	sess := e.create(o)
	t.Cleanup(func() { e.svc.Stop(context.Background(), sess, false) })
	if sess.MountMode != mount {
		t.Fatalf("session %s: engine %s, mount %q; want mount %q", sess.ID, sess.Engine, sess.MountMode, mount)
	}
	for _, step := range s.steps {
		e.sh(sess, step)
	}
	p, err := e.cr.Create(ctx, sess, changes.CreateOptions{Title: "case " + strconv.FormatInt(seed, 10)})
	if err != nil && strings.Contains(err.Error(), "nothing to package") {
		return
	}
	if err != nil {
		t.Fatalf("seed %d: create: %v\nscript:\n%s", seed, err, strings.Join(s.steps, "\n"))
	}
	fail := func(format string, args ...any) {
		t.Helper()
		patch, _ := e.cr.ReadFile(p, changes.PatchFile)
		t.Fatalf("seed %d: %s\nscript:\n%s\npatch:\n%s", seed, fmt.Sprintf(format, args...), strings.Join(s.steps, "\n"), patch)
	}
	// What git itself stages from the worktree: a scratch index from HEAD,
	// then add -A.
	wt := e.worktree(sess)
	idx := filepath.Join(t.TempDir(), "index")
	gitEnv := []string{"GIT_INDEX_FILE=" + idx}
	gitWith(t, wt, gitEnv, "read-tree", "HEAD")
	gitWith(t, wt, gitEnv, "add", "-A")
	if want := gitWith(t, wt, gitEnv, "write-tree"); want != p.Manifest.Tree {
		fail("manifest tree %s, git add -A stages %s", p.Manifest.Tree, want)
	}
	// The patch on a fresh clone at the base commit.
	clone := filepath.Join(t.TempDir(), "clone")
	git(t, e.dir, "clone", "-q", "--no-checkout", e.repo, clone)
	git(t, clone, "checkout", "-q", "--detach", p.BaseCommit)
	patch := filepath.Join(p.Dir, changes.PatchFile)
	if out, err := gitTry(clone, nil, "apply", "--index", patch); err != nil {
		fail("git apply --index on a fresh clone: %v: %s", err, out)
	}
	if got := gitWith(t, clone, nil, "write-tree"); got != p.Manifest.Tree {
		fail("git apply --index on a fresh clone gives tree %s, the manifest says %s", got, p.Manifest.Tree)
	}
	if st := gitWith(t, clone, nil, "diff", "--name-status"); st != "" {
		fail("after git apply --index the clone's working tree differs from its index:\n%s", st)
	}
	rep, err := e.cr.Verify(ctx, p)
	if err != nil || !rep.Intact {
		fail("verify: %v %+v", err, rep)
	}
}

func gitWith(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	return gitOutEnv(t, dir, env, args...)
}

// fidelitySeed is XMODE_FIDELITY_SEED, else the time; printed on failure.
func fidelitySeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if v := os.Getenv("XMODE_FIDELITY_SEED"); v != "" {
		seed, _ = strconv.ParseInt(v, 10, 64)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random edit scripts from seed %d: rerun with XMODE_FIDELITY_SEED=%d", seed, seed)
		}
	})
	return seed
}

// TestFidelity: random edit scripts on a real repository, each run as
// steps in a real sandbox, packaged, and checked two ways: the manifest's
// tree is what `git add -A` stages from the worktree, and `git apply
// --index change.patch` on a fresh clone at the base commit yields exactly
// that tree. Host sessions (clone per run and project-machine worktrees,
// with agent commits) and docker sessions (bind and volume mode, a machine
// worktree).
func TestFidelity(t *testing.T) {
	seed := fidelitySeed(t)
	t.Run("host", func(t *testing.T) {
		e := newEnv(t, map[string]string{"XMODE_PROJECT_MACHINES": "1"})
		fidelityRepo(e)
		for i := int64(0); i < 16; i++ {
			o := sandbox.CreateOptions{}
			if i%4 == 3 {
				o = sandbox.CreateOptions{Project: "fid", Repo: e.repo}
			}
			fidelityCase(t, e, seed+i, o, true, "")
		}
	})
	t.Run("docker", func(t *testing.T) {
		cli := dockertest.Require(t)
		img := dockertest.Image(t)
		vars := map[string]string{"XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker",
			"XMODE_SANDBOX_IMAGE": img, "XMODE_PROJECT_MACHINES": "1"}
		e := newEnv(t, vars)
		fidelityRepo(e)
		instance(t, e, cli)
		fidelityCase(t, e, seed+100, sandbox.CreateOptions{}, false, "bind")
		// a fresh project per storage root: another install's cache volume is refused
		fidelityCase(t, e, seed+101, sandbox.CreateOptions{Project: dockertest.NewID("fid-"), Repo: e.repo}, false, "bind")

		vol, mountpoint := dockertest.StorageVolume(t, cli)
		vars["XMODE_SANDBOX_STORAGE_VOLUME"], vars["XMODE_SANDBOX_STORAGE_MOUNT"] = vol, mountpoint
		ev := newEnvAt(t, vars, mountpoint)
		ev.repo, ev.dir = e.repo, e.dir
		instance(t, ev, cli)
		fidelityCase(t, ev, seed+102, sandbox.CreateOptions{}, false, "volume")
		fidelityCase(t, ev, seed+103, sandbox.CreateOptions{Project: dockertest.NewID("fid-"), Repo: ev.repo}, false, "volume")
	})
}

// instance removes, when the test ends, every container of the env's
// storage root.
func instance(t *testing.T, e *env, cli *client.Client) {
	id, err := e.st.InstanceID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, id) })
}
