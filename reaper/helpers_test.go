package reaper_test

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli/gittest"
	"github.com/xmode/xmode/internal/proc"
	_ "github.com/xmode/xmode/providers/local" // the host engine
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// env is a storage root with a real store, a real git repository made by the
// git binary, and the sandbox service that creates sessions in it.
type env struct {
	t    *testing.T
	dir  string // scratch space outside the storage root
	root string
	repo string
	cfg  *config.Config
	st   *store.Store
	svc  *sandbox.Service
	log  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	s.b.Reset()
	s.mu.Unlock()
}

func newEnv(t *testing.T, vars map[string]string) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, root: filepath.Join(dir, "root"), repo: filepath.Join(dir, "repo"), log: &syncBuffer{}}
	if r := vars["XMODE_STORAGE_ROOT"]; r != "" {
		e.root = r
	}
	makeRepo(t, e.repo)
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
	e.svc = &sandbox.Service{Cfg: cfg, Store: e.st, Guard: fsguard.Guard{Root: e.root}}
	return e
}

// git runs the real git for a fixture (gittest.Git).
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return gittest.Git(t, dir, args...)
}

func makeRepo(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "src", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q", "-b", "main")
	for name, body := range map[string]string{"README": "hello\n", "src/a.go": "package a\n", "src/deep/b.txt": "b\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "one")
}

// create makes a real session: a run directory and a git worktree.
func (e *env) create(runID string) *store.Session {
	e.t.Helper()
	o := sandbox.CreateOptions{Repo: e.repo}
	if runID != "" {
		o = sandbox.CreateOptions{RunID: runID}
	}
	s, err := e.svc.Create(context.Background(), o)
	if err != nil {
		e.t.Fatalf("create: %v", err)
	}
	return s
}

// expire moves a session's expiry into the past, as the passing of its TTL
// would.
func (e *env) expire(ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		if err := e.st.Extend(context.Background(), id, time.Now().Add(-time.Second)); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) get(id string) *store.Session {
	e.t.Helper()
	s, err := e.st.Get(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) reaper() *reaper.Reaper {
	return &reaper.Reaper{Cfg: e.cfg, Store: e.st, Guard: fsguard.Guard{Root: e.root}, Log: e.log}
}

func (e *env) pass(r *reaper.Reaper, dry bool) *reaper.Summary {
	e.t.Helper()
	return e.passWith(r, reaper.PassOptions{DryRun: dry})
}

func (e *env) passWith(r *reaper.Reaper, o reaper.PassOptions) *reaper.Summary {
	e.t.Helper()
	if r == nil {
		r = e.reaper()
	}
	sum, err := r.Pass(context.Background(), o)
	if err != nil {
		e.t.Fatalf("pass: %v", err)
	}
	return sum
}

// exec runs one step in a session through the sandbox service.
func (e *env) exec(s *store.Session, argv ...string) {
	e.t.Helper()
	res, err := e.svc.Exec(context.Background(), s, sandbox.ExecOptions{Argv: argv})
	if err != nil || res.ExitCode != 0 {
		e.t.Fatalf("exec %v: %v %+v", argv, err, res)
	}
}

// sql runs a statement on the database behind the store's back: a tampered
// row, a crash's leftovers.
func (e *env) sql(q string, args ...any) {
	e.t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.root, store.FileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

func (e *env) worktree(s *store.Session) string {
	return filepath.Join(e.root, "runs", s.RunID, "worktree")
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// want compares the counting fields of a summary.
func want(t *testing.T, got *reaper.Summary, w reaper.Summary) {
	t.Helper()
	g := *got
	g.DurationMS, w.DurationMS = 0, 0
	if len(g.Errors) != len(w.Errors) {
		t.Fatalf("summary errors %+v, want %d", g.Errors, len(w.Errors))
	}
	g.Errors, w.Errors = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("summary\n got %+v\nwant %+v", g, w)
	}
}

// testClock is a clock the test moves by hand, for the service that writes
// heartbeats and the reaper that judges them alike.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// endedOwner names a step owner that has ended (a killed xmode): this pid
// with another start time, what a recycled pid looks like.
func endedOwner() string {
	pid, rest, _ := strings.Cut(proc.Self(), ":")
	return pid + ":1" + rest
}

// foreignOwner names a step owner in another PID namespace, which only its
// heartbeat can tell alive.
func foreignOwner() string {
	name, _, _ := strings.Cut(proc.Self(), "@")
	return name + "@0"
}
