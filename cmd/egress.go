package cmd

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/fail"
)

// EgressCommand is the hidden command a sandbox's egress proxy runs as:
// started by the engine that wires a sandbox to it, never by a person.
const EgressCommand = "__egress"

// newEgress serves the egress proxy and resolver for every policy in a
// configuration directory (docs/network.md): a policy file that changes is
// served from the next scan, at once on SIGUSR1 (SIGHUP, like SIGTERM,
// ends it). A bad configuration at start is exit 2.
func (a *App) newEgress() *cobra.Command {
	var dir string
	var poll time.Duration
	var keepGoing bool
	cmd := &cobra.Command{
		Use:    EgressCommand + " --dir DIR",
		Short:  "Serve sandboxes' egress proxy (internal: started by the engine)",
		Hidden: true,
		Args:   exactArgs(0, "no arguments: xmode "+EgressCommand+" --dir DIR"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fail.Usagef("--dir: the egress configuration directory is needed")
			}
			reload, stop := egress.ReloadSignal()
			defer stop()
			err := egress.Serve(cmd.Context(), egress.ServeOptions{Dir: dir, Reload: reload, Poll: poll, Stderr: a.Err, Getenv: a.Env, KeepGoing: keepGoing})
			if ce := (*egress.ConfigError)(nil); errors.As(err, &ce) {
				return fail.Usagef("--dir %s: %v", dir, ce.Err)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the configuration directory (egress.json, policies/, state/, ca/, logs/)")
	cmd.Flags().DurationVar(&poll, "poll", time.Second, "how often policies/ is scanned for changes")
	cmd.Flags().BoolVar(&keepGoing, "keep-going", false, "at start too, refuse everything to a sandbox whose policy cannot be served instead of exiting")
	return cmd
}
