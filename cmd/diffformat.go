package cmd

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fatih/color"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/internal/termsafe"
)

// colour reports whether stdout gets colour: a terminal, and neither
// --no-color nor NO_COLOR.
func (a *App) colour() bool {
	return !a.noColor && a.Env("NO_COLOR") == "" && isTerminal(a.Out)
}

// patchWriter is the way a patch takes to w. To a terminal, it is escaped
// (termsafe) line by line: the files are the sandbox's, and a control
// sequence in one could move the cursor over lines a reviewer reads, or a
// bidi override reorder them; coloured as git colours it when stdout gets
// colour. To a file or a pipe the patch stays byte for byte what `git
// apply` reads back. flush writes what the writer holds back.
func (a *App) patchWriter(w io.Writer) (io.Writer, func() error) {
	switch {
	case !isTerminal(a.Out):
		return w, func() error { return nil }
	case a.colour():
		cw := &diffColourer{w: w, escape: true}
		return cw, func() error { cw.flush(); return cw.err }
	}
	tw := termsafe.NewWriter(w)
	return tw, tw.Flush
}

var (
	diffMeta = color.New(color.Bold)
	diffFrag = color.New(color.FgCyan)
	diffOld  = color.New(color.FgRed)
	diffNew  = color.New(color.FgGreen)
)

// diffColourer colours a unified diff line by line the way git does by
// default: headers bold, hunk headers cyan, removed lines red, added green.
type diffColourer struct {
	w       io.Writer
	partial []byte
	header  bool
	escape  bool // make each line inert on a terminal (termsafe)
	err     error
}

func (d *diffColourer) Write(p []byte) (int, error) {
	d.partial = append(d.partial, p...)
	for {
		i := bytes.IndexByte(d.partial, '\n')
		if i < 0 {
			break
		}
		d.line(string(d.partial[:i]))
		d.partial = d.partial[i+1:]
	}
	return len(p), d.err
}

func (d *diffColourer) flush() {
	if len(d.partial) > 0 {
		d.line(string(d.partial))
		d.partial = nil
	}
}

func (d *diffColourer) line(l string) {
	if d.escape {
		// With its newline, so that a CRLF ending stays one.
		l = strings.TrimSuffix(termsafe.EscapeText(l+"\n"), "\n")
	}
	var out string
	switch {
	case strings.HasPrefix(l, "diff --git "):
		d.header = true
		out = diffMeta.Sprint(l)
	case strings.HasPrefix(l, "@@"):
		d.header = false
		if end := strings.Index(l[2:], "@@"); end >= 0 {
			out = diffFrag.Sprint(l[:end+4]) + l[end+4:]
		} else {
			out = diffFrag.Sprint(l)
		}
	case d.header:
		out = diffMeta.Sprint(l)
	case strings.HasPrefix(l, "+"):
		out = diffNew.Sprint(l)
	case strings.HasPrefix(l, "-"):
		out = diffOld.Sprint(l)
	default:
		out = l
	}
	if _, err := io.WriteString(d.w, out+"\n"); err != nil && d.err == nil {
		d.err = err
	}
}

// statSummary is git's last diffstat line, without the leading space.
func statSummary(st *changes.Stat) string {
	if st.Files == 0 {
		return "0 files changed"
	}
	s := fmt.Sprintf("%d file%s changed", st.Files, plural(st.Files))
	if st.Insertions > 0 || st.Deletions == 0 {
		s += fmt.Sprintf(", %d insertion%s(+)", st.Insertions, plural(st.Insertions))
	}
	if st.Deletions > 0 || st.Insertions == 0 {
		s += fmt.Sprintf(", %d deletion%s(-)", st.Deletions, plural(st.Deletions))
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// statWidth is the width git gives a diffstat that is not on a terminal.
const statWidth = 80

// writeStat prints a diffstat as `git diff --stat` lays it out.
func writeStat(w io.Writer, st *changes.Stat, colour bool) error {
	names := make([]string, len(st.PerFile))
	maxLen, maxChange := 0, 0
	binary := false
	for i, f := range st.PerFile {
		names[i] = clean(f.Path)
		if f.OldPath != "" {
			names[i] = clean(renameName(f.OldPath, f.Path))
		}
		maxLen = max(maxLen, utf8.RuneCountInString(names[i]))
		if f.Binary {
			binary = true
			continue
		}
		maxChange = max(maxChange, f.Insertions+f.Deletions)
	}
	numWidth := len(strconv.Itoa(maxChange))
	if binary && numWidth < 3 {
		numWidth = 3 // "Bin"
	}
	width := statWidth
	graph := maxChange
	nameWidth := maxLen
	if nameWidth+numWidth+6+graph > width {
		if graph > width*3/8-numWidth-6 {
			graph = max(width*3/8-numWidth-6, 6)
		}
		if nameWidth > width-numWidth-6-graph {
			nameWidth = width - numWidth - 6 - graph
		} else {
			graph = width - numWidth - 6 - nameWidth
		}
	}
	paint := func(c *color.Color, s string) string {
		if colour && s != "" {
			return c.Sprint(s)
		}
		return s
	}
	for i, f := range st.PerFile {
		name := statName(names[i], nameWidth)
		pad := strings.Repeat(" ", max(nameWidth-utf8.RuneCountInString(name), 0))
		if f.Binary {
			fmt.Fprintf(w, " %s%s | %*s %d -> %d bytes\n", name, pad, numWidth, "Bin", f.OldSize, f.NewSize)
			continue
		}
		add, del := f.Insertions, f.Deletions
		if maxChange > graph && maxChange > 0 {
			add, del = scale(add, graph, maxChange), scale(del, graph, maxChange)
		}
		// git puts the blank before the graph only when there is one.
		gap := ""
		if f.Insertions+f.Deletions > 0 {
			gap = " "
		}
		fmt.Fprintf(w, " %s%s | %*d%s%s%s\n", name, pad, numWidth, f.Insertions+f.Deletions, gap,
			paint(diffNew, strings.Repeat("+", add)), paint(diffOld, strings.Repeat("-", del)))
	}
	_, err := fmt.Fprintf(w, " %s\n", statSummary(st))
	return err
}

// statName fits a name into width columns as git's diffstat does: "..."
// and its end, from the first "/" there, so that no directory is cut.
func statName(name string, width int) string {
	r := []rune(name)
	if len(r) <= width {
		return name
	}
	rest := string(r[len(r)-max(width-3, 0):])
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[i:]
	}
	return "..." + rest
}

func scale(n, width, maxChange int) int {
	if n == 0 {
		return 0
	}
	return 1 + n*(width-1)/maxChange
}

// renameName is git's "dir/{old => new}/rest" form of a rename.
func renameName(a, b string) string {
	pfx := 0
	for i := 0; i < len(a) && i < len(b) && a[i] == b[i]; i++ {
		if a[i] == '/' {
			pfx = i + 1
		}
	}
	sfx := 0
	for i := 1; i <= len(a)-pfx && i <= len(b)-pfx && a[len(a)-i] == b[len(b)-i]; i++ {
		if a[len(a)-i] == '/' {
			sfx = i
		}
	}
	if pfx == 0 && sfx == 0 {
		return a + " => " + b
	}
	return a[:pfx] + "{" + a[pfx:len(a)-sfx] + " => " + b[pfx:len(b)-sfx] + "}" + a[len(a)-sfx:]
}
