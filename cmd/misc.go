package cmd

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/store"
)

func (a *App) newConfig() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration, each value with its source",
		Long: `Print every setting of contract §6 with its effective value and where it came
from: a flag, its XMODE_* variable, the CODEX_DOCKER_* fallback, or the default.
A bad value exits 2 and names the variable.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.config(nil)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(cfg.Values)
			}
			t := newTable(a.Out, "VARIABLE", "VALUE", "SOURCE")
			for _, v := range cfg.Values {
				val := v.Value
				if val == "" {
					val = "(unset)"
				}
				t.row(v.Name, val, v.Source)
			}
			return t.flush()
		},
	}
}

func (a *App) newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			v := map[string]any{"version": Version, "go": runtime.Version(), "schema": store.SchemaVersion()}
			if a.json {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.Out, "xmode %s (%s, store schema %d)\n", Version, runtime.Version(), store.SchemaVersion())
			return nil
		},
	}
}
