package cmd

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// followPoll is how often `logs --follow` looks for more output and
// whether the step is still running.
const followPoll = 200 * time.Millisecond

// logsOptions are `sandbox logs`'s session, step and flags.
type logsOptions struct {
	session             string
	step                string
	hasStep             bool // STEP was given
	follow, stderr, all bool
	network             bool
}

func (a *App) newLogs() *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:   "logs SESSION [STEP] [--follow] [--stderr|--all|--network]",
		Short: "The evidence browser: a session's steps, or what one step printed",
		Long: `Without STEP, a table of the session's steps: number, name, how it ended
(exit code, running or lost), duration, when it started, its command; failed
steps stand out. With STEP — its number; or its name (the latest step of
that name); or words of its name (test finds make-test, the step that
` + "`exec ID -- make test`" + ` made: a step is named after its command unless
--name names it) — what the step printed: its stdout log, its stderr log with --stderr,
both with --all (each on the stream it came from). A shell's transcript is
its stdout log.

--follow streams a step that is still running — a background step
(` + "`exec --detach`" + `) as well as another terminal's — and ends when the
step ends, with a line on stderr saying how; it exits 0 whatever the step's
status, as ` + "`docker logs --follow`" + ` does (its status is in
` + "`sandbox logs SESSION STEP --json`" + `). Without STEP it follows the latest
running step, else the last one. --json prints the steps as JSON, or the
step with its output.

--network prints, instead of what the step printed, the egress proxy's
decisions for the connections (and DNS questions) that began while the step
ran — host, port, verdict, the rule that decided or why it was refused,
bytes each way — for a session whose network is proxied (--network allow
or open: docs/network.md); without STEP, the session's whole network log
with the step each line falls in. A line is the step's by time: the proxy
knows the sandbox a connection came from, not its process, so a background
step's connections also show under a step that ran beside it.

Logs are read from runs/<run>/steps/<seq>-<name>/ through the storage guard:
nothing a step planted there (a symlink, a FIFO) is followed.` + exitStatusHelp,
		Example: `  xmode sandbox logs sbx_7k2m9q4x
  xmode sandbox logs 7k2m 3              # step 3's stdout
  xmode sandbox logs 7k2m test --stderr  # the latest step named test (or make-test)
  xmode sandbox logs 7k2m --follow       # the running step, live
  xmode sandbox logs 7k2m 4 -f --all     # step 4 (a background server), both logs
  xmode sandbox logs 7k2m 3 --network    # what step 3 reached, and what it was refused
  xmode sandbox logs 7k2m --json | jq '.[] | select(.exit_code != 0)'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return fail.Usagef("expected a session and maybe a step: xmode sandbox logs SESSION [STEP]")
			}
			return nil
		},
		ValidArgsFunction: a.completeSteps,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			if len(args) == 2 {
				o.step, o.hasStep = args[1], true
			}
			return a.runLogs(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.follow, "follow", "f", false, "stream a running step's output until it ends")
	f.BoolVar(&o.stderr, "stderr", false, "print the step's stderr log instead of its stdout log")
	f.BoolVar(&o.all, "all", false, "print both logs: stdout's on stdout, stderr's on stderr")
	f.BoolVar(&o.network, "network", false, "print the egress proxy's decisions for the step's connections instead (docs/network.md)")
	return a.setTraits(cmd, traits{interrupted: "stopped following"})
}

func (a *App) runLogs(ctx context.Context, o logsOptions) error {
	if o.stderr && o.all {
		return fail.Usagef("--stderr and --all do not go together: --all prints both logs")
	}
	if o.follow && a.json {
		return fail.Usagef("--follow and --json do not go together: follow a step, then ask for its JSON")
	}
	if o.network && (o.follow || o.stderr || o.all) {
		return fail.Usagef("--network prints the step's network decisions: it goes with neither --follow, --stderr nor --all")
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	steps, err := sessionSteps(ctx, svc.Store, sess)
	if err != nil {
		return err
	}
	if o.network {
		seq := 0
		if o.hasStep {
			st, err := pickStep(sess, steps, o.step)
			if err != nil {
				return err
			}
			seq = st.Seq
		}
		return a.networkLines(ctx, svc, sess, seq)
	}
	if !o.hasStep && !o.follow {
		return a.logsTable(svc, sess, steps)
	}
	var st store.StepRow
	if o.hasStep {
		if st, err = pickStep(sess, steps, o.step); err != nil {
			return err
		}
	} else if len(steps) == 0 {
		return fail.NotFoundf("session %s has no steps yet: run one with `xmode sandbox exec %s -- CMD`", sess.ID, sess.ID)
	} else {
		st = followed(steps)
	}
	files := []string{evidence.StdoutFile}
	switch {
	case o.stderr:
		files = []string{evidence.StderrFile}
	case o.all:
		files = []string{evidence.StdoutFile, evidence.StderrFile}
	}
	if a.json {
		return a.stepJSON(svc, st, files)
	}
	if o.follow {
		return a.follow(ctx, svc, st, files)
	}
	for i, f := range files {
		if err := a.copyLog(svc, st, f, a.streamFor(i, o.all)); err != nil {
			return err
		}
	}
	return nil
}

// followed is the step `logs --follow` follows without STEP: the latest
// that is running (a background server, while later steps came and went),
// else the last.
func followed(steps []store.StepRow) store.StepRow {
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].State == store.StateRunning {
			return steps[i]
		}
	}
	return steps[len(steps)-1]
}

// sessionSteps are the steps the session ran (a shared run has others').
func sessionSteps(ctx context.Context, st *store.Store, sess *store.Session) ([]store.StepRow, error) {
	all, err := st.Steps(ctx, sess.RunID)
	if err != nil {
		return nil, err
	}
	var out []store.StepRow
	for _, s := range all {
		if s.SessionID == sess.ID {
			out = append(out, s)
		}
	}
	return out, nil
}

// pickStep finds STEP (docs/cli: sandbox logs): a number is that step; a
// name is the latest step of that name; else the latest step whose name has
// STEP's words in it (test finds make-test), as long as they all have one
// name — two names are ambiguous (exit 2), and the message lists them.
func pickStep(sess *store.Session, steps []store.StepRow, ref string) (store.StepRow, error) {
	if n, err := strconv.Atoi(ref); err == nil {
		for _, s := range steps {
			if s.Seq == n {
				return s, nil
			}
		}
		return store.StepRow{}, fail.NotFoundf("no step %d in session %s: `xmode sandbox logs %s` lists its steps", n, sess.ID, sess.ID)
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Name == ref {
			return steps[i], nil
		}
	}
	want := stepWords(ref)
	var found []store.StepRow
	names := map[string]bool{}
	for _, s := range steps {
		if len(want) > 0 && hasWords(stepWords(s.Name), want) {
			found = append(found, s)
			names[s.Name] = true
		}
	}
	switch {
	case len(found) == 0:
		return store.StepRow{}, fail.NotFoundf("no step named %q in session %s: `xmode sandbox logs %s` lists its steps", ref, sess.ID, sess.ID)
	case len(names) > 1:
		var list []string
		for _, s := range found {
			if names[s.Name] {
				list = append(list, fmt.Sprintf("%s (step %d)", s.Name, s.Seq))
				delete(names, s.Name)
			}
		}
		return store.StepRow{}, fail.Usagef("step %q is ambiguous in session %s: it matches %s; give the step's number or whole name", ref, sess.ID, strings.Join(list, ", "))
	}
	return found[len(found)-1], nil
}

// stepWords splits a step name (or what a user typed for one) into its
// words, lowercased: make-test is make, test.
func stepWords(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return r == '-' || r == '_' || r == '.' || r == ' ' || r == '/'
	})
}

// hasWords reports whether want occurs in words, in order and together.
func hasWords(words, want []string) bool {
	for i := 0; i+len(want) <= len(words); i++ {
		if slices.Equal(words[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// streamFor is where the i-th log goes: stdout, or with --all the second
// (stderr's) to stderr.
func (a *App) streamFor(i int, all bool) io.Writer {
	if all && i == 1 {
		return a.Err
	}
	return a.Out
}

func (a *App) copyLog(svc *sandbox.Service, st store.StepRow, file string, w io.Writer) error {
	f, err := evidence.Open(svc.Guard, st.RunID, st.Seq, st.Name, file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// follow streams the logs of a step until it is no longer running (or its
// xmode is gone), then prints what is left and how it ended.
func (a *App) follow(ctx context.Context, svc *sandbox.Service, st store.StepRow, files []string) error {
	fw, err := evidence.Follow(svc.Store, svc.Guard, svc.Now, st, files...)
	if err != nil {
		return err
	}
	defer fw.Close()
	row, err := fw.Run(ctx, evidence.Stream{Poll: followPoll, Out: func(i int, p []byte) error {
		_, err := a.streamFor(i, len(files) == 2).Write(p)
		return err
	}})
	if err != nil {
		return err
	}
	switch {
	case row.State == store.StateRunning:
		a.info("xmode: step %d's xmode is gone; the reaper records it as lost", row.Seq)
	case row.StoppedBy != "":
		a.info("xmode: step %d ended: %s (stopped by `%s`)", row.Seq, stepExit(row), row.StoppedBy)
	default:
		a.info("xmode: step %d ended: %s", row.Seq, stepExit(row))
	}
	return nil
}

// stepView is a step as --json shows it (logs, show, run show, exec
// --detach): docs/reference.md, "Step".
type stepView = sandbox.StepView

func viewStep(svc *sandbox.Service, s store.StepRow) stepView { return svc.ViewStep(s) }

func viewSteps(svc *sandbox.Service, steps []store.StepRow) []stepView {
	out := make([]stepView, 0, len(steps))
	for _, s := range steps {
		out = append(out, viewStep(svc, s))
	}
	return out
}

// stepJSON prints one step with the logs asked for.
func (a *App) stepJSON(svc *sandbox.Service, st store.StepRow, files []string) error {
	v := viewStep(svc, st)
	for _, name := range files {
		f, err := evidence.Open(svc.Guard, st.RunID, st.Seq, st.Name, name)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return err
		}
		text := string(b)
		if name == evidence.StdoutFile {
			v.Stdout = &text
		} else {
			v.Stderr = &text
		}
	}
	return a.printJSON(v)
}

// stepTable prints the session's steps; failed and lost ones in red.
func (a *App) logsTable(svc *sandbox.Service, sess *store.Session, steps []store.StepRow) error {
	if a.json {
		return a.printJSON(viewSteps(svc, steps))
	}
	if len(steps) == 0 {
		a.info("session %s has no steps yet: run one with `xmode sandbox exec %s -- CMD`", sess.ID, sess.ID)
		return nil
	}
	now := clock()
	t := newTable(a.Out, "STEP", "NAME", "EXIT", "DURATION", "STARTED", "COMMAND")
	for _, s := range steps {
		t.row(strconv.Itoa(s.Seq), clean(s.Name), a.stepStatus(s), stepDuration(s, now), humanize.Ago(s.StartedAt, now), truncate(clean(strings.Join(s.Argv, " ")), 50))
	}
	return t.flush()
}

// stepStatus is how a step ended, coloured: red when it failed or was lost.
func (a *App) stepStatus(s store.StepRow) string {
	switch {
	case s.ExitCode != nil:
		text := strconv.Itoa(*s.ExitCode)
		if s.TimedOut {
			text += " (timeout)"
		}
		if s.OOMKilled {
			text += " (oom)"
		}
		switch s.StoppedBy {
		case "":
		case store.StoppedByKill:
			text += " (killed)"
		default:
			text += " (stopped)"
		}
		if *s.ExitCode != 0 {
			return a.paint(color.FgRed, text)
		}
		return a.paint(color.FgGreen, text)
	case s.State == store.StateLost:
		return a.paint(color.FgRed, store.StateLost)
	}
	if s.Detached {
		return a.paint(color.FgCyan, "running (detached)")
	}
	return a.paint(color.FgCyan, "running")
}

// stepDuration is how long a step ran, or has run so far: "-" for one
// lost before it finished.
func stepDuration(s store.StepRow, now time.Time) string {
	if s.FinishedAt == nil {
		if s.State == store.StateRunning {
			return humanize.Duration(now.Sub(s.StartedAt))
		}
		return "-"
	}
	return humanize.Duration(s.FinishedAt.Sub(s.StartedAt))
}
