package ui

import (
	"html/template"
	"strings"
	"unicode/utf8"

	"github.com/xmode/xmode/internal/termsafe"
)

// Everything the UI shows that xmode did not write — file names, diffs,
// logs, commit messages, objectives, step names, cloud titles and
// transcripts, error messages that quote them — comes from a sandbox, an
// agent or the cloud and is hostile (docs/ui.md, "Security"). It reaches
// the page only through these functions: HTML-escaped, and every character
// a terminal or the bidi algorithm would act on instead of show (controls,
// ESC, bidi overrides and isolates, zero-width characters, bytes that are
// not UTF-8) shown as termsafe's visible escape (`\x1b`, `\u202e`, `\xff`)
// in a marked span, so a reviewer sees that it is there and it moves
// nothing. Each value is isolated (<bdi>) so right-to-left text in it
// cannot reorder what is around it.

// maxShown bounds one value on a page (a title, a path, a line of a
// transcript): what is longer is cut, and the cut said.
const maxShown = 4096

// hostile is one line of hostile text: newlines are escapes too.
func hostile(s string) template.HTML { return render(s, false, "bdi", "span") }

// hostileText is hostile text of several lines (a commit message, an
// objective): newlines stay, for a white-space: pre-wrap block.
func hostileText(s string) template.HTML { return render(s, true, "bdi", "span") }

// hostileSVG is hostile for inside an SVG <text>: tspans instead of spans.
func hostileSVG(s string) template.HTML { return render(s, false, "tspan", "tspan") }

func render(s string, text bool, wrap, mark string) template.HTML {
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString("<" + wrap + ">")
	cut := false
	if len(s) > maxShown {
		s, cut = clip(s, maxShown), true
	}
	writeEscaped(&b, s, text, mark)
	if cut {
		b.WriteString(`<` + mark + ` class="cut">… (cut)</` + mark + `>`)
	}
	b.WriteString("</" + wrap + ">")
	return template.HTML(b.String())
}

// writeEscaped writes s to b as HTML, the characters termsafe escapes in
// marked elements (<span class="esc">, or tspans in SVG).
func writeEscaped(b *strings.Builder, s string, text bool, mark string) {
	termsafe.Pieces(s, text, func(p string, escaped bool) {
		if !escaped {
			template.HTMLEscape(b, []byte(p))
			return
		}
		b.WriteString(`<` + mark + ` class="esc">`)
		b.WriteString(p) // backslash, hex digits and letters only
		b.WriteString(`</` + mark + `>`)
	})
}

// clip cuts s to at most n bytes on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// firstLine is the first line of s (an objective's title), trimmed.
func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l)
}

// truncate cuts s to n characters, with an ellipsis.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// termsafeText is termsafe.Pieces for text that keeps its newlines.
func termsafeText(s string, fn func(string, bool)) { termsafe.Pieces(s, true, fn) }

// writeHTML writes s HTML-escaped.
func writeHTML(b *strings.Builder, s string) { template.HTMLEscape(b, []byte(s)) }
