package agents

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
)

// feed writes the stream to a parser in chunks of n bytes, as a pipe may
// cut it, and returns the summary and events.jsonl.
func feed(t *testing.T, kind, dir, stream string, n int, st engine.Status) (*evidence.Agent, string) {
	t.Helper()
	var events bytes.Buffer
	p := newParser(kind, dir, "missing!", &events)
	for b := []byte(stream); len(b) > 0; {
		k := min(n, len(b))
		p.Write(b[:k])
		b = b[k:]
	}
	return p.Summary(st), events.String()
}

// The codex shapes are those of codex-rs/exec/src/exec_events.rs.
const codexRun = `{"type":"thread.started","thread_id":"t1"}
{"type":"turn.started"}
not json: codex's own warning line
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"thinking"}}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"a\nb\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"/wt/src/a.go","kind":"update"},{"path":"docs/new.md","kind":"add"},{"path":"/wt/src/a.go","kind":"update"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"first"}}
{"type":"turn.completed","usage":{"input_tokens":1200,"cached_input_tokens":200,"output_tokens":345}}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_4","type":"agent_message","text":"Done: tests pass."}}
{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":5}}`

func TestCodexEvents(t *testing.T) {
	for _, n := range []int{1, 7, 4096} {
		sum, events := feed(t, Codex, "/wt", codexRun, n, engine.Status{})
		want := &evidence.Agent{Kind: Codex, FinalMessage: "Done: tests pass.", Commands: []string{"bash -lc ls"},
			FilesChanged: []string{"src/a.go", "docs/new.md"}, Tokens: &evidence.Tokens{Input: 1210, Output: 350}, Events: 11}
		if !reflect.DeepEqual(sum, want) {
			t.Fatalf("chunks of %d: summary\n%+v, want\n%+v", n, sum, want)
		}
		if strings.Contains(events, "not json") || strings.Count(events, "\n") != 11 {
			t.Fatalf("events.jsonl must hold the 11 JSON lines only:\n%s", events)
		}
	}
}

func TestCodexWithoutNetwork(t *testing.T) {
	// Real output of codex 0.171.0 not signed in, no network, ended by a timeout.
	b, err := os.ReadFile("testdata/codex-no-network.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := feed(t, Codex, "/wt", string(b), 100, engine.Status{ExitCode: 124, TimedOut: true})
	// The summary is evidence every front end shows: it names no CLI flag.
	if !strings.HasPrefix(sum.Error, "stopped by its timeout; its last error: ") || !strings.Contains(sum.Error, "Reconnecting") ||
		strings.Contains(sum.Error, "--") || sum.Tokens != nil {
		t.Fatalf("summary: %+v", sum)
	}
}

func TestClaudeEvents(t *testing.T) {
	stream := `{"type":"system","subtype":"init","cwd":"/wt","apiKeySource":"ANTHROPIC_API_KEY"}
{"type":"assistant","message":{"content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"go test ./..."}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}
{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Edit","input":{"file_path":"/wt/main.go","old_string":"a","new_string":"b"}},{"type":"tool_use","id":"t3","name":"Write","input":{"file_path":"/wt/NEW.md","content":"x"}},{"type":"tool_use","id":"t4","name":"Read","input":{"file_path":"/wt/other.go"}}]}}
{"type":"result","subtype":"success","is_error":false,"result":"Fixed the bug.","usage":{"input_tokens":321,"output_tokens":45}}
`
	sum, _ := feed(t, Claude, "/wt", stream, 13, engine.Status{})
	want := &evidence.Agent{Kind: Claude, FinalMessage: "Fixed the bug.", Commands: []string{"go test ./..."},
		FilesChanged: []string{"main.go", "NEW.md"}, Tokens: &evidence.Tokens{Input: 321, Output: 45}, Events: 5}
	if !reflect.DeepEqual(sum, want) {
		t.Fatalf("summary\n%+v, want\n%+v", sum, want)
	}
}

func TestClaudeNotLoggedIn(t *testing.T) {
	// Real output of claude 2.1.197 not logged in (docs/agents.md, "Failing
	// clearly and fast").
	b, err := os.ReadFile("testdata/claude-not-logged-in.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := feed(t, Claude, "/tmp/wdir", string(b), 512, engine.Status{ExitCode: 1})
	if sum.Error != "Not logged in · Please run /login" || sum.Events != 3 {
		t.Fatalf("summary: %+v", sum)
	}
}

func TestMissingCLI(t *testing.T) {
	sum, events := feed(t, Claude, "/wt", "", 1, engine.Status{ExitCode: 127})
	if sum.Error != "missing!" || events != "" {
		t.Fatalf("a CLI that is not there: %+v %q", sum, events)
	}
}

func TestExpandKeepsEachElementOneArgument(t *testing.T) {
	got := expand([]string{"agent", "--in={prompt_file}", "{worktree}", "{session}{run}"}, map[string]string{
		"{worktree}": "/w t/{prompt_file}", "{prompt_file}": "/p; rm -rf /", "{session}": "sbx_a", "{run}": "run_b",
	})
	want := []string{"agent", "--in=/p; rm -rf /", "/w t/{prompt_file}", "sbx_arun_b"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("expand: %q, want %q", got, want)
	}
}

// show writes the stream to the terminal view in chunks of n bytes.
func show(kind, stream string, n int) string {
	var out bytes.Buffer
	l := newLive(kind, "/wt", &out)
	for b := []byte(stream); len(b) > 0; {
		k := min(n, len(b))
		l.Write(b[:k])
		b = b[k:]
	}
	l.flush()
	return out.String()
}

// The terminal gets an agent's events read for a person, never raw; lines
// that are not events pass as they are.
func TestLiveView(t *testing.T) {
	for _, n := range []int{1, 7, 4096} {
		got := show(Codex, codexRun, n)
		want := "not json: codex's own warning line\n$ bash -lc ls\nedited src/a.go\nadded docs/new.md\nedited src/a.go\nfirst\nDone: tests pass.\n"
		if got != want {
			t.Fatalf("codex, chunks of %d:\n%s\nwant\n%s", n, got, want)
		}
	}
	claude := `{"type":"system","subtype":"init","cwd":"/wt"}
{"type":"assistant","message":{"content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"go test ./..."}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}
{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Edit","input":{"file_path":"/wt/main.go"}}]}}
{"type":"result","subtype":"error_during_execution","is_error":true,"result":"API Error: 529 overloaded"}
plain text, no newline`
	if got, want := show(Claude, claude, 5), "Let me look.\n$ go test ./...\nedited main.go\nerror: API Error: 529 overloaded\nplain text, no newline"; got != want {
		t.Fatalf("claude:\n%s\nwant\n%s", got, want)
	}
	// Not signed in: nothing of claude's events; xmode's one line says it.
	b, err := os.ReadFile("testdata/claude-not-logged-in.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if got := show(Claude, string(b), 512); got != "" {
		t.Fatalf("claude not logged in reached the terminal as:\n%s", got)
	}
	var events bytes.Buffer
	p := newParser(Claude, "/wt", "", &events)
	p.Write(b)
	if p.Summary(engine.Status{ExitCode: 1}); !p.signIn {
		t.Fatal("the parser did not see claude's failed sign-in")
	}
	// codex without a network: its errors, once each as it said them.
	b, err = os.ReadFile("testdata/codex-no-network.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if got := show(Codex, string(b), 100); strings.Contains(got, `"type"`) || !strings.Contains(got, "error: ") {
		t.Fatalf("codex without a network:\n%s", got)
	}
}
