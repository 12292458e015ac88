package cmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fatih/color"
)

// Coloured cells take the room they show, not the bytes of their colour
// codes: every column starts at the same place on every line.
func TestTableAlignsColouredCells(t *testing.T) {
	was := color.NoColor
	color.NoColor = false
	defer func() { color.NoColor = was }()
	a := &App{Env: func(string) string { return "" }}
	var out bytes.Buffer
	tb := newTable(&out, "ID", "STATUS", "USER")
	tb.row("sbx_aaaaaaaa", a.paint(color.FgGreen, "open"), "alice")
	tb.row("sbx_bbbbbbbb", a.paint(color.FgRed, "failed (provision_failed)"), "bob")
	tb.row("sbx_cccccccc", "destroyed", "carol")
	if err := tb.flush(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\x1b[") {
		t.Fatalf("no colour in the table; the test would prove nothing:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSuffix(stripANSI(out.String()), "\n"), "\n")
	var col []int
	for i, user := range []string{"USER", "alice", "bob", "carol"} {
		col = append(col, strings.Index(lines[i], user))
	}
	for _, c := range col {
		if c != col[0] {
			t.Fatalf("the USER column starts at %v on its lines: misaligned\n%s", col, strings.Join(lines, "\n"))
		}
	}
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func TestVisibleWidth(t *testing.T) {
	for s, want := range map[string]int{"": 0, "open": 4, "\x1b[32mopen\x1b[0m": 4, "héllo": 5, "\x1b[1;31mx\x1b[0m y": 3} {
		if got := visibleWidth(s); got != want {
			t.Errorf("visibleWidth(%q) = %d, want %d", s, got, want)
		}
	}
}
