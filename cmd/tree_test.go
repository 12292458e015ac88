package cmd

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command a user can see has examples in its --help.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c.HasParent() {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("`%s --help` has no examples: give the command an Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(Tree())
}

// Every command that runs has an EXIT STATUS section in its --help, and
// each says what a closed pipe gives: 141, or, for a command that exits
// with its step's status, that it does not change it.
func TestEveryExitStatusSaysWhatAClosedPipeGives(t *testing.T) {
	a := &App{Out: io.Discard, Err: io.Discard, Env: func(string) string { return "" }}
	seen := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c.HasParent() {
			return
		}
		_, section, ok := strings.Cut(c.Long, "\nEXIT STATUS\n")
		switch {
		case !ok && !c.HasSubCommands():
			t.Errorf("`%s --help` has no EXIT STATUS section: end its Long with exitStatusHelp, or its own codes and pipeExitHelp", c.CommandPath())
		case ok && a.traitsOf(c).exit != exitByKind:
			seen++
			if !strings.HasSuffix(section, stepPipeExitHelp) {
				t.Errorf("the EXIT STATUS of `%s --help` does not end with stepPipeExitHelp:\n%s", c.CommandPath(), section)
			}
		case ok:
			seen++
			if !strings.HasSuffix(section, pipeExitHelp) || !strings.Contains(section, "141") {
				t.Errorf("the EXIT STATUS of `%s --help` does not end with pipeExitHelp (141):\n%s", c.CommandPath(), section)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(a.newRoot(nil))
	if seen < 30 {
		t.Fatalf("only %d EXIT STATUS sections: the walk is broken", seen)
	}
}

// suggestion is an xmode command line a message tells the user to run: in
// backquotes, its lowercase words up to an argument, a flag or the end.
var suggestion = regexp.MustCompile("`xmode((?: [a-z][a-z-]*)+)(?:`| [%A-Z$<\"'-])")

// No message suggests a command that does not exist: every `xmode …` in
// the code outside tests names a command of the tree.
func TestSuggestedCommandsExist(t *testing.T) {
	root := Tree()
	seen := 0
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "docs") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range suggestion.FindAllStringSubmatch(string(b), -1) {
			seen++
			words := strings.Fields(m[1])
			c, rest, err := root.Find(words)
			if err != nil || c == root || len(rest) > 0 && c.HasSubCommands() {
				t.Errorf("%s suggests `xmode%s`, which is not a command", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Fatalf("found only %d suggestions: the scan is broken", seen)
	}
}
