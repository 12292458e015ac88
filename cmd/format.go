package cmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/store"
)

// table prints aligned columns, two spaces apart. Widths are what a
// terminal shows: colour codes take no room (text/tabwriter counts their
// bytes, which pushed every column after a coloured one out of line).
type table struct {
	w    io.Writer
	rows [][]string
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: w}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cols ...string) { t.rows = append(t.rows, cols) }

func (t *table) flush() error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r[:max(len(r)-1, 0)] {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], visibleWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-visibleWidth(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	t.rows = nil
	_, err := io.WriteString(t.w, b.String())
	return err
}

// visibleWidth is how many columns s takes on a terminal: its runes, less
// the escape sequences that colour them (ESC [ … m).
func visibleWidth(s string) int {
	n := 0
	for i := 0; i < len(s); {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == ';') {
				j++
			}
			if j < len(s) && s[j] == 'm' {
				i = j + 1
				continue
			}
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
	}
	return n
}

// left says how long a session has: "1h59m left", "expired 3m ago", "ended".
func left(s *store.Session, now time.Time) string {
	if s.Ended() {
		return "ended"
	}
	if d := s.ExpiresAt.Sub(now); d > 0 {
		return humanize.Span(d) + " left"
	}
	return "expired " + humanize.Span(now.Sub(s.ExpiresAt)) + " ago"
}

// size prints a byte count the way du -h does; "-" when unknown.
func size(n *int64) string {
	if n == nil {
		return "-"
	}
	v := float64(*n)
	for _, unit := range []string{"B", "K", "M", "G"} {
		if v < 1024 {
			if unit == "B" {
				return fmt.Sprintf("%d%s", int64(v), unit)
			}
			return fmt.Sprintf("%.1f%s", v, unit)
		}
		v /= 1024
	}
	return fmt.Sprintf("%.1fT", v)
}

// dockerSize prints a byte count in docker's units, as the limits are
// written: 64m, 4g, 1536m.
func dockerSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.suffix)
		}
	}
	return fmt.Sprintf("%db", n)
}

// clean makes text xmode did not write itself (a sandbox's file names and
// commit messages, a repository's refs, a cloud task's title) inert on a
// terminal, on one line: termsafe.Escape, under the name every command
// here uses.
func clean(s string) string { return termsafe.Escape(s) }

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// truncate shortens s to at most n runes.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// stepTable prints a run's steps, as `sandbox show` and `run show` list them.
func (a *App) stepTable(steps []store.StepRow) error {
	now := clock()
	t := newTable(a.Out, "STEP", "SESSION", "COMMAND", "EXIT", "DURATION")
	for _, st := range steps {
		t.row(fmt.Sprintf("%04d-%s", st.Seq, clean(st.Name)), st.SessionID, truncate(clean(strings.Join(st.Argv, " ")), 50), a.stepStatus(st), stepDuration(st, now))
	}
	return t.flush()
}

// printJSONWith prints v as printJSON does, with one more field last: key,
// a string streamed from r, so that a package file is never held whole in
// memory. v must encode as an object with at least one field and no key.
func (a *App) printJSONWith(v any, key string, r io.Reader) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	head, ok := bytes.CutSuffix(b, []byte("\n}"))
	if !ok {
		return fmt.Errorf("printJSONWith: %T does not encode as an object with fields", v)
	}
	k, _ := json.Marshal(key)
	w := bufio.NewWriterSize(a.Out, 64<<10)
	w.Write(head)
	fmt.Fprintf(w, ",\n  %s: \"", k)
	if err := writeJSONStringBody(w, r); err != nil {
		w.Flush()
		return err
	}
	w.WriteString("\"\n}\n")
	return w.Flush()
}

// writeJSONStringBody writes what r holds as the inside of a JSON string,
// escaped exactly as encoding/json escapes a string (invalid UTF-8 as
// U+FFFD, <, > and & as \u escapes), a chunk at a time: a character split
// between two chunks is held back for the next.
func writeJSONStringBody(w io.Writer, r io.Reader) error {
	buf := make([]byte, 64<<10)
	held := 0
	for {
		n, err := r.Read(buf[held:])
		n += held
		held = 0
		if err == nil {
			// hold back an incomplete character at the end
			for k := 1; k <= min(utf8.UTFMax-1, n); k++ {
				if utf8.RuneStart(buf[n-k]) {
					if !utf8.FullRune(buf[n-k : n]) {
						held = k
					}
					break
				}
			}
		}
		if n-held > 0 {
			q, merr := json.Marshal(string(buf[:n-held]))
			if merr != nil {
				return merr
			}
			if _, werr := w.Write(q[1 : len(q)-1]); werr != nil {
				return werr
			}
			copy(buf, buf[n-held:n])
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
