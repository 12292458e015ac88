package cmd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/fail"
)

// EgressCommand is the hidden command a sandbox's egress proxy runs as:
// started by the engine that wires a sandbox to it, never by a person.
const EgressCommand = "__egress"

// EgressCtlCommand is the hidden command an engine runs in the proxy's
// container over an exec (egress.Ctl).
const EgressCtlCommand = egress.CtlCommand

// newEgress serves the egress proxy and resolver for every policy in a
// configuration directory (docs/network.md): a policy file that changes is
// served from the next scan, at once on SIGUSR1 (SIGHUP, like SIGTERM,
// ends it). A bad configuration at start is exit 2.
func (a *App) newEgress() *cobra.Command {
	var dir string
	var poll time.Duration
	var keepGoing bool
	var configJSON, extraCA string
	cmd := &cobra.Command{
		Use:    EgressCommand + " --dir DIR",
		Short:  "Serve sandboxes' egress proxy (internal: started by the engine)",
		Hidden: true,
		Args:   exactArgs(0, "no arguments: xmode "+EgressCommand+" --dir DIR"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fail.Usagef("--dir: the egress configuration directory is needed")
			}
			if configJSON != "" {
				// An engine that can hand the process nothing but its
				// arguments (a pod's memory for its directory): egress.json.
				if err := writeEgressConfig(dir, configJSON, extraCA); err != nil {
					return fail.Usagef("--config-json: %v", err)
				}
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
	cmd.Flags().StringVar(&configJSON, "config-json", "", "egress.json's content, written into --dir before it starts")
	cmd.Flags().StringVar(&extraCA, "extra-ca-pem", "", "with --config-json: PEM roots trusted for upstreams besides the system's, written as extra-ca.pem")
	return cmd
}

// writeEgressConfig checks egress.json's content and writes it into dir,
// with extra-ca.pem beside it when given.
func writeEgressConfig(dir, content, extraCA string) error {
	tmp, err := os.MkdirTemp(dir, ".config-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, egress.ConfigFile), []byte(content), 0o600); err != nil {
		return err
	}
	cfg, err := egress.ReadConfig(tmp)
	if err != nil {
		return err
	}
	if extraCA != "" {
		if !strings.Contains(extraCA, "-----BEGIN CERTIFICATE-----") {
			return errors.New("--extra-ca-pem holds no PEM certificate")
		}
		cfg.ExtraCAFile = filepath.Join(dir, "extra-ca.pem")
		if err := os.WriteFile(cfg.ExtraCAFile, []byte(extraCA), 0o600); err != nil {
			return err
		}
	}
	return egress.WriteConfig(dir, cfg)
}

// newEgressCtl is what an engine runs over an exec in the proxy's
// container when the proxy's directory is reachable no other way
// (egress.Ctl): put and read its files, have a policy served, prove a
// NetworkPolicy holds.
func (a *App) newEgressCtl() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    egress.CtlCommand + " [--dir DIR] put REL | cat REL | serve SANDBOX HASH | canary OPEN SHUT",
		Short:  "Manage an egress proxy's directory from inside its container (internal: run by the engine)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" && args[0] != "canary" {
				return fail.Usagef("--dir: the egress configuration directory is needed")
			}
			if err := egress.Ctl(cmd.Context(), dir, args, cmd.InOrStdin(), a.Out); err != nil {
				return fail.Failedf("%s: %v", egress.CtlCommand, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the configuration directory")
	return cmd
}
