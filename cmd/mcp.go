package cmd

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/httpserve"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/mcpserver"
)

// mcpOptions are `xmode mcp`'s flags.
type mcpOptions struct {
	listen              string
	allowRemote         bool
	allSessions         bool
	allowNetworkChanges bool
}

func (a *App) newMCP() *cobra.Command {
	var o mcpOptions
	cmd := &cobra.Command{
		Use:   "mcp [--listen HOST:PORT [--allow-remote]] [--all-sessions] [--allow-network-changes]",
		Short: "Serve xmode's sandboxes to an agent over the Model Context Protocol (stdio or HTTP)",
		Long: `Serve MCP (the Model Context Protocol) so that an interactive agent — Claude
Code, Codex CLI, Cursor, VS Code — works in xmode sandboxes: it creates one
for the repository, runs every command and changes every file through it
(each call recorded as a step's evidence), and finishes with a change request
you review. See docs/mcp.md for wiring it into each client and the tools.

Over standard input and output by default (what ` + "`claude mcp add xmode -- xmode mcp`" + `
runs); nothing else is written to stdout. With --listen, over streamable HTTP at
http://HOST:PORT/mcp, every request carrying a bearer token: XMODE_MCP_TOKEN,
or one made up and printed once on stderr. --listen takes a loopback address
unless it names another explicitly and --allow-remote is given.

Commands run only in a session's engine. Use the docker engine for agents
(XMODE_SANDBOX_ENGINE=docker XMODE_RUNNER_MODE=cloud_worker in the server's
environment): with the host engine a sandbox is a separate worktree, but its
commands run on this machine as you. Docker sandboxes the server makes are
hardened — every limit, network none, capabilities dropped — unless
XMODE_SANDBOX_BIND_HARDENED=0 opts out; sandbox_create's warnings say what a
sandbox lacks. MCP clients start the server with their own environment, not
your shell's: give it the variables it needs (XMODE_SANDBOX_IMAGE, and
XMODE_STORAGE_ROOT when you set one), as docs/mcp.md shows.

The server acts on the sessions MCP clients made for your user (so a new
server picks up where the last left off); --all-sessions adds the sessions
you made with the CLI. Sessions made through MCP say so in ` + "`xmode sandbox show`" + `.

A client gets a sandbox's network as your configuration gives it
(XMODE_SANDBOX_NETWORK; allow or open: through xmode's egress proxy, every
connection recorded: docs/network.md). It may narrow a sandbox's egress
policy (a deny rule, a narrower mode) at sandbox_create and later
(network_policy), but not widen it — an allow rule, a wider mode, a deny
rule taken out — unless you start the server with --allow-network-changes.` + exitStatusHelp,
		Example: `  claude mcp add xmode -- xmode mcp
  codex mcp add xmode -- xmode mcp
  XMODE_SANDBOX_ENGINE=docker XMODE_RUNNER_MODE=cloud_worker xmode mcp
  XMODE_MCP_TOKEN=$(openssl rand -hex 32) xmode mcp --listen 127.0.0.1:8765`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runMCP(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "", "serve streamable HTTP on HOST:PORT (e.g. 127.0.0.1:8765) instead of stdio")
	f.BoolVar(&o.allowRemote, "allow-remote", false, "let --listen take an address other machines reach")
	f.BoolVar(&o.allSessions, "all-sessions", false, "act on all of your sessions, not only those MCP clients made")
	f.BoolVar(&o.allowNetworkChanges, "allow-network-changes", false, "let clients widen a sandbox's egress policy (allow rules, a wider network mode); narrowing is always allowed")
	return a.setTraits(cmd, traits{interrupted: "the server stopped; steps it was running were ended and recorded"})
}

func (a *App) runMCP(ctx context.Context, o mcpOptions) error {
	if o.listen == "" && o.allowRemote {
		return fail.Usagef("--allow-remote goes with --listen: the stdio server is reached by its client only")
	}
	if o.listen != "" {
		if err := httpserve.CheckListen(o.listen, o.allowRemote); err != nil {
			return err
		}
	}
	token := a.Env("XMODE_MCP_TOKEN")
	if o.listen != "" && token != "" && len(token) < 16 {
		return fail.Usagef("XMODE_MCP_TOKEN is %d characters; a token has at least 16 (e.g. $(openssl rand -hex 32))", len(token))
	}
	// The token is the server's: steps it runs on the host do not inherit it.
	_ = os.Unsetenv("XMODE_MCP_TOKEN")
	// Hardened sandboxes unless the user opted out (mcpserver.ConfigDefaults).
	svc, err := a.service(ctx, mcpserver.ConfigDefaults(a.Env))
	if err != nil {
		return err
	}
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("the working directory: %w", err)
	}
	var log io.Writer
	if !a.quiet {
		log = termsafe.NewWriter(a.Err)
	}
	root := ""
	if svc.Cfg.Explicit("XMODE_STORAGE_ROOT") {
		root = svc.Cfg.StorageRoot
	}
	srv := mcpserver.New(mcpserver.Options{
		Sandbox: svc, Changes: changesOf(svc), AllSessions: o.allSessions, AllowNetworkChanges: o.allowNetworkChanges, Version: Version, WorkDir: wd,
		LookupEnv: a.lookupEnv, Log: log, StorageRootArg: root,
		LoadConfig: func(ov map[string]config.Flag) (*config.Config, error) {
			all := mcpserver.ConfigDefaults(a.Env)
			maps.Copy(all, ov)
			return a.config(all)
		},
	})
	if o.listen == "" {
		return srv.ServeStdio(ctx, a.In, a.Out)
	}
	ln, err := httpserve.Listen(o.listen, o.allowRemote)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.Err, "xmode mcp: serving MCP (streamable HTTP) on http://%s/mcp\n", ln.Addr())
	if token == "" {
		token = mcpserver.NewToken()
		fmt.Fprintf(a.Err, "xmode mcp: bearer token (shown once; set XMODE_MCP_TOKEN to choose it): %s\n", token)
	} else {
		fmt.Fprintln(a.Err, "xmode mcp: bearer token: XMODE_MCP_TOKEN's")
	}
	if o.allowRemote {
		fmt.Fprintln(a.Err, "xmode mcp: warning: this server speaks plain HTTP: put TLS in front of it before its token crosses a network")
	}
	return srv.ServeHTTP(ctx, ln, token)
}
