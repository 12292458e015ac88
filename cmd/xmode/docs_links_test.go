package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/xmode/xmode/internal/testenv"
)

// TestDocsLinksResolve keeps the docs' links whole when a section moves:
// every relative link of README.md, docs/*.md and docs/cli/*.md names a
// file that exists and, with a #fragment, a heading of that page (GitHub's
// anchor for it); and every docs/<page>.md a doc or a Go comment names
// exists. Citations of a section by its title are TestDocsCiteTheRepository's.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	top, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	docs := append([]string{"README.md"}, globDocs(t, top)...)
	anchors := map[string]map[string]bool{} // page (relative to top) → its anchors
	anchorsOf := func(page string) (map[string]bool, error) {
		if a, ok := anchors[page]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(top, page))
		if err != nil {
			return nil, err
		}
		a := markdownAnchors(string(b))
		anchors[page] = a
		return a, nil
	}
	linkRE := regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	pageRE := regexp.MustCompile(`\bdocs/([a-z0-9-]+\.md)\b`)
	inlineCodeRE := regexp.MustCompile("`[^`\n]*`")
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(filepath.Join(top, doc))
		if err != nil {
			t.Fatal(err)
		}
		text := inlineCodeRE.ReplaceAllString(stripMarkdownCode(string(b)), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			page := doc
			if file != "" {
				page = filepath.ToSlash(filepath.Join(filepath.Dir(doc), file))
				if _, err := os.Stat(filepath.Join(top, page)); err != nil {
					t.Errorf("%s links to %s: no such file (%s)", doc, target, page)
					continue
				}
			}
			checked++
			if frag == "" || !strings.HasSuffix(page, ".md") {
				continue
			}
			a, err := anchorsOf(page)
			if err != nil {
				t.Fatal(err)
			}
			if !a[frag] {
				t.Errorf("%s links to %s: %s has no heading whose anchor is #%s", doc, target, page, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d links checked: the link pattern no longer finds the docs' links", checked)
	}
	// Pages named in prose and in Go comments, of the files git tracks
	// (upstream's code in third_party/ cites none of ours).
	out, err := exec.Command("git", "-C", top, "ls-files", "-z", "--", "*.go", "*.md").Output()
	if err != nil {
		testenv.Skip(t, "git ls-files: %v (not a git checkout)", err)
	}
	var named []string
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "third_party/") || name == "third_party/README.md" {
			named = append(named, filepath.Join(top, name))
		}
	}
	for _, path := range named {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(top, path)
		text := string(b)
		if strings.HasSuffix(path, ".go") {
			// Only comments: tests' string literals name pages of made-up
			// repositories.
			var comments []string
			for _, l := range strings.Split(text, "\n") {
				if _, c, ok := strings.Cut(l, "//"); ok {
					comments = append(comments, c)
				}
			}
			text = strings.Join(comments, "\n")
		}
		for _, m := range pageRE.FindAllStringSubmatch(text, -1) {
			if _, err := os.Stat(filepath.Join(top, "docs", m[1])); err != nil {
				t.Errorf("%s names docs/%s, which does not exist", rel, m[1])
			}
		}
	}
}

// markdownAnchors lists the anchors GitHub gives a page's headings: the
// heading's text lower-cased, code marks and punctuation other than '-'
// and '_' dropped, spaces made '-', and a repeated anchor numbered (-1,
// -2, …).
func markdownAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(stripMarkdownCode(text), "\n") {
		h := strings.TrimLeft(l, "#")
		if h == l || len(l)-len(h) > 6 || !strings.HasPrefix(h, " ") {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				slug.WriteRune(r)
			}
		}
		s := slug.String()
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// stripMarkdownCode blanks fenced code blocks, whose lines are neither
// headings nor links.
func stripMarkdownCode(text string) string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, l := range lines {
		trim := strings.TrimSpace(l)
		switch {
		case fence == "" && (strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~")):
			fence = trim[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}
