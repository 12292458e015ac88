// Package clidocs generates xmode's CLI reference (docs/cli, one Markdown
// page per command) and its man pages from the cobra command tree, so that
// they say exactly what --help says. `make docs` regenerates the reference;
// a test fails when it is stale.
package clidocs

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/xmode/xmode/cmd"
)

// Markdown writes one page per command into dir, and nothing else: pages of
// commands that no longer exist are removed.
func Markdown(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "xmode*.md"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	root := cmd.Tree()
	prepend := func(string) string { return "" }
	link := func(name string) string { return name }
	if err := doc.GenMarkdownTreeCustom(root, dir, prepend, link); err != nil {
		return err
	}
	return writeIndex(root, dir)
}

// writeIndex writes README.md: every command with its one-line summary.
func writeIndex(root *cobra.Command, dir string) error {
	var b strings.Builder
	b.WriteString("# xmode CLI reference\n\nGenerated from the command tree by `make docs` (a test fails when it is stale): the same text as `--help`.\n\n")
	var walk func(c *cobra.Command, depth int)
	walk = func(c *cobra.Command, depth int) {
		if !c.IsAvailableCommand() && c != root {
			return
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
		b.WriteString(strings.Repeat("  ", depth) + "- [" + c.CommandPath() + "](" + name + ") — " + c.Short + "\n")
		for _, sub := range c.Commands() {
			walk(sub, depth+1)
		}
	}
	walk(root, 0)
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}

// Man writes a man page (section 1) per command into dir.
func Man(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root := cmd.Tree()
	escapePlaceholders(root)
	return doc.GenManTree(root, &doc.GenManHeader{Title: "XMODE", Section: "1", Source: "xmode", Manual: "xmode manual"}, dir)
}

// escapePlaceholders keeps the <run>-style placeholders of the help text in
// the man pages: cobra/doc hands the text to go-md2man as Markdown, which
// takes <run> for an HTML tag and drops it (runs/<run>/steps became
// runs//steps). Examples are code blocks, where nothing is dropped.
func escapePlaceholders(c *cobra.Command) {
	c.Short, c.Long = markdownText(c.Short), markdownText(c.Long)
	for _, fs := range []*pflag.FlagSet{c.LocalFlags(), c.InheritedFlags()} {
		fs.VisitAll(func(f *pflag.Flag) { f.Usage = markdownText(f.Usage) })
	}
	for _, sub := range c.Commands() {
		escapePlaceholders(sub)
	}
}

// markdownText escapes every "<" of s that Markdown would read as the start
// of a tag, outside `code spans`; one escaped already stays as it is, so a
// flag that several commands share is escaped once.
func markdownText(s string) string {
	var b strings.Builder
	code := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '`':
			code = !code
		case c == '<' && !code && (i == 0 || s[i-1] != '\\'):
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
