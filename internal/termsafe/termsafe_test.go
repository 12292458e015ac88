package termsafe

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	cases := map[string]string{
		"":            "",
		"plain title": "plain title",
		"tab\tstays":  "tab\tstays",
		"héllo wörld 日本語 ✓ 👨‍👩‍👧": "héllo wörld 日本語 ✓ 👨‍👩‍👧", // ZWJ sequence intact
		"\x1b[2Jclear":                            `\x1b[2Jclear`,
		"\x1b]52;c;cGF5bG9hZA==\x07":              `\x1b]52;c;cGF5bG9hZA==\x07`,    // OSC 52 clipboard write
		"\x1b]8;;https://evil\x1b\\link":          `\x1b]8;;https://evil\x1b\link`, // OSC 8 link
		"bell\x07 bs\x08 del\x7f nul\x00":         `bell\x07 bs\x08 del\x7f nul\x00`,
		"two\nlines\r\n":                          `two\nlines\r\n`,
		"csi8\u009b2J nel\u0085":                  `csi8\u009b2J nel\u0085`,
		"admin\u202e\u2066txt.exe":                `admin\u202e\u2066txt.exe`,
		"lrm\u200e rlm\u200f alm\u061c pdi\u2069": `lrm\u200e rlm\u200f alm\u061c pdi\u2069`,
		"zero\u200bwidth bom\ufeff shy\u00ad":     `zero\u200bwidth bom\ufeff shy\u00ad`,
		"line\u2028sep":                           `line\u2028sep`,
		"tag\U000E0041":                           `tag\U000e0041`,
		"bad\xffutf8\xe2\x82":                     `bad\xffutf8\xe2\x82`,
	}
	for in, want := range cases {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
		if got := Escape(in); !inert(got, false) {
			t.Errorf("Escape(%q) = %q: still has a character a terminal acts on", in, got)
		}
	}
}

func TestEscapeText(t *testing.T) {
	cases := map[string]string{
		"a\nb\n":             "a\nb\n",
		"crlf\r\nkept\r\n":   "crlf\r\nkept\r\n",
		"over\rwrite\n":      `over\rwrite` + "\n",
		"trailing cr\r":      `trailing cr\r`,
		"\x1b[1A\x1b[2Kgone": `\x1b[1A\x1b[2Kgone`,
		"ok\tcode\n":         "ok\tcode\n",
	}
	for in, want := range cases {
		if got := EscapeText(in); got != want {
			t.Errorf("EscapeText(%q) = %q, want %q", in, got, want)
		}
	}
}

// inert: nothing in s but printable text, tabs (and with text newlines and
// CRLF endings).
func inert(s string, text bool) bool {
	for i, r := range s {
		if r == utf8.RuneError || r == '\r' && !(text && strings.HasPrefix(s[i+1:], "\n")) {
			return false
		}
		if r != '\r' && dangerous(r, text) {
			return false
		}
	}
	return true
}

// The writer gives what EscapeText gives, however the stream is cut:
// a character or a CRLF split across writes is seen whole.
func TestWriterAnyCut(t *testing.T) {
	text := "diff\r\n+ok 日本\u202eevil\x1b[2J\r\nend\rx\xe2\x82\xac\xff€"
	want := EscapeText(text)
	for cut := 0; cut <= len(text); cut++ {
		var out bytes.Buffer
		w := NewWriter(&out)
		for _, part := range []string{text[:cut], text[cut:]} {
			if n, err := w.Write([]byte(part)); err != nil || n != len(part) {
				t.Fatalf("Write: %d, %v", n, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Fatalf("cut at %d: %q, want %q", cut, out.String(), want)
		}
	}
	var out bytes.Buffer
	w := NewWriter(&out)
	for i := 0; i < len(text); i++ {
		w.Write([]byte{text[i]})
	}
	w.Flush()
	if out.String() != want {
		t.Fatalf("byte by byte: %q, want %q", out.String(), want)
	}
	if !inert(want, true) {
		t.Fatalf("%q is not inert", want)
	}
}

// An incomplete character at the very end is escaped byte by byte at Flush.
func TestWriterFlushesAnIncompleteCharacter(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	w.Write([]byte("x\xe2\x82"))
	if out.String() != "x" {
		t.Fatalf("before Flush: %q", out.String())
	}
	w.Flush()
	if out.String() != `x\xe2\x82` {
		t.Fatalf("after Flush: %q", out.String())
	}
}

func BenchmarkEscapePlain(b *testing.B) {
	s := strings.Repeat("internal/termsafe/termsafe.go ", 4)
	for b.Loop() {
		Escape(s)
	}
}

// Pieces splits text as Escape escapes it: joined, the pieces are Escape's
// output, and every escaped piece is one character's escape.
func TestPieces(t *testing.T) {
	for _, s := range []string{"", "plain", "a\x1b[31mred\x1b[0m", "\u202eevil\u202c", "x\xffy", "line\r\nnext\rover", "tab\there\n"} {
		for _, text := range []bool{false, true} {
			var joined strings.Builder
			Pieces(s, text, func(p string, escaped bool) {
				if escaped && (!strings.HasPrefix(p, `\`) || len(p) < 2) {
					t.Errorf("%q: escaped piece %q", s, p)
				}
				if !escaped && escape(p, text) != p {
					t.Errorf("%q: plain piece %q needs escaping", s, p)
				}
				joined.WriteString(p)
			})
			if want := escape(s, text); joined.String() != want {
				t.Errorf("Pieces(%q, %v) joined = %q, want %q", s, text, joined.String(), want)
			}
		}
	}
}
