package cmd

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Every command line builds the command tree before cobra finds the
// command to run, and building all of it (some 70 commands with their flags
// and help: 580 allocations) cost ~4% of `xmode --version`: so a command's
// subcommands are built only when the line needs them. When it
// names one plainly, that one is built; when it does not (help, an unknown
// command and its suggestions, completion, flags cobra must parse first),
// all of them are, so what cobra sees and prints never depends on this.

// lazyCommand is a subcommand and how to build it. It allocates nothing
// of its own (no slice of names, no closure): newRoot makes some thirty of
// them for every command line.
type lazyCommand struct {
	names string                              // its name and aliases, space-separated, as its Use and Aliases say
	leaf  func() *cobra.Command               // a command without subcommands, or
	group func(words []string) *cobra.Command // one given the line after its name (nil: build all of it)
}

// leaf is a command without subcommands.
func leaf(names string, build func() *cobra.Command) lazyCommand {
	return lazyCommand{names: names, leaf: build}
}

// group is a command whose own subcommands are built lazily too.
func group(names string, build func(words []string) *cobra.Command) lazyCommand {
	return lazyCommand{names: names, group: build}
}

func (c lazyCommand) build(words []string) *cobra.Command {
	if c.leaf != nil {
		return c.leaf()
	}
	return c.group(words)
}

// named: word is its name or one of its aliases.
func (c lazyCommand) named(word string) bool {
	for n := range strings.FieldsSeq(c.names) {
		if n == word {
			return true
		}
	}
	return false
}

// addCommands adds to parent the subcommand words[0] names exactly, or all
// of cmds when it names none of them (or words is empty or nil).
func addCommands(parent *cobra.Command, words []string, cmds ...lazyCommand) {
	if len(words) > 0 {
		for _, c := range cmds {
			if c.named(words[0]) {
				parent.AddCommand(c.build(words[1:]))
				return
			}
		}
	}
	for _, c := range cmds {
		cmd := c.build(nil)
		if names := append([]string{cmd.Name()}, cmd.Aliases...); !slices.Equal(names, strings.Fields(c.names)) {
			// A slip in newRoot's table, which every test of the whole
			// tree (help, docs) meets at once.
			panic(fmt.Sprintf("command %q is built under the names %q", names, c.names))
		}
		parent.AddCommand(cmd)
	}
}

// commandWords is the command line from the command's name on, past the
// global flags before it (--json, -q, --storage-root DIR…). It is nil
// when the line is not that plain (any other flag first, completion, help)
// or is nil itself (the whole tree: Tree), and empty when it names no
// command at all: the root runs alone (`xmode`, `xmode --version`) and
// needs no subcommand.
func commandWords(args []string) []string {
	if args == nil {
		return nil
	}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--json", a == "--no-color", a == "-q", a == "--quiet", a == "-v", a == "--verbose",
			a == "--version", strings.HasPrefix(a, "--storage-root="):
		case a == "--storage-root":
			if i++; i == len(args) {
				return nil
			}
		case strings.HasPrefix(a, "-"), a == "completion", a == "help":
			return nil
		default:
			return args[i:]
		}
	}
	return []string{}
}
