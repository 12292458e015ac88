package ui

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// A step's output as a reviewer reads it: SGR colours and styles (bold,
// faint, italic, underline; 16, 256 and 24-bit colours, the last two
// mapped to the nearest of the 16) become CSS classes, and nothing else a
// terminal would act on is acted on. Every other escape sequence — cursor
// movement and erasure (which could draw over lines the reviewer must
// read), OSC (the clipboard, OSC 8 links, titles), DCS, APC, PM, SOS — and
// every other control character, bidi override or byte that is not UTF-8
// is shown as a visible, marked escape, as internal/termsafe shows it on
// a terminal. A terminal emulator library (buildkite/terminal-to-html)
// would execute cursor movement and render OSC 8 links and inline images;
// the converters that only translate SGR (robert-nix/ansihtml) drop the
// rest silently and emit style attributes the page's CSP refuses. So this
// is xmode's own, small and total: it never emits an attribute but a class
// from a fixed set, and it is fed a stream in any pieces (a log page, the
// bytes a live step just wrote), holding back a sequence or a character
// split across two.

// seg is one run of output with one style: Text is shown as it is (the
// HTML escaping is the caller's), or, with Esc, it is an escape.
type seg struct {
	Text  string `json:"t"`
	Class string `json:"c,omitempty"`
	Esc   bool   `json:"e,omitempty"`
}

// ansi is the converter's state: the current style, and what the last
// feed held back.
type ansi struct {
	fg, bg                         int // -1: default; 0-15
	bold, faint, italic, underline bool
	held                           []byte
}

func newANSI() *ansi { return &ansi{fg: -1, bg: -1} }

// Limits of one escape sequence: a longer one is not a sequence a terminal
// would take, and its ESC is shown alone.
const (
	maxCSI = 64
	maxOSC = 4096
)

// feed converts p (after what the last feed held back) into segments. A
// sequence or a character that p ends in the middle of is held back for
// the next feed (pending says how many bytes), unless final (the end of
// the output, or of what will be shown): then it is shown as the escapes
// it begins with.
func (a *ansi) feed(p []byte, final bool) (out []seg) {
	data := p
	if len(a.held) > 0 {
		data = append(a.held, p...)
	}
	a.held = nil
	text := 0 // start of the plain text not yet emitted
	i := 0
	flush := func(end int) {
		if end > text {
			out = a.appendText(out, string(data[text:end]))
		}
	}
	for i < len(data) {
		if data[i] != 0x1b {
			i++
			continue
		}
		n, kind := sequence(data[i:])
		if n == 0 && !final { // incomplete: wait for more
			flush(i)
			a.held = append([]byte(nil), data[i:]...)
			return out
		}
		flush(i)
		switch {
		case n == 0 || kind == seqNone:
			// A lone ESC (or one that starts no sequence that ends): shown
			// alone, and what follows is text.
			out = append(out, seg{Text: `\x1b`, Esc: true})
			i++
		case kind == seqSGR:
			a.sgr(string(data[i+2 : i+n-1]))
			i += n
		default:
			out = append(out, seg{Text: escapeSeq(data[i : i+n]), Esc: true})
			i += n
		}
		text = i
	}
	// Hold back a character split across feeds, and a trailing \r (it may
	// be the first half of a CRLF).
	end := len(data)
	if !final {
		end = holdText(data, text)
		a.held = append([]byte(nil), data[end:]...)
	}
	flush(end)
	return out
}

// pending is how many bytes fed so far the segments do not cover yet.
func (a *ansi) pending() int { return len(a.held) }

// holdText is where the plain text data[from:] can be cut now.
func holdText(data []byte, from int) int {
	n := len(data)
	if n > from && data[n-1] == '\r' {
		return n - 1
	}
	for i := n - 1; i >= from && i >= n-utf8.UTFMax; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				return i
			}
			break
		}
	}
	return n
}

type seqKind int

const (
	seqNone seqKind = iota
	seqSGR
	seqOther
)

// sequence measures the escape sequence at the start of b (b[0] is ESC):
// its length, 0 when b ends before it does, and whether it is an SGR.
func sequence(b []byte) (int, seqKind) {
	if len(b) < 2 {
		return 0, seqNone
	}
	switch b[1] {
	case '[': // CSI: parameters 0x30-0x3f, intermediates 0x20-0x2f, final 0x40-0x7e
		for j := 2; j < len(b); j++ {
			c := b[j]
			switch {
			case c >= 0x40 && c <= 0x7e:
				if c == 'm' && sgrParams(b[2:j]) {
					return j + 1, seqSGR
				}
				return j + 1, seqOther
			case c >= 0x20 && c <= 0x3f:
				if j >= maxCSI {
					return 1, seqNone
				}
			default:
				return 1, seqNone // not a CSI after all
			}
		}
		if len(b) >= maxCSI {
			return 1, seqNone
		}
		return 0, seqNone
	case ']', 'P', '_', '^', 'X': // OSC, DCS, APC, PM, SOS: to BEL or ST (ESC \)
		for j := 2; j < len(b); j++ {
			if j > maxOSC {
				return 1, seqNone
			}
			if b[j] == 0x07 && b[1] == ']' {
				return j + 1, seqOther
			}
			if b[j] == 0x1b {
				if j+1 == len(b) {
					return 0, seqNone
				}
				if b[j+1] == '\\' {
					return j + 2, seqOther
				}
				return 1, seqNone
			}
		}
		if len(b) > maxOSC {
			return 1, seqNone
		}
		return 0, seqNone
	}
	if b[1] >= 0x20 && b[1] <= 0x7e { // ESC and one character: ESC 7, ESC c, ESC (B…
		if b[1] >= 0x20 && b[1] <= 0x2f { // an intermediate: one more
			if len(b) < 3 {
				return 0, seqNone
			}
			return 3, seqOther
		}
		return 2, seqOther
	}
	return 1, seqNone
}

// sgrParams reports whether an SGR's parameters are digits and separators.
func sgrParams(p []byte) bool {
	for _, c := range p {
		if !(c >= '0' && c <= '9' || c == ';' || c == ':') {
			return false
		}
	}
	return true
}

// escapeSeq shows a sequence as its escapes: ESC as \x1b, the rest as
// termsafe would show it (its own controls escaped too).
func escapeSeq(b []byte) string {
	var s strings.Builder
	for _, piece := range splitPieces(string(b)) {
		s.WriteString(piece.Text)
	}
	return s.String()
}

// appendText adds plain text in the current style, its controls, bidi
// overrides and bad bytes as escape segments.
func (a *ansi) appendText(out []seg, s string) []seg {
	class := a.class()
	for _, p := range splitPieces(s) {
		if p.Esc {
			out = append(out, p)
			continue
		}
		if n := len(out); n > 0 && !out[n-1].Esc && out[n-1].Class == class {
			out[n-1].Text += p.Text
			continue
		}
		out = append(out, seg{Text: p.Text, Class: class})
	}
	return out
}

// sgr applies one SGR's parameters to the style.
func (a *ansi) sgr(params string) {
	if params == "" {
		params = "0"
	}
	ps := strings.FieldsFunc(params, func(r rune) bool { return r == ';' || r == ':' })
	num := func(i int) int {
		if i >= len(ps) {
			return -1
		}
		n, err := strconv.Atoi(ps[i])
		if err != nil || n > 255 {
			return -1
		}
		return n
	}
	for i := 0; i < len(ps); i++ {
		switch n := num(i); {
		case n == 0:
			*a = ansi{fg: -1, bg: -1}
		case n == 1:
			a.bold = true
		case n == 2:
			a.faint = true
		case n == 3:
			a.italic = true
		case n == 4:
			a.underline = true
		case n == 22:
			a.bold, a.faint = false, false
		case n == 23:
			a.italic = false
		case n == 24:
			a.underline = false
		case n >= 30 && n <= 37:
			a.fg = n - 30
		case n == 39:
			a.fg = -1
		case n >= 40 && n <= 47:
			a.bg = n - 40
		case n == 49:
			a.bg = -1
		case n >= 90 && n <= 97:
			a.fg = n - 90 + 8
		case n >= 100 && n <= 107:
			a.bg = n - 100 + 8
		case n == 38 || n == 48:
			c, used := extendedColour(num, i+1)
			i += used
			if n == 38 {
				a.fg = c
			} else {
				a.bg = c
			}
		}
	}
}

// extendedColour reads 5;N (256 colours) or 2;R;G;B at ps[i:], as one of
// the 16 basic colours (-1 when malformed), and how many parameters it used.
func extendedColour(num func(int) int, i int) (int, int) {
	switch num(i) {
	case 5:
		n := num(i + 1)
		if n < 0 {
			return -1, 2
		}
		return basic256(n), 2
	case 2:
		r, g, b := num(i+1), num(i+2), num(i+3)
		if r < 0 || g < 0 || b < 0 {
			return -1, 4
		}
		return nearest(r, g, b), 4
	}
	return -1, 1
}

// basic256 maps a 256-colour index to the nearest of the first 16.
func basic256(n int) int {
	switch {
	case n < 16:
		return n
	case n < 232:
		n -= 16
		level := [6]int{0, 95, 135, 175, 215, 255}
		return nearest(level[n/36], level[n/6%6], level[n%6])
	}
	v := 8 + (n-232)*10
	return nearest(v, v, v)
}

// xterm's 16 colours, for nearest.
var palette = [16][3]int{
	{0, 0, 0}, {205, 0, 0}, {0, 205, 0}, {205, 205, 0}, {0, 0, 238}, {205, 0, 205}, {0, 205, 205}, {229, 229, 229},
	{127, 127, 127}, {255, 0, 0}, {0, 255, 0}, {255, 255, 0}, {92, 92, 255}, {255, 0, 255}, {0, 255, 255}, {255, 255, 255},
}

func nearest(r, g, b int) int {
	best, bestD := 0, 1<<30
	for i, c := range palette {
		d := (c[0]-r)*(c[0]-r) + (c[1]-g)*(c[1]-g) + (c[2]-b)*(c[2]-b)
		if d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// class is the current style as CSS classes (app.css: .f0-.f15, .b0-.b15,
// .sb bold, .sf faint, .si italic, .su underline).
func (a *ansi) class() string {
	var c []string
	if a.fg >= 0 {
		c = append(c, "f"+strconv.Itoa(a.fg))
	}
	if a.bg >= 0 {
		c = append(c, "b"+strconv.Itoa(a.bg))
	}
	if a.bold {
		c = append(c, "sb")
	}
	if a.faint {
		c = append(c, "sf")
	}
	if a.italic {
		c = append(c, "si")
	}
	if a.underline {
		c = append(c, "su")
	}
	return strings.Join(c, " ")
}

// splitPieces is termsafe's split of text (newlines kept) as segments.
func splitPieces(s string) []seg {
	var out []seg
	termsafeText(s, func(p string, escaped bool) { out = append(out, seg{Text: p, Esc: escaped}) })
	return out
}

// segsHTML renders segments as HTML: escaped text in spans of their class.
func segsHTML(b *strings.Builder, segs []seg) {
	for _, s := range segs {
		switch {
		case s.Esc:
			b.WriteString(`<span class="esc">`)
			writeHTML(b, s.Text)
			b.WriteString(`</span>`)
		case s.Class != "":
			b.WriteString(`<span class="`)
			b.WriteString(s.Class) // from class(): letters, digits, spaces
			b.WriteString(`">`)
			writeHTML(b, s.Text)
			b.WriteString(`</span>`)
		default:
			writeHTML(b, s.Text)
		}
	}
}
