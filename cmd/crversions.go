package cmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
)

// --- cr diff

type crDiffOptions struct {
	ref      string
	from, to int
	stat     bool
}

func (a *App) newCRDiff() *cobra.Command {
	var o crDiffOptions
	cmd := &cobra.Command{
		Use: "diff CR [--from N] [--to M] [--stat]",
		Example: `  xmode cr diff cr_7k2m --from 1 --to 2
  xmode cr diff cr_7k2m --from 0 --to 1   # version 1 against the base: its whole change`,
		Short: "Show what changed between two versions of a change request (the interdiff)",
		Long: `Show what changed from version --from to version --to of a change request —
not against the base: one version's tree against the other's, as Gerrit
diffs two patch sets — as git diff shows it (--stat: a diffstat; --json: the
stat). --to defaults to the newest version, --from to the one before --to;
--from 0 is the base, so --from 0 --to N is version N's whole change. Paged
and coloured on a terminal like git.` + exitStatusHelp,
		Args: exactArgs(1, "one change request"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ref = args[0]
			if !cmd.Flags().Changed("from") {
				o.from = -1
			}
			return a.runCRDiff(cmd.Context(), o)
		},
	}
	cmd.Flags().IntVar(&o.from, "from", 0, "the version to diff from (0: the base; default: the one before --to)")
	cmd.Flags().IntVar(&o.to, "to", 0, "the version to diff to (default: the newest)")
	cmd.Flags().BoolVar(&o.stat, "stat", false, "a diffstat instead of the patch")
	return cmd
}

func (a *App) runCRDiff(ctx context.Context, o crDiffOptions) error {
	if o.to < 0 || o.from < -1 {
		return fail.Usagef("versions count from 1 (0 is the base)")
	}
	cs, err := a.changes(ctx)
	if err != nil {
		return err
	}
	c, err := cs.Store.ResolveChange(ctx, o.ref)
	if err != nil {
		return err
	}
	do := changes.InterdiffOptions{From: o.from, To: o.to, Stat: a.json || o.stat}
	if do.Stat {
		d, err := cs.WriteInterdiff(ctx, c, do, nil)
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(d)
		}
		return a.paged(func(w io.Writer) error { return writeStat(w, d.Stat, a.colour()) })
	}
	return a.paged(func(w io.Writer) error {
		pw, flush := a.patchWriter(w)
		_, err := cs.WriteInterdiff(ctx, c, do, pw)
		if ferr := flush(); err == nil {
			err = ferr
		}
		return err
	})
}

// --- cr compare

type crCompareOptions struct {
	a, b string
	stat bool
}

func (a *App) newCRCompare() *cobra.Command {
	var o crCompareOptions
	cmd := &cobra.Command{
		Use:     "compare CR1 CR2 [--stat]",
		Example: `  xmode cr compare cr_7k2m cr_q4x8`,
		Short:   "Show where two change requests on one base differ: two attempts",
		Long: `Show where the newest versions of two change requests on the same base commit
(two attempts of a run: xmode run --attempts) differ: each file either
changes, what each did to it (A added, M modified, D deleted, R renamed, T
type changed, - left as the base has it) and whether both end with the same
file; then the diff from CR1's tree to CR2's (--stat: its diffstat; --json:
the files and the stat). Paged and coloured on a terminal like git.` + exitStatusHelp,
		Args: exactArgs(2, "two change requests"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.a, o.b = args[0], args[1]
			return a.runCRCompare(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.stat, "stat", false, "a diffstat instead of the patch")
	return cmd
}

func (a *App) runCRCompare(ctx context.Context, o crCompareOptions) error {
	cs, err := a.changes(ctx)
	if err != nil {
		return err
	}
	x, err := cs.Open(ctx, o.a)
	if err != nil {
		return err
	}
	y, err := cs.Open(ctx, o.b)
	if err != nil {
		return err
	}
	if a.json || o.stat {
		cmp, err := cs.Compare(ctx, x, y, nil)
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(cmp)
		}
		return a.paged(func(w io.Writer) error {
			if err := writeCompareFiles(w, cmp); err != nil {
				return err
			}
			fmt.Fprintln(w)
			return writeStat(w, cmp.Stat, a.colour())
		})
	}
	// The files first, then the diff: one comparison, its diff written
	// after the table.
	return a.paged(func(w io.Writer) error {
		pw, flush := a.patchWriter(w)
		var diff bytesWriter
		cmp, err := cs.Compare(ctx, x, y, &diff)
		if err != nil {
			return err
		}
		if err := writeCompareFiles(w, cmp); err != nil {
			return err
		}
		fmt.Fprintln(w)
		_, err = pw.Write(diff.b)
		if ferr := flush(); err == nil {
			err = ferr
		}
		return err
	})
}

// bytesWriter keeps what is written to it.
type bytesWriter struct{ b []byte }

func (b *bytesWriter) Write(p []byte) (int, error) {
	b.b = append(b.b, p...)
	return len(p), nil
}

// writeCompareFiles lists the files of a comparison.
func writeCompareFiles(w io.Writer, cmp *changes.Comparison) error {
	fmt.Fprintf(w, "%s and %s, on base %s:\n", cmp.A, cmp.B, shortSHA(cmp.BaseCommit))
	t := newTable(w, "PATH", cmp.A, cmp.B, "")
	for _, f := range cmp.Files {
		same := "differ"
		if f.Same {
			same = "same"
		}
		t.row(clean(f.Path), orDash(f.A), orDash(f.B), same)
	}
	return t.flush()
}
