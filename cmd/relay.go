package cmd

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/internal/relay"
)

// RelayCommand is the hidden command at the far end of a published
// sandbox port (internal/relay): started by the engine in the sandbox's
// network, never by a person.
const RelayCommand = "__relay"

// newRelay connects to ADDR and copies the connection to and from its
// standard streams; with --idle it only waits for a signal (what a relay
// container runs between connections).
func (a *App) newRelay() *cobra.Command {
	var idle bool
	cmd := &cobra.Command{
		Use:    RelayCommand + " ADDR | --idle",
		Short:  "Relay a connection to a sandbox's port (internal: started by the engine)",
		Hidden: true,
		Args:   cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if idle {
				// PID 1 of its container: a signal with no handler is ignored.
				ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
				defer stop()
				<-ctx.Done()
				return nil
			}
			if len(args) != 1 {
				return exactArgs(1, "the address to relay to")(cmd, args)
			}
			return relay.Serve(cmd.Context(), args[0], a.In, a.Out)
		},
	}
	cmd.Flags().BoolVar(&idle, "idle", false, "wait for a signal, relaying nothing")
	return cmd
}
