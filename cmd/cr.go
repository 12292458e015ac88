package cmd

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// changes opens the store and the change-request service.
func (a *App) changes(ctx context.Context) (*changes.Service, error) {
	// A snapshot's heap is a few MB in a process that lives for
	// milliseconds: collecting it at 4× instead of 2× its live size saves
	// a quarter of the CPU (and ~300 page faults) of a `sandbox diff`.
	debug.SetGCPercent(400)
	svc, err := a.service(ctx, nil)
	if err != nil {
		return nil, err
	}
	// A large change or a hostile pack can hold a few hundred MB live
	// (docs/change-requests.md, "Hostile packs"): a soft limit keeps the
	// heap near that rather than at 5 times it.
	debug.SetMemoryLimit(512<<20 + 4*min(svc.Cfg.CRMaxBytes, 1<<40))
	return changesOf(svc), nil
}

// changesOf is the change-request service of a storage root.
func changesOf(svc *sandbox.Service) *changes.Service {
	return &changes.Service{Store: svc.Store, Guard: svc.Guard, MaxBytes: svc.Cfg.CRMaxBytes, User: svc.Cfg.User, Cfg: svc.Cfg, Now: svc.Clock}
}

func (a *App) warn(warnings []string) {
	if a.quiet {
		return
	}
	for _, w := range warnings {
		fmt.Fprintf(a.Err, "%s %s\n", a.paint(color.FgYellow, "xmode: warning:"), clean(w))
	}
}

func (a *App) newCR() *cobra.Command {
	c := parent(&cobra.Command{
		Use: "cr",
		Example: `  cr=$(xmode cr create $id --title "Make the tests pass")
  xmode cr show $cr --patch
  xmode cr review $cr --approve`,
		Aliases: []string{"change-request"},
		Short:   "Change requests: freeze a sandbox's work, review it, export it",
		Long: `A change request is everything a session's worktree holds against its base
commit — the agent's commits, its uncommitted and untracked files, with the
repository's ignore rules — frozen into runs/<run>/change_requests/<n>/
(change.patch, manifest.json, evidence.json), built without running anything
the sandbox configured. See docs/change-requests.md.`,
	})
	c.AddCommand(a.newCRCreate(), a.newCRList(), a.newCRShow(), a.newCRReview(), a.newCRVerify(), a.newCRExport(),
		a.newCRDiff(), a.newCRCompare())
	return c
}

// --- sandbox diff

type diffOptions struct {
	session string
	stat    bool
}

// diffView is `sandbox diff --json`.
type diffView struct {
	SessionID  string            `json:"session_id"`
	RunID      string            `json:"run_id"`
	Worktree   string            `json:"worktree"`
	BaseCommit changes.Hash      `json:"base_commit"`
	Head       changes.Hash      `json:"head"`
	Tree       changes.Hash      `json:"tree"`
	Commits    []*changes.Commit `json:"commits"`
	Stat       *changes.Stat     `json:"stat"`
	Skipped    []changes.Skipped `json:"skipped"`
	Warnings   []string          `json:"warnings"`
}

func (a *App) newDiff() *cobra.Command {
	var o diffOptions
	cmd := &cobra.Command{
		Use: "diff SESSION [--stat]",
		Example: `  xmode sandbox diff $id --stat
  xmode sandbox diff $id --json`,
		Short: "Show what a sandbox changed against its base commit (commits, uncommitted and untracked files)",
		Long: `Show everything the session's worktree holds against its base commit — the
agent's commits, uncommitted and untracked files, with the repository's ignore
rules — as git diff would show it (--stat: as git diff --stat). Nothing the
worktree configured runs, and nothing is written the sandbox can see. Paths
git refuses to track (.GIT, git~1, ...) are left out and listed on stderr; a
change larger than XMODE_CR_MAX_BYTES is refused (exit 4), as cr create
refuses it.` + exitStatusHelp,
		Args: exactArgs(1, "one session"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			return a.runDiff(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.stat, "stat", false, "a diffstat instead of the patch")
	return cmd
}

func (a *App) runDiff(ctx context.Context, o diffOptions) error {
	cs, err := a.changes(ctx)
	if err != nil {
		return err
	}
	sess, err := findSession(ctx, cs.Store, o.session, anySession)
	if err != nil {
		return err
	}
	want := changes.WantPatch
	if a.json || o.stat {
		want = changes.WantStat
	}
	sn, err := cs.Snapshot(ctx, sess, want)
	if err != nil {
		return err
	}
	defer sn.Close()
	a.warn(sn.Warnings)
	a.reportLeftOut(sn.Skipped)
	if a.json || o.stat {
		st, err := sn.Stat(ctx)
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(diffView{
				SessionID: sess.ID, RunID: sess.RunID, Worktree: sn.Kind, BaseCommit: sn.Base, Head: sn.Head, Tree: sn.Tree,
				Commits: nonNilSlice(sn.Commits), Stat: st, Skipped: nonNilSlice(sn.Skipped), Warnings: nonNilSlice(sn.Warnings),
			})
		}
		return a.paged(func(w io.Writer) error { return writeStat(w, st, a.colour()) })
	}
	return a.paged(func(w io.Writer) error {
		pw, flush := a.patchWriter(w)
		err := sn.Patch(ctx, pw, false)
		if ferr := flush(); err == nil {
			err = ferr
		}
		return err
	})
}

// reportLeftOut lists on stderr the worktree paths a snapshot left out,
// and why (--json has them as "skipped").
func (a *App) reportLeftOut(skipped []changes.Skipped) {
	for _, s := range skipped {
		a.info("xmode: left out %s: %s", clean(s.Path), s.Reason)
	}
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// --- cr create

type crCreateOptions struct {
	session string
	changes.CreateOptions
}

func (a *App) newCRCreate() *cobra.Command {
	var o crCreateOptions
	cmd := &cobra.Command{
		Use:   "create SESSION [--title T] [--message M]",
		Short: "Freeze what a sandbox changed into a change request",
		Long: `Freeze the session's worktree against its base commit into a new package,
runs/<run>/change_requests/<n>/: change.patch (applies with git apply --index
to a clean checkout of the base commit and yields exactly the recorded tree),
manifest.json (the tree, the agent's commits, the stat, the sha256 of every
file) and evidence.json (every step of the run). Prints the change request's
ID. An empty change is refused (exit 4), and so is one larger than
XMODE_CR_MAX_BYTES, naming its largest files.` + exitStatusHelp,
		Example: `  xmode cr create sbx_7k2m9q4x --title "Fix the flaky test"`,
		Args:    exactArgs(1, "one session"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			return a.runCRCreate(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Title, "title", "", "title (default: the agent's last commit subject)")
	cmd.Flags().StringVarP(&o.Message, "message", "m", "", "description for the reviewer")
	return cmd
}

func (a *App) runCRCreate(ctx context.Context, o crCreateOptions) error {
	cs, err := a.changes(ctx)
	if err != nil {
		return err
	}
	sess, err := findSession(ctx, cs.Store, o.session, anySession)
	if err != nil {
		return err
	}
	p, err := cs.Create(ctx, sess, o.CreateOptions)
	if err != nil {
		return err
	}
	a.warn(p.Manifest.Warnings)
	a.reportLeftOut(p.Manifest.Skipped)
	if a.json {
		return a.printJSON(p)
	}
	fmt.Fprintln(a.Out, p.ID)
	a.info("created %s in %s: %s; base %s, %d commit(s) by the agent", p.ID, p.Dir, statSummary(p.Manifest.Stat), shortSHA(p.BaseCommit), len(p.Manifest.Commits))
	return nil
}

// --- cr list

type crListOptions struct {
	store.ChangeFilter
}

func (a *App) newCRList() *cobra.Command {
	var o crListOptions
	cmd := &cobra.Command{
		Use: "list [--run R] [--status STATUS]",
		Example: `  xmode cr list --status open
  xmode cr list --run run_7k2m9q4x --json`,
		Aliases: []string{"ls"},
		Short:   "List change requests, newest first",
		Long:    "List change requests, newest first (--json: as JSON)." + exitStatusHelp,
		Args:    exactArgs(0, "no arguments"),
		RunE:    func(cmd *cobra.Command, _ []string) error { return a.runCRList(cmd.Context(), o) },
	}
	cmd.Flags().StringVar(&o.RunID, "run", "", "only this run's")
	cmd.Flags().StringVar(&o.Status, "status", "", "only those in this state: open, approved, rejected, changes_requested or superseded")
	return cmd
}

func (a *App) runCRList(ctx context.Context, o crListOptions) error {
	switch o.Status {
	case "", store.ChangeOpen, store.ChangeApproved, store.ChangeRejected, store.ChangeChangesRequested, store.ChangeSuperseded:
	default:
		return fail.Usagef("--status %q: use open, approved, rejected, changes_requested or superseded", o.Status)
	}
	cs, err := a.changes(ctx)
	if err != nil {
		return err
	}
	list, err := cs.Store.ListChanges(ctx, o.ChangeFilter)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(list)
	}
	if a.quiet {
		for _, c := range list {
			fmt.Fprintln(a.Out, c.ID)
		}
		return nil
	}
	now := clock()
	t := newTable(a.Out, "ID", "STATUS", "RUN", "FILES", "+/-", "CREATED", "TITLE")
	for _, c := range list {
		t.row(c.ID, a.crStatus(c.Status), c.RunID, fmt.Sprint(c.Files), fmt.Sprintf("+%d -%d", c.Insertions, c.Deletions),
			humanize.Ago(c.CreatedAt, now), truncate(clean(c.Title), 50))
	}
	return t.flush()
}

func (a *App) crStatus(s string) string {
	switch s {
	case store.ChangeApproved:
		return a.paint(color.FgGreen, s)
	case store.ChangeRejected:
		return a.paint(color.FgRed, s)
	case store.ChangeChangesRequested, store.ChangeSuperseded:
		return a.paint(color.FgYellow, s)
	}
	return a.paint(color.FgCyan, s)
}

// --- cr show

type crShowOptions struct {
	ref     string
	patch   bool
	version int
}

// crShowView is `cr show --json`.
type crShowView struct {
	*changes.Package
	// Shown is the version shown (the newest unless --version), Versions
	// every one.
	Shown    int                   `json:"shown_version"`
	Versions []store.ChangeVersion `json:"versions"`
	Manifest *changes.Manifest     `json:"manifest"`
	Evidence *changes.Evidence     `json:"evidence"`
	// Verify is cr verify's report: a manifest that is not intact says
	// what its forger wants said.
	Verify *changes.Report `json:"verify"`
	// "patch" (cr show --json --patch) is streamed after these
	// (printJSONWith).
}

func (a *App) newCRShow() *cobra.Command {
	var o crShowOptions
	cmd := &cobra.Command{
		Use: "show CR [--patch] [--version N]",
		Example: `  xmode cr show cr_7k2m --patch
  xmode cr show cr_7k2m --version 1`,
		Short: "Show a change request: title, base, stat, the evidence's steps (and the patch)",
		Long: `Show a change request's newest version (--version N: another): its title, status
and reviews (with their comments on lines, each marked addressed once the next
version changed its line), its versions, base commit, the agent's commits, the
diffstat and every step of the version's evidence with pass/fail at a glance;
--patch adds the patch. Paged on a terminal like git ($PAGER, else less -FRX).
Every version is verified as cr verify does: one that is not what was recorded
is shown under a TAMPERED line naming each file that differs.` + exitStatusHelp,
		Args: exactArgs(1, "one change request"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ref = args[0]
			return a.runCRShow(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVarP(&o.patch, "patch", "p", false, "show the patch too")
	cmd.Flags().IntVar(&o.version, "version", 0, "show this version (default: the newest)")
	return cmd
}

func (a *App) runCRShow(ctx context.Context, o crShowOptions) error {
	if o.version < 0 {
		return fail.Usagef("--version %d: versions count from 1", o.version)
	}
	cs, err := a.changes(ctx)
	if err != nil {
		return err
	}
	p, err := cs.OpenVersion(ctx, o.ref, o.version)
	if err != nil {
		return err
	}
	versions, err := cs.Store.Versions(ctx, p.ID)
	if err != nil {
		return err
	}
	if err := cs.Annotate(ctx, p.Change); err != nil {
		return err
	}
	// What the manifest says (title, message, commits) is shown only with
	// whether it is what was recorded.
	rep, err := cs.Verify(ctx, p)
	if err != nil {
		return err
	}
	ev, err := cs.Evidence(p)
	if err != nil && rep.Intact {
		return err
	}
	if err != nil {
		ev = nil // tampered with: the report names it
	}
	// The patch is streamed, never read whole: a change.patch that is not
	// what its manifest records is refused before anything is shown — a
	// forged patch is never printed where a reviewer could apply it.
	var patch io.ReadCloser
	if o.patch {
		if patch, _, err = cs.OpenFile(p, changes.PatchFile); err != nil {
			return err
		}
		defer patch.Close()
	}
	if a.json {
		v := crShowView{Package: p, Shown: p.At().Version, Versions: versions, Manifest: p.Manifest, Evidence: ev, Verify: rep}
		if patch != nil {
			return a.printJSONWith(v, "patch", patch)
		}
		return a.printJSON(v)
	}
	if !rep.Intact {
		a.warn([]string{fmt.Sprintf("%s is tampered with: %s", p.ID, problemFiles(rep))})
	}
	return a.paged(func(w io.Writer) error {
		if err := a.writeCR(w, p, versions, ev, rep); err != nil {
			return err
		}
		if patch == nil {
			return nil
		}
		fmt.Fprintln(w)
		pw, flush := a.patchWriter(w)
		_, err := io.Copy(pw, patch)
		if ferr := flush(); err == nil {
			err = ferr
		}
		return err
	})
}

// problemFiles names the files a report found differing, once each
// (after their version, when it is not the first).
func problemFiles(rep *changes.Report) string {
	var files []string
	for _, pr := range rep.Problems {
		if f := problemFile(pr); !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	return strings.Join(files, ", ") + " differ(s) from what was recorded"
}

// problemFile names a problem's file: "version 2: change.patch" for a
// later version's.
func problemFile(pr changes.Problem) string {
	if pr.Version > 1 {
		return fmt.Sprintf("version %d: %s", pr.Version, pr.File)
	}
	return pr.File
}

// writeCR shows a change request; one that is tampered with is said to be
// before anything its package says, each problem named.
func (a *App) writeCR(w io.Writer, p *changes.Package, versions []store.ChangeVersion, ev *changes.Evidence, rep *changes.Report) error {
	m := p.Manifest
	now := clock()
	if !rep.Intact {
		fmt.Fprintf(w, "%s this package is not what was recorded: what it says below may be forged (xmode cr verify %s)\n", a.paint(color.FgRed, "TAMPERED:"), p.ID)
		for _, pr := range rep.Problems {
			fmt.Fprintf(w, "  %s: %s\n", clean(problemFile(pr)), clean(pr.Problem))
		}
		fmt.Fprintln(w)
	}
	status := a.crStatus(p.Status)
	if !rep.Intact {
		status += " " + a.paint(color.FgRed, "tampered")
	}
	fmt.Fprintf(w, "%s %s  %s\n", a.paint(color.Bold, p.ID), status, clean(m.Title))
	kv := newTable(w)
	at := p.At()
	if len(versions) > 1 {
		shown := fmt.Sprintf("%d of %d", at.Version, len(versions))
		if at.Version == p.Version {
			shown += " (the newest)"
		}
		kv.row("Version:", shown)
	}
	kv.row("Run:", p.RunID+" (session "+p.SessionID+")")
	if at.RunID != p.RunID || at.SessionID != p.SessionID {
		kv.row("This version:", "run "+at.RunID+", session "+at.SessionID)
	}
	kv.row("Repo:", clean(m.Repo)+" @ "+clean(m.Ref))
	kv.row("Base:", m.BaseCommit)
	kv.row("Tree:", m.Tree)
	kv.row("Author:", clean(m.Author))
	kv.row("Created:", m.CreatedAt.Local().Format(time.DateTime)+" ("+humanize.Ago(m.CreatedAt, now)+")")
	kv.row("Package:", p.Dir)
	for _, r := range p.Reviews {
		line := r.Decision + " by " + clean(r.Reviewer) + " at " + r.DecidedAt.Local().Format(time.DateTime)
		if len(versions) > 1 {
			line = fmt.Sprintf("v%d: %s", r.Version, line)
		}
		if r.Note != "" {
			line += ": " + clean(r.Note)
		}
		kv.row("Review:", line)
		for _, c := range r.Comments {
			mark := ""
			if c.Addressed != nil && *c.Addressed {
				mark = a.paint(color.FgGreen, " (addressed in v"+fmt.Sprint(c.Version+1)+")")
			} else if c.Addressed != nil {
				mark = a.paint(color.FgYellow, " (not addressed in v"+fmt.Sprint(c.Version+1)+")")
			}
			kv.row("", "  "+clean(changes.Where(c))+": "+clean(c.Text)+mark)
		}
	}
	if err := kv.flush(); err != nil {
		return err
	}
	if len(versions) > 1 {
		fmt.Fprintln(w)
		t := newTable(w, "VERSION", "SESSION", "FILES", "+/-", "CREATED")
		for _, v := range versions {
			label := fmt.Sprint(v.Version)
			if v.Version == at.Version {
				label += " *"
			}
			t.row(label, v.SessionID, fmt.Sprint(v.Files), fmt.Sprintf("+%d -%d", v.Insertions, v.Deletions), v.CreatedAt.Local().Format(time.DateTime))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if m.Message != "" {
		lines := strings.Split(strings.TrimRight(m.Message, "\n"), "\n")
		for i, l := range lines {
			lines[i] = clean(strings.TrimSuffix(l, "\r"))
		}
		fmt.Fprintf(w, "\n    %s\n", strings.Join(lines, "\n    "))
	}
	if len(m.Commits) > 0 {
		fmt.Fprintf(w, "\nCommits by the agent (%d):\n", len(m.Commits))
		for _, c := range m.Commits {
			subject, _, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
			fmt.Fprintf(w, "  %s %s\n", a.paint(color.FgYellow, c.ID.String()[:12]), clean(subject))
		}
	}
	for _, warning := range m.Warnings {
		fmt.Fprintf(w, "%s %s\n", a.paint(color.FgYellow, "Warning:"), clean(warning))
	}
	for _, s := range m.Skipped {
		fmt.Fprintf(w, "Left out: %s: %s\n", clean(s.Path), s.Reason)
	}
	fmt.Fprintln(w)
	if err := writeStat(w, m.Stat, a.colour()); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if ev == nil {
		fmt.Fprintf(w, "Evidence: not shown: %s is not what was recorded.\n", changes.EvidenceFile)
		return nil
	}
	a.networkEvidence(w, ev.Network)
	if len(ev.Steps) == 0 {
		fmt.Fprintln(w, "Evidence: no steps ran in this run.")
		return nil
	}
	passed := 0
	for _, s := range ev.Steps {
		if s.Passed() {
			passed++
		}
	}
	fmt.Fprintf(w, "Evidence: %d of %d steps passed\n", passed, len(ev.Steps))
	t := newTable(w, "STEP", "COMMAND", "RESULT", "DURATION")
	for _, s := range ev.Steps {
		dur := "-"
		if s.FinishedAt != nil {
			dur = humanize.Duration(time.Duration(s.DurationMS) * time.Millisecond)
		}
		t.row(fmt.Sprintf("%04d-%s", s.Seq, clean(s.Name)), truncate(clean(strings.Join(s.Argv, " ")), 50), a.stepResult(s), dur)
	}
	return t.flush()
}

// networkEvidence says what the run's proxied sandboxes reached and were
// refused ("Network: N connections to [hosts], M denied"), with the first
// refused attempts: what a reviewer should see the agent tried.
func (a *App) networkEvidence(w io.Writer, n *evidence.NetworkSummary) {
	if n == nil {
		return
	}
	fmt.Fprintf(w, "Network: %s\n", clean(n.Line))
	const shown = 10
	for i, r := range n.Refused {
		if i == shown {
			fmt.Fprintf(w, "  … %d more refused (`xmode sandbox network SESSION --denied` lists them)\n", len(n.Refused)-shown)
			break
		}
		dest := r.Host
		if r.Port != 0 {
			dest += ":" + strconv.Itoa(r.Port)
		}
		fmt.Fprintf(w, "  %s %s (%s, step %s): %s\n", a.paint(color.FgRed, "refused"), clean(dest), r.Kind, stepsCell(r.Steps), clean(truncate(r.Reason, 120)))
	}
	fmt.Fprintln(w)
}

func (a *App) stepResult(s changes.StepEvidence) string {
	switch s.Status {
	case changes.EvidencePassed:
		return a.paint(color.FgGreen, "✓ passed")
	case changes.EvidenceRunning:
		return a.paint(color.FgCyan, "… running")
	case changes.EvidenceTimedOut:
		return a.paint(color.FgRed, "✗ timed out")
	case changes.EvidenceOOMKilled:
		return a.paint(color.FgRed, "✗ out of memory")
	case changes.EvidenceKilled:
		return a.paint(color.FgRed, "✗ killed ("+s.Signal+")")
	}
	code := -1
	if s.ExitCode != nil {
		code = *s.ExitCode
	}
	return a.paint(color.FgRed, fmt.Sprintf("✗ failed (exit %d)", code))
}

// --- cr review

type crReviewOptions struct {
	ref                             string
	approve, reject, requestChanges bool
	note                            string
	comments                        []string
	closeOthers                     bool
}

func (a *App) newCRReview() *cobra.Command {
	var o crReviewOptions
	cmd := &cobra.Command{
		Use: "review CR --approve|--request-changes|--reject [--note TEXT] [--comment \"PATH:LINE: TEXT\"]... [--close-others]",
		Example: `  xmode cr review cr_7k2m --approve -m "looks right"
  xmode cr review cr_7k2m --request-changes --note "the test still skips on CI" \
    --comment "src/a.go:12: return the error" --comment "src/a.go:-30: keep this check"
  xmode cr review cr_7k2m --approve --close-others`,
		Short: "Approve, reject or ask for changes to a change request (every decision is kept)",
		Long: `Record a review decision about the change request's newest version, with the
reviewer ($XMODE_USER, else the OS user) and the time. Its status is its latest
decision. An approval is refused for a change request that fails verification.
--request-changes asks for a new version (status changes_requested): say
which with --note, --comment or both; ` + "`xmode run continue RUN`" + ` gives them to the
agent, and what it makes is the next version.

--comment "PATH:LINE: TEXT" (repeatable) comments on line LINE of PATH as the
version has it (a line the diff shows: added or context); "PATH:-LINE: TEXT"
on line LINE of the base (a line the change removed). A path the version does
not change, or a line its diff does not show, is refused (exit 2).

--close-others, with --approve on one attempt of a run of attempts (xmode run
--attempts), closes the others still open or awaiting a new version as
superseded.` + exitStatusHelp,
		Args: exactArgs(1, "one change request"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ref = args[0]
			return a.runCRReview(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.approve, "approve", false, "approve it")
	cmd.Flags().BoolVar(&o.reject, "reject", false, "reject it")
	cmd.Flags().BoolVar(&o.requestChanges, "request-changes", false, "reject it, asking for the changes --note names")
	cmd.Flags().StringVarP(&o.note, "note", "m", "", "a note kept with the decision (-m as for git commit)")
	cmd.Flags().StringArrayVar(&o.comments, "comment", nil, `a comment on a line of the diff: "PATH:LINE: TEXT" (PATH:-LINE: a line of the base) (repeatable)`)
	cmd.Flags().BoolVar(&o.closeOthers, "close-others", false, "with --approve: close the other attempts of the run as superseded")
	return cmd
}

func (a *App) runCRReview(ctx context.Context, o crReviewOptions) error {
	n := 0
	for _, given := range []bool{o.approve, o.reject, o.requestChanges} {
		if given {
			n++
		}
	}
	if n != 1 {
		return fail.Usagef("give exactly one of --approve, --request-changes and --reject")
	}
	if o.requestChanges && strings.TrimSpace(o.note) == "" && len(o.comments) == 0 {
		return fail.Usagef("--request-changes needs --note TEXT or --comment \"PATH:LINE: TEXT\" saying which changes")
	}
	if o.closeOthers && !o.approve {
		return fail.Usagef("--close-others goes with --approve: it closes the other attempts as superseded by the approved one")
	}
	ro := changes.ReviewOptions{Note: o.note, CloseOthers: o.closeOthers}
	for _, text := range o.comments {
		c, err := changes.ParseComment(text)
		if err != nil {
			return err
		}
		ro.Comments = append(ro.Comments, c)
	}
	cs, err := a.changes(ctx)
	if err != nil {
		return err
	}
	p, err := cs.Open(ctx, o.ref)
	if err != nil {
		return err
	}
	decision := store.ChangeApproved
	switch {
	case o.requestChanges:
		decision = store.ChangeChangesRequested
	case o.reject:
		decision = store.ChangeRejected
	}
	closed, err := cs.Review(ctx, p, decision, ro)
	if err != nil {
		return err
	}
	for _, id := range closed {
		a.info("%s superseded by %s", id, p.ID)
	}
	c, err := cs.Store.GetChange(ctx, p.ID)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(c)
	}
	fmt.Fprintln(a.Out, c.ID)
	a.info("%s %s by %s", c.ID, c.Status, cs.User)
	return nil
}

// --- cr verify

type crVerifyOptions struct {
	ref string
}

func (a *App) newCRVerify() *cobra.Command {
	return &cobra.Command{
		Use:     "verify CR",
		Example: `  xmode cr verify cr_7k2m && echo intact`,
		Short:   "Recompute every hash of a change request and its tree, every version's",
		Long: `Recompute every hash of each version's package — manifest.json against the
store, change.patch and evidence.json against the manifest, the logs of its
steps against evidence.json — and its tree: change.patch applied to the base
commit must give the manifest's tree. The versions are checked as a chain:
each version's manifest must name the one before by the sha256 the store
recorded of its manifest. Each problem names its version.

EXIT STATUS
  0 intact · 1 tampered (each problem is named) · 2 bad argument · 3 no such
  change request.` + pipeExitHelp,
		Args: exactArgs(1, "one change request"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runCRVerify(cmd.Context(), crVerifyOptions{ref: args[0]})
		},
	}
}

func (a *App) runCRVerify(ctx context.Context, o crVerifyOptions) error {
	cs, err := a.changes(ctx)
	if err != nil {
		return err
	}
	c, err := cs.Store.ResolveChange(ctx, o.ref)
	if err != nil {
		return err
	}
	rep, err := cs.Verify(ctx, &changes.Package{Change: c})
	if err != nil {
		return err
	}
	if a.json {
		if err := a.printJSON(rep); err != nil {
			return err
		}
	} else {
		for _, pr := range rep.Problems {
			fmt.Fprintf(a.Out, "%s %s: %s\n", a.paint(color.FgRed, "tampered:"), clean(problemFile(pr)), clean(pr.Problem))
		}
		fmt.Fprintln(a.Out, rep.Summary())
	}
	if !rep.Intact {
		return exitStatus(1)
	}
	return nil
}

// --- cr export

type crExportOptions struct {
	ref, repo, branch string
}

func (a *App) newCRExport() *cobra.Command {
	var o crExportOptions
	cmd := &cobra.Command{
		Use:   "export CR --repo PATH [--branch NAME]",
		Short: "Create a branch with the change in your repository",
		Long: `Create a branch (default xmode/<cr_id>) in the repository at PATH with the
change — its approved version; the newest while none is approved — on top of
the base commit: the agent's commits as it made them, then one
commit with what it left uncommitted — or, when one of those commits holds a
path git refuses (.GIT/hooks/..., git~1), one commit of the whole change
instead, with a warning. Only objects and the new branch are
written: the checked-out branch, the index and the working tree are not
touched. Merge it like any branch. A branch that exists is refused (exit 4), so
is a package that fails verification (exit 1). One not approved yet is exported
with a warning, as a pull request's branch exists before its review: approve it
(cr review --approve) before you merge. The commit of what the agent left
uncommitted is yours: git's user.name and user.email in that repository, as
git commit would take them (the agent's commits keep their authors).` + exitStatusHelp,
		Example: `  xmode cr export cr_7k2m9q4x --repo ~/src/project
  git -C ~/src/project merge xmode/cr_7k2m9q4x`,
		Args: exactArgs(1, "one change request"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ref = args[0]
			return a.runCRExport(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.repo, "repo", "", "your repository (a path)")
	cmd.Flags().StringVar(&o.branch, "branch", "", "branch to create (default xmode/<cr_id>)")
	return cmd
}

func (a *App) runCRExport(ctx context.Context, o crExportOptions) error {
	if o.repo == "" {
		return fail.Usagef("--repo is required: the path of your repository")
	}
	cs, err := a.changes(ctx)
	if err != nil {
		return err
	}
	p, err := cs.ExportVersion(ctx, o.ref)
	if err != nil {
		return err
	}
	out, err := cs.Export(ctx, p, o.repo, o.branch)
	if err != nil {
		return err
	}
	if r := out.Squashed; r != nil {
		a.warn([]string{fmt.Sprintf("the agent's commit %s holds %s (%s): %s has one commit of the whole change on top of the base instead of the agent's commits", shortSHA(r.Commit), r.Path, r.Reason, out.Branch)})
	}
	a.warn(out.Warnings)
	if a.json {
		return a.printJSON(out)
	}
	fmt.Fprintln(a.Out, clean(out.Branch))
	a.info("exported %s to branch %s of %s: %d commit(s), %s", out.ID, clean(out.Branch), clean(out.Repo), out.Commits, shortSHA(out.Commit))
	return nil
}
