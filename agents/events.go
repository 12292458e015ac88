package agents

import (
	"bytes"
	"encoding/json"
	"io"
	"path"
	"strings"
	"sync"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
)

// maxEventLine is the longest stdout line read as an event; a longer one
// (a command's whole output in one event) stays in stdout.log only.
const maxEventLine = 8 << 20

// parser follows an agent's stdout line by line: every line that is a JSON
// object goes to events.jsonl and is read for the summary. codex's JSONL
// (`codex exec --json`) and claude's stream-json differ; the command agent
// is read as codex's, so a stand-in that speaks it is summarised the same
// way, and one that prints plain text gets an empty summary.
type parser struct {
	mu      sync.Mutex
	kind    string
	dir     string // the worktree as the agent sees it: paths are shown relative to it
	events  io.Writer
	line    []byte
	tooLong bool

	sum       evidence.Agent
	seenFile  map[string]bool
	lastError string
	missing   string // the agent's error when its CLI is not found (127)
	// signIn: claude said it has no (valid) credentials.
	signIn bool
}

func newParser(kind, dir, missing string, events io.Writer) *parser {
	return &parser{kind: kind, dir: dir, missing: missing, events: events, seenFile: map[string]bool{},
		sum: evidence.Agent{Kind: kind, Commands: []string{}, FilesChanged: []string{}}}
}

func (p *parser) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if !p.tooLong {
			if len(p.line)+len(chunk) > maxEventLine {
				p.tooLong, p.line = true, p.line[:0]
			} else {
				p.line = append(p.line, chunk...)
			}
		}
		if i < 0 {
			break
		}
		if !p.tooLong {
			p.event(p.line)
		}
		p.line, p.tooLong = p.line[:0], false
		b = b[i+1:]
	}
	return n, nil
}

func (p *parser) event(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' || !json.Valid(line) {
		return
	}
	p.sum.Events++
	_, _ = p.events.Write(append(append([]byte(nil), line...), '\n'))
	if p.kind == Claude {
		p.claudeEvent(line)
	} else {
		p.codexEvent(line)
	}
}

// Summary is result.json's agent object once the command has ended.
func (p *parser) Summary(st engine.Status) *evidence.Agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.line) > 0 && !p.tooLong {
		p.event(p.line) // a last line without its newline
		p.line = p.line[:0]
	}
	s := p.sum
	switch {
	case st.ExitCode == 127 && s.Events == 0:
		s.Error = p.missing
	// In no front end's words: the summary is evidence, read by the CLI,
	// MCP (timeout_seconds) and the UI alike.
	case st.TimedOut && p.lastError != "":
		s.Error = "stopped by its timeout; its last error: " + p.lastError
	case st.TimedOut:
		s.Error = "stopped by its timeout"
	case st.ExitCode != 0 && s.Error == "":
		s.Error = p.lastError
	}
	return &s
}

func (p *parser) file(name string) {
	if name == "" {
		return
	}
	name = inWorktree(p.dir, name)
	if !p.seenFile[name] {
		p.seenFile[name] = true
		p.sum.FilesChanged = append(p.sum.FilesChanged, name)
	}
}

// inWorktree shows a path under the worktree relative to it.
func inWorktree(dir, name string) string {
	if rel, ok := strings.CutPrefix(path.Clean(name), strings.TrimSuffix(dir, "/")+"/"); ok && path.IsAbs(name) {
		return rel
	}
	return name
}

// codexEvent reads one event of `codex exec --json` (codex-rs
// exec_events.rs): thread.started, turn.started, turn.completed {usage},
// turn.failed {error}, item.started/updated/completed {item}, error.
func (p *parser) codexEvent(line []byte) {
	var ev struct {
		Type  string `json:"type"`
		Usage *struct {
			Input  int64 `json:"input_tokens"`
			Output int64 `json:"output_tokens"`
		} `json:"usage"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
		Item    *struct {
			Type    string `json:"type"`
			Text    string `json:"text"`
			Message string `json:"message"`
			Command string `json:"command"`
			Changes []struct {
				Path string `json:"path"`
			} `json:"changes"`
		} `json:"item"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return
	}
	switch ev.Type {
	case "turn.completed":
		if ev.Usage != nil {
			if p.sum.Tokens == nil {
				p.sum.Tokens = &evidence.Tokens{}
			}
			p.sum.Tokens.Input += ev.Usage.Input
			p.sum.Tokens.Output += ev.Usage.Output
		}
	case "turn.failed":
		if ev.Error != nil {
			p.sum.Error = ev.Error.Message
		}
	case "error":
		p.lastError = ev.Message
	case "item.completed":
		if ev.Item == nil {
			return
		}
		switch ev.Item.Type {
		case "agent_message":
			p.sum.FinalMessage = ev.Item.Text
		case "command_execution":
			p.sum.Commands = append(p.sum.Commands, ev.Item.Command)
		case "file_change":
			for _, c := range ev.Item.Changes {
				p.file(c.Path)
			}
		case "error":
			p.lastError = ev.Item.Message
		}
	}
}

// claudeEvent reads one event of `claude -p --output-format stream-json
// --verbose`: system/init, assistant {message.content[]: text, tool_use},
// user {tool results}, result {result, is_error, usage}.
func (p *parser) claudeEvent(line []byte) {
	var ev struct {
		Type    string `json:"type"`
		Error   string `json:"error"`
		Result  string `json:"result"`
		IsError bool   `json:"is_error"`
		Usage   *struct {
			Input  int64 `json:"input_tokens"`
			Output int64 `json:"output_tokens"`
		} `json:"usage"`
		Message *struct {
			Content []struct {
				Type  string `json:"type"`
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
		return
	}
	switch ev.Type {
	case "assistant":
		p.signIn = p.signIn || ev.Error == "authentication_failed"
		if ev.Message == nil {
			return
		}
		for _, c := range ev.Message.Content {
			if c.Type != "tool_use" {
				continue
			}
			switch c.Name {
			case "Bash":
				p.sum.Commands = append(p.sum.Commands, c.Input.Command)
			case "Edit", "MultiEdit", "Write":
				p.file(c.Input.FilePath)
			case "NotebookEdit":
				p.file(c.Input.NotebookPath)
			}
		}
	case "result":
		p.sum.FinalMessage = ev.Result
		if ev.IsError {
			p.sum.Error = ev.Result
			p.signIn = p.signIn || claudeSignIn(ev.Result)
		}
		if ev.Usage != nil {
			p.sum.Tokens = &evidence.Tokens{Input: ev.Usage.Input, Output: ev.Usage.Output}
		}
	}
}
