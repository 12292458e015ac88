package cmd

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/sandbox"
)

// cpOptions are `sandbox cp`'s source and destination, one of them
// SESSION:PATH.
type cpOptions struct {
	src, dst string
}

func (a *App) newCp() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SESSION:PATH DEST | SRC SESSION:PATH",
		Short: "Copy files out of or into a sandbox's worktree, like docker cp",
		Long: `Copy a file or a directory (recursively) between this machine and a session's
worktree. PATH is relative to the worktree ("." is all of it; "dir/." what dir
holds). A destination that is a directory receives the source inside it;
otherwise the source is copied as the destination. One that ends in / must
be a directory, as for cp: a file is not copied in the place of one that
does not exist (exit 3); a directory makes it. Symlinks are copied as
links, never followed; modes and times are kept, without setuid, setgid or
sticky bits; FIFOs, devices and sockets are skipped (and listed). What is
copied into a worktree belongs to the worktree's owner.

PATH cannot leave the worktree: an absolute path or ".." is refused (exit 2),
and so is a path that leads out through a symlink a step planted (exit 4). In
docker's sync mode (a daemon on another machine) a copy out first brings the
sandbox's copy of the worktree back, and a copy in is pushed into it.` + exitStatusHelp,
		Example: `  xmode sandbox cp sbx_7k2m9q4x:coverage.out .
  xmode sandbox cp 7k2m:build/. ./artifacts      # what build/ holds
  xmode sandbox cp fixtures/ 7k2m:testdata       # into testdata/ if it is a directory`,
		Args:              exactArgs(2, "a source and a destination, one of them SESSION:PATH"),
		ValidArgsFunction: a.completeCopy,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runCp(cmd.Context(), cpOptions{src: args[0], dst: args[1]})
		},
	}
}

func (a *App) runCp(ctx context.Context, o cpOptions) error {
	srcRef, srcPath, srcRemote := splitRemote(o.src)
	dstRef, dstPath, dstRemote := splitRemote(o.dst)
	if srcRemote == dstRemote {
		return fail.Usagef("one of the two must be SESSION:PATH and the other a path here, e.g. `xmode sandbox cp ID:out.txt .` or `xmode sandbox cp in.txt ID:dir`")
	}
	ref := srcRef
	if dstRemote {
		ref = dstRef
	}
	svc, sess, err := a.session(ctx, ref, anySession)
	if err != nil {
		return err
	}
	var res sandbox.CopyResult
	if srcRemote {
		res, err = svc.CopyOut(ctx, sess, srcPath, o.dst)
	} else {
		res, err = svc.CopyIn(ctx, sess, o.src, dstPath)
	}
	a.reportCopy(res.Copied)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(map[string]any{"to": res.To, "files": res.Files, "dirs": res.Dirs, "links": res.Links,
			"bytes": res.Bytes, "skipped": append([]string{}, res.Skipped...)})
	}
	a.info("copied %d file(s), %d dir(s), %d link(s), %s to %s", res.Files, res.Dirs, res.Links, size(&res.Bytes), res.To)
	return nil
}

// splitRemote splits SESSION:PATH. A local path containing ":" can be
// given as ./a:b.
func splitRemote(arg string) (ref, path string, remote bool) {
	if strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") {
		return "", arg, false
	}
	ref, path, remote = strings.Cut(arg, ":")
	if !remote {
		return "", arg, false
	}
	return ref, path, true
}

// reportCopy lists on stderr what a copy skipped.
func (a *App) reportCopy(c fsguard.Copied) {
	for _, s := range c.Skipped {
		a.info("xmode: skipped %s: not a file, a directory or a link (a FIFO, device or socket)", clean(s))
	}
}
