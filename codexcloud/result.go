package codexcloud

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// State is a task's state in the Result contract.
type State string

// The states of docs/codex-cloud.md, "States". pending and running are the
// task's; ready and failed are terminal.
const (
	Pending State = "pending"
	Running State = "running"
	Ready   State = "ready"
	Failed  State = "failed"
)

// Terminal reports whether the task is over.
func (s State) Terminal() bool { return s == Ready || s == Failed }

func (s State) valid() bool {
	switch s {
	case Pending, Running, Ready, Failed:
		return true
	}
	return false
}

// Result is what the client learns about a task, whatever the CLI version
// (docs/codex-cloud.md): the poller depends on this shape only.
type Result struct {
	State State  `json:"state"`
	Title string `json:"title"`
	// Summary is one line about the outcome (codex 0.171: "+12/-3 • 2 files").
	Summary string `json:"summary"`
	// Transcript is the task's whole transcript so far, oldest line first;
	// codex 0.171's text status has none.
	Transcript []string `json:"transcript"`
	// Error says why a failed task failed.
	Error string `json:"error"`
}

// Compiled on first use: a package-level regexp.MustCompile runs at every
// start of xmode.
var (
	ansi       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`) })
	statusLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\[(READY|PENDING|ERROR|APPLIED)\]\s?(.*)$`) })
)

// textStates maps codex 0.171's labels. It has no "running": PENDING covers
// a queued task and one at work. APPLIED means someone applied a finished
// task's diff: it finished, so it is ready here.
var textStates = map[string]State{"READY": Ready, "PENDING": Pending, "ERROR": Failed, "APPLIED": Ready}

// parseStatus reads a status command's stdout: the JSON Result when it is
// JSON, codex's text status otherwise. ok is false when it is neither; the
// exit code is not consulted, since codex exits 1 for every state but READY.
func parseStatus(stdout []byte) (Result, bool, error) {
	out := bytes.TrimSpace(stdout)
	if bytes.HasPrefix(out, []byte("{")) {
		var r Result
		dec := json.NewDecoder(bytes.NewReader(out))
		if err := dec.Decode(&r); err != nil {
			return Result{}, false, fmt.Errorf("the status command printed JSON that is not a Result: %v", err)
		}
		if !r.State.valid() {
			return Result{}, false, fmt.Errorf("the status command's JSON has state %q: want pending, running, ready or failed", r.State)
		}
		return r, true, nil
	}
	lines := textLines(out)
	if len(lines) == 0 {
		return Result{}, false, nil
	}
	m := statusLine().FindStringSubmatch(lines[0])
	if m == nil {
		return Result{}, false, nil
	}
	r := Result{State: textStates[m[1]], Title: strings.TrimSpace(m[2])}
	// Then the environment and a relative time ("3m ago"), which changes
	// with every call, then the diff summary: the summary is the last line.
	if len(lines) >= 3 {
		r.Summary = lines[len(lines)-1]
	}
	if r.State == Failed {
		r.Error = "codex cloud reports the task failed: " + lines[0]
	}
	return r, true, nil
}

// textLines splits output into trimmed, non-empty lines without colour codes.
func textLines(b []byte) []string {
	var out []string
	for _, l := range strings.Split(ansi().ReplaceAllString(string(b), ""), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// ValidTaskID reports whether s can be a Codex cloud task ID (task_e_ and
// hex, today): it goes on codex's command line and into paths, so nothing
// else is accepted.
func ValidTaskID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '_' || r == '-')
		if !ok {
			return false
		}
	}
	return true
}

// TaskURLPrefix is what the URL of a task that `codex cloud exec` prints
// starts with: codex builds it as <chatgpt.com>/codex/tasks/<task_id>.
const TaskURLPrefix = "https://chatgpt.com/codex/tasks/"

// taskIDFromURL takes the task ID from what `codex cloud exec` printed:
// the first word, on any line, that is a task URL of exactly codex's shape,
// TaskURLPrefix and a task ID. Another host, another path, a query or a
// fragment is not one: whatever else codex or the prompt it echoes prints
// cannot choose the task xmode follows.
func taskIDFromURL(stdout []byte) (id, url string, ok bool) {
	for _, line := range textLines(stdout) {
		for _, f := range strings.Fields(line) {
			if rest, ok := strings.CutPrefix(f, TaskURLPrefix); ok && ValidTaskID(rest) {
				return rest, f, true
			}
		}
	}
	return "", "", false
}
