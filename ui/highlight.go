package ui

import (
	"embed"
	"html/template"
	"io/fs"
	"path"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/chroma/v2"
)

// Syntax highlighting of a diff with chroma (docs/dependencies.md,
// "The libraries"): its engine, and the lexers of lexers/ built the first
// time a diff is shown, never when the binary starts.

//go:embed lexers/*.xml
var lexerFS embed.FS

type highlighter struct {
	once sync.Once
	reg  *chroma.LexerRegistry
}

// registry builds the lexers once.
func (h *highlighter) registry() *chroma.LexerRegistry {
	h.once.Do(func() {
		reg := chroma.NewLexerRegistry()
		paths, _ := fs.Glob(lexerFS, "lexers/*.xml")
		for _, p := range paths {
			if l, err := chroma.NewXMLLexer(lexerFS, p); err == nil {
				reg.Register(l)
			}
		}
		reg.Register(goLexer())
		h.reg = reg
	})
	return h.reg
}

// lexer is the lexer for a file by its name, nil when none fits.
func (h *highlighter) lexer(file string) chroma.Lexer {
	return h.registry().Match(path.Base(file))
}

// Bounds of highlighting: what a page's files cost to lex at most, and
// the longest line and hunk side worth lexing (a minified file is shown
// plain). chroma's regular expressions backtrack, and what they lex is a
// sandbox's writing: each match is bounded by chroma (250 ms), the whole
// page by highlightBudget, after which the rest is shown plain.
const (
	highlightBudget = 200 * time.Millisecond
	maxLexLine      = 1000
	maxLexSide      = 256 << 10
)

// highlight sets the HTML of every line of the page's files, and returns
// when all of them are set.
func (h *highlighter) highlight(page *diffPage) {
	h.start(page)
	for _, f := range page.Files {
		for _, hk := range f.Hunks {
			hk.Wait()
		}
	}
}

// start sets the HTML of every line of the page's files in the background,
// closing each hunk's lexed as its lines are done (hunk.Wait): their tokens
// in classes where a lexer fits and the budget lasts, plain text otherwise.
// Every token's text goes through the hostile-text escaping. Hunks are lexed
// in file order, one worker per processor: lexing is most of a large page's
// time, and the page's top is rendered meanwhile.
func (h *highlighter) start(page *diffPage) {
	deadline := time.Now().Add(highlightBudget)
	type job struct {
		lx chroma.Lexer
		hk *hunk
	}
	var jobs []job
	for _, f := range page.Files {
		var lx chroma.Lexer
		if !f.Binary && len(f.Hunks) > 0 {
			lx = h.lexer(f.Path())
		}
		for _, hk := range f.Hunks {
			hk.lexed = make(chan struct{})
			jobs = append(jobs, job{lx, hk})
		}
	}
	if len(jobs) == 0 {
		return
	}
	next := make(chan job, len(jobs))
	for _, j := range jobs {
		next <- j
	}
	close(next)
	for range min(len(jobs), max(1, runtime.GOMAXPROCS(0))) {
		go func() {
			for j := range next {
				if j.lx == nil || !time.Now().Before(deadline) || !h.lexHunk(j.lx, j.hk, deadline) {
					for _, l := range j.hk.Lines {
						l.HTML = plainLine(l.Text)
					}
				}
				close(j.hk.lexed)
			}
		}()
	}
}

// plainLine is a diff line's text as escaped HTML.
func plainLine(s string) template.HTML {
	var b strings.Builder
	writeEscaped(&b, s, false, "span")
	return template.HTML(b.String())
}

// lexHunk highlights one hunk: its old side (context and deletions) and
// its new side (context and additions) lexed as two texts, so that a
// comment or a string over several lines is one, then split back into the
// hunk's lines. It reports false (and changes nothing) when a side is too
// large, the lexer fails, or the deadline passes.
func (h *highlighter) lexHunk(lx chroma.Lexer, hk *hunk, deadline time.Time) (ok bool) {
	defer func() {
		if recover() != nil { // a lexer's panic on input it did not expect
			ok = false
		}
	}()
	var oldSide, newSide []*dline
	for _, l := range hk.Lines {
		if len(l.Text) > maxLexLine {
			return false
		}
		switch l.Kind {
		case ' ':
			oldSide, newSide = append(oldSide, l), append(newSide, l)
		case '-':
			oldSide = append(oldSide, l)
		case '+':
			newSide = append(newSide, l)
		}
	}
	oldHTML, ok1 := lexLines(lx, oldSide, deadline)
	newHTML, ok2 := lexLines(lx, newSide, deadline)
	if !ok1 || !ok2 {
		return false
	}
	oi, ni := 0, 0
	for _, l := range hk.Lines {
		switch l.Kind {
		case ' ':
			l.HTML = newHTML[ni]
			oi, ni = oi+1, ni+1
		case '-':
			l.HTML = oldHTML[oi]
			oi++
		case '+':
			l.HTML = newHTML[ni]
			ni++
		default:
			l.HTML = plainLine(l.Text)
		}
	}
	return true
}

// lexLines lexes lines as one text and returns each line's HTML.
func lexLines(lx chroma.Lexer, lines []*dline, deadline time.Time) ([]template.HTML, bool) {
	if len(lines) == 0 {
		return nil, true
	}
	var text strings.Builder
	for _, l := range lines {
		text.WriteString(l.Text)
		text.WriteByte('\n')
		if text.Len() > maxLexSide {
			return nil, false
		}
	}
	// Not EnsureLF: a \r in a line must not become a line of its own.
	it, err := lx.Tokenise(&chroma.TokeniseOptions{State: "root"}, text.String())
	if err != nil {
		return nil, false
	}
	out := make([]template.HTML, 0, len(lines))
	var b strings.Builder
	n := 0
	for tok := it(); tok != chroma.EOF; tok = it() {
		if n++; n%256 == 0 && time.Now().After(deadline) {
			return nil, false
		}
		class := tokenClass(tok.Type)
		// A token may span lines (a block comment): each line gets its part.
		for v := tok.Value; v != ""; {
			part, rest, nl := strings.Cut(v, "\n")
			if part != "" {
				if class != "" {
					b.WriteString(`<span class="` + class + `">`)
				}
				writeEscaped(&b, part, false, "span")
				if class != "" {
					b.WriteString(`</span>`)
				}
			}
			if !nl {
				break
			}
			out = append(out, template.HTML(b.String()))
			b.Reset()
			v = rest
		}
	}
	if b.Len() > 0 {
		out = append(out, template.HTML(b.String()))
	}
	if len(out) < len(lines) { // a lexer that dropped text: do not guess
		return nil, false
	}
	return out[:len(lines)], true
}

// tokenClass is the CSS class (app.css, "Syntax") of a token type: a few
// families a reviewer tells apart, not chroma's every shade.
func tokenClass(t chroma.TokenType) string {
	switch {
	case t == chroma.KeywordType:
		return "kt"
	case t == chroma.KeywordConstant:
		return "kc"
	case t.InCategory(chroma.Keyword):
		return "k"
	case t == chroma.NameFunction || t == chroma.NameFunctionMagic:
		return "nf"
	case t == chroma.NameBuiltin || t == chroma.NameBuiltinPseudo:
		return "nb"
	case t == chroma.NameClass || t == chroma.NameNamespace:
		return "nc"
	case t == chroma.NameTag:
		return "nt"
	case t == chroma.NameAttribute || t == chroma.NameDecorator:
		return "na"
	case t.InSubCategory(chroma.LiteralString):
		return "s"
	case t.InSubCategory(chroma.LiteralNumber):
		return "m"
	case t == chroma.CommentPreproc || t == chroma.CommentPreprocFile:
		return "cp"
	case t.InCategory(chroma.Comment):
		return "c"
	case t.InCategory(chroma.Operator):
		return "o"
	case t.InCategory(chroma.Generic) && t == chroma.GenericHeading:
		return "gh"
	}
	return ""
}
