package cmd

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/fail"
)

// The files `make install` puts in $(PREFIX)/share/xmode/examples.
const (
	exampleAgent = "agent.sh"
	examplePlan  = "xmode.yaml"
)

func (a *App) newExamples() *cobra.Command {
	return &cobra.Command{
		Use:   "examples",
		Short: "Print the directory of the stand-in agent and the sample plan installed with xmode",
		Long: `Print the directory that holds the stand-in agent (agent.sh) and the sample
plan (xmode.yaml) installed with this xmode, so that docs and scripts need no
install path: ` + "`make install PREFIX=P`" + ` puts them in P/share/xmode/examples,
and xmode finds them beside its own binary (P/bin/xmode, symlinks resolved),
wherever P is. A binary built in a source checkout (bin/xmode) finds the
checkout's examples/.

  export XMODE_AGENT_COMMAND_TEMPLATE="sh '$(xmode examples)/agent.sh' {prompt_file}"
  xmode run --repo . --objective "…" -f "$(xmode examples)/xmode.yaml"

EXIT STATUS
  0 found; 3 not found (the message says where it looked).` + pipeExitHelp,
		Example: `  xmode examples
  xmode examples --json | jq -r .plan`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error { return a.runExamples() },
	}
}

// runExamples is `xmode examples`, which has no options of its own.
func (a *App) runExamples() error {
	dir, err := examplesDir()
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(map[string]string{
			"dir": dir, "agent": filepath.Join(dir, exampleAgent), "plan": filepath.Join(dir, examplePlan),
		})
	}
	_, err = a.Out.Write([]byte(dir + "\n"))
	return err
}

// examplesDir finds the examples relative to the running binary: an
// install's ../share/xmode/examples, else a source checkout's ../examples.
func examplesDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fail.NotFoundf("cannot tell where this xmode is (%v), so not where its examples are: they are examples/ in xmode's source", err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	bin := filepath.Dir(exe)
	var tried []string
	for _, dir := range []string{
		filepath.Join(bin, "..", "share", "xmode", "examples"),
		filepath.Join(bin, "..", "examples"),
	} {
		dir = filepath.Clean(dir)
		if regular(filepath.Join(dir, exampleAgent)) && regular(filepath.Join(dir, examplePlan)) {
			return dir, nil
		}
		tried = append(tried, dir)
	}
	return "", fail.NotFoundf("no examples beside this xmode (%s; looked in %s): `make install PREFIX=P` puts them in P/share/xmode/examples beside P/bin/xmode; in xmode's source they are examples/",
		exe, strings.Join(tried, " and "))
}

func regular(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
