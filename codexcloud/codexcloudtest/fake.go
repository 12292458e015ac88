// Package codexcloudtest is a stand-in for the Codex CLI's cloud commands,
// for tests and benchmarks: the Codex cloud backend cannot be reached from
// here. Main reproduces what codex 0.171 prints and how it exits for `cloud
// exec`, `cloud status`, `cloud list --json` and `cloud diff`
// (docs/codex-cloud.md), driven by a state
// directory ($FAKE_CODEX_DIR) that a test changes to move tasks along: Fake
// from Go, Ctl (the `fakecodex` command) from testscript.
package codexcloudtest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// DirEnv names the state directory.
const DirEnv = "FAKE_CODEX_DIR"

// Config is the stand-in's world: who is signed in, whether the backend
// answers, how slow it is, which environments exist.
type Config struct {
	SignedIn     bool          `json:"signed_in"`
	Unreachable  bool          `json:"unreachable"`
	StatusDelay  time.Duration `json:"status_delay"`
	DiffDelay    time.Duration `json:"diff_delay"`
	Environments []string      `json:"environments"`
}

// Task statuses. codex 0.171 shows pending and running alike ([PENDING]);
// the JSON Result of `fakecodex result` tells them apart.
const (
	StatusPending = "pending"
	StatusRunning = "running"
	StatusReady   = "ready"
	StatusError   = "error"
	StatusApplied = "applied"
)

// Task is one cloud task as the stand-in keeps it.
type Task struct {
	ID         string    `json:"id"`
	Title      string    `json:"title"`
	Status     string    `json:"status"`
	Env        string    `json:"env"`
	Branch     string    `json:"branch"`
	Attempts   int       `json:"attempts"`
	Prompt     string    `json:"prompt"`
	UpdatedAt  time.Time `json:"updated_at"`
	Diff       string    `json:"diff"`
	Transcript []string  `json:"transcript"`
	Error      string    `json:"error"`
	Added      int       `json:"lines_added"`
	Removed    int       `json:"lines_removed"`
	Files      int       `json:"files_changed"`
}

// Fake is a stand-in's state directory, seen from a Go test.
type Fake struct {
	Dir string
	tb  testing.TB
}

// New makes a state directory: signed in, backend up, one environment
// "env_1".
func New(tb testing.TB) *Fake {
	tb.Helper()
	f := &Fake{Dir: tb.TempDir(), tb: tb}
	f.must(state{f.Dir}.ensure())
	return f
}

// Env is what a process needs to find this stand-in's state.
func (f *Fake) Env() []string { return []string{DirEnv + "=" + f.Dir} }

func (f *Fake) must(err error) {
	if err != nil {
		f.tb.Helper()
		f.tb.Fatal(err)
	}
}

// Configure changes the world.
func (f *Fake) Configure(change func(*Config)) {
	f.tb.Helper()
	s := state{f.Dir}
	c, err := s.config()
	f.must(err)
	change(&c)
	f.must(writeJSON(filepath.Join(f.Dir, "config.json"), c))
}

// Task returns a task; it fails the test when there is none.
func (f *Fake) Task(id string) Task {
	f.tb.Helper()
	t, err := state{f.Dir}.task(id)
	f.must(err)
	return t
}

// Tasks returns every task, oldest first.
func (f *Fake) Tasks() []Task {
	f.tb.Helper()
	ts, err := state{f.Dir}.tasks()
	f.must(err)
	return ts
}

// Put creates or replaces a task (a new ID when it has none).
func (f *Fake) Put(t Task) Task {
	f.tb.Helper()
	if t.ID == "" {
		t.ID = NewTaskID()
	}
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = time.Now()
	}
	f.must(state{f.Dir}.put(t))
	return t
}

// Update changes a task.
func (f *Fake) Update(id string, change func(*Task)) {
	f.tb.Helper()
	t := f.Task(id)
	change(&t)
	t.UpdatedAt = time.Now()
	f.must(state{f.Dir}.put(t))
}

// Call is one invocation of the stand-in, from its calls log.
type Call struct {
	Op     string // exec, status, diff, list, result
	Task   string
	PID    int
	Start  time.Time
	End    time.Time // zero when the call never finished (killed)
	Finish bool
}

// Calls reads the calls log.
func (f *Fake) Calls() []Call {
	f.tb.Helper()
	cs, err := readCalls(f.Dir)
	f.must(err)
	return cs
}

// NewTaskID returns an ID shaped like the cloud's: task_e_ + 32 hex digits.
func NewTaskID() string {
	var b [16]byte
	rand.Read(b[:])
	return "task_e_" + hex.EncodeToString(b[:])
}

// state is the directory, for the stand-in and the test alike.
type state struct{ dir string }

// ensure makes the default world (signed in, backend up, environment
// env_1) when the directory has none yet.
func (s state) ensure() error {
	if _, err := os.Stat(filepath.Join(s.dir, "config.json")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "tasks"), 0o755); err != nil {
		return err
	}
	return writeJSON(filepath.Join(s.dir, "config.json"), Config{SignedIn: true, Environments: []string{"env_1"}})
}

func (s state) config() (Config, error) {
	var c Config
	err := readJSON(filepath.Join(s.dir, "config.json"), &c)
	return c, err
}

func (s state) taskPath(id string) (string, error) {
	if id == "" || strings.ContainsAny(id, `/\`) || id[0] == '.' {
		return "", fmt.Errorf("bad task id %q", id)
	}
	return filepath.Join(s.dir, "tasks", id+".json"), nil
}

var errNoTask = errors.New("no such task")

func (s state) task(id string) (Task, error) {
	p, err := s.taskPath(id)
	if err != nil {
		return Task{}, err
	}
	var t Task
	err = readJSON(p, &t)
	if errors.Is(err, fs.ErrNotExist) {
		return Task{}, errNoTask
	}
	return t, err
}

func (s state) put(t Task) error {
	p, err := s.taskPath(t.ID)
	if err != nil {
		return err
	}
	return writeJSON(p, t)
}

func (s state) tasks() ([]Task, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "tasks"))
	if err != nil {
		return nil, err
	}
	var out []Task
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		t, err := s.task(strings.TrimSuffix(e.Name(), ".json"))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt.Before(out[j].UpdatedAt) })
	return out, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// writeJSON replaces a file atomically: a stand-in reading it at the same
// time sees the old content or the new.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func logCall(dir, event, op, task string) {
	f, err := os.OpenFile(filepath.Join(dir, "calls.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %d %d %s %s\n", event, time.Now().UnixNano(), os.Getpid(), op, task)
}

func readCalls(dir string) ([]Call, error) {
	b, err := os.ReadFile(filepath.Join(dir, "calls.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type key struct {
		pid int
		op  string
	}
	var out []Call
	open := map[key]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev, op, task string
		var ns int64
		var pid int
		if n, _ := fmt.Sscanf(l, "%s %d %d %s %s", &ev, &ns, &pid, &op, &task); n < 4 {
			continue
		}
		at := time.Unix(0, ns)
		k := key{pid, op}
		switch ev {
		case "start":
			open[k] = len(out)
			out = append(out, Call{Op: op, Task: task, PID: pid, Start: at})
		case "end":
			if i, ok := open[k]; ok {
				out[i].End, out[i].Finish = at, true
				delete(open, k)
			}
		}
	}
	return out, nil
}

// Dispatch runs the stand-in when this test binary was started as `codex`
// or `fakecodex` (the links Install makes): call it first in TestMain.
func Dispatch() {
	switch filepath.Base(os.Args[0]) {
	case "codex":
		os.Exit(Main())
	case "fakecodex":
		os.Exit(Ctl())
	}
}

// Install links the running test binary as `codex` and `fakecodex` in a
// new directory and returns the directory; the test binary's TestMain must
// call Dispatch (or list Main and Ctl among testscript's commands).
func Install(tb testing.TB) string {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	for _, name := range []string{"codex", "fakecodex"} {
		if err := os.Symlink(self, filepath.Join(dir, name)); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// RealVersion is the Codex CLI release the stand-in reproduces and the
// tests of the real CLI pin (.ci/run installs it from npm).
const RealVersion = "0.171.0"

// RealCodex returns the real Codex CLI: $XMODE_TEST_CODEX_BIN, else codex on
// PATH, at RealVersion. Without it the test skips, or fails when CI=true.
func RealCodex(tb testing.TB) string {
	tb.Helper()
	bin := os.Getenv("XMODE_TEST_CODEX_BIN")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("codex"); err != nil {
			missing(tb, "the Codex CLI is not installed (npm install -g @openai/codex@"+RealVersion+", or set XMODE_TEST_CODEX_BIN)")
			return ""
		}
	}
	c := exec.Command(bin, "--version")
	c.Env = append(os.Environ(), "HOME="+tb.TempDir(), probeEnv+"=1")
	out, err := c.Output()
	if err != nil || !strings.Contains(string(out), RealVersion) {
		missing(tb, fmt.Sprintf("%s --version: %q, %v; want %s", bin, out, err, RealVersion))
		return ""
	}
	if strings.Contains(string(out), standInMark) {
		missing(tb, fmt.Sprintf("the codex on PATH (%s) is this package's stand-in, not the real CLI: install @openai/codex@%s or set XMODE_TEST_CODEX_BIN", bin, RealVersion))
		return ""
	}
	return bin
}

func missing(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatal(why)
	}
	tb.Skip("SKIP: " + why)
}
