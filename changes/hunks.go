package changes

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/xmode/xmode/internal/udiff"
)

// fileDiff is one file of a unified diff as git writes it: its paths (""
// for /dev/null), whether git took it for binary, and its hunks.
type fileDiff struct {
	OldPath, NewPath string
	Binary           bool
	Hunks            []hunk
}

// Path is the file's path after the change (before it, for a deletion).
func (f *fileDiff) Path() string {
	if f.NewPath != "" {
		return f.NewPath
	}
	return f.OldPath
}

// hunk is one @@ block: where it starts on each side, and its lines, each
// with git's prefix (' ', '-' or '+'; "\ No newline" lines are dropped).
type hunk struct {
	OldStart, OldLines int
	NewStart, NewLines int
	Lines              []string
}

// diffLine is one line of a hunk with its numbers on each side (0 where
// it has none: an added line has no old number).
type diffLine struct {
	Text     string
	Old, New int
}

// numbered gives each line of the hunk its numbers.
func (h *hunk) numbered() []diffLine {
	out := make([]diffLine, 0, len(h.Lines))
	o, n := h.OldStart, h.NewStart
	for _, l := range h.Lines {
		d := diffLine{Text: l}
		switch l[0] {
		case '+':
			d.New = n
			n++
		case '-':
			d.Old = o
			o++
		default:
			d.Old, d.New = o, n
			o++
			n++
		}
		out = append(out, d)
	}
	return out
}

// maxDiffLine bounds one line of a diff that is parsed: a patch is xmode's
// own writing from a sandbox's files, which can hold anything.
const maxDiffLine = 1 << 20

// parseDiff reads a unified diff (git's, with or without --binary) into
// its files. A line longer than maxDiffLine is kept cut at that length.
func parseDiff(r io.Reader) ([]*fileDiff, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var files []*fileDiff
	var cur *fileDiff
	var h *hunk
	left := [2]int{} // lines of the current hunk still to come: old, new
	inBinary := false
	for {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) && line == "" {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		switch {
		case h != nil && (left[0] > 0 || left[1] > 0) && line != "" && strings.ContainsRune(" +-", rune(line[0])):
			h.Lines = append(h.Lines, line)
			if line[0] != '+' {
				left[0]--
			}
			if line[0] != '-' {
				left[1]--
			}
			continue
		case h != nil && strings.HasPrefix(line, `\`):
			continue // "\ No newline at end of file"
		case h != nil && line == "" && (left[0] > 0 || left[1] > 0):
			// an empty context line whose space an editor took
			h.Lines = append(h.Lines, " ")
			left[0]--
			left[1]--
			continue
		}
		h = nil
		switch {
		case strings.HasPrefix(line, "diff --git "):
			cur = &fileDiff{}
			files = append(files, cur)
			inBinary = false
			cur.OldPath, cur.NewPath = udiff.HeaderPaths(line)
		case cur == nil || inBinary:
		case strings.HasPrefix(line, "--- "):
			cur.OldPath = udiff.StripPrefix(udiff.Unquote(strings.TrimPrefix(line, "--- ")), "a/")
		case strings.HasPrefix(line, "+++ "):
			cur.NewPath = udiff.StripPrefix(udiff.Unquote(strings.TrimPrefix(line, "+++ ")), "b/")
		case strings.HasPrefix(line, "rename from "):
			cur.OldPath = udiff.Unquote(strings.TrimPrefix(line, "rename from "))
		case strings.HasPrefix(line, "rename to "):
			cur.NewPath = udiff.Unquote(strings.TrimPrefix(line, "rename to "))
		case strings.HasPrefix(line, "new file mode "):
			cur.OldPath = ""
		case strings.HasPrefix(line, "deleted file mode "):
			cur.NewPath = ""
		case line == "GIT binary patch" || strings.HasPrefix(line, "Binary files "):
			cur.Binary, inBinary = true, line == "GIT binary patch"
		case strings.HasPrefix(line, "@@ "):
			a, b, c, d, _, ok := udiff.HunkHeader(line)
			if !ok {
				return nil, fmt.Errorf("diff: bad hunk header %q", line)
			}
			nh := hunk{OldStart: a, OldLines: b, NewStart: c, NewLines: d}
			cur.Hunks = append(cur.Hunks, nh)
			h = &cur.Hunks[len(cur.Hunks)-1]
			left = [2]int{nh.OldLines, nh.NewLines}
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	return files, nil
}

// readLine reads one line without its end, cut at maxDiffLine.
func readLine(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		chunk, isPrefix, err := br.ReadLine()
		if b.Len() < maxDiffLine {
			b.Write(chunk[:min(len(chunk), maxDiffLine-b.Len())])
		}
		if err != nil {
			return b.String(), err
		}
		if !isPrefix {
			return b.String(), nil
		}
	}
}
