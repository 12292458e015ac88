package cmd

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// portOptions are `sandbox port`'s session, port and flags.
type portOptions struct {
	session string
	port    int
	hasPort bool
	sandbox.PortOptions
	close bool
}

func (a *App) newPort() *cobra.Command {
	var o portOptions
	cmd := &cobra.Command{
		Use:   "port SESSION [PORT] [--host-port [ADDR:]N] [--expose-remote] [--close]",
		Short: "Publish a sandbox's port on this host (a server a step started), and print its URL",
		Long: `Publish a port of the sandbox — a server a background step started
(` + "`sandbox exec --detach ID -- …`" + `) — on a loopback port of this host, and print
its URL. It stays published until the sandbox ends (` + "`sandbox stop`" + `, its
expiry) or --close: a forwarder of its own serves it, outliving this
command. Without PORT, the session's published ports.

It works whatever the sandbox's network, none included: on the docker
engine each connection goes through a relay in the sandbox's network
namespace (docs/network.md, "Ports"). A host step's server listens on this
machine already: its port is recorded and its URL printed, and nothing is
forwarded unless --host-port or --expose-remote asks for another address.

--host-port chooses where on this host (default: a free loopback port); an
address that is not loopback needs --expose-remote, as does listening on
every address: other machines then reach the sandbox's server. ` + "`xmode ui`" + `
opens a published port behind its login (docs/ui.md).` + exitStatusHelp,
		Example: `  xmode sandbox exec --detach 7k2m --name web -- busybox httpd -f -p 8080
  xmode sandbox port 7k2m 8080                 # prints http://127.0.0.1:41873/
  xmode sandbox port 7k2m 8080 --host-port 9000
  xmode sandbox port 7k2m                      # the published ports
  xmode sandbox port 7k2m 8080 --close`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return fail.Usagef("expected a session and maybe a port: xmode sandbox port SESSION [PORT]")
			}
			return nil
		},
		ValidArgsFunction: a.completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			if len(args) == 2 {
				n, err := strconv.Atoi(args[1])
				if err != nil || n < 1 || n > 65535 {
					return fail.Usagef("port %q: a port is a number from 1 to 65535", args[1])
				}
				o.port, o.hasPort, o.Port = n, true, n
			}
			return a.runPort(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.HostPort, "host-port", "", "where on this host: a port (9000) or an address and a port (127.0.0.1:9000); default a free loopback port")
	f.BoolVar(&o.ExposeRemote, "expose-remote", false, "let the port listen where other machines reach it (every address, or a non-loopback --host-port)")
	f.BoolVar(&o.close, "close", false, "stop publishing PORT")
	return cmd
}

func (a *App) runPort(ctx context.Context, o portOptions) error {
	if !o.hasPort && (o.close || o.HostPort != "" || o.ExposeRemote) {
		return fail.Usagef("--close, --host-port and --expose-remote need a PORT: xmode sandbox port SESSION PORT")
	}
	if o.close && (o.HostPort != "" || o.ExposeRemote) {
		return fail.Usagef("--close goes with neither --host-port nor --expose-remote")
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	switch {
	case !o.hasPort:
		ps, err := svc.Ports(ctx, sess, false)
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(ps)
		}
		return a.portTable(ps)
	case o.close:
		if err := svc.ClosePort(ctx, sess, o.port); err != nil {
			return err
		}
		a.info("xmode: port %d of %s is no longer published", o.port, sess.ID)
		return nil
	}
	p, err := svc.PublishPort(ctx, sess, o.PortOptions)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(p)
	}
	fmt.Fprintln(a.Out, sandbox.PortURL(*p))
	if p.Owner == "" {
		a.info("xmode: a host step's server listens on this machine already: port %d is its own, nothing is forwarded", o.port)
	} else {
		a.info("xmode: port %d of %s is published at %s until the sandbox ends (`xmode sandbox port %s %d --close` closes it)", o.port, sess.ID, p.HostAddr, sess.ID, o.port)
	}
	return nil
}

// portTable lists published ports.
func (a *App) portTable(ps []store.Port) error {
	if len(ps) == 0 {
		a.info("xmode: no port is published")
		return nil
	}
	now := clock()
	t := newTable(a.Out, "PORT", "URL", "LISTENS ON", "SINCE")
	for _, p := range ps {
		t.row(strconv.Itoa(p.Port), sandbox.PortURL(p), p.HostAddr, humanize.Ago(p.OpenedAt, now))
	}
	return t.flush()
}

// newForward is the hidden command a published port's forwarder runs as
// (sandbox.ForwarderCommand): started by `sandbox port`, never by a
// person, with the port on fd 3 and its report on fd 4.
func (a *App) newForward() *cobra.Command {
	return &cobra.Command{
		Use:    sandbox.ForwarderCommand + " SESSION PORT",
		Short:  "Forward a published sandbox port (internal: started by `sandbox port`)",
		Hidden: true,
		Args:   exactArgs(2, "a session and a port"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			handover, report := sandbox.ForwarderFiles()
			return sandbox.Forward(cmd.Context(), handover, report, clock)
		},
	}
}
