package cmd

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand"
	"strings"
	"testing"
	"testing/iotest"

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

// A string streamed into JSON is escaped exactly as encoding/json escapes
// it whole, however the reads split it: multi-byte characters across
// chunks, invalid UTF-8, control and HTML characters, U+2028.
func TestJSONStringStreamed(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	pieces := []string{"a", "é", "€", "😀", "\xe2\x82", "\xff", "\x00", "\n", "\r", "\t", "\"", "\\", "<", ">", "&", "\u2028", "\xf0\x9f", "diff --git a/x b/x\n"}
	for i := 0; i < 200; i++ {
		var sb strings.Builder
		for n := rng.Intn(200); n > 0; n-- {
			sb.WriteString(pieces[rng.Intn(len(pieces))])
		}
		if i == 0 {
			sb.WriteString(strings.Repeat("€", 100<<10)) // more than a chunk
		}
		s := sb.String()
		want, _ := json.Marshal(s)
		for name, r := range map[string]io.Reader{
			"whole": strings.NewReader(s), "one byte": iotest.OneByteReader(strings.NewReader(s)),
			"halves": iotest.HalfReader(strings.NewReader(s)), "data+EOF": iotest.DataErrReader(strings.NewReader(s)),
		} {
			var out bytes.Buffer
			if err := writeJSONStringBody(&out, r); err != nil {
				t.Fatal(err)
			}
			if got := `"` + out.String() + `"`; got != string(want) {
				t.Fatalf("%s read of %q:\n got %.200s\nwant %.200s", name, s, got, want)
			}
		}
	}

	// printJSONWith gives what printJSON gives with the field in the value
	type withPatch struct {
		ID    string  `json:"id"`
		Patch *string `json:"patch"`
	}
	patch := "diff --git a/<x> b/<x>\n+\xff\n"
	var want, got bytes.Buffer
	(&App{Out: &want}).printJSON(withPatch{"cr_1", &patch})
	if err := (&App{Out: &got}).printJSONWith(struct {
		ID string `json:"id"`
	}{"cr_1"}, "patch", strings.NewReader(patch)); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Fatalf("printJSONWith:\n%s\nprintJSON:\n%s", got.String(), want.String())
	}
}
