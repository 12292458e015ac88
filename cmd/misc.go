package cmd

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/store"
)

func (a *App) newConfig() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration, each value with its source",
		Long: `Print every setting of docs/configuration.md with its effective value and
where it came from: a flag, its XMODE_* variable, the CODEX_DOCKER_* fallback,
or the default. A bad value exits 2 and names the variable.` + exitStatusHelp,
		Example: `  xmode config
  XMODE_SANDBOX_ENGINE=docker xmode config --json | jq '.[] | select(.source != "default")'`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error { return a.runConfig() },
	}
}

// runConfig is `xmode config`, which has no options of its own.
func (a *App) runConfig() error {
	cfg, err := a.config(nil)
	if err != nil {
		return err
	}
	unapplied := map[string]bool{}
	for _, n := range cfg.Unapplied() {
		unapplied[n] = true
	}
	if a.json {
		type value struct {
			config.Value
			NotApplied string `json:"not_applied,omitempty"`
		}
		out := make([]value, len(cfg.Values))
		for i, v := range cfg.Values {
			out[i].Value = v
			if unapplied[v.Name] {
				out[i].NotApplied = "bind mode"
			}
		}
		return a.printJSON(out)
	}
	t := newTable(a.Out, "VARIABLE", "VALUE", "SOURCE")
	for _, v := range cfg.Values {
		val := v.Value
		if val == "" {
			val = "(unset)"
		}
		src := v.Source
		if unapplied[v.Name] {
			src += " (not applied in bind mode: XMODE_SANDBOX_BIND_HARDENED=1 or set it)"
		}
		t.row(v.Name, clean(val), src)
	}
	return t.flush()
}

func (a *App) newVersion() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Long:    "Print xmode's version, the Go it was built with and its store's schema." + exitStatusHelp,
		Example: "  xmode version\n  xmode version --json",
		Args:    exactArgs(0, "no arguments"),
		RunE:    func(*cobra.Command, []string) error { return a.printVersion() },
	}
}

// printVersion is `xmode version` and `xmode --version`, which have no
// options of their own.
func (a *App) printVersion() error {
	if a.json {
		return a.printJSON(map[string]any{"version": Version, "go": runtime.Version(), "schema": store.SchemaVersion()})
	}
	fmt.Fprintf(a.Out, "xmode %s (%s, store schema %d)\n", Version, runtime.Version(), store.SchemaVersion())
	return nil
}
