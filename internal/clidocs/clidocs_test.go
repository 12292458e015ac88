package clidocs

import (
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/russross/blackfriday/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xmode/xmode/cmd"
)

// docs/cli says what --help says: regenerating it changes nothing. When
// this fails, run `make docs` and commit the result.
func TestReferenceUpToDate(t *testing.T) {
	fresh := t.TempDir()
	if err := Markdown(fresh); err != nil {
		t.Fatal(err)
	}
	committed := filepath.Join("..", "..", "docs", "cli")
	want := files(t, fresh)
	have := files(t, committed)
	for name, text := range want {
		if got, ok := have[name]; !ok {
			t.Errorf("docs/cli/%s is missing: run `make docs`", name)
		} else if got != text {
			t.Errorf("docs/cli/%s is stale (it differs from the command's --help): run `make docs`", name)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/cli/%s documents a command that no longer exists: run `make docs`", name)
		}
	}
}

// The man pages generate (make install installs them).
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if err := Man(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "xmode-sandbox-shell.1")); err != nil {
		t.Fatalf("no man page for xmode sandbox shell: %v", err)
	}
	// Every <run>-style placeholder of the help text and the flags' usage
	// is in the man page, not eaten as an HTML tag (runs//steps).
	seen := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		page, err := os.ReadFile(filepath.Join(dir, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1"))
		if err != nil {
			t.Fatal(err)
		}
		text := c.Long
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { text += "\n" + f.Usage })
		for _, p := range placeholder.FindAllString(text, -1) {
			seen++
			if !strings.Contains(string(page), p) {
				t.Errorf("%s.1 lost the placeholder %s", strings.ReplaceAll(c.CommandPath(), " ", "-"), p)
			}
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(cmd.Tree())
	if seen < 5 {
		t.Fatalf("only %d placeholders in the help: the check proves nothing", seen)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "xmode-cr.1")); !strings.Contains(string(b), "runs/<run>/change_requests/<n>/") {
		t.Errorf("xmode-cr.1 does not say runs/<run>/change_requests/<n>/")
	}
	// Every EXIT STATUS section keeps its lines: a preformatted block
	// (.EX), not a paragraph troff fills.
	sections := 0
	eachCommand(cmd.Tree(), func(c *cobra.Command, name string) {
		lines := exitStatusLines(c.Long)
		if lines == nil {
			return
		}
		sections++
		page, err := os.ReadFile(filepath.Join(dir, strings.ReplaceAll(name, "_", "-")+".1"))
		if err != nil {
			t.Fatal(err)
		}
		if want := ".EX\n" + strings.Join(lines, "\n") + "\n.EE\n"; !strings.Contains(string(page), want) {
			t.Errorf("%s.1 does not keep its EXIT STATUS line by line:\n%s\nwant:\n%s", name, page, want)
		}
	})
	if sections < 30 {
		t.Fatalf("only %d EXIT STATUS sections: the check proves nothing", sections)
	}
}

// The reference as GitHub shows it shows what --help shows: every
// <run>-style placeholder of the help text is text in the rendered page,
// not a tag the renderer drops, and every EXIT STATUS section keeps its
// lines in a preformatted block. (blackfriday renders CommonMark's raw
// HTML as GitHub's renderer does before GitHub drops the tags it does not
// know.)
func TestReferenceShowsTheHelp(t *testing.T) {
	dir := t.TempDir()
	if err := Markdown(dir); err != nil {
		t.Fatal(err)
	}
	pre := regexp.MustCompile(`(?s)<pre><code>(.*?)</code></pre>`)
	placeholders, sections := 0, 0
	eachCommand(cmd.Tree(), func(c *cobra.Command, name string) {
		page, err := os.ReadFile(filepath.Join(dir, name+".md"))
		if err != nil {
			t.Fatal(err)
		}
		rendered := string(blackfriday.Run(page))
		for _, p := range placeholder.FindAllString(c.Short+"\n"+c.Long, -1) {
			placeholders++
			if strings.Contains(rendered, p) || !strings.Contains(rendered, html.EscapeString(p)) {
				t.Errorf("%s.md does not show the placeholder %s: it renders as\n%s", name, p, rendered)
			}
		}
		lines := exitStatusLines(c.Long)
		if lines == nil {
			return
		}
		sections++
		kept := false
		for _, m := range pre.FindAllStringSubmatch(rendered, -1) {
			kept = kept || html.UnescapeString(m[1]) == strings.Join(lines, "\n")+"\n"
		}
		if !kept {
			t.Errorf("%s.md does not keep its EXIT STATUS line by line: it renders as\n%s", name, rendered)
		}
	})
	if placeholders < 5 || sections < 30 {
		t.Fatalf("only %d placeholders and %d EXIT STATUS sections in the help: the check proves nothing", placeholders, sections)
	}
}

// helpMarkdown escapes "<" outside code only, and fences the indented
// blocks of --help, once.
func TestHelpMarkdown(t *testing.T) {
	in := "Logs under runs/<run>/steps, `a <b> c` as is.\nA plan:\n  steps:\n    - run: [x]\nEXIT STATUS\n  0 ok · 1 <failed>\n  141 gone"
	want := "Logs under runs/&lt;run>/steps, `a <b> c` as is.\nA plan:\n\n```\n  steps:\n    - run: [x]\n```\n\nEXIT STATUS\n\n```\n  0 ok · 1 <failed>\n  141 gone\n```"
	if got := helpMarkdown(in, markdownLT); got != want {
		t.Errorf("helpMarkdown:\n%s\nwant:\n%s", got, want)
	}
	if got := escapeLT(escapeLT("a <b>", manLT), manLT); got != `a \<b>` {
		t.Errorf("escaped twice for man: %q", got)
	}
}

// placeholder is a <run>-style placeholder of the help text.
var placeholder = regexp.MustCompile(`<[a-z_]+>`)

// eachCommand calls f with every command a user can see and the name of its
// page (xmode_sandbox_exec).
func eachCommand(c *cobra.Command, f func(c *cobra.Command, name string)) {
	f(c, strings.ReplaceAll(c.CommandPath(), " ", "_"))
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			eachCommand(sub, f)
		}
	}
}

// exitStatusLines are the lines of the EXIT STATUS section of a command's
// help text, nil without one.
func exitStatusLines(long string) []string {
	_, section, ok := strings.Cut(long, "\nEXIT STATUS\n")
	if !ok {
		return nil
	}
	return strings.Split(strings.TrimRight(section, "\n"), "\n")
}

func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}
