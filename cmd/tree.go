package cmd

import (
	"io"

	"github.com/spf13/cobra"
)

// Tree is xmode's command tree as `xmode --help` shows it, for the CLI
// reference in docs/cli and the man pages (internal/clidocs): the binary
// itself does not link the generator.
func Tree() *cobra.Command {
	a := &App{Out: io.Discard, Err: io.Discard, Env: func(string) string { return "" }}
	root := a.newRoot(nil)
	root.DisableAutoGenTag = true
	return root
}
