package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/sandbox"
)

// A sandbox's files: file_read, file_list, file_write, file_edit,
// file_delete, each a step of its own.

// fileStepOut is what every file tool says of its step.
type hashView struct {
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

func viewHash(h *evidence.FileHash) *hashView {
	if h == nil {
		return nil
	}
	return &hashView{SHA256: h.SHA256, Bytes: h.Size}
}

func stepOf(r *evidence.Result) int {
	if r == nil {
		return 0
	}
	return r.Seq
}

type readIn struct {
	Session     string `json:"session" jsonschema:"the sandbox's ID"`
	Path        string `json:"path" jsonschema:"the file's path, relative to the worktree (e.g. src/main.go)"`
	StartLine   int    `json:"start_line,omitempty" jsonschema:"the first line to return, from 1 (default 1)"`
	EndLine     int    `json:"end_line,omitempty" jsonschema:"the last line to return (default: the last)"`
	LineNumbers bool   `json:"line_numbers,omitempty" jsonschema:"number each line as cat -n does: its number right-aligned in 6 columns, then a tab (not part of the file: leave them out of file_edit's old_string)"`
}

type readOut struct {
	Path       string    `json:"path"`
	Content    string    `json:"content"`
	StartLine  int       `json:"start_line"`
	EndLine    int       `json:"end_line"`
	TotalLines *int      `json:"total_lines" jsonschema:"the file's number of lines; null when unknown: the file is longer than the 32 MiB a read scans"`
	NextLine   int       `json:"next_line" jsonschema:"where to go on: the read stopped at 1 MiB (or at the 32 MiB a read scans); 0 when the range was read whole"`
	Binary     bool      `json:"binary" jsonschema:"not text (a NUL byte, or not UTF-8): content is empty (inspect it with sandbox_exec, e.g. od or base64)"`
	File       *hashView `json:"file" jsonschema:"the file's size, and its sha256 when it is at most 32 MiB (else empty)"`
	Step       int       `json:"step"`
}

func (s *Server) addFileRead() {
	addRaw(s, &mcp.Tool{Name: "file_read", Title: "Read a file",
		Description: `Read a text file of the sandbox's worktree: all of it, or lines start_line to end_line (1-based), with line_numbers numbered as cat -n does. At most 1 MiB per call: a longer read stops at a line and next_line says where to go on. A read looks at the first 32 MiB of a file at most: past them total_lines is null, and lines beyond are read with sandbox_exec (sed -n, tail). A file holding a NUL byte or that is not UTF-8 is binary: its content is not returned. Paths are relative to the worktree; links are not followed and .git is not readable (use git through sandbox_exec).`,
		Annotations: readOnly}, s.fileRead)
}

func (s *Server) fileRead(ctx context.Context, _ *mcp.CallToolRequest, in readIn) (*mcp.CallToolResult, readOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, readOut{}, err
	}
	r, err := s.o.Sandbox.ReadFile(ctx, sess, sandbox.ReadOptions{Path: in.Path, StartLine: in.StartLine, EndLine: in.EndLine})
	if err != nil {
		return nil, readOut{}, err
	}
	out := readOut{Path: r.Path, Content: r.Content, StartLine: r.StartLine, EndLine: r.EndLine,
		NextLine: r.NextLine, Binary: r.Binary, File: viewHash(r.Before), Step: stepOf(r.Step)}
	total := "more than the 32 MiB a read scans"
	if r.TotalLines >= 0 {
		out.TotalLines, total = ptr(r.TotalLines), fmt.Sprint(r.TotalLines)
	}
	if in.LineNumbers && out.StartLine > 0 {
		out.Content = numberLines(out.Content, out.StartLine)
	}
	text := out.Content
	switch {
	case out.Binary:
		sum := "sha256 " + out.File.SHA256
		if out.File.SHA256 == "" {
			sum = "not hashed: larger than 32 MiB"
		}
		text = fmt.Sprintf("[%s is not text (%d bytes, %s): its content is not returned; inspect it with sandbox_exec (e.g. od -c, base64, file)]", out.Path, out.File.Bytes, sum)
	case out.NextLine > 0:
		text += fmt.Sprintf("\n[lines %d-%d of %s; the read stopped at 1 MiB: go on with start_line %d]", out.StartLine, out.EndLine, total, out.NextLine)
	case out.StartLine == 0 && r.TotalLines > 0:
		text = fmt.Sprintf("[%s has %d lines: nothing in lines %d-%d]", out.Path, r.TotalLines, in.StartLine, in.EndLine)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

// numberLines numbers the lines of content, the first being first, as
// cat -n does: the number right-aligned in 6 columns, then a tab.
func numberLines(content string, first int) string {
	var b strings.Builder
	b.Grow(len(content) + 8*strings.Count(content, "\n") + 8)
	for n := first; content != ""; n++ {
		line, rest, ok := strings.Cut(content, "\n")
		fmt.Fprintf(&b, "%6d\t%s", n, line)
		if ok {
			b.WriteByte('\n')
		}
		content = rest
	}
	return b.String()
}

type listFilesIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Path    string `json:"path,omitempty" jsonschema:"a directory, relative to the worktree (default: its top)"`
	Pattern string `json:"pattern,omitempty" jsonschema:"a glob matched against paths under path: * and ? within a name, ** across directories (e.g. **/*_test.go); none lists path's own entries"`
}

type listFilesOut struct {
	Entries   []sandbox.FileEntry `json:"entries"`
	Truncated bool                `json:"truncated" jsonschema:"there are more than 2000: narrow path or pattern"`
	Step      int                 `json:"step"`
}

func (s *Server) addFileList() {
	add(s, &mcp.Tool{Name: "file_list", Title: "List files",
		Description: `List a directory of the sandbox's worktree (path, default its top), or, with pattern, every path under it that matches a glob: * and ? within a name, ** across directories (**/*.go: every Go file). .git is never listed and links are not followed. At most 2000 entries.`,
		Annotations: readOnly}, s.fileList)
}

func (s *Server) fileList(ctx context.Context, _ *mcp.CallToolRequest, in listFilesIn) (*mcp.CallToolResult, listFilesOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, listFilesOut{}, err
	}
	l, err := s.o.Sandbox.ListFiles(ctx, sess, sandbox.ListOptions{Path: in.Path, Pattern: in.Pattern})
	if err != nil {
		return nil, listFilesOut{}, err
	}
	out := listFilesOut{Entries: l.Entries, Truncated: l.Truncated, Step: stepOf(l.Step)}
	if out.Entries == nil {
		out.Entries = []sandbox.FileEntry{}
	}
	return nil, out, nil
}

type writeIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Path    string `json:"path" jsonschema:"the file's path, relative to the worktree"`
	Content string `json:"content" jsonschema:"the whole new content of the file (at most 8 MiB)"`
}

type changeOut struct {
	Path         string    `json:"path"`
	Created      bool      `json:"created,omitempty"`
	Replacements int       `json:"replacements,omitempty"`
	Removed      int       `json:"removed,omitempty"`
	Before       *hashView `json:"before" jsonschema:"the file before (null: there was none)"`
	After        *hashView `json:"after" jsonschema:"the file after (null: there is none)"`
	Step         int       `json:"step" jsonschema:"the step that recorded it"`
}

func viewChange(f *sandbox.FileStep) changeOut {
	return changeOut{Path: f.Path, Created: f.Created, Replacements: f.Replacements, Removed: f.Removed,
		Before: viewHash(f.Before), After: viewHash(f.After), Step: stepOf(f.Step)}
}

func (s *Server) addFileWrite() {
	addRaw(s, &mcp.Tool{Name: "file_write", Title: "Write a file",
		Description: `Write a whole file of the sandbox's worktree: create it (and its directories) or replace it. content is at most 8 MiB. Replaces only a regular file: a link or a directory at path is refused. To change part of a file, use file_edit.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}}, s.fileWrite)
}

func (s *Server) fileWrite(ctx context.Context, _ *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, changeOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, changeOut{}, err
	}
	f, err := s.o.Sandbox.WriteFile(ctx, sess, in.Path, []byte(in.Content))
	if err != nil {
		return nil, changeOut{}, err
	}
	return nil, viewChange(f), nil
}

type editIn struct {
	Session    string `json:"session" jsonschema:"the sandbox's ID"`
	Path       string `json:"path" jsonschema:"the file's path, relative to the worktree"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace, as file_read shows it (whitespace and line breaks included)"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence (default: old_string must occur exactly once)"`
}

func (s *Server) addFileEdit() {
	addRaw(s, &mcp.Tool{Name: "file_edit", Title: "Edit a file",
		Description: `Replace exact text in a file of the sandbox's worktree: old_string must occur exactly once (copy it from file_read, whitespace included, with enough lines around it to be unique), or set replace_all to change every occurrence. A missing or ambiguous old_string changes nothing and says where it occurs.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}}, s.fileEdit)
}

func (s *Server) fileEdit(ctx context.Context, _ *mcp.CallToolRequest, in editIn) (*mcp.CallToolResult, changeOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, changeOut{}, err
	}
	f, err := s.o.Sandbox.EditFile(ctx, sess, sandbox.EditOptions{Path: in.Path, Old: in.OldString, New: in.NewString, ReplaceAll: in.ReplaceAll})
	if err != nil {
		return nil, changeOut{}, err
	}
	return nil, viewChange(f), nil
}

type deleteIn struct {
	Session   string `json:"session" jsonschema:"the sandbox's ID"`
	Path      string `json:"path" jsonschema:"the path to delete, relative to the worktree"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"delete a directory and everything in it"`
}

func (s *Server) addFileDelete() {
	add(s, &mcp.Tool{Name: "file_delete", Title: "Delete a file",
		Description: `Delete a file or a link (never what it points to) of the sandbox's worktree; a directory only with recursive.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}}, s.fileDelete)
}

func (s *Server) fileDelete(ctx context.Context, _ *mcp.CallToolRequest, in deleteIn) (*mcp.CallToolResult, changeOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, changeOut{}, err
	}
	f, err := s.o.Sandbox.DeleteFile(ctx, sess, in.Path, in.Recursive)
	if err != nil {
		return nil, changeOut{}, err
	}
	return nil, viewChange(f), nil
}
