package ui

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/internal/udiff"
)

// A change request's patch, read as a stream and shown a page at a time
// (docs/ui.md, "Large logs and diffs"): a page is the files from one
// index on, up to a budget of diff lines; a file larger than what is left
// of the budget goes on where the next page starts. Nothing reads the
// patch whole: the reader skips to the page's first file line by line, and
// keeps only that page's lines.

// Page budgets (variables: the tests page small patches).
var (
	pageLines = 4000    // diff lines of a page
	pageBytes = 4 << 20 // bytes of diff lines of a page
)

// maxLineShow is how much of one diff line is shown; the rest is cut, and
// the cut said.
const maxLineShow = 4000

// diffPage is one page of a patch.
type diffPage struct {
	Files []*diffFile
	// Next is where the next page starts; nil on the last.
	Next *pagePos
}

// pagePos is a place in a patch: the file's index, and how many of its
// diff lines come before it.
type pagePos struct {
	File, Skip int
}

func (p pagePos) Query() string { return fmt.Sprintf("file=%d&skip=%d", p.File, p.Skip) }

// diffFile is one file of a page.
type diffFile struct {
	Index            int
	Stat             *changes.FileStat // the manifest's record of it; nil if the patch and the manifest disagree
	OldPath, NewPath string            // from the patch, unquoted (git quotes unusual names)
	OldMode, NewMode string
	Similarity       int
	New, Deleted     bool
	Renamed, Copied  bool
	Binary           bool
	Hunks            []*hunk
	Skipped          int  // diff lines of this file shown on earlier pages
	More             bool // it goes on on the next page
}

// hunk is one @@ hunk (or the part of one on this page).
type hunk struct {
	Header string // "@@ -a,b +c,d @@"
	// Section is the function git names after the header: hostile text.
	Section string
	Lines   []*dline
	// Cont: this page starts in the middle of it.
	Cont bool
	// lexed is closed when its lines' HTML is set (highlighter.start).
	lexed chan struct{}
}

// Wait waits until the hunk's lines are highlighted: the page's template
// calls it as it reaches each hunk, so the top of a large change request
// is on its way to the browser while the rest is lexed.
func (h *hunk) Wait() string {
	if h.lexed != nil {
		<-h.lexed
	}
	return ""
}

// dline is one line of a hunk.
type dline struct {
	Kind     byte // ' ', '+', '-', '\\' (no newline at end of file)
	Old, New int  // line numbers; 0 where the side has none
	Text     string
	Cut      int // bytes cut from a line longer than maxLineShow
	HTML     template.HTML
}

// Path is the file's path as the change names it: its new path, else the
// old (a deletion).
func (f *diffFile) Path() string {
	if f.Stat != nil {
		return f.Stat.Path
	}
	if f.NewPath != "" {
		return f.NewPath
	}
	return f.OldPath
}

// Kind says what happened to the file, for the list and the file's
// header: added, deleted, renamed, copied, mode changed, modified.
func (f *diffFile) Kind() string {
	switch {
	case f.New:
		return "added"
	case f.Deleted:
		return "deleted"
	case f.Renamed:
		return "renamed"
	case f.Copied:
		return "copied"
	}
	return "modified"
}

// readPage reads the page of the patch that starts at from. per is the
// manifest's files in the patch's order (git writes both from one run).
func readPage(r io.Reader, from pagePos, per []changes.FileStat) (*diffPage, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	page := &diffPage{}
	idx := -1
	var cur *diffFile
	var h *hunk
	oldLeft, newLeft := 0, 0 // lines of the current hunk still to come
	oldNo, newNo := 0, 0
	inBinary := false
	used, usedBytes := 0, 0
	fileLines := 0 // diff lines of the current file so far
	for {
		line, cut, err := readLine(br)
		if err == io.EOF && line == nil {
			break
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		// Every hunk line starts with ' ', '+', '-' or '\', so a line
		// that starts so always begins a file.
		if bytes.HasPrefix(line, []byte("diff --git ")) {
			idx++
			h, inBinary, fileLines, oldLeft, newLeft = nil, false, 0, 0, 0
			if idx < from.File {
				cur = nil
				continue
			}
			if len(page.Files) > 0 && (used >= pageLines || usedBytes >= pageBytes) {
				page.Next = &pagePos{File: idx}
				return page, nil
			}
			cur = &diffFile{Index: idx}
			if idx < len(per) {
				cur.Stat = &per[idx]
			}
			cur.OldPath, cur.NewPath = udiff.HeaderPaths(string(line))
			if idx == from.File {
				cur.Skipped = from.Skip
			}
			page.Files = append(page.Files, cur)
			continue
		}
		if cur == nil {
			continue // a file before the page
		}
		if (oldLeft > 0 || newLeft > 0) && !hunkLine(line) {
			oldLeft, newLeft = 0, 0 // the hunk was shorter than it said
		}
		if oldLeft > 0 || newLeft > 0 {
			if len(line) == 0 {
				line = []byte(" ") // an empty context line some tools write
			}
			kind := line[0]
			switch kind {
			case ' ':
				oldNo, newNo, oldLeft, newLeft = oldNo+1, newNo+1, oldLeft-1, newLeft-1
			case '-':
				oldNo, oldLeft = oldNo+1, oldLeft-1
			case '+':
				newNo, newLeft = newNo+1, newLeft-1
			}
			fileLines++
			if fileLines <= cur.Skipped {
				continue
			}
			if used >= pageLines || usedBytes >= pageBytes {
				cur.More = true
				page.Next = &pagePos{File: idx, Skip: fileLines - 1}
				return page, nil
			}
			if h == nil { // the page starts in the middle of this hunk
				h = &hunk{Cont: true}
				cur.Hunks = append(cur.Hunks, h)
			}
			l := &dline{Kind: kind, Text: string(line[1:]), Cut: cut}
			switch kind {
			case ' ':
				l.Old, l.New = oldNo, newNo
			case '-':
				l.Old = oldNo
			case '+':
				l.New = newNo
			}
			h.Lines = append(h.Lines, l)
			used++
			usedBytes += len(line)
			continue
		}
		if len(line) > 0 && line[0] == '\\' && h != nil && !inBinary {
			// "\ No newline at end of file" after a hunk's last line.
			fileLines++
			if fileLines > cur.Skipped {
				h.Lines = append(h.Lines, &dline{Kind: '\\', Text: string(line[1:])})
			}
			continue
		}
		if inBinary {
			continue
		}
		s := string(line)
		switch {
		case strings.HasPrefix(s, "@@ "):
			a, b, c, d, section, ok := udiff.HunkHeader(s)
			if !ok {
				continue
			}
			oldNo, newNo, oldLeft, newLeft = a-1, c-1, b, d
			if a == 0 {
				oldNo = 0
			}
			if c == 0 {
				newNo = 0
			}
			h = nil
			if fileLines >= cur.Skipped {
				h = &hunk{Header: s[:len(s)-len(section)], Section: strings.TrimSpace(section)}
				cur.Hunks = append(cur.Hunks, h)
			}
		case strings.HasPrefix(s, "old mode "):
			cur.OldMode = s[len("old mode "):]
		case strings.HasPrefix(s, "new mode "):
			cur.NewMode = s[len("new mode "):]
		case strings.HasPrefix(s, "new file mode "):
			cur.New, cur.NewMode = true, s[len("new file mode "):]
		case strings.HasPrefix(s, "deleted file mode "):
			cur.Deleted, cur.OldMode = true, s[len("deleted file mode "):]
		case strings.HasPrefix(s, "similarity index "):
			cur.Similarity, _ = strconv.Atoi(strings.TrimSuffix(s[len("similarity index "):], "%"))
		case strings.HasPrefix(s, "rename from "):
			cur.Renamed, cur.OldPath = true, udiff.Unquote(s[len("rename from "):])
		case strings.HasPrefix(s, "rename to "):
			cur.Renamed, cur.NewPath = true, udiff.Unquote(s[len("rename to "):])
		case strings.HasPrefix(s, "copy from "):
			cur.Copied, cur.OldPath = true, udiff.Unquote(s[len("copy from "):])
		case strings.HasPrefix(s, "copy to "):
			cur.Copied, cur.NewPath = true, udiff.Unquote(s[len("copy to "):])
		case strings.HasPrefix(s, "Binary files "):
			cur.Binary = true
		case s == "GIT binary patch":
			cur.Binary, inBinary = true, true
		case strings.HasPrefix(s, "--- "):
			if p := udiff.StripPrefix(udiff.Unquote(s[4:]), "a/"); p != "" {
				cur.OldPath = p
			}
		case strings.HasPrefix(s, "+++ "):
			if p := udiff.StripPrefix(udiff.Unquote(s[4:]), "b/"); p != "" {
				cur.NewPath = p
			}
		}
	}
	return page, nil
}

// hunkLine reports a line that can be in a hunk's body.
func hunkLine(l []byte) bool {
	return len(l) == 0 || l[0] == ' ' || l[0] == '+' || l[0] == '-' || l[0] == '\\'
}

// readLine reads one line without its newline, at most maxLineShow bytes
// of it; cut is how many more it had.
func readLine(br *bufio.Reader) (line []byte, cut int, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		room := maxLineShow - len(line)
		switch {
		case room <= 0:
			cut += len(chunk)
		case len(chunk) > room:
			line = append(line, chunk[:room]...)
			cut += len(chunk) - room
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && len(line) == 0 && cut == 0 {
			return nil, 0, io.EOF
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		} else if cut > 0 && len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
			cut--
		}
		if line == nil {
			line = []byte{}
		}
		if err == io.EOF {
			err = nil
		}
		return line, cut, err
	}
}

// splitRow is one row of the side-by-side view.
type splitRow struct {
	L, R *dline
	Note *dline // a "\ No newline" line, across both sides
}

// Rows pairs a hunk's lines for the side-by-side view: context on both
// sides; a run of deletions beside the run of additions that follows it.
func (h *hunk) Rows() []splitRow {
	var rows []splitRow
	ls := h.Lines
	for i := 0; i < len(ls); {
		switch ls[i].Kind {
		case ' ':
			rows = append(rows, splitRow{L: ls[i], R: ls[i]})
			i++
		case '\\':
			rows = append(rows, splitRow{Note: ls[i]})
			i++
		default:
			var dels, adds []*dline
			for i < len(ls) && ls[i].Kind == '-' {
				dels = append(dels, ls[i])
				i++
			}
			for i < len(ls) && ls[i].Kind == '+' {
				adds = append(adds, ls[i])
				i++
			}
			for j := 0; j < max(len(dels), len(adds)); j++ {
				var r splitRow
				if j < len(dels) {
					r.L = dels[j]
				}
				if j < len(adds) {
					r.R = adds[j]
				}
				rows = append(rows, r)
			}
		}
	}
	return rows
}
