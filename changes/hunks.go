package changes

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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
			cur.OldPath, cur.NewPath = headerPaths(strings.TrimPrefix(line, "diff --git "))
		case cur == nil || inBinary:
		case strings.HasPrefix(line, "--- "):
			cur.OldPath = diffPath(strings.TrimPrefix(line, "--- "), "a/")
		case strings.HasPrefix(line, "+++ "):
			cur.NewPath = diffPath(strings.TrimPrefix(line, "+++ "), "b/")
		case strings.HasPrefix(line, "rename from "):
			cur.OldPath = unquotePath(strings.TrimPrefix(line, "rename from "))
		case strings.HasPrefix(line, "rename to "):
			cur.NewPath = unquotePath(strings.TrimPrefix(line, "rename to "))
		case strings.HasPrefix(line, "new file mode "):
			cur.OldPath = ""
		case strings.HasPrefix(line, "deleted file mode "):
			cur.NewPath = ""
		case line == "GIT binary patch" || strings.HasPrefix(line, "Binary files "):
			cur.Binary, inBinary = true, line == "GIT binary patch"
		case strings.HasPrefix(line, "@@ "):
			nh, err := parseHunkHeader(line)
			if err != nil {
				return nil, err
			}
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

// parseHunkHeader reads "@@ -a[,b] +c[,d] @@ …".
func parseHunkHeader(line string) (hunk, error) {
	var h hunk
	f := strings.Fields(line)
	if len(f) < 4 || f[0] != "@@" || f[3] != "@@" && !strings.HasPrefix(f[3], "@@") {
		return h, fmt.Errorf("diff: bad hunk header %q", line)
	}
	var err error
	if h.OldStart, h.OldLines, err = hunkRange(f[1], "-"); err != nil {
		return h, fmt.Errorf("diff: bad hunk header %q", line)
	}
	if h.NewStart, h.NewLines, err = hunkRange(f[2], "+"); err != nil {
		return h, fmt.Errorf("diff: bad hunk header %q", line)
	}
	return h, nil
}

func hunkRange(s, sign string) (start, n int, err error) {
	s, ok := strings.CutPrefix(s, sign)
	if !ok {
		return 0, 0, errors.New("no sign")
	}
	a, b, has := strings.Cut(s, ",")
	if start, err = strconv.Atoi(a); err != nil {
		return 0, 0, err
	}
	n = 1
	if has {
		if n, err = strconv.Atoi(b); err != nil {
			return 0, 0, err
		}
	}
	return start, n, nil
}

// diffPath is the path of a "--- "/"+++ " line: "" for /dev/null, else
// unquoted and without its prefix.
func diffPath(s, prefix string) string {
	if s == "/dev/null" {
		return ""
	}
	return strings.TrimPrefix(unquotePath(s), prefix)
}

// headerPaths reads the paths of "diff --git a/X b/Y" where it can: both
// quoted, or the same path on each side. A binary file or a mode change
// has no ---/+++ lines to name it.
func headerPaths(s string) (string, string) {
	if strings.HasPrefix(s, `"`) {
		a, rest, ok := cutQuoted(s)
		if !ok {
			return "", ""
		}
		b := strings.TrimPrefix(rest, " ")
		return strings.TrimPrefix(a, "a/"), strings.TrimPrefix(unquotePath(b), "b/")
	}
	// "a/X b/X": the same X on each side
	if len(s)%2 == 1 {
		half := (len(s) - 1) / 2
		a, b := s[:half], s[half+1:]
		if strings.HasPrefix(a, "a/") && strings.HasPrefix(b, "b/") && a[2:] == b[2:] {
			return a[2:], b[2:]
		}
	}
	return "", ""
}

// unquotePath undoes git's quoting of a path ("…" with C escapes, octal
// for bytes); an unquoted path is returned as it is.
func unquotePath(s string) string {
	if !strings.HasPrefix(s, `"`) {
		return s
	}
	p, _, ok := cutQuoted(s)
	if !ok {
		return s
	}
	return p
}

// cutQuoted reads one C-quoted string at the start of s and returns it
// unquoted with what follows it.
func cutQuoted(s string) (string, string, bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), s[i+1:], true
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			return "", "", false
		}
		switch e := s[i]; e {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'v':
			b.WriteByte('\v')
		case 'f':
			b.WriteByte('\f')
		case 'r':
			b.WriteByte('\r')
		case '0', '1', '2', '3':
			if i+2 >= len(s) {
				return "", "", false
			}
			v, err := strconv.ParseUint(s[i:i+3], 8, 8)
			if err != nil {
				return "", "", false
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			b.WriteByte(e)
		}
	}
	return "", "", false
}
