package cmd

import (
	"io"
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

// Every command and alias of the whole tree, named on a command line, is
// found by cobra as the same command, built without its siblings where the
// tree is built lazily: the names newRoot builds by are those of the
// commands it builds.
func TestLazyTreeBuildsWhatTheLineNames(t *testing.T) {
	app := func() *App { return &App{Out: io.Discard, Err: io.Discard, Env: func(string) string { return "" }} }
	var walk func(c *cobra.Command, path []string)
	checked := 0
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue // built only with the whole tree (commandWords)
			}
			for _, name := range append([]string{sub.Name()}, sub.Aliases...) {
				line := append(slices.Clone(path), name)
				root := app().newRoot(append(slices.Clone(line), "arg"))
				found, _, err := root.Find(append(slices.Clone(line), "arg"))
				if err != nil || found.CommandPath() != sub.CommandPath() {
					t.Errorf("xmode %v: found %q (%v), want %q", line, found.CommandPath(), err, sub.CommandPath())
					continue
				}
				// Only the path to it was built: one command at each level
				// built lazily (the root and sandbox) above it.
				for p := found.Parent(); p != nil; p = p.Parent() {
					if lazy := p.Parent() == nil || p.Name() == "sandbox"; !lazy {
						continue
					}
					if n := len(p.Commands()); n != 1 {
						t.Errorf("xmode %v: %q has %d subcommands built, want only the one on the line", line, p.CommandPath(), n)
					}
				}
				checked++
			}
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	full := app().newRoot(nil)
	full.InitDefaultHelpCmd()
	walk(full, nil)
	if checked < 45 {
		t.Fatalf("checked only %d command names", checked)
	}
}

func TestCommandWords(t *testing.T) {
	for _, c := range []struct {
		args, want []string
	}{
		{[]string{"sandbox", "exec", "ID", "--", "true"}, []string{"sandbox", "exec", "ID", "--", "true"}},
		{[]string{"--json", "-q", "--storage-root", "/r", "sb", "ls"}, []string{"sb", "ls"}},
		{[]string{"--storage-root=/r", "--no-color", "-v", "reap"}, []string{"reap"}},
		{[]string{"--version"}, []string{}},
		{[]string{"--json", "--version"}, []string{}},
		{[]string{}, []string{}},
		{nil, nil},
		{[]string{"--help"}, nil},
		{[]string{"-h", "sandbox"}, nil},
		{[]string{"--storage-root"}, nil},
		{[]string{"--json=true", "sandbox"}, nil},
		{[]string{"help", "sandbox"}, nil},
		{[]string{"completion", "bash"}, nil},
		{[]string{cobra.ShellCompRequestCmd, "sandbox", ""}, []string{cobra.ShellCompRequestCmd, "sandbox", ""}},
	} {
		got := commandWords(c.args)
		if (got == nil) != (c.want == nil) || !slices.Equal(got, c.want) {
			t.Errorf("commandWords(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}
