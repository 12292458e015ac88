package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// The MCP server (`xmode mcp`, docs/mcp.md) driven by the Go SDK's client,
// against this test binary started as a real xmode process, over stdio and
// over streamable HTTP.

// mcpRig is a storage root, a repository and the environment every xmode
// of a test shares.
type mcpRig struct {
	t    *testing.T
	dir  string
	root string
	repo string
	env  []string // besides os.Environ()
}

func newMCPRig(t *testing.T, env ...string) *mcpRig {
	t.Helper()
	dir := t.TempDir()
	r := &mcpRig{t: t, dir: dir, root: filepath.Join(dir, "root"), repo: filepath.Join(dir, "repo")}
	if err := makeRepo(r.repo); err != nil {
		t.Fatal(err)
	}
	r.env = append([]string{"XMODE_TEST_AS_MAIN=1", "XMODE_STORAGE_ROOT=" + r.root, "XMODE_USER=tester", "NO_COLOR=1",
		"GORACE=atexit_sleep_ms=0", "HOME=" + filepath.Join(dir, "home"), "GIT_CONFIG_NOSYSTEM=1", "XMODE_SANDBOX_MAX_OPEN=0"}, env...)
	// Every session of the test ends, whatever fails on the way.
	t.Cleanup(func() {
		out, _ := r.cli(nil, "sandbox", "list", "-q", "--user", "").Output()
		for _, id := range strings.Fields(string(out)) {
			r.cli(nil, "sandbox", "stop", "--force", id).Run()
		}
	})
	return r
}

// cli is an xmode command of the rig.
func (r *mcpRig) cli(env []string, args ...string) *exec.Cmd {
	c := exec.Command(os.Args[0], args...)
	c.Env = append(append(os.Environ(), r.env...), env...)
	c.Dir = r.repo
	return c
}

// cliOut runs an xmode command that must succeed and returns its stdout.
func (r *mcpRig) cliOut(env []string, args ...string) string {
	r.t.Helper()
	c := r.cli(env, args...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		r.t.Fatalf("xmode %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// stdio starts `xmode mcp ARGS` and connects a client to it.
func (r *mcpRig) stdio(opts *mcp.ClientOptions, env []string, args ...string) *mcp.ClientSession {
	r.t.Helper()
	cs, _ := r.stdioServer(opts, env, args...)
	return cs
}

// stdioServer is stdio, with the server's process.
func (r *mcpRig) stdioServer(opts *mcp.ClientOptions, env []string, args ...string) (*mcp.ClientSession, *os.Process) {
	r.t.Helper()
	c := r.cli(env, append([]string{"mcp"}, args...)...)
	c.Stderr = &testLog{t: r.t, prefix: "server: "}
	client := mcp.NewClient(&mcp.Implementation{Name: "xmode-test", Version: "1.0"}, opts)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: c}, nil)
	if err != nil {
		r.t.Fatalf("connect to xmode mcp: %v", err)
	}
	r.t.Cleanup(func() { cs.Close() })
	return cs, c.Process
}

// rawStdio starts `xmode mcp` for a test that speaks JSON-RPC itself: its
// standard input and a reader of its output. The server ends when the
// test does.
func (r *mcpRig) rawStdio() (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	r.t.Helper()
	c := r.cli(nil, "mcp")
	in, err := c.StdinPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	c.Stderr = &testLog{t: r.t, prefix: "server: "}
	if err := c.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		in.Close()
		c.Wait()
	})
	return c, in, bufio.NewReaderSize(out, 1<<20)
}

// httpServer starts `xmode mcp --listen 127.0.0.1:0 ARGS` and returns its
// endpoint and the token it printed.
func (r *mcpRig) httpServer(env []string, args ...string) (endpoint, token string) {
	r.t.Helper()
	endpoint, token, _ = r.httpServerProc(env, args...)
	return endpoint, token
}

// httpServerProc is httpServer, with the server's process.
func (r *mcpRig) httpServerProc(env []string, args ...string) (endpoint, token string, proc *os.Process) {
	r.t.Helper()
	c := r.cli(env, append([]string{"mcp", "--listen", "127.0.0.1:0"}, args...)...)
	stderr, err := c.StderrPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		c.Process.Signal(os.Interrupt)
		c.Wait()
	})
	sc := bufio.NewScanner(stderr)
	urlRE := regexp.MustCompile(`on (http://\S+/mcp)`)
	tokenRE := regexp.MustCompile(`bearer token \(shown once.*\): (\S+)`)
	for (endpoint == "" || token == "") && sc.Scan() {
		if m := urlRE.FindStringSubmatch(sc.Text()); m != nil {
			endpoint = m[1]
		}
		if m := tokenRE.FindStringSubmatch(sc.Text()); m != nil {
			token = m[1]
		}
		if strings.Contains(sc.Text(), "XMODE_MCP_TOKEN's") {
			token = "(from the environment)"
		}
	}
	if endpoint == "" || token == "" {
		r.t.Fatalf("xmode mcp --listen printed no URL or token")
	}
	go io.Copy(&testLog{t: r.t, prefix: "server: "}, stderr)
	return endpoint, token, c.Process
}

// httpClient connects a client to endpoint with token.
func (r *mcpRig) httpClient(endpoint, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	r.t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "xmode-test", Version: "1.0"}, opts)
	tr := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1}
	cs, err := client.Connect(context.Background(), tr, nil)
	if err != nil {
		r.t.Fatalf("connect to %s: %v", endpoint, err)
	}
	r.t.Cleanup(func() { cs.Close() })
	return cs
}

type bearer struct{ token string }

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(req)
}

// testLog passes what the server says to the test's log.
type testLog struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.t.Log(l.prefix + line)
	}
	return len(p), nil
}

// call calls a tool, failing the test on a protocol error; it returns the
// result and its structured content.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v", name, args, err)
	}
	var out map[string]any
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
	}
	return res, out
}

// ok calls a tool that must succeed.
func ok(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	res, out := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v: %s", name, args, text(res))
	}
	return out
}

// toolErr calls a tool that must fail with a tool error (isError) whose
// message says want.
func toolErr(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want string) {
	t.Helper()
	res, _ := call(t, cs, name, args)
	if !res.IsError || !strings.Contains(text(res), want) {
		t.Fatalf("%s %v: isError %v %q; want an error saying %q", name, args, res.IsError, text(res), want)
	}
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func str(v map[string]any, path ...string) string {
	var cur any = v
	for _, p := range path {
		m, _ := cur.(map[string]any)
		cur = m[p]
	}
	switch x := cur.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return ""
	}
	b, _ := json.Marshal(cur)
	return string(b)
}

var mcpTools = []string{"cr_create", "cr_show", "file_delete", "file_edit", "file_list", "file_read", "file_write",
	"network_log", "network_policy", "sandbox_create", "sandbox_diff", "sandbox_exec", "sandbox_extend", "sandbox_fork", "sandbox_list",
	"sandbox_port", "sandbox_show", "sandbox_stop", "step_kill", "step_logs", "step_status"}

// Every tool, over stdio and over HTTP: a session from create to change
// request, recorded as MCP's, whose change request verifies and applies.
func TestMCPEveryTool(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			r := newMCPRig(t, "SECRET_FOR_MCP=hunter2-very-secret", "XMODE_MCP_ENV=SECRET_*")
			var cs *mcp.ClientSession
			if transport == "stdio" {
				cs = r.stdio(nil, nil)
			} else {
				e, tok := r.httpServer(nil)
				cs = r.httpClient(e, tok, nil)
			}
			everyTool(t, r, cs)
		})
	}
}

func everyTool(t *testing.T, r *mcpRig, cs *mcp.ClientSession) {
	ctx := context.Background()
	init := cs.InitializeResult()
	if init == nil || !strings.Contains(init.Instructions, "sandbox_create") || !strings.Contains(init.Instructions, "cr_create") ||
		!strings.Contains(init.Instructions, "follow_along") || !strings.Contains(init.Instructions, "step_kill") {
		t.Fatalf("instructions: %+v", init)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil || tool.Annotations == nil {
			t.Errorf("%s: no description, schema or annotations", tool.Name)
		}
		if strings.HasPrefix(tool.Name, "cr_review") || strings.Contains(tool.Name, "approve") {
			t.Errorf("a review tool: %s", tool.Name)
		}
		ro := tool.Annotations.ReadOnlyHint
		wantRO := slices.Contains([]string{"sandbox_list", "sandbox_show", "step_status", "step_logs", "file_read", "file_list", "sandbox_diff", "cr_show", "network_log"}, tool.Name)
		if ro != wantRO {
			t.Errorf("%s: readOnlyHint %v", tool.Name, ro)
		}
		if d := tool.Annotations.DestructiveHint; !ro && d == nil {
			t.Errorf("%s: no destructiveHint", tool.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, mcpTools) {
		t.Fatalf("tools %q, want %q", names, mcpTools)
	}

	// Create.
	created := ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo, "title": "Make README say three"})
	id := str(created, "session", "id")
	if !strings.HasPrefix(id, "sbx_") || len(str(created, "session", "base_commit")) != 40 || str(created, "session", "title") != "Make README say three" {
		t.Fatalf("create: %v", created)
	}
	follow := str(created, "follow_along")
	for _, want := range []string{"sandbox logs " + id + " --follow", "sandbox diff " + id, "sandbox shell " + id} {
		if !strings.Contains(follow, want) {
			t.Errorf("follow_along %s lacks %q", follow, want)
		}
	}
	if str(created, "session", "engine") == "host" && !strings.Contains(str(created, "warnings"), "this sandbox lacks isolation of any kind: the host engine runs commands on this machine as the user") {
		t.Errorf("a host session's warnings do not say its commands run on the host: %s", str(created, "warnings"))
	}
	// The session says where it came from, in sandbox show and its JSON.
	var shown map[string]any
	json.Unmarshal([]byte(r.cliOut(nil, "sandbox", "show", id, "--json")), &shown)
	if shown["origin"] != "mcp" || shown["origin_client"] != "xmode-test 1.0" || shown["title"] != "Make README say three" {
		t.Fatalf("sandbox show --json: origin %v, client %v, title %v", shown["origin"], shown["origin_client"], shown["title"])
	}
	if human := r.cliOut(nil, "sandbox", "show", id); !strings.Contains(human, "Origin:") || !strings.Contains(human, "xmode-test 1.0") {
		t.Fatalf("sandbox show does not say the origin:\n%s", human)
	}
	if list := ok(t, cs, "sandbox_list", nil); !strings.Contains(str(list, "sandboxes"), id) {
		t.Fatalf("sandbox_list: %v", list)
	}

	// Commands: a shell line, argv, a workdir, a variable passed by name
	// (masked), a failing command (a result, not an error).
	ex := ok(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "echo out; echo err >&2; echo $SECRET_FOR_MCP", "env": []string{"SECRET_FOR_MCP"}})
	if str(ex, "exit_code") != "0" || str(ex, "stdout") != "out\n***\n" || str(ex, "stderr") != "err\n" || str(ex, "step") != "1" {
		t.Fatalf("exec: %v", ex)
	}
	ex = ok(t, cs, "sandbox_exec", map[string]any{"session": id, "argv": []string{"pwd"}, "workdir": "sub/dir"})
	if !strings.HasSuffix(strings.TrimSpace(str(ex, "stdout")), "worktree/sub/dir") {
		t.Fatalf("exec in sub/dir: %v", ex)
	}
	res, ex := call(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "exit 3"})
	if res.IsError || str(ex, "exit_code") != "3" || !strings.Contains(text(res), "exit 3") {
		t.Fatalf("a failing command: %v %s", ex, text(res))
	}
	st := ok(t, cs, "step_status", map[string]any{"session": id, "step": 1})
	if str(st, "state") != "finished" || str(st, "exit_code") != "0" || str(st, "stdout_bytes") != "8" || str(st, "name") != "echo-out-echo-err-2-echo-SECRET_FOR_MCP" {
		t.Fatalf("step_status: %v", st)
	}
	lg := ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "tail": 4})
	if str(lg, "content") != "***\n" || str(lg, "offset") != "4" || str(lg, "eof") != "true" {
		t.Fatalf("step_logs tail: %v", lg)
	}
	lg = ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "offset": 0, "max_bytes": 4})
	if str(lg, "content") != "out\n" || str(lg, "next_offset") != "4" || str(lg, "eof") != "false" {
		t.Fatalf("step_logs from 0: %v", lg)
	}
	lg = ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "stream": "stderr"})
	if str(lg, "content") != "err\n" {
		t.Fatalf("step_logs stderr: %v", lg)
	}
	// The secret's value is in no evidence.
	evidenceHas(t, r.root, "hunter2", false)

	// Files.
	w := ok(t, cs, "file_write", map[string]any{"session": id, "path": "notes/todo.txt", "content": "one\ntwo\n"})
	if str(w, "created") != "true" || str(w, "before") != "" || str(w, "after", "bytes") != "8" {
		t.Fatalf("file_write: %v", w)
	}
	e := ok(t, cs, "file_edit", map[string]any{"session": id, "path": "README", "old_string": "version two", "new_string": "version three"})
	if str(e, "replacements") != "1" || str(e, "before", "sha256") == str(e, "after", "sha256") {
		t.Fatalf("file_edit: %v", e)
	}
	rd := ok(t, cs, "file_read", map[string]any{"session": id, "path": "notes/todo.txt", "start_line": 2})
	if str(rd, "content") != "two\n" || str(rd, "total_lines") != "2" || str(rd, "start_line") != "2" {
		t.Fatalf("file_read: %v", rd)
	}
	ls := ok(t, cs, "file_list", map[string]any{"session": id, "pattern": "**/*.txt"})
	if got := str(ls, "entries"); !strings.Contains(got, `"notes/todo.txt"`) || !strings.Contains(got, `"sub/dir/file.txt"`) || strings.Contains(got, ".git") {
		t.Fatalf("file_list: %v", got)
	}
	ok(t, cs, "file_write", map[string]any{"session": id, "path": "scratch.txt", "content": "x"})
	if d := ok(t, cs, "file_delete", map[string]any{"session": id, "path": "scratch.txt"}); str(d, "removed") != "1" {
		t.Fatalf("file_delete: %v", d)
	}
	show := ok(t, cs, "sandbox_show", map[string]any{"session": id})
	var stepNames []string
	for _, s := range show["steps"].([]any) {
		stepNames = append(stepNames, s.(map[string]any)["name"].(string))
	}
	if want := "echo-out-echo-err-2-echo-SECRET_FOR_MCP pwd exit-3 file-write file-edit file-read file-list file-write file-delete"; strings.Join(stepNames, " ") != want {
		t.Fatalf("sandbox_show steps %q, want %q", strings.Join(stepNames, " "), want)
	}

	// The change: a diff, a change request with the edits in its evidence.
	df := ok(t, cs, "sandbox_diff", map[string]any{"session": id})
	if !strings.Contains(str(df, "patch"), "+version three") || str(df, "stat", "files") != "2" {
		t.Fatalf("sandbox_diff: %v", df)
	}
	if df = ok(t, cs, "sandbox_diff", map[string]any{"session": id, "stat": true}); str(df, "patch") != "" || str(df, "stat", "insertions") != "3" {
		t.Fatalf("sandbox_diff --stat: %v", df)
	}
	cr := ok(t, cs, "cr_create", map[string]any{"session": id, "message": "README says three; notes added"})
	crID := str(cr, "id")
	if !strings.HasPrefix(crID, "cr_") || str(cr, "title") != "Make README say three" || !strings.Contains(str(cr, "review"), "cr review "+crID) {
		t.Fatalf("cr_create: %v", cr)
	}
	// Its steps, and the export prefilled with the session's repository.
	if steps := str(cr, "steps"); !strings.Contains(steps, `"file-edit"`) || !strings.Contains(steps, `"name":"pwd"`) || !strings.Contains(steps, `"status":"failed"`) {
		t.Fatalf("cr_create's steps: %s", steps)
	}
	if rv := str(cr, "review"); !strings.Contains(rv, "cr export "+crID+" --repo "+r.repo+" ") || strings.Contains(rv, "REPO") {
		t.Fatalf("cr_create's export command is not of the session's repository: %s", rv)
	}
	crs := ok(t, cs, "cr_show", map[string]any{"change_request": crID, "patch": true})
	if !strings.Contains(str(crs, "patch"), "+version three") || str(crs, "status") != "open" || !strings.Contains(str(crs, "steps"), "file-edit") {
		t.Fatalf("cr_show: %v", crs)
	}
	var pkg struct {
		Evidence struct {
			Steps []struct {
				Name string          `json:"name"`
				File json.RawMessage `json:"file"`
			} `json:"steps"`
		} `json:"evidence"`
	}
	json.Unmarshal([]byte(r.cliOut(nil, "cr", "show", crID, "--json")), &pkg)
	var edit string
	for _, s := range pkg.Evidence.Steps {
		if s.Name == "file-edit" {
			var b bytes.Buffer
			json.Compact(&b, s.File)
			edit = b.String()
		}
	}
	if !strings.Contains(edit, `"op":"edit"`) || !strings.Contains(edit, `"path":"README"`) || !strings.Contains(edit, `"sha256"`) {
		t.Fatalf("the change request's evidence of the edit: %s", edit)
	}
	verifyAndApply(t, r, crID, "README", "version three\n")

	// The user asks for changes with a comment on a line; the agent reads
	// it (cr_show), answers in the sandbox, and makes the next version.
	toolErr(t, cs, "cr_create", map[string]any{"session": id, "change_request": crID}, "none does now")
	r.cliOut(nil, "cr", "review", crID, "--request-changes", "--comment", "README:1: say <b>which</b> three")
	crs = ok(t, cs, "cr_show", map[string]any{"change_request": crID})
	if str(crs, "status") != "changes_requested" || !strings.Contains(str(crs, "comments"), `README:1 (version 1): say \u003cb\u003ewhich\u003c/b\u003e three`) {
		t.Fatalf("cr_show of a change request awaiting a new version: %v", crs)
	}
	ok(t, cs, "file_edit", map[string]any{"session": id, "path": "README", "old_string": "version three", "new_string": "version three, the third"})
	v2 := ok(t, cs, "cr_create", map[string]any{"session": id, "change_request": crID, "message": "says which"})
	if str(v2, "id") != crID || str(v2, "version") != "2" || str(v2, "status") != "open" {
		t.Fatalf("cr_create of the next version: %v", v2)
	}
	crs = ok(t, cs, "cr_show", map[string]any{"change_request": crID})
	if !strings.Contains(str(crs, "comments"), "[addressed in version 2]") {
		t.Fatalf("cr_show after version 2: %v", crs)
	}
	if out := r.cliOut(nil, "cr", "verify", crID); !strings.Contains(out, "2 versions as a chain") {
		t.Fatalf("cr verify after version 2: %s", out)
	}

	// Stop.
	stop := ok(t, cs, "sandbox_stop", map[string]any{"session": id})
	if str(stop, "session", "status") != "destroyed" {
		t.Fatalf("sandbox_stop: %v", stop)
	}
	toolErr(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "true"}, "refused: session "+id+" is destroyed")
	if again := ok(t, cs, "sandbox_stop", map[string]any{"session": id}); !strings.Contains(str(again, "note"), "already ended") {
		t.Fatalf("a second stop: %v", again)
	}
}

// evidenceHas checks whether any evidence file under root holds s.
func evidenceHas(t *testing.T, root, s string, want bool) {
	t.Helper()
	found := ""
	filepath.Walk(filepath.Join(root, "runs"), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && strings.Contains(p, "/steps/") {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), s) {
				found = p
			}
		}
		return nil
	})
	if (found != "") != want {
		t.Fatalf("evidence holding %q: %q (want it there: %v)", s, found, want)
	}
}

// verifyAndApply runs `cr verify` on a change request and applies its
// patch to a fresh clone of the rig's repository with git, which must then
// hold want in file.
func verifyAndApply(t *testing.T, r *mcpRig, crID, file, want string) {
	t.Helper()
	r.cliOut(nil, "cr", "verify", crID) // exit 0: it verifies
	var show struct {
		Dir      string `json:"dir"`
		Manifest struct {
			BaseCommit string `json:"base_commit"`
		} `json:"manifest"`
	}
	json.Unmarshal([]byte(r.cliOut(nil, "cr", "show", crID, "--json")), &show)
	clone := filepath.Join(t.TempDir(), "clone")
	for _, args := range [][]string{
		{"clone", "-q", r.repo, clone},
		{"-C", clone, "checkout", "-q", show.Manifest.BaseCommit},
		{"-C", clone, "apply", "--index", filepath.Join(show.Dir, "change.patch")},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(clone, file)); err != nil || string(b) != want {
		t.Fatalf("%s in a fresh clone with the change request applied: %q %v, want %q", file, b, err, want)
	}
}

// Tool failures are tool results (isError) whose message names the fix;
// a session the server did not create is not found; another user's never.
func TestMCPErrorsAndScope(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t, "XMODE_MCP_ENV=XMODE_TEST_*")
	cli := r.cliOut(nil, "sandbox", "create", "--repo", r.repo, "-q")
	other := r.cliOut([]string{"XMODE_USER=mallory"}, "sandbox", "create", "--repo", r.repo, "-q")
	cs := r.stdio(nil, nil)
	id := str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")

	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"sandbox_exec", map[string]any{"session": "sbx_nosuch00", "command": "true"}, "not found: no sandbox \"sbx_nosuch00\" among yours"},
		{"sandbox_exec", map[string]any{"session": cli, "command": "true"}, "--all-sessions"},
		{"sandbox_show", map[string]any{"session": cli}, "not found"},
		{"file_read", map[string]any{"session": cli, "path": "README"}, "not found"},
		{"sandbox_stop", map[string]any{"session": cli}, "not found"},
		{"cr_create", map[string]any{"session": cli}, "not found"},
		{"sandbox_exec", map[string]any{"session": id}, "invalid input: give the command to run"},
		{"sandbox_exec", map[string]any{"session": id, "command": "x", "argv": []string{"y"}}, "not both"},
		{"sandbox_exec", map[string]any{"session": id, "command": "true", "env": []string{"1A=b"}}, "give a variable's name"},
		{"sandbox_exec", map[string]any{"session": id, "command": "true", "env": []string{"XMODE_TEST_NO_SUCH_VAR"}}, "server's environment has no XMODE_TEST_NO_SUCH_VAR"},
		{"sandbox_exec", map[string]any{"session": id, "command": "true", "env": []string{"HOME"}}, "refused: env HOME: the user has not allowed"},
		{"sandbox_exec", map[string]any{"session": id, "command": "true", "workdir": "../.."}, "invalid input"},
		{"sandbox_exec", map[string]any{"session": id, "command": "true", "timeout_seconds": -1}, "timeout_seconds"},
		{"file_edit", map[string]any{"session": id, "path": "README", "old_string": "nope", "new_string": "x"}, "old_string was not found in README: read the file (file_read)"},
		{"file_read", map[string]any{"session": id, "path": "missing.txt"}, "not found: missing.txt"},
		{"step_logs", map[string]any{"session": id, "step": 99}, "has no step 99"},
		{"step_logs", map[string]any{"session": id, "step": 1, "stream": "both"}, "stdout or stderr"},
		{"cr_create", map[string]any{"session": id}, "nothing to package"},
		{"cr_show", map[string]any{"change_request": "cr_nosuch00"}, "not found"},
		{"sandbox_create", map[string]any{"repository": filepath.Join(r.dir, "no-such-repo")}, "refused: repository"},
		{"sandbox_exec", map[string]any{"session": id, "command": "true", "bogus": 1}, "bogus"},
		{"file_write", map[string]any{"session": id, "path": "x", "content": "x", "bogus": 1}, `invalid input: the arguments: json: unknown field "bogus"`},
		{"file_write", map[string]any{"session": id, "path": "x"}, `invalid input: "content" is required`},
		{"file_read", map[string]any{"session": id, "path": "README", "start_line": "2"}, "invalid input: the arguments: json: cannot unmarshal string"},
		{"file_edit", map[string]any{"session": id, "path": "README", "old_string": "x"}, `"new_string" is required`},
	} {
		toolErr(t, cs, c.tool, c.args, c.want)
	}
	// Another user's session, not even with --all-sessions; the CLI's with it.
	all := r.stdio(nil, nil, "--all-sessions")
	ok(t, all, "sandbox_exec", map[string]any{"session": cli, "command": "true"})
	toolErr(t, all, "sandbox_show", map[string]any{"session": other}, "not found")
	if list := str(ok(t, all, "sandbox_list", nil), "sandboxes"); !strings.Contains(list, cli) || !strings.Contains(list, id) || strings.Contains(list, other) {
		t.Fatalf("sandbox_list --all-sessions: %s", list)
	}
	if list := str(ok(t, cs, "sandbox_list", nil), "sandboxes"); strings.Contains(list, cli) || !strings.Contains(list, id) {
		t.Fatalf("sandbox_list: %s", list)
	}
	// A change request of a session out of scope is not found either.
	r.cliOut(nil, "sandbox", "exec", cli, "--", "sh", "-c", "echo x > x.txt")
	crCLI := r.cliOut(nil, "cr", "create", cli, "-q")
	toolErr(t, cs, "cr_show", map[string]any{"change_request": crCLI}, "not found")
	// A new server (a client that starts one per call) picks up where the
	// last left off.
	cs.Close()
	again := r.stdio(nil, nil)
	ok(t, again, "sandbox_exec", map[string]any{"session": id, "command": "true"})
}

// Malformed JSON-RPC gets a protocol error and the server keeps serving.
func TestMCPMalformedMessages(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	c := r.cli(nil, "mcp")
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = &testLog{t: t, prefix: "server: "}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	defer in.Close()
	out := bufio.NewReader(outPipe)
	send := func(line string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(in, line+"\n"); err != nil {
			t.Fatal(err)
		}
		l, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("after %.80q: %v", line, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("reply %q: %v", l, err)
		}
		return m
	}
	if m := send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	for _, c := range []struct {
		line string
		code float64
		id   any
	}{
		{`this is not json`, -32700, nil},
		{`{"jsonrpc":"2.0","id":2,"method":`, -32700, nil},
		{`[{"jsonrpc":"2.0","id":3,"method":"tools/list"}]`, -32600, nil},
		{`{"jsonrpc":"1.0","id":4,"method":"tools/list"}`, -32600, float64(4)},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`, -32600, nil},
		{`{"jsonrpc":"2.0","id":5,"method":"no/such/method"}`, -32601, float64(5)},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"no_such_tool"}}`, -32602, float64(7)},
	} {
		m := send(c.line)
		e, _ := m["error"].(map[string]any)
		if e == nil || e["code"] != c.code || m["id"] != c.id {
			t.Errorf("%s: %v; want error %v with id %v", c.line, m, c.code, c.id)
		}
	}
	// Arguments that are no object: a tool error saying so.
	if m := send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"sandbox_list","arguments":"not an object"}}`); str(m, "result", "isError") != "true" {
		t.Errorf("arguments that are no object: %v", m)
	}
	// A line over the limit (100 MB of content) is refused by its id, and
	// the server reads on.
	big := `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"file_write","arguments":{"session":"sbx_x","path":"big","content":"` +
		strings.Repeat("a", 100<<20) + `"}}}`
	if m := send(big); m["id"] != float64(8) || !strings.Contains(str(m, "error", "message"), "longer than") {
		t.Fatalf("a 100 MB message: %.300v", m)
	}
	if m := send(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`); m["result"] == nil {
		t.Fatalf("tools/list after all that: %v", m)
	}
}

// Over HTTP every request needs the token: none or a wrong one is 401.
func TestMCPHTTPToken(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	endpoint, token := r.httpServer(nil)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	post := func(auth string) *http.Response {
		req, _ := http.NewRequest("POST", endpoint, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	for _, auth := range []string{"", "Bearer ", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token} {
		if res := post(auth); res.StatusCode != http.StatusUnauthorized || !strings.Contains(res.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: %s", auth, res.Status)
		}
	}
	if res := post("Bearer " + token); res.StatusCode != http.StatusOK {
		t.Fatalf("the right token: %s", res.Status)
	}
	// A client with a wrong token cannot connect; with the right one it can.
	client := mcp.NewClient(&mcp.Implementation{Name: "x", Version: "0"}, nil)
	if _, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{"wrong"}}, MaxRetries: -1}, nil); err == nil {
		t.Fatal("a client with a wrong token connected")
	}
	ok(t, r.httpClient(endpoint, token, nil), "sandbox_list", nil)
	// XMODE_MCP_TOKEN chooses it; one too short is refused; --listen is
	// loopback unless --allow-remote names another address.
	e2, _ := r.httpServer([]string{"XMODE_MCP_TOKEN=a-token-chosen-by-the-user"})
	ok(t, r.httpClient(e2, "a-token-chosen-by-the-user", nil), "sandbox_list", nil)
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"XMODE_MCP_TOKEN=short"}, []string{"--listen", "127.0.0.1:0"}, "at least 16"},
		{nil, []string{"--listen", ":0"}, "every interface"},
		{nil, []string{"--listen", "0.0.0.0:0"}, "--allow-remote"},
		{nil, []string{"--allow-remote"}, "goes with --listen"},
	} {
		c2 := r.cli(c.env, append([]string{"mcp"}, c.args...)...)
		out, err := c2.CombinedOutput()
		if c2.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("mcp %v: %v %s; want exit 2 saying %q", c.args, err, out, c.want)
		}
	}
}

// A cancelled call ends the step's processes as Ctrl-C does (SIGINT: exit
// 130), and the step is recorded; progress comes while a step runs.
func TestMCPCancelAndProgress(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			r := newMCPRig(t)
			progress := make(chan string, 100)
			opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
				select {
				case progress <- req.Params.Message:
				default:
				}
			}}
			var cs *mcp.ClientSession
			if transport == "stdio" {
				cs = r.stdio(opts, nil)
			} else {
				e, tok := r.httpServer(nil)
				cs = r.httpClient(e, tok, opts)
			}
			created := ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo})
			id, wt := str(created, "session", "id"), str(created, "session", "worktree")

			// Progress: the step waits for a file the test makes once the
			// first notification has come.
			params := &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"session": id,
				"command": "echo started; while [ ! -e go ]; do sleep 0.05; done; echo done"}}
			params.SetProgressToken("p1")
			done := make(chan *mcp.CallToolResult, 1)
			go func() {
				res, err := cs.CallTool(context.Background(), params)
				if err != nil {
					t.Errorf("exec with progress: %v", err)
				}
				done <- res
			}()
			select {
			case msg := <-progress:
				if !strings.Contains(msg, "running for") {
					t.Errorf("progress %q", msg)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("no progress notification while the step ran")
			}
			os.WriteFile(filepath.Join(wt, "go"), nil, 0o644)
			if res := <-done; res == nil || res.IsError || !strings.Contains(text(res), "started\ndone") {
				t.Fatalf("the step with progress: %v", res)
			}

			// Cancel.
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"session": id,
					"command": "sleep 300 & echo $! > bg.pid; echo $$ > fg.pid; wait"}})
				errc <- err
			}()
			pids := waitPids(t, filepath.Join(wt, "fg.pid"), filepath.Join(wt, "bg.pid"))
			cancel()
			if err := <-errc; err == nil {
				t.Fatal("a cancelled call returned no error")
			}
			deadline := time.Now().Add(30 * time.Second)
			for _, pid := range pids {
				for alive(pid) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if alive(pid) {
					t.Fatalf("process %d of the cancelled step still runs", pid)
				}
			}
			var st map[string]any
			for time.Now().Before(deadline) {
				if st = ok(t, cs, "step_status", map[string]any{"session": id, "step": 2}); str(st, "state") == "finished" {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if str(st, "exit_code") != "130" || str(st, "signal") != "SIGINT" {
				t.Fatalf("the cancelled step: %v; want exit 130 by SIGINT, as Ctrl-C", st)
			}
		})
	}
}

// waitPids waits for files that hold a process ID each.
func waitPids(t *testing.T, files ...string) []int {
	t.Helper()
	var pids []int
	deadline := time.Now().Add(60 * time.Second)
	for _, f := range files {
		for {
			b, _ := os.ReadFile(f)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				pids = append(pids, pid)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no pid in %s", f)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return pids
}

// A 10 MB output comes back cut to the cap, saying so and where the rest
// is; the evidence has all of it.
func TestMCPOutputCapped(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	cs := r.stdio(nil, nil)
	id := str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	res, out := call(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "head -c 10485760 /dev/zero | tr '\\0' x; echo; echo the-end"})
	stdout := str(out, "stdout")
	if res.IsError || str(out, "stdout_bytes") != "10485769" || str(out, "cut") != "true" || len(stdout) > 65536+200 ||
		!strings.HasSuffix(stdout, "the-end\n") || !strings.Contains(stdout, "left out here") {
		t.Fatalf("10 MB of output: isError %v, %d bytes back, stdout_bytes %s, cut %s", res.IsError, len(stdout), str(out, "stdout_bytes"), str(out, "cut"))
	}
	if t2 := text(res); !strings.Contains(t2, "output cut to 65536 bytes") || !strings.Contains(t2, str(out, "stdout_path")) {
		t.Fatalf("the text does not say the cap and where the log is: %.500s", t2)
	}
	if st, err := os.Stat(str(out, "stdout_path")); err != nil || st.Size() != 10485769 {
		t.Fatalf("the evidence's log: %v %v", st, err)
	}
	lg := ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "offset": 10485760})
	if str(lg, "content") != "\nthe-end\n" {
		t.Fatalf("step_logs at the end: %v", lg)
	}
}

// One client's many concurrent calls: every one answered, each step its
// own number, the store shared (the server runs with -race under `go test
// -race`: this binary is it).
func TestMCPConcurrentCalls(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	cs := r.stdio(nil, nil)
	id := str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	const n = 24
	var wg sync.WaitGroup
	steps := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			var out map[string]any
			switch i % 3 {
			case 0:
				out = ok(t, cs, "sandbox_exec", map[string]any{"session": id, "command": fmt.Sprintf("echo %d > f%d.txt; cat f%d.txt", i, i, i)})
				if strings.TrimSpace(str(out, "stdout")) != strconv.Itoa(i) {
					t.Errorf("exec %d: %v", i, out)
				}
			case 1:
				out = ok(t, cs, "file_write", map[string]any{"session": id, "path": fmt.Sprintf("w/%d.txt", i), "content": strconv.Itoa(i)})
			default:
				out = ok(t, cs, "file_read", map[string]any{"session": id, "path": "README"})
			}
			steps <- str(out, "step")
			ok(t, cs, "sandbox_show", map[string]any{"session": id})
		})
	}
	wg.Wait()
	close(steps)
	seen := map[string]bool{}
	for s := range steps {
		if seen[s] {
			t.Errorf("step %s twice", s)
		}
		seen[s] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct steps, want %d", len(seen), n)
	}
}

// Hostile input through every tool: paths out of the worktree, links and
// FIFOs an earlier step planted, NUL bytes, content past the limit, shell
// metacharacters (which run in the sandbox only: a docker sandbox here).
func TestMCPHostileInput(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	cs := r.stdio(nil, nil)
	id := str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	outside := filepath.Join(r.dir, "outside.txt")
	os.WriteFile(outside, []byte("outside\n"), 0o644)
	ok(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "ln -s " + outside + " out; ln -s " + r.dir + " outdir; ln -s .git g; mkfifo fifo"})
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"file_read", map[string]any{"path": "../../../outside.txt"}, `".." would leave the worktree`},
		{"file_read", map[string]any{"path": outside}, "is absolute"},
		{"file_read", map[string]any{"path": "out"}, "symbolic link"},
		{"file_read", map[string]any{"path": "outdir/outside.txt"}, "symbolic link"},
		{"file_read", map[string]any{"path": "g/config"}, "symbolic link"},
		{"file_read", map[string]any{"path": "fifo"}, "a FIFO"},
		{"file_read", map[string]any{"path": ".git/config"}, "in .git"},
		{"file_read", map[string]any{"path": "README\x00.txt"}, "NUL byte"},
		{"file_list", map[string]any{"path": "outdir"}, "symbolic link"},
		{"file_list", map[string]any{"path": "../"}, "would leave"},
		{"file_write", map[string]any{"path": "out", "content": "pwned"}, "symbolic link"},
		{"file_write", map[string]any{"path": "outdir/outside.txt", "content": "pwned"}, "symbolic link"},
		{"file_write", map[string]any{"path": "g/hooks/pre-commit", "content": "#!/bin/sh"}, "symbolic link"},
		{"file_write", map[string]any{"path": ".git/hooks/pre-commit", "content": "#!/bin/sh"}, "in .git"},
		{"file_write", map[string]any{"path": "/tmp/pwned", "content": "x"}, "is absolute"},
		{"file_write", map[string]any{"path": "fifo", "content": "x"}, "a FIFO"},
		{"file_write", map[string]any{"path": "a\x00b", "content": "x"}, "NUL byte"},
		{"file_write", map[string]any{"path": "big", "content": strings.Repeat("x", 9<<20)}, "at most 8388608"},
		{"file_edit", map[string]any{"path": "out", "old_string": "outside", "new_string": "pwned"}, "symbolic link"},
		{"file_edit", map[string]any{"path": "../outside.txt", "old_string": "outside", "new_string": "pwned"}, "would leave"},
		{"file_delete", map[string]any{"path": "outdir/outside.txt"}, "symbolic link"},
		{"file_delete", map[string]any{"path": ".."}, "would leave"},
		{"file_delete", map[string]any{"path": ".git"}, "in .git"},
		{"sandbox_exec", map[string]any{"command": "true", "workdir": "outdir"}, "escapes the worktree"},
		{"sandbox_exec", map[string]any{"command": "a\x00b"}, "NUL byte"},
		{"step_logs", map[string]any{"step": 1, "offset": -5}, "0 or more"},
	} {
		c.args["session"] = id
		toolErr(t, cs, c.tool, c.args, c.want)
	}
	// The diff and a change request of a worktree holding those links and
	// the FIFO record the links as links, never what they point to, and do
	// not block on the FIFO.
	df := ok(t, cs, "sandbox_diff", map[string]any{"session": id})
	if p := str(df, "patch"); !strings.Contains(p, "new file mode 120000") || strings.Contains(p, "+outside") {
		t.Fatalf("sandbox_diff of planted links: %s", p)
	}
	cr := ok(t, cs, "cr_create", map[string]any{"session": id, "title": "links"})
	if p := str(ok(t, cs, "cr_show", map[string]any{"change_request": str(cr, "id"), "patch": true}), "patch"); strings.Contains(p, "+outside") {
		t.Fatalf("a change request followed a planted link: %s", p)
	}
	// Deleting the links removes the links, never what they point to.
	ok(t, cs, "file_delete", map[string]any{"session": id, "path": "out"})
	ok(t, cs, "file_delete", map[string]any{"session": id, "path": "outdir", "recursive": true})
	if b, err := os.ReadFile(outside); err != nil || string(b) != "outside\n" {
		t.Fatalf("the file outside the worktree: %q %v", b, err)
	}
	// NUL bytes in content are content; metacharacters in a path are a name.
	ok(t, cs, "file_write", map[string]any{"session": id, "path": "nul.bin", "content": "a\x00b"})
	weird := "a;b $(touch pwned) `id` | & > <.txt"
	ok(t, cs, "file_write", map[string]any{"session": id, "path": weird, "content": "x"})
	if ls := str(ok(t, cs, "file_list", map[string]any{"session": id}), "entries"); !strings.Contains(ls, "$(touch pwned)") || strings.Contains(ls, `"pwned"`) {
		t.Fatalf("a path with metacharacters: %s", ls)
	}
	// argv passes metacharacters to the program as they are.
	if out := ok(t, cs, "sandbox_exec", map[string]any{"session": id, "argv": []string{"echo", "$(id)", ";", "rm", "-rf", "/"}}); str(out, "stdout") != "$(id) ; rm -rf /\n" {
		t.Fatalf("argv with metacharacters: %v", out)
	}

	// In a docker sandbox a shell line's metacharacters run in the
	// container: what it writes to /tmp is not this machine's.
	dockertest.Require(t)
	img := dockertest.Image(t)
	dk := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img, "XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}
	dcs := r.stdio(nil, dk)
	did := str(ok(t, dcs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	marker := "/tmp/xmode-mcp-meta-" + strconv.Itoa(os.Getpid())
	out := ok(t, dcs, "sandbox_exec", map[string]any{"session": did, "command": "echo $(echo sub) && touch " + marker + " && ls " + marker + "; echo `echo tick` | cat"})
	if str(out, "stdout") != "sub\n"+marker+"\ntick\n" {
		t.Fatalf("metacharacters in a docker sandbox: %v", out)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		os.Remove(marker)
		t.Fatalf("a docker sandbox's shell line wrote %s on this machine", marker)
	}
	if warn := str(ok(t, dcs, "sandbox_show", map[string]any{"session": did}), "session", "engine"); warn != "docker" {
		t.Fatalf("engine %s", warn)
	}
}

// A background step: sandbox_exec returns it running at once; step_status
// and step_logs read it while it runs, a later step reaches it, step_kill
// ends its processes (TERM: 143) and the step is recorded as killed;
// sandbox_stop ends another and records it stopped.
func TestMCPBackgroundSteps(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	cs := r.stdio(nil, nil)
	created := ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo})
	id, wt := str(created, "session", "id"), str(created, "session", "worktree")

	// A server of a kind: it answers each request file the later steps
	// drop in its inbox, until it is ended. Its answer appears whole (made
	// aside, then renamed): the asking step reads it as soon as it exists.
	bg := ok(t, cs, "sandbox_exec", map[string]any{"session": id, "background": true, "name": "server",
		"command": "mkdir -p inbox; echo $$ > srv.pid; echo ready; while :; do for f in inbox/*.req; do [ -e \"$f\" ] && { echo \"answer to $(cat \"$f\")\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f.out\"; echo \"served $f\"; rm \"$f\"; }; done; sleep 0.02; done"})
	if str(bg, "step") != "1" || str(bg, "state") != "running" || str(bg, "exit_code") != "" || str(bg, "background") != "true" ||
		!strings.Contains(str(bg, "follow_along"), "sandbox logs "+id+" 1 --follow") {
		t.Fatalf("a background sandbox_exec: %v", bg)
	}
	srv := waitPids(t, filepath.Join(wt, "srv.pid"))[0]
	t.Cleanup(func() { syscall.Kill(srv, syscall.SIGKILL) })

	// Status and logs while it runs.
	deadline := time.Now().Add(60 * time.Second)
	var lg map[string]any
	for {
		lg = ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "offset": 0})
		if str(lg, "content") == "ready\n" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if str(lg, "content") != "ready\n" || str(lg, "state") != "running" || str(lg, "eof") != "false" {
		t.Fatalf("step_logs of the running step: %v", lg)
	}
	st := ok(t, cs, "step_status", map[string]any{"session": id, "step": 1})
	if str(st, "state") != "running" || str(st, "running") != "true" || str(st, "exit_code") != "" || str(st, "background") != "true" || str(st, "stdout_bytes") != "6" {
		t.Fatalf("step_status of the running step: %v", st)
	}
	// A later step is served by it, and its logs go on from where the last
	// read stopped.
	ex := ok(t, cs, "sandbox_exec", map[string]any{"session": id,
		"timeout_seconds": 60, "command": "echo hello > inbox/q.tmp && mv inbox/q.tmp inbox/q.req; while [ ! -e inbox/q.req.out ]; do sleep 0.02; done; cat inbox/q.req.out"})
	if str(ex, "stdout") != "answer to hello\n" || str(ex, "step") != "2" {
		t.Fatalf("a later step served by the background one: %v", ex)
	}
	var more map[string]any
	for {
		more = ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "offset": lg["next_offset"]})
		if str(more, "content") != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if str(more, "content") != "served inbox/q.req\n" || str(more, "offset") != "6" {
		t.Fatalf("step_logs from next_offset: %v", more)
	}
	if tail := ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "tail": 7}); str(tail, "content") != "/q.req\n" {
		t.Fatalf("step_logs tail: %v", tail)
	}

	// Kill: a bad signal and a step that is not running are refused.
	toolErr(t, cs, "step_kill", map[string]any{"session": id, "step": 1, "signal": "STOP"}, "invalid input: signal \"STOP\"")
	toolErr(t, cs, "step_kill", map[string]any{"session": id, "step": 2}, "refused: step 2 (")
	toolErr(t, cs, "step_kill", map[string]any{"session": id, "step": 9}, "not found")
	k := ok(t, cs, "step_kill", map[string]any{"session": id, "step": 1})
	if str(k, "state") != "finished" || str(k, "exit_code") != "143" || str(k, "stopped_by") != "sandbox kill" || str(k, "running") != "false" {
		t.Fatalf("step_kill: %v", k)
	}
	waitGone(t, srv, "the killed background step's shell")
	if st := ok(t, cs, "step_status", map[string]any{"session": id, "step": 1}); str(st, "state") != "finished" || str(st, "exit_code") != "143" || str(st, "stopped_by") != "sandbox kill" {
		t.Fatalf("step_status after step_kill: %v", st)
	}
	if end := ok(t, cs, "step_logs", map[string]any{"session": id, "step": 1, "offset": 0}); str(end, "eof") != "true" {
		t.Fatalf("step_logs of the killed step: %v", end)
	}
	toolErr(t, cs, "step_kill", map[string]any{"session": id, "step": 1}, "is not running (finished: exit 143)")

	// sandbox_stop ends a background step (no force needed) and records it.
	ok(t, cs, "sandbox_exec", map[string]any{"session": id, "background": true, "command": "echo $$ > long.pid; exec sleep 300"})
	long := waitPids(t, filepath.Join(wt, "long.pid"))[0]
	t.Cleanup(func() { syscall.Kill(long, syscall.SIGKILL) })
	ok(t, cs, "sandbox_stop", map[string]any{"session": id})
	waitGone(t, long, "the background step of a stopped sandbox")
	var shown struct {
		Steps []struct {
			Seq       int    `json:"seq"`
			State     string `json:"state"`
			StoppedBy string `json:"stopped_by"`
		} `json:"steps"`
	}
	json.Unmarshal([]byte(r.cliOut(nil, "sandbox", "show", id, "--json")), &shown)
	if n := len(shown.Steps); n != 3 || shown.Steps[2].State == "running" || shown.Steps[2].StoppedBy != "sandbox stop" {
		t.Fatalf("the background step of a stopped sandbox: %+v", shown.Steps)
	}
}

// sandbox_create: the repository defaults to the client's root, else the
// server's working directory; uncommitted changes left out are a warning;
// a repository that would make git run a program on this machine (a remote
// helper) is refused; an MCP session counts against the user's quota.
func TestMCPCreate(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t, "XMODE_SANDBOX_MAX_OPEN=2")
	// The server runs in r.repo (cli's Dir); the client's root is another
	// repository.
	other := filepath.Join(r.dir, "other")
	if err := makeRepo(other); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(other, "README"), []byte("changed, not committed\n"), 0o644)
	client := mcp.NewClient(&mcp.Implementation{Name: "rooted", Version: "2"}, nil)
	client.AddRoots(&mcp.Root{URI: "file://" + other, Name: "other"})
	c := r.cli(nil, "mcp")
	c.Stderr = &testLog{t: t, prefix: "server: "}
	rooted, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rooted.Close() })
	made := ok(t, rooted, "sandbox_create", nil)
	if str(made, "session", "repository") != other {
		t.Fatalf("a client with a root: the sandbox is of %s, want %s", str(made, "session", "repository"), other)
	}
	if w := str(made, "warnings"); !strings.Contains(w, "uncommitted") {
		t.Fatalf("uncommitted changes left out are not a warning: %s", w)
	}
	cs := r.stdio(nil, nil)
	plain := ok(t, cs, "sandbox_create", nil)
	if str(plain, "session", "repository") != r.repo || strings.Contains(str(plain, "warnings"), "uncommitted") {
		t.Fatalf("a client without roots: %v", plain)
	}
	// The third open session is over XMODE_SANDBOX_MAX_OPEN=2.
	toolErr(t, cs, "sandbox_create", nil, "refused")

	// A remote helper runs git-remote-NAME from PATH: planted here, it must
	// never run.
	bin := filepath.Join(r.dir, "bin")
	os.MkdirAll(bin, 0o755)
	marker := filepath.Join(r.dir, "helper-ran")
	os.WriteFile(filepath.Join(bin, "git-remote-pwn"), []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755)
	hs := r.stdio(nil, []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "XMODE_SANDBOX_MAX_OPEN=0"})
	for repo, want := range map[string]string{
		"pwn::anything":          "remote helper",
		"pwn://host/x":           "not a transport of git's own",
		"ext::sh -c touch% /tmp": "remote helper",
	} {
		toolErr(t, hs, "sandbox_create", map[string]any{"repository": repo}, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a repository named by the client ran a program on this machine")
	}
}

// Over HTTP a request past the body limit (100 MB of file content) is
// refused with a client error and the server serves on.
func TestMCPHTTPOversizedRequest(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	endpoint, token := r.httpServer(nil)
	cs := r.httpClient(endpoint, token, nil)
	id := str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	body := io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"file_write","arguments":{"session":"`+id+`","path":"big","content":"`),
		io.LimitReader(repeatReader('a'), 100<<20), strings.NewReader(`"}}}`))
	req, _ := http.NewRequest("POST", endpoint, body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", cs.ID())
	res, err := http.DefaultClient.Do(req)
	if err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode < 400 || res.StatusCode >= 500 {
			t.Fatalf("a 100 MB request: %s; want a client error", res.Status)
		}
	} // else: the server closed the connection on it, which is a refusal too
	if _, err := os.Stat(filepath.Join(r.root, "runs")); err == nil {
		if m, _ := filepath.Glob(filepath.Join(r.root, "runs", "*", "worktree", "big")); len(m) > 0 {
			t.Fatalf("the oversized write reached the worktree: %v", m)
		}
	}
	ok(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "true"})
}

// repeatReader reads as the byte it is, endlessly.
type repeatReader byte

func (b repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// A client of an older protocol (2025-06-18) is asked for its roots by a
// request of the server's own while sandbox_create runs; its answer names
// the repository.
func TestMCPRootsOlderProtocol(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	other := filepath.Join(r.dir, "other")
	if err := makeRepo(other); err != nil {
		t.Fatal(err)
	}
	_, in, out := r.rawStdio()
	read := func() map[string]any {
		t.Helper()
		l, err := out.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal([]byte(l), &m)
		return m
	}
	io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"old","version":"1"}}}`+"\n")
	if m := read(); str(m, "result", "protocolVersion") != "2025-06-18" {
		t.Fatalf("initialize: %v", m)
	}
	io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	io.WriteString(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_create","arguments":{}}}`+"\n")
	ask := read()
	if ask["method"] != "roots/list" || ask["id"] == nil {
		t.Fatalf("the server did not ask for roots: %v", ask)
	}
	id, _ := json.Marshal(ask["id"])
	io.WriteString(in, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"roots":[{"uri":"file://`+other+`"}]}}`+"\n")
	res := read()
	if str(res, "result", "structuredContent", "session", "repository") != other {
		t.Fatalf("sandbox_create with the client's root: %v", res)
	}
	// A client that fails to say its roots gets a sandbox of the server's
	// directory, not an error.
	io.WriteString(in, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_create","arguments":{}}}`+"\n")
	ask = read()
	id, _ = json.Marshal(ask["id"])
	io.WriteString(in, `{"jsonrpc":"2.0","id":`+string(id)+`,"error":{"code":-32603,"message":"no roots here"}}`+"\n")
	if res = read(); str(res, "result", "isError") == "true" || str(res, "result", "structuredContent", "session", "repository") != r.repo {
		t.Fatalf("sandbox_create when the client fails to say its roots: %v", res)
	}
}
