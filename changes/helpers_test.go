package changes_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli/gittest"
	_ "github.com/xmode/xmode/providers/local" // the host engine
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// env is a storage root with a real store, a real repository made by the
// git binary, the sandbox service that creates sessions in it and the
// change-request service under test.
type env struct {
	t    testing.TB
	dir  string
	root string
	repo string
	cfg  *config.Config
	st   *store.Store
	svc  *sandbox.Service
	cr   *changes.Service
}

func newEnv(t testing.TB, vars map[string]string) *env {
	t.Helper()
	return newEnvAt(t, vars, "")
}

// newEnvAt is newEnv with the storage root at root ("": in the test's
// directory).
func newEnvAt(t testing.TB, vars map[string]string, root string) *env {
	t.Helper()
	dir := t.TempDir()
	if root == "" {
		root = filepath.Join(dir, "root")
	}
	e := &env{t: t, dir: dir, root: root, repo: filepath.Join(dir, "repo")}
	all := map[string]string{"XMODE_STORAGE_ROOT": e.root, "XMODE_USER": "tester", "XMODE_SANDBOX_MAX_OPEN": "0"}
	for k, v := range vars {
		all[k] = v
	}
	cfg, err := config.Load(func(k string) string { return all[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = cfg
	if e.st, err = store.Open(context.Background(), e.root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	g := fsguard.Guard{Root: e.root}
	e.svc = &sandbox.Service{Cfg: cfg, Store: e.st, Guard: g}
	e.cr = &changes.Service{Store: e.st, Guard: g, MaxBytes: cfg.CRMaxBytes, User: cfg.User}
	return e
}

// git runs the real git for a fixture.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return gittest.Git(t, dir, args...)
}

func write(t testing.TB, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// makeRepo makes e.repo from files (path → content; a "-> target" content
// is a symlink) in one commit on main.
func (e *env) makeRepo(files map[string]string) {
	e.t.Helper()
	git(e.t, e.dir, "init", "-q", "-b", "main", e.repo)
	for p, body := range files {
		full := filepath.Join(e.repo, p)
		if target, ok := strings.CutPrefix(body, "-> "); ok {
			os.MkdirAll(filepath.Dir(full), 0o755)
			if err := os.Symlink(target, full); err != nil {
				e.t.Fatal(err)
			}
			continue
		}
		write(e.t, full, body)
	}
	git(e.t, e.repo, "add", "-A")
	git(e.t, e.repo, "commit", "-qm", "base")
}

func (e *env) create(o sandbox.CreateOptions) *store.Session {
	e.t.Helper()
	if o.Repo == "" && o.RunID == "" {
		o.Repo = e.repo
	}
	s, err := e.svc.Create(context.Background(), o)
	if err != nil {
		e.t.Fatalf("create: %v", err)
	}
	return s
}

// sh runs a shell script as one step of the session.
func (e *env) sh(s *store.Session, script string) {
	e.t.Helper()
	var out bytes.Buffer
	res, err := e.svc.Exec(context.Background(), s, sandbox.ExecOptions{
		Argv: []string{"sh", "-c", script}, LiveStdout: &out, LiveStderr: &out,
		Env: []string{"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com", "GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com", "GIT_CONFIG_NOSYSTEM=1"},
	})
	if err != nil || res.ExitCode != 0 {
		e.t.Fatalf("step %q: %v exit %v\n%s", script, err, res, out.String())
	}
}

// dropStatCache removes the run's stat cache (what the create seeded), so
// that the next snapshot reads every file.
func (e *env) dropStatCache(s *store.Session) {
	e.t.Helper()
	if err := os.Remove(filepath.Join(e.root, "runs", s.RunID, changes.StoreDirName, "xmode-stat-cache")); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) worktree(s *store.Session) string {
	return filepath.Join(e.root, "runs", s.RunID, "worktree")
}

// gitTry runs git in dir with a clean configuration and env.
func gitTry(dir string, env []string, args ...string) (string, error) {
	c := exec.Command("git", append([]string{"-c", "safe.directory=*", "-C", dir}, args...)...)
	c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	c.Env = append(c.Env, env...)
	out, err := c.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// gitOutEnv runs git in dir with a clean configuration, an identity and
// env, and returns its output.
func gitOutEnv(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	c := exec.Command("git", append([]string{"-c", "safe.directory=*", "-C", dir}, args...)...)
	c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	c.Env = append(c.Env, env...)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
