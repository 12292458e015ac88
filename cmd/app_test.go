package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/gitcli/gittest"
	"github.com/xmode/xmode/internal/testenv"
)

// testCLI runs xmode commands in-process, each through a fresh App (as a
// process would get) on in-memory streams, against a storage root of its
// own: a real store in a temporary directory.
type testCLI struct {
	t    *testing.T
	env  map[string]string
	root string
	in   string

	stdout, stderr bytes.Buffer
}

func newTestCLI(t *testing.T) *testCLI {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	return &testCLI{t: t, root: root, env: map[string]string{
		"XMODE_STORAGE_ROOT": root,
		"XMODE_USER":         "tester",
		"NO_COLOR":           "1",
	}}
}

// app is a fresh App on the CLI's streams and environment.
func (c *testCLI) app() *App {
	c.stdout.Reset()
	c.stderr.Reset()
	return &App{In: strings.NewReader(c.in), Out: &c.stdout, Err: &c.stderr, Env: func(k string) string { return c.env[k] }}
}

// run runs one command line and returns its exit code.
func (c *testCLI) run(args ...string) int {
	c.t.Helper()
	return c.app().Run(context.Background(), args)
}

// ok runs a command line that must succeed and returns its stdout.
func (c *testCLI) ok(args ...string) string {
	c.t.Helper()
	if code := c.run(args...); code != 0 {
		c.t.Fatalf("xmode %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, c.stdout.String(), c.stderr.String())
	}
	return c.stdout.String()
}

// fails runs a command line that must exit with code and have want in
// its stderr.
func (c *testCLI) fails(code int, want string, args ...string) {
	c.t.Helper()
	got := c.run(args...)
	if got != code {
		c.t.Fatalf("xmode %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, c.stdout.String(), c.stderr.String())
	}
	if !strings.Contains(c.stderr.String(), want) {
		c.t.Fatalf("xmode %s: stderr does not say %q:\n%s", strings.Join(args, " "), want, c.stderr.String())
	}
}

// jsonError is the error object a failing command prints under --json.
func (c *testCLI) jsonError() (code int, kind, message string) {
	c.t.Helper()
	var v struct {
		Error struct {
			Code    int    `json:"code"`
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(c.stdout.Bytes(), &v); err != nil {
		c.t.Fatalf("stdout is not one JSON error: %v\n%s", err, c.stdout.String())
	}
	return v.Error.Code, v.Error.Kind, v.Error.Message
}

// testRepo makes a git repository with one commit (a file README) with the
// real git binary.
func testRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Skip(t, "git is not on PATH")
	}
	dir := filepath.Join(t.TempDir(), "repo")
	gittest.Git(t, ".", "init", "-q", "-b", "main", dir)
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, dir, "add", "README")
	gittest.Git(t, dir, "commit", "-q", "-m", "first")
	return dir
}

// session creates a host session of a fresh repository and returns its ID.
func (c *testCLI) session() string {
	c.t.Helper()
	return strings.TrimSpace(c.ok("sandbox", "create", "--repo", testRepo(c.t), "-q"))
}
