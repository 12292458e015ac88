package clidocs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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
	placeholder := regexp.MustCompile(`<[a-z_]+>`)
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
