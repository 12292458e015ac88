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
	rewrite(root, markdownLT)
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
	rewrite(root, manLT)
	return doc.GenManTree(root, &doc.GenManHeader{Title: "XMODE", Section: "1", Source: "xmode", Manual: "xmode manual"}, dir)
}

// How a "<" of the help text is written so that Markdown shows it instead
// of taking <run> for an HTML tag, which GitHub's renderer drops and
// go-md2man leaves out (runs/<run>/steps became runs//steps): an entity
// for GitHub, a backslash escape for go-md2man, which does not decode
// entities.
const (
	markdownLT = "&lt;"
	manLT      = `\<`
)

// rewrite makes the help text of c and its subcommands the Markdown that
// cobra/doc hands on as it is: every "<" outside code written as lt, and
// each block of lines indented as --help indents them (EXIT STATUS, a
// plan, a list) a preformatted block, where its line layout survives and
// nothing needs escaping. Man pages take the flags' usage as Markdown too;
// the reference shows it in a code block.
func rewrite(c *cobra.Command, lt string) {
	c.Short, c.Long = escapeLT(c.Short, lt), helpMarkdown(c.Long, lt)
	if lt == manLT {
		for _, fs := range []*pflag.FlagSet{c.LocalFlags(), c.InheritedFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { f.Usage = escapeLT(f.Usage, lt) })
		}
	}
	for _, sub := range c.Commands() {
		rewrite(sub, lt)
	}
}

// helpMarkdown is help text as Markdown: runs of lines indented by two
// spaces or more become fenced code blocks, kept line by line, and the
// text between them is escaped with escapeLT.
func helpMarkdown(s, lt string) string {
	var out, text []string
	flush := func() {
		if len(text) > 0 {
			out = append(out, strings.Split(escapeLT(strings.Join(text, "\n"), lt), "\n")...)
			text = nil
		}
	}
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		if !indented(lines[i]) {
			text = append(text, lines[i])
			continue
		}
		flush()
		if len(out) > 0 && out[len(out)-1] != "" {
			out = append(out, "")
		}
		out = append(out, "```")
		for ; i < len(lines) && indented(lines[i]); i++ {
			out = append(out, lines[i])
		}
		out = append(out, "```")
		if i < len(lines) && lines[i] != "" {
			out = append(out, "")
		}
		i--
	}
	flush()
	return strings.Join(out, "\n")
}

// indented reports a line of a preformatted block of --help.
func indented(line string) bool {
	return strings.HasPrefix(line, "  ") && strings.TrimSpace(line) != ""
}

// escapeLT writes every "<" of s outside `code spans` as lt; one escaped
// already stays as it is, so a flag that several commands share is
// escaped once.
func escapeLT(s, lt string) string {
	var b strings.Builder
	code := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '`':
			code = !code
		case c == '<' && !code && (i == 0 || s[i-1] != '\\'):
			b.WriteString(lt)
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
