package cmd

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/store"
)

// completionOptions are `completion`'s shell, and the tree to complete.
type completionOptions struct {
	shell string
	root  *cobra.Command
}

func (a *App) newCompletion() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print the shell completion script (sessions, steps, projects and flag values complete from your data)",
		Long: `Print the completion script for a shell. Completion knows xmode's data:
session IDs (with their status, repository and time left), step names and
numbers, project machines, and flag values such as --runner-mode.
` + "`make install`" + ` installs the scripts for bash, zsh and fish. The bash
script works in a plain bash too, and uses the bash-completion package's
helpers where that is loaded.` + exitStatusHelp,
		Example: `  source <(xmode completion bash)                       # this shell
  xmode completion bash > /etc/bash_completion.d/xmode
  xmode completion zsh > "${fpath[1]}/_xmode"
  xmode completion fish > ~/.config/fish/completions/xmode.fish
  xmode completion powershell | Out-String | Invoke-Expression`,
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		Args:      exactArgs(1, "one shell: bash, zsh, fish or powershell"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runCompletion(completionOptions{shell: args[0], root: cmd.Root()})
		},
	}
}

func (a *App) runCompletion(o completionOptions) error {
	root := o.root
	switch o.shell {
	case "bash":
		return bashCompletion(root, a.Out)
	case "zsh":
		return root.GenZshCompletion(a.Out)
	case "fish":
		return root.GenFishCompletion(a.Out, true)
	case "powershell":
		return root.GenPowerShellCompletionWithDesc(a.Out)
	}
	return fail.Usagef("no completion for shell %q: use bash, zsh, fish or powershell", o.shell)
}

// bashCompletion is cobra's bash script (v2, with descriptions), made to
// work in a bash without the bash-completion package too: the script takes
// the words of the line from that package's _get_comp_words_by_ref, and
// without it completed nothing ("_get_comp_words_by_ref: command not
// found"). Where the package is loaded, its function is used as before.
func bashCompletion(root *cobra.Command, w io.Writer) error {
	var b bytes.Buffer
	if err := root.GenBashCompletionV2(&b, true); err != nil {
		return err
	}
	script := strings.Replace(b.String(), bashWordsByRef, bashWordsFallback, 1)
	_, err := io.WriteString(w, script)
	return err
}

// bashWordsByRef is the line of cobra's script that needs bash-completion.
const bashWordsByRef = `    _get_comp_words_by_ref "$@" cur prev words cword
`

// bashWordsFallback splits the line up to the cursor at blanks only, as
// _get_comp_words_by_ref -n =: leaves "--flag=value" and "ID:path" whole.
const bashWordsFallback = `    if declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
        _get_comp_words_by_ref "$@" cur prev words cword
        return
    fi
    # No bash-completion package: the words up to the cursor, split at blanks.
    local line=${COMP_LINE:0:COMP_POINT}
    read -r -a words <<<"$line"
    if [[ ${#words[@]} -eq 0 || $line == *[[:blank:]] ]]; then
        words+=("")
    fi
    cword=$((${#words[@]} - 1))
    cur=${words[cword]}
    prev=${words[cword-1]-}
`

// flagCompletions complete flag values by the flag's name, on every command
// that has such a flag: a command added later (the agent, cr and cloud
// commands) gets them by naming its flags alike.
func (a *App) flagCompletions() map[string]cobra.CompletionFunc {
	return map[string]cobra.CompletionFunc{
		"runner-mode": words(
			config.ModeLocalWorktree, "a host process in a worktree (the default)",
			config.ModeCloudWorker, "a hardened docker container with XMODE_SANDBOX_ENGINE=docker, a pod with kubernetes",
			config.ModeCloudSubscription, "the Codex cloud loop; nothing runs here"),
		"agent": words(
			"codex", "the Codex CLI (codex exec)",
			"claude", "Claude Code (claude -p)",
			"command", "XMODE_AGENT_COMMAND_TEMPLATE"),
		"project": a.completeProjects,
		"run":     a.storeCompletion(completeRuns),
	}
}

// completions registers flagCompletions on every command of the tree.
func (a *App) completions(root *cobra.Command) {
	funcs := a.flagCompletions()
	var walk func(*cobra.Command)
	args := map[string]cobra.CompletionFunc{
		"xmode sandbox diff": a.completeSessions,
		"xmode cr create":    a.completeSessions,
		"xmode agent run":    a.completeSessions,
		"xmode pipeline run": a.completeSessions,
		"xmode cloud submit": a.completeSessions,
		"xmode cloud log":    a.completeAnySession,
		"xmode cloud show":   a.completeAnySession,
		"xmode cr show":      a.completeCRs,
		"xmode cr review":    a.completeCRs,
		"xmode cr verify":    a.completeCRs,
		"xmode cr export":    a.completeCRs,
	}
	walk = func(c *cobra.Command) {
		if fn, ok := args[c.CommandPath()]; ok && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = fn
		}
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if fn, ok := funcs[f.Name]; ok {
				_ = c.RegisterFlagCompletionFunc(f.Name, fn)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// words completes fixed values: value, description, value, description…
func words(pairs ...string) cobra.CompletionFunc {
	var out []cobra.Completion
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, cobra.CompletionWithDesc(pairs[i], pairs[i+1]))
	}
	return cobra.FixedCompletions(out, cobra.ShellCompDirectiveNoFileComp)
}

// storeCompletion makes a completion function from a query of the store:
// the way to complete an ID of xmode's data (a change request, a cloud
// task) as sessions and projects are completed here. It opens the store
// only where one exists (completing never creates a storage root), and
// completes nothing on any error.
func (a *App) storeCompletion(list func(ctx context.Context, st *store.Store, args []string, toComplete string) ([]cobra.Completion, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		cfg, err := a.config(nil)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if _, err := os.Stat(filepath.Join(cfg.StorageRoot, store.FileName)); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := store.Open(ctx, cfg.StorageRoot)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer st.Close()
		out, err := list(ctx, st, args, toComplete)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// sessionCandidates are session IDs (open ones, or all with ended) that
// are not among skip, described by status, repository and time left.
func sessionCandidates(ctx context.Context, st *store.Store, ended bool, skip []string) ([]cobra.Completion, error) {
	sessions, err := st.List(ctx, store.Filter{All: ended})
	if err != nil {
		return nil, err
	}
	now := clock()
	var out []cobra.Completion
	for _, s := range sessions {
		if slices.Contains(skip, s.ID) {
			continue
		}
		desc := s.Status + ", " + left(s, now) + ", " + path.Base(s.Repo)
		if s.Project != "" {
			desc += " (" + s.Project + ")"
		}
		out = append(out, cobra.CompletionWithDesc(s.ID, clean(desc)))
	}
	return out, nil
}

// completeSessions completes the first argument with an open session.
func (a *App) completeSessions(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	return a.storeCompletion(func(ctx context.Context, st *store.Store, _ []string, _ string) ([]cobra.Completion, error) {
		return sessionCandidates(ctx, st, false, nil)
	})(cmd, args, toComplete)
}

// completeCRs completes the first argument with a change request, its
// title and review state as the description.
func (a *App) completeCRs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.storeCompletion(func(ctx context.Context, st *store.Store, _ []string, _ string) ([]cobra.Completion, error) {
		crs, err := st.ListChanges(ctx, store.ChangeFilter{})
		if err != nil {
			return nil, err
		}
		out := make([]cobra.Completion, 0, len(crs))
		for _, c := range crs {
			out = append(out, cobra.CompletionWithDesc(c.ID, c.Status+": "+clean(c.Title)))
		}
		return out, nil
	})(cmd, args, toComplete)
}

// completeAnySession completes the first argument with any session, ended
// ones included (show, logs: their evidence stays).
func (a *App) completeAnySession(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.storeCompletion(func(ctx context.Context, st *store.Store, _ []string, _ string) ([]cobra.Completion, error) {
		return sessionCandidates(ctx, st, true, nil)
	})(cmd, args, toComplete)
}

// completeOpenSessions completes every argument with an open session not
// named yet (stop takes several).
func (a *App) completeOpenSessions(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return a.storeCompletion(func(ctx context.Context, st *store.Store, args []string, _ string) ([]cobra.Completion, error) {
		return sessionCandidates(ctx, st, false, args)
	})(cmd, args, toComplete)
}

// completeSteps completes logs' arguments: a session, then one of its
// steps by number or name.
func (a *App) completeSteps(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return a.completeAnySession(cmd, args, toComplete)
	}
	if len(args) > 1 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.storeCompletion(func(ctx context.Context, st *store.Store, args []string, toComplete string) ([]cobra.Completion, error) {
		sess, err := findSession(ctx, st, args[0], anySession)
		if err != nil {
			return nil, err
		}
		steps, err := st.Steps(ctx, sess.RunID)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		byNumber := toComplete != "" && toComplete[0] >= '0' && toComplete[0] <= '9'
		for _, s := range steps {
			if s.SessionID != sess.ID {
				continue
			}
			desc := clean(truncate(strings.Join(s.Argv, " "), 50)) + " (" + stepExit(s) + ")"
			if byNumber {
				out = append(out, cobra.CompletionWithDesc(strconv.Itoa(s.Seq), s.Name+": "+desc))
			} else {
				out = append(out, cobra.CompletionWithDesc(s.Name, "step "+strconv.Itoa(s.Seq)+": "+desc))
			}
		}
		return out, nil
	})(cmd, args, toComplete)
}

// completeProjects completes a project machine's name (the first
// argument, or --project).
func (a *App) completeProjects(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.storeCompletion(func(ctx context.Context, st *store.Store, _ []string, _ string) ([]cobra.Completion, error) {
		ms, err := st.ListMachines(ctx)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, m := range ms {
			out = append(out, cobra.CompletionWithDesc(m.Project, clean(m.Repo+" @ "+m.DefaultRef)))
		}
		return out, nil
	})(cmd, args, toComplete)
}

// completeRuns completes a run ID (--run: the runs of open sessions).
func completeRuns(ctx context.Context, st *store.Store, _ []string, _ string) ([]cobra.Completion, error) {
	sessions, err := st.List(ctx, store.Filter{})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []cobra.Completion
	for _, s := range sessions {
		if !seen[s.RunID] {
			seen[s.RunID] = true
			out = append(out, cobra.CompletionWithDesc(s.RunID, clean("run of "+s.ID+", "+path.Base(s.Repo))))
		}
	}
	return out, nil
}

// completeCopy completes `sandbox cp` operands: SESSION: and, after it, a
// path in that session's worktree (read through os.Root: a listing follows
// no link out of it); anything else is a local path.
func (a *App) completeCopy(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) >= 2 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ref, rel, remote := strings.Cut(toComplete, ":")
	if !remote {
		out, _ := a.storeCompletion(func(ctx context.Context, st *store.Store, _ []string, _ string) ([]cobra.Completion, error) {
			cands, err := sessionCandidates(ctx, st, false, nil)
			for i, c := range cands {
				id, desc, _ := strings.Cut(c, "\t")
				cands[i] = cobra.CompletionWithDesc(id+":", desc)
			}
			return cands, err
		})(cmd, args, toComplete)
		return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveDefault
	}
	out, _ := a.storeCompletion(func(ctx context.Context, st *store.Store, _ []string, _ string) ([]cobra.Completion, error) {
		sess, err := findSession(ctx, st, ref, anySession)
		if err != nil {
			return nil, err
		}
		root, err := os.OpenRoot(sess.WorktreePath)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		dir := path.Dir(rel)
		if strings.HasSuffix(rel, "/") {
			dir = strings.TrimSuffix(rel, "/")
		}
		if dir == "" {
			dir = "."
		}
		entries, err := fs.ReadDir(root.FS(), dir)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, e := range entries {
			if clean(e.Name()) != e.Name() {
				// A name with a control or bidi character: the shell would
				// print it raw in the list (a newline would even forge
				// candidates), and nobody types one.
				continue
			}
			name := path.Join(dir, e.Name())
			if dir == "." {
				name = e.Name()
			}
			if e.IsDir() {
				name += "/"
			}
			out = append(out, ref+":"+name)
		}
		return out, nil
	})(cmd, args, toComplete)
	return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}

// stepExit says how a step ended: its exit code, "running" or "lost".
func stepExit(s store.StepRow) string {
	switch {
	case s.ExitCode != nil:
		return "exit " + strconv.Itoa(*s.ExitCode)
	case s.State == store.StateLost:
		return store.StateLost
	}
	return store.StateRunning
}
