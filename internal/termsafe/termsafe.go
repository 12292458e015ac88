// Package termsafe makes text that xmode did not write itself — file names,
// commit messages and change-request titles out of a sandbox, task titles
// and transcripts out of the Codex cloud, a plan's step names — inert on a
// terminal: every character a terminal would act on instead of show is
// printed as a visible escape (docs/conventions.md, "Hostile text on the
// terminal").
//
// What is escaped: the C0 controls and DEL (ESC starts every CSI and OSC
// sequence: clear the screen, move the cursor over earlier lines, write the
// clipboard with OSC 52, disguise a link with OSC 8; BEL, backspace and a
// carriage return rewrite what is shown), the C1 controls (U+0080–U+009F:
// U+009B is CSI on terminals that read 8-bit controls), the Unicode format
// characters (category Cf: the bidi embeddings, overrides and isolates
// U+202A–U+202E and U+2066–U+2069 that reorder what a reviewer reads, the
// marks U+200E, U+200F and U+061C, zero-width spaces and joiners other
// than ZWJ and ZWNJ, the BOM, tag characters that smuggle invisible text)
// and the line and paragraph separators U+2028 and U+2029; and every byte
// that is not UTF-8. Tabs, and ordinary UTF-8 text of every script, stay
// as they are; so do ZWJ and ZWNJ (U+200D, U+200C), which emoji sequences
// and several scripts need and which move nothing.
//
// The form is Go's and C's backslash escape, as git quotes a path with
// control characters in it (core.quotePath) but in hex: \x1b for ESC, \x07
// for BEL, \n and \r, \u009b for a C1 control, \u202e for a format
// character, \xff for a byte that is not UTF-8. It is unambiguous about
// which character it was and copies into printf(1) or a Go string as is.
package termsafe

import (
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with every character a terminal would act on escaped,
// newlines included: for text that must stay on one line (a table cell, a
// title, an error message's line).
func Escape(s string) string { return escape(s, false) }

// EscapeText is Escape for text that may have several lines: newlines stay
// (and a carriage return right before one, a CRLF line ending), everything
// else is escaped as by Escape.
func EscapeText(s string) string { return escape(s, true) }

// safeSlow reports whether s needs no escaping, rune by rune.
func safeSlow(s string, text bool) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || dangerous(r, text) && !(text && r == '\r' && strings.HasPrefix(s[i+1:], "\n")) {
			return false
		}
		i += n
	}
	return true
}

// dangerous reports whether r must be escaped; text keeps newlines.
func dangerous(r rune, text bool) bool {
	switch {
	case r == '\t':
		return false
	case r == '\n':
		return !text
	case r < 0x20, r >= 0x7f && r < 0xa0:
		return true
	case r < 0xa0:
		return false
	case r == 0x200c, r == 0x200d: // ZWNJ, ZWJ
		return false
	case r == 0x2028, r == 0x2029:
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

func escape(s string, text bool) string {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' && !(text && c == '\n') || c >= 0x7f {
			plain = false
			break
		}
	}
	if plain || safeSlow(s, text) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	appendEscaped(&b, s, text)
	return b.String()
}

// appendEscaped writes s to b escaped.
func appendEscaped(b *strings.Builder, s string, text bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case text && r == '\r' && strings.HasPrefix(s[i+1:], "\n"):
			b.WriteByte('\r')
		case !dangerous(r, text):
			b.WriteString(s[i : i+n])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			b.WriteString(`\x`)
			b.WriteString(hex2(byte(r)))
		default:
			q := strconv.QuoteRuneToASCII(r) // '\u202e', '\U000e0041'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}

// Writer escapes a stream as EscapeText does: for text that reaches a
// terminal through a writer (a patch shown to a reviewer, the notes a
// package prints as it works). A character split across two writes is
// escaped whole, and a carriage return at the end of a write waits for the
// next to tell a CRLF line ending from one that rewrites the line; Flush
// writes what is held back at the end.
type Writer struct {
	w       io.Writer
	pending []byte
	buf     strings.Builder
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p (and what an earlier write held back) to the underlying
// writer; it reports len(p) written unless that writer failed.
func (t *Writer) Write(p []byte) (int, error) {
	data := p
	if len(t.pending) > 0 {
		data = append(t.pending, p...)
		t.pending = nil
	}
	cut := holdBack(data)
	if err := t.emit(data[:cut]); err != nil {
		return 0, err
	}
	t.pending = append(t.pending[:0], data[cut:]...)
	return len(p), nil
}

// Flush writes what a write held back (an incomplete character, escaped
// byte by byte; a lone carriage return).
func (t *Writer) Flush() error {
	p := t.pending
	t.pending = nil
	return t.emit(p)
}

func (t *Writer) emit(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	s := string(p)
	if safeSlow(s, true) {
		_, err := io.WriteString(t.w, s)
		return err
	}
	t.buf.Reset()
	appendEscaped(&t.buf, s, true)
	_, err := io.WriteString(t.w, t.buf.String())
	return err
}

// holdBack is where the part of p that can be escaped now ends: before a
// trailing carriage return, or a trailing UTF-8 sequence that is not
// complete yet.
func holdBack(p []byte) int {
	n := len(p)
	if n > 0 && p[n-1] == '\r' {
		return n - 1
	}
	// The start of the last character, at most UTFMax-1 bytes back.
	for i := n - 1; i >= 0 && i >= n-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return i
			}
			break
		}
	}
	return n
}

// Pieces splits s into what a terminal would show as it is and what Escape
// (or, with text, EscapeText) would escape, in order: fn gets each run of
// plain text with escaped false, and each character to escape, already in
// its escaped form (`\x1b`, `\u202e`, `\xff`), with escaped true. It is how
// another medium (the web UI's HTML) shows the same characters as visible,
// marked escapes.
func Pieces(s string, text bool, fn func(piece string, escaped bool)) {
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		bad := r == utf8.RuneError && n <= 1 ||
			dangerous(r, text) && !(text && r == '\r' && strings.HasPrefix(s[i+1:], "\n"))
		if !bad {
			i += n
			continue
		}
		if start < i {
			fn(s[start:i], false)
		}
		var b strings.Builder
		appendEscaped(&b, s[i:i+n], text)
		fn(b.String(), true)
		i += n
		start = i
	}
	if start < len(s) {
		fn(s[start:], false)
	}
}
