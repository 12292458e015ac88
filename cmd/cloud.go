package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/codexcloud"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

func (a *App) newCloud() *cobra.Command {
	c := parent(&cobra.Command{
		Use: "cloud",
		Example: `  id=$(xmode sandbox create --repo . --runner-mode cloud_subscription -q)
  xmode cloud submit "$id" --env ENV_ID --prompt "fix the flaky test"
  xmode cloud poll --watch`,
		Short: "The Codex cloud loop: submit a cloud_subscription session's work, follow it, see its outcome",
		Long: `A cloud_subscription session runs nothing locally: its work goes to the Codex
cloud as a task (` + "`cloud submit`" + `), a poller run by cron or a systemd timer
follows the task (` + "`cloud poll`" + `), streams its transcript into the session's
thread (` + "`cloud log`" + `) and, when it ends, marks the session ready with the
task's diff captured for review, or failed (` + "`cloud show`" + `). See
docs/codex-cloud.md.`,
	})
	c.AddCommand(a.newCloudSubmit(), a.newCloudPoll(), a.newCloudLog(), a.newCloudShow())
	return c
}

// cloudEnd is how the loop ends a session: the reaper's teardown.
func cloudEnd(svc *sandbox.Service) codexcloud.EndFunc {
	return codexcloud.Teardown(&reaper.Reaper{Cfg: svc.Cfg, Store: svc.Store, Guard: svc.Guard, Log: svc.Log, Now: svc.Clock})
}

// cloudSubmitOptions are `cloud submit`'s session and flags.
type cloudSubmitOptions struct {
	codexcloud.SubmitOptions
	session     string
	promptSet   bool // --prompt was given
	attemptsSet bool // --attempts was given
}

func (a *App) newCloudSubmit() *cobra.Command {
	var o cloudSubmitOptions
	cmd := &cobra.Command{
		Use:   "submit SESSION --env ENV_ID --prompt TEXT|- [--branch B] [--attempts N]",
		Short: "Submit a cloud_subscription session's work to the Codex cloud (codex cloud exec)",
		Long: `Run ` + "`codex cloud exec`" + ` for an open cloud_subscription session, record the task
ID from the URL codex prints, and move the session to submitted. Prints the
task ID (the task as JSON with --json). ` + "`--prompt -`" + ` reads the prompt from
standard input. The branch defaults to the session's ref.

A submit that fails leaves the session failed (submit_failed) with the error;
the message says whether retrying can help and what to do (not signed in:
run ` + "`codex login`" + ` on this host).

EXIT STATUS
  0 submitted · 1 the submit failed (the session is now failed) · 2 bad flag
  or value · 3 no such session · 4 refused (not a cloud_subscription session,
  not open, already submitted)` + pipeExitHelp,
		Example: `  xmode cloud submit sbx_7k2m9q4x --env env_123 --prompt "Fix the flaky test in pkg/x"
  git log -1 --format=%B | xmode cloud submit sbx_7k2m --env env_123 --prompt -`,
		Args: exactArgs(1, "one session"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			o.promptSet, o.attemptsSet = cmd.Flags().Changed("prompt"), cmd.Flags().Changed("attempts")
			return a.runCloudSubmit(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Env, "env", "", "Codex cloud environment ID (required)")
	f.StringVar(&o.Branch, "branch", "", "branch the cloud checks out (default: the session's ref)")
	f.IntVar(&o.Attempts, "attempts", 1, "best-of-N attempts, 1 to 4")
	f.StringVar(&o.Prompt, "prompt", "", "the task; - reads it from standard input (required)")
	return cmd
}

func (a *App) runCloudSubmit(ctx context.Context, o cloudSubmitOptions) error {
	if !o.promptSet {
		return fail.Usagef("--prompt is required: the task for the Codex cloud, or - to read it from standard input")
	}
	if o.Prompt == "-" {
		b, err := io.ReadAll(io.LimitReader(a.In, 1<<20+1))
		if err != nil {
			return fmt.Errorf("read the prompt from standard input: %w", err)
		}
		if len(b) > 1<<20 {
			return fail.Usagef("the prompt on standard input is longer than 1 MiB")
		}
		o.Prompt = string(b)
	}
	if o.attemptsSet && o.Attempts == 0 {
		return fail.Usagef("--attempts 0: codex runs 1 to 4 attempts")
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	sub := &codexcloud.Submitter{Store: svc.Store, Client: codexcloud.NewCLI(svc.Cfg), End: cloudEnd(svc), Now: svc.Clock}
	task, err := sub.Submit(ctx, sess, o.SubmitOptions)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(task)
	}
	fmt.Fprintln(a.Out, task.TaskID)
	a.info("submitted %s as %s (%s); follow it with `xmode cloud log %s --follow`", sess.ID, task.TaskID, clean(task.URL), sess.ID)
	return nil
}

// cloudPollOptions are `cloud poll`'s flags.
type cloudPollOptions struct {
	watch, sweep, verbose bool
	overrides             map[string]config.Flag // --interval
}

func (a *App) newCloudPoll() *cobra.Command {
	var o cloudPollOptions
	cmd := &cobra.Command{
		Use:   "poll",
		Short: "Follow submitted tasks once, or every --interval with --watch (what cron or a systemd timer runs)",
		Long: `One pass over the submitted tasks that are due: each is leased in the store
(two pollers, or a poller and a sweep, never work on one task at once), its
status asked (CODEX_CLOUD_STATUS_COMMAND, in parallel), its new transcript
lines appended to the session's thread, and, once the task ended, the
session marked ready (the task's diff captured for review) or failed.

A transient error (the backend unreachable, a timeout) backs off: the task
is due again 30s later, doubling up to 5m. A permanent one (codex not signed
in, output xmode does not understand) parks the task until a person acts;
--sweep re-queues every task whose last poll is older than
XMODE_CLOUD_STALE_AFTER, parked ones included.

Silent on success, for cron; -v prints one line per action, --json the
summary (one line per pass with --watch). --watch polls every --interval
(XMODE_CLOUD_POLL_INTERVAL) until SIGINT or SIGTERM, which end it cleanly.

EXIT STATUS
  0 every task moved on, or only transient errors (retried later) · 1 a
  permanent error needs a person (see stderr or --json errors) · 2 bad flag
  or value` + pipeExitHelp,
		Example: `  xmode cloud poll --sweep                 # from cron, every minute
  xmode cloud poll --watch --interval 30s  # as a service
  xmode cloud poll -v                      # one line per action`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.overrides = map[string]config.Flag{}
			flagOverride(cmd, o.overrides, "interval", "XMODE_CLOUD_POLL_INTERVAL")
			return a.runCloudPoll(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.watch, "watch", false, "keep polling every --interval until SIGINT or SIGTERM")
	f.String("interval", "", "time between passes with --watch (default $XMODE_CLOUD_POLL_INTERVAL, else 15s)")
	f.BoolVar(&o.sweep, "sweep", false, "first re-queue tasks whose last poll is older than XMODE_CLOUD_STALE_AFTER")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "print one line per action, with the session and task IDs")
	return cmd
}

func (a *App) runCloudPoll(ctx context.Context, o cloudPollOptions) error {
	svc, err := a.service(ctx, o.overrides)
	if err != nil {
		return err
	}
	var logTo io.Writer = a.Out
	if a.json {
		logTo = a.Err
	}
	p := &codexcloud.Poller{Store: svc.Store, Client: codexcloud.NewCLI(svc.Cfg),
		Capturer: codexcloud.ChangeRequests{Changes: changesOf(svc)}, End: cloudEnd(svc), StaleAfter: svc.Cfg.CloudStaleAfter, Now: svc.Clock}
	if o.verbose && !a.quiet {
		// Its lines quote task titles and codex's errors.
		p.Log = termsafe.NewWriter(logTo)
	}
	pass := codexcloud.PassOptions{Sweep: o.sweep}
	if o.watch {
		// A reader that went away (`| head -1`) ends the watch after
		// the pass that found it gone; App.Run then exits 141, silently.
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		return p.Watch(ctx, svc.Cfg.CloudPollInterval, pass, func(sum *codexcloud.Summary, err error) {
			defer func() {
				if a.brokenPipe(nil) {
					stop()
				}
			}()
			if err != nil {
				fmt.Fprintf(a.Err, "%s %s\n", a.paint(color.FgRed, "xmode:"), clean(err.Error()))
				return
			}
			if a.json {
				b, _ := json.Marshal(sum)
				fmt.Fprintln(a.Out, string(b))
			}
			a.pollFailures(sum)
		})
	}
	sum, err := p.Pass(ctx, pass)
	if err != nil {
		if sum == nil {
			return err
		}
		a.pollFailures(sum)
		took := humanize.Duration(time.Duration(sum.DurationMS) * time.Millisecond)
		if ctx.Err() != nil {
			return fail.Failedf("poll interrupted after %s: %v; run it again to finish", took, err)
		}
		return fail.Failedf("poll stopped after %s: %v", took, err)
	}
	if a.json {
		if err := a.printJSON(sum); err != nil {
			return err
		}
	}
	if a.pollFailures(sum) > 0 {
		return exitStatus(1)
	}
	return nil
}

// pollFailures prints the permanent failures of a pass on stderr (cron mails
// them) and returns how many there were; transient ones show with -v.
func (a *App) pollFailures(sum *codexcloud.Summary) int {
	perm := sum.Permanent()
	for _, f := range perm {
		fmt.Fprintf(a.Err, "%s %s %s: %s\n", a.paint(color.FgRed, "xmode:"), f.SessionID, f.TaskID, clean(f.Error))
	}
	return len(perm)
}

// cloudTask resolves a session and its task.
func (a *App) cloudTask(ctx context.Context, ref string) (*sandbox.Service, *store.CloudTask, error) {
	svc, sess, err := a.session(ctx, ref, anySession)
	if err != nil {
		return nil, nil, err
	}
	task, err := svc.Store.CloudTaskOf(ctx, sess.ID)
	if err != nil {
		return nil, nil, err
	}
	return svc, task, nil
}

// cloudLogOptions are `cloud log`'s session and flags.
type cloudLogOptions struct {
	session string
	follow  bool
}

func (a *App) newCloudLog() *cobra.Command {
	var o cloudLogOptions
	cmd := &cobra.Command{
		Use:     "log SESSION [--follow]",
		Example: `  xmode cloud log $id --follow`,
		Short:   "Print the session's thread: the task's transcript as it arrived, with times",
		Long: `Print the transcript lines the poller stored for the session's task, each with
the time it arrived (--json: one JSON object per line). --follow keeps
printing new lines as ` + "`cloud poll`" + ` (run elsewhere) stores them, until the
task is finished or Ctrl-C.

codex 0.171's status output has no transcript: the thread fills when
CODEX_CLOUD_STATUS_COMMAND prints the JSON Result (docs/codex-cloud.md).` + exitStatusHelp,
		Args: exactArgs(1, "one session"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			return a.runCloudLog(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing new lines until the task is finished")
	return cmd
}

func (a *App) runCloudLog(ctx context.Context, o cloudLogOptions) error {
	svc, task, err := a.cloudTask(ctx, o.session)
	if err != nil {
		return err
	}
	next := 0
	for {
		lines, err := svc.Store.Thread(ctx, task.TaskID, next)
		if err != nil {
			return err
		}
		for _, l := range lines {
			if a.json {
				b, _ := json.Marshal(l)
				if _, err := fmt.Fprintln(a.Out, string(b)); err != nil {
					return err
				}
			} else {
				if _, err := fmt.Fprintf(a.Out, "%s  %s\n", l.ArrivedAt.Local().Format(time.DateTime), clean(l.Line)); err != nil {
					return err // a reader that went away ends --follow too
				}
			}
			next = l.Index + 1
		}
		if !o.follow || task.Finished() {
			if o.follow {
				a.info("%s: task %s %s", task.SessionID, task.TaskID, clean(task.State))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		if task, err = svc.Store.CloudTask(ctx, task.TaskID); err != nil {
			return err
		}
	}
}

// cloudShowOptions are `cloud show`'s session.
type cloudShowOptions struct {
	session string
}

func (a *App) newCloudShow() *cobra.Command {
	return &cobra.Command{
		Use:     "show SESSION",
		Example: `  xmode cloud show $id --json`,
		Short:   "Show the session's cloud task: ID, state, attempts, polls, next due, last error, capture",
		Args:    exactArgs(1, "one session"),
		Long:    `Show the Codex cloud task of a session (--json: the task as JSON).` + exitStatusHelp,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runCloudShow(cmd.Context(), cloudShowOptions{session: args[0]})
		},
	}
}

func (a *App) runCloudShow(ctx context.Context, o cloudShowOptions) error {
	_, t, err := a.cloudTask(ctx, o.session)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(t)
	}
	now := clock()
	when := func(at *time.Time) string {
		if at == nil {
			return "never"
		}
		return at.Local().Format(time.DateTime) + " (" + humanize.Ago(*at, now) + ")"
	}
	kv := newTable(a.Out)
	kv.row("Session:", t.SessionID+" ("+t.SessionStatus+")")
	kv.row("Task:", t.TaskID)
	if t.URL != "" {
		kv.row("URL:", clean(t.URL))
	}
	state := clean(t.State)
	if t.Title != "" {
		state += ": " + clean(t.Title)
	}
	kv.row("State:", state)
	if t.Summary != "" {
		kv.row("Summary:", clean(t.Summary))
	}
	kv.row("Environment:", fmt.Sprintf("%s, branch %s, %d attempt(s)", clean(t.EnvID), clean(t.Branch), t.Attempts))
	kv.row("Submitted:", when(&t.SubmittedAt))
	kv.row("Last poll:", fmt.Sprintf("%s, %d poll(s)", when(t.LastPollAt), t.Polls))
	switch {
	case t.Finished():
		kv.row("Finished:", when(t.FinishedAt))
	case t.Parked():
		kv.row("Next due:", "parked until a person acts and `xmode cloud poll --sweep` re-queues it")
	case !t.NextDueAt.After(now):
		kv.row("Next due:", "now (the next `xmode cloud poll`)")
	default:
		kv.row("Next due:", t.NextDueAt.Local().Format(time.DateTime)+" (in "+humanize.Span(t.NextDueAt.Sub(now))+")")
	}
	if t.LastError != "" {
		e := clean(t.LastError)
		if t.ErrorClass != "" {
			e += " (" + t.ErrorClass + ")"
		}
		kv.row("Last error:", e)
	}
	kv.row("Transcript:", fmt.Sprintf("%d line(s): `xmode cloud log %s`", t.TranscriptLen, t.SessionID))
	if t.Capture != "" {
		kv.row("Change request:", clean(t.Capture))
	}
	return kv.flush()
}

// cloudStatusHint is what sandbox show adds for a session in the cloud loop.
func cloudStatusHint(s *store.Session) string {
	if s.RunnerMode != config.ModeCloudSubscription {
		return ""
	}
	switch s.Status {
	case store.StatusOpen:
		return "submit its work with `xmode cloud submit " + s.ID + " --env ENV_ID --prompt TEXT`"
	case store.StatusSubmitted, store.StatusReady:
		return "`xmode cloud show " + s.ID + "`"
	}
	return ""
}
