package cmd

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/fatih/color"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/store"
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

// Every table that shows how long a step ran says it the one way
// (internal/humanize): sandbox logs and show, run show, and cr show.
func TestStepDurationsOneWay(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for took, want := range map[time.Duration]string{
		340 * time.Millisecond:        "340ms",
		1234 * time.Millisecond:       "1.2s",
		3*time.Minute + 5*time.Second: "3m05s",
	} {
		end := start.Add(took)
		if got := stepDuration(store.StepRow{StartedAt: start, FinishedAt: &end, State: "finished"}, end); got != want {
			t.Errorf("stepDuration of %v = %q, want %q", took, got, want)
		}
		if got := stepDuration(store.StepRow{StartedAt: start, State: "running"}, end); got != want {
			t.Errorf("stepDuration of a step running for %v = %q, want %q", took, got, want)
		}
		zero := 0
		a := &App{Env: func(string) string { return "" }}
		var out bytes.Buffer
		p := &changes.Package{Change: &store.Change{ID: "cr_aaaaaaaa", Status: store.ChangeOpen}, Manifest: &changes.Manifest{Stat: &changes.Stat{}}}
		ev := &changes.Evidence{Steps: []changes.StepEvidence{{Seq: 1, Name: "test", Argv: []string{"make", "test"}, Status: "passed",
			ExitCode: &zero, StartedAt: start, FinishedAt: &end, DurationMS: took.Milliseconds()}}}
		if err := a.writeCR(&out, p, nil, ev, &changes.Report{Intact: true}); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`\n0001-test +make test +✓ passed +` + regexp.QuoteMeta(want) + `\n`).MatchString(out.String()) {
			t.Errorf("cr show of a step of %v, want %q:\n%s", took, want, out.String())
		}
	}
}
