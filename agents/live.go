package agents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
)

// live is what the terminal gets of an agent's stdout: each JSON event as
// a line a person reads (what the agent said, a command it ran, a file it
// changed) or nothing, and any other line as it is. The events themselves
// go to events.jsonl, never to the terminal. It sits behind the sandbox's
// live writer, so a slow terminal still never holds up the step.
type live struct {
	mu   sync.Mutex
	kind string
	dir  string // the worktree as the agent sees it: paths are shown relative to it
	w    io.Writer
	line []byte
}

func newLive(kind, dir string, w io.Writer) *live {
	return &live{kind: kind, dir: dir, w: w}
}

func (l *live) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(l.line)+len(b) > maxEventLine {
				// No event is this long: pass it on as text.
				_, err := l.w.Write(append(l.line, b...))
				l.line = l.line[:0]
				return n, err
			}
			l.line = append(l.line, b...)
			break
		}
		l.line = append(l.line, b[:i+1]...)
		if err := l.emit(); err != nil {
			return n, err
		}
		b = b[i+1:]
	}
	return n, nil
}

// flush shows a last line that came without its newline (an event, read
// for a person, on a line of its own).
func (l *live) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.line) > 0 {
		_ = l.emit()
	}
}

func (l *live) emit() error {
	line := l.line
	l.line = l.line[:0]
	t := bytes.TrimSpace(line)
	if len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		_, err := l.w.Write(line) // as it came, a last line without its newline included
		return err
	}
	var out []string
	if l.kind == Claude {
		out = claudeLines(t, l.dir)
	} else {
		out = codexLines(t, l.dir)
	}
	for _, s := range out {
		if s = strings.TrimRight(s, "\n"); s != "" {
			if _, err := fmt.Fprintln(l.w, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// codexLines reads an event of `codex exec --json` (and of a command agent
// that speaks it) for a person.
func codexLines(line []byte, dir string) []string {
	var ev struct {
		Type  string `json:"type"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
		Item    *struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Message  string `json:"message"`
			Command  string `json:"command"`
			ExitCode *int   `json:"exit_code"`
			Changes  []struct {
				Path string `json:"path"`
				Kind string `json:"kind"`
			} `json:"changes"`
		} `json:"item"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return nil
	}
	switch ev.Type {
	case "turn.failed":
		if ev.Error != nil {
			return []string{"error: " + ev.Error.Message}
		}
	case "error":
		return []string{"error: " + ev.Message}
	case "item.completed":
		if ev.Item == nil {
			return nil
		}
		switch ev.Item.Type {
		case "agent_message":
			return []string{ev.Item.Text}
		case "command_execution":
			s := "$ " + ev.Item.Command
			if ev.Item.ExitCode != nil && *ev.Item.ExitCode != 0 {
				s += fmt.Sprintf("  (exit %d)", *ev.Item.ExitCode)
			}
			return []string{s}
		case "file_change":
			var out []string
			for _, c := range ev.Item.Changes {
				out = append(out, changeVerb(c.Kind)+" "+inWorktree(dir, c.Path))
			}
			return out
		case "error":
			return []string{"error: " + ev.Item.Message}
		}
	}
	return nil
}

func changeVerb(kind string) string {
	switch kind {
	case "add":
		return "added"
	case "delete":
		return "deleted"
	}
	return "edited"
}

// claudeLines reads an event of claude's stream-json for a person. A failed
// sign-in is left to the one line xmode prints about it.
func claudeLines(line []byte, dir string) []string {
	var ev struct {
		Type    string `json:"type"`
		Error   string `json:"error"`
		Result  string `json:"result"`
		IsError bool   `json:"is_error"`
		Message *struct {
			Content []struct {
				Type  string `json:"type"`
				Text  string `json:"text"`
				Name  string `json:"name"`
				Input struct {
					Command      string `json:"command"`
					FilePath     string `json:"file_path"`
					NotebookPath string `json:"notebook_path"`
				} `json:"input"`
			} `json:"content"`
		} `json:"message"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return nil
	}
	switch ev.Type {
	case "assistant":
		if ev.Message == nil || ev.Error != "" {
			return nil
		}
		var out []string
		for _, c := range ev.Message.Content {
			switch {
			case c.Type == "text":
				out = append(out, c.Text)
			case c.Type == "tool_use" && c.Name == "Bash":
				out = append(out, "$ "+c.Input.Command)
			case c.Type == "tool_use" && (c.Name == "Edit" || c.Name == "MultiEdit" || c.Name == "Write"):
				out = append(out, "edited "+inWorktree(dir, c.Input.FilePath))
			case c.Type == "tool_use" && c.Name == "NotebookEdit":
				out = append(out, "edited "+inWorktree(dir, c.Input.NotebookPath))
			}
		}
		return out
	case "result":
		if ev.IsError && !claudeSignIn(ev.Result) {
			return []string{"error: " + ev.Result}
		}
	}
	return nil
}

// claudeSignIn reports whether claude's error is about its credentials:
// "Not logged in · Please run /login", "Invalid API key · Please run /login".
func claudeSignIn(msg string) bool {
	return strings.Contains(msg, "/login") || strings.Contains(strings.ToLower(msg), "not logged in")
}
