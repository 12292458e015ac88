package codexcloud

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
)

func TestMain(m *testing.M) {
	codexcloudtest.Dispatch()
	os.Exit(m.Run())
}

// codex 0.171's text status, colours and all, and the JSON Result, read
// into one shape.
func TestParseStatus(t *testing.T) {
	cases := []struct {
		name, out string
		want      Result
	}{
		{"ready", "[READY] Fix the flaky test\nenv_1  •  3m ago\n+12/-3 • 2 files\n",
			Result{State: Ready, Title: "Fix the flaky test", Summary: "+12/-3 • 2 files"}},
		{"pending", "[PENDING] Add docs\nmy-env  •  10s ago\nno diff\n",
			Result{State: Pending, Title: "Add docs", Summary: "no diff"}},
		{"error", "[ERROR] Broken\nenv  •  1h ago\nno diff\n",
			Result{State: Failed, Title: "Broken", Summary: "no diff", Error: "codex cloud reports the task failed: [ERROR] Broken"}},
		{"applied", "[APPLIED] Done\nenv  •  Jan 2 15:04\n+1/-0 • 1 file\n",
			Result{State: Ready, Title: "Done", Summary: "+1/-0 • 1 file"}},
		{"colours", "[\x1b[32mREADY\x1b[0m] Coloured\n\x1b[2menv\x1b[0m  •  1s ago\n\x1b[32m+1\x1b[0m/\x1b[31m-2\x1b[0m  •  1 file\n",
			Result{State: Ready, Title: "Coloured", Summary: "+1/-2  •  1 file"}},
		{"json", `{"state":"running","title":"T","summary":"s","transcript":["a","b"],"error":"","extra":1}`,
			Result{State: Running, Title: "T", Summary: "s", Transcript: []string{"a", "b"}}},
		{"json failed", ` {"state":"failed","title":"T","error":"tests failed"}` + "\n",
			Result{State: Failed, Title: "T", Error: "tests failed"}},
	}
	for _, c := range cases {
		got, ok, err := parseStatus([]byte(c.out))
		if err != nil || !ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v ok=%v err=%v\nwant %+v", c.name, got, ok, err, c.want)
		}
	}
	for _, out := range []string{"", "Error: something\n", "READY Fix\n", "[DONE] x\n"} {
		if _, ok, err := parseStatus([]byte(out)); ok || err != nil {
			t.Errorf("%q: understood (ok=%v, err=%v)", out, ok, err)
		}
	}
	for _, out := range []string{`{"state":"done"}`, `{"state":`, `{"state":"READY"}`} {
		if _, ok, err := parseStatus([]byte(out)); ok || err == nil {
			t.Errorf("%q: accepted as a Result", out)
		}
	}
}

func TestTaskIDs(t *testing.T) {
	for _, id := range []string{"task_e_68a1b2c3d4e5f60718293a4b5c6d7e8f", "abc", "T-1"} {
		if !ValidTaskID(id) {
			t.Errorf("%q refused", id)
		}
	}
	for _, id := range []string{"", "-rf", "_x", "a b", "a/b", "../x", "a;b", "$(id)", strings.Repeat("a", 129)} {
		if ValidTaskID(id) {
			t.Errorf("%q accepted", id)
		}
	}
	// The URL codex prints, the first one when there are several.
	cases := map[string]string{
		"https://chatgpt.com/codex/tasks/task_e_123\n":                                       "task_e_123",
		"Reading query from stdin...\nhttps://chatgpt.com/codex/tasks/abc\n":                 "abc",
		"Task: https://chatgpt.com/codex/tasks/first \nhttps://chatgpt.com/codex/tasks/last": "first",
		"see https://evil.example/codex/tasks/bad\nhttps://chatgpt.com/codex/tasks/good":     "good",
	}
	for out, want := range cases {
		if id, _, ok := taskIDFromURL([]byte(out)); !ok || id != want {
			t.Errorf("%q: %q %v, want %q", out, id, ok, want)
		}
	}
	// Any other host, path or shape is no task URL.
	for _, out := range []string{"", "done\n",
		"https://x.test/codex/tasks/abc\n", "http://chatgpt.com/codex/tasks/abc\n",
		"https://chatgpt.com.evil.example/codex/tasks/abc\n", "https://evil.example/?https://chatgpt.com/codex/tasks/abc\n",
		"https://chatgpt.com/x/codex/tasks/abc\n", "https://chatgpt.com/codex/tasks/abc?x=1\n", "https://chatgpt.com/codex/tasks/abc#f\n",
		"https://chatgpt.com/codex/tasks/abc/\n", "https://chatgpt.com/codex/tasks/../../etc\n", "https://chatgpt.com/codex/tasks/a%20b\n",
		"https://chatgpt.com/codex/tasks/\n", "xhttps://chatgpt.com/codex/tasks/abc\n"} {
		if id, _, ok := taskIDFromURL([]byte(out)); ok {
			t.Errorf("%q: took %q", out, id)
		}
	}
}

// Errors as codex 0.171 prints them (observed with the real CLI).
func TestClassify(t *testing.T) {
	warning := "WARNING: proceeding, even though we could not create PATH aliases: Refusing to create helper binaries under temporary dir \"/tmp\" (codex_home: AbsolutePathBuf(\"/tmp/x/.codex\"))\n"
	cases := []struct {
		name, stderr string
		class        Class
		want         string
	}{
		{"not signed in", warning + "Not signed in. Please run 'codex login' to sign in with ChatGPT, then re-run 'codex cloud'.\n",
			Permanent, "codex login"},
		{"status unreachable", "Error: http error: get_task_details failed: error sending request for url (https://chatgpt.com/backend-api/wham/tasks/abc)\n\nStack backtrace:\n   0: <unknown>\n",
			Transient, "get_task_details failed"},
		{"exec unreachable", "Error: error sending request for url (https://chatgpt.com/backend-api/wham/environments)\n\nCaused by:\n    0: client error (Connect)\n",
			Transient, "unreachable"},
		{"unknown", warning + "Error: environment 'nope' not found; run `codex cloud` to list available environments\n\nStack backtrace:\n",
			Permanent, "environment 'nope' not found"},
	}
	for _, c := range cases {
		e := classify("codex cloud status abc", 1, nil, []byte(c.stderr), fixStatus)
		if e.Class != c.class || !strings.Contains(e.Error(), c.want) {
			t.Errorf("%s: %v %q", c.name, e.Class, e.Error())
		}
	}
	// Output nobody understood is kept, bounded.
	e := classify("op", 3, []byte("weird\n"+strings.Repeat("x", 5000)), nil, "")
	if e.Class != Permanent || !strings.HasPrefix(e.Raw, "weird") || len(e.Raw) > maxRaw+10 || !strings.Contains(e.Error(), "exit 3") {
		t.Errorf("unknown output: %+v", e)
	}
}

// The status command is a template split into argv, never a shell line, and
// a task ID is checked before it goes in.
func TestStatusArgv(t *testing.T) {
	c := &CLI{Bin: "/opt/codex", StatusCommand: "codex cloud status {task_id}"}
	if got, _ := c.StatusArgv("task_e_1"); !reflect.DeepEqual(got, []string{"/opt/codex", "cloud", "status", "task_e_1"}) {
		t.Errorf("default: %q", got)
	}
	c.StatusCommand = "  /usr/local/bin/status-wrapper   --task={task_id} --json "
	if got, _ := c.StatusArgv("abc"); !reflect.DeepEqual(got, []string{"/usr/local/bin/status-wrapper", "--task=abc", "--json"}) {
		t.Errorf("custom: %q", got)
	}
	for _, id := range []string{"$(touch /tmp/x)", "a b", "-h", ""} {
		if _, err := c.StatusArgv(id); err == nil {
			t.Errorf("task ID %q accepted", id)
		}
	}
	c.StatusCommand = "codex cloud status"
	if _, err := c.StatusArgv("abc"); err == nil {
		t.Error("a template without {task_id} accepted")
	}
}

func TestBackoff(t *testing.T) {
	want := []string{"30s", "1m0s", "2m0s", "4m0s", "5m0s", "5m0s"}
	for i, w := range want {
		if got := backoff(i + 1).String(); got != w {
			t.Errorf("backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
}
