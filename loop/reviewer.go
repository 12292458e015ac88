package loop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/store"
)

// A reviewer command's decisions (docs/agents.md, "Iterating with a
// reviewer command"): the first word of its answer.
const (
	ReviewApprove        = "approve"
	ReviewRequestChanges = "request-changes"
	ReviewReject         = "reject"
)

// ReviewerAnswer is what a reviewer command answered about one version.
type ReviewerAnswer struct {
	Decision string // ReviewApprove, ReviewRequestChanges or ReviewReject
	Note     string
	Comments []store.Comment
}

// maxReviewerAnswer bounds what xmode reads of a reviewer's stdout.
const maxReviewerAnswer = 1 << 20

// ParseReviewerAnswer reads a reviewer command's stdout: its decision on
// the first line that is not blank or a # comment — approve,
// request-changes or reject — then any number of lines "note: TEXT" (the
// review's note, a line each) and "comment: PATH:LINE: TEXT" (a comment on
// a line, as `cr review --comment` takes it).
func ParseReviewerAnswer(out []byte) (*ReviewerAnswer, error) {
	a := &ReviewerAnswer{}
	var notes []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), maxReviewerAnswer)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		t := strings.TrimSpace(line)
		switch {
		case t == "" || strings.HasPrefix(t, "#"):
			continue
		case a.Decision == "":
			switch t {
			case ReviewApprove, ReviewRequestChanges, ReviewReject:
				a.Decision = t
			default:
				return nil, fail.Failedf("the reviewer's answer, line %d: %q: the first line says approve, request-changes or reject", n, clip(t))
			}
		case strings.HasPrefix(t, "note:"):
			notes = append(notes, strings.TrimSpace(strings.TrimPrefix(t, "note:")))
		case strings.HasPrefix(t, "comment:"):
			c, err := changes.ParseComment(strings.TrimSpace(strings.TrimPrefix(t, "comment:")))
			if err != nil {
				return nil, fail.Failedf("the reviewer's answer, line %d: %v", n, err)
			}
			a.Comments = append(a.Comments, c)
		default:
			return nil, fail.Failedf("the reviewer's answer, line %d: %q: after the decision, lines say note: TEXT or comment: PATH:LINE: TEXT", n, clip(t))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fail.Failedf("the reviewer's answer: %v", err)
	}
	if a.Decision == "" {
		return nil, fail.Failedf("the reviewer answered nothing: its first line says approve, request-changes or reject")
	}
	a.Note = strings.Join(notes, "\n")
	if a.Decision == ReviewRequestChanges && a.Note == "" && len(a.Comments) == 0 {
		return nil, fail.Failedf("the reviewer asked for changes without saying which: add note: TEXT or comment: PATH:LINE: TEXT lines")
	}
	return a, nil
}

func clip(s string) string {
	if r := []rune(s); len(r) > 80 {
		return string(r[:79]) + "…"
	}
	return s
}

// Reviewer runs a reviewer command on one version of a change request:
// `sh -c CMD` on this host (the command is the user's own, as a CI
// script is), in xmode's working directory, its stdin empty, with the
// version in its environment — XMODE_CR, XMODE_CR_VERSION,
// XMODE_CR_PATCH (the version's change.patch), XMODE_CR_DIR (its
// package), XMODE_RUN — its stderr passed to errOut, its stdout its answer
// (at most maxReviewerAnswer bytes). A command that fails, or answers
// what ParseReviewerAnswer cannot read, is an error.
func Reviewer(ctx context.Context, command string, p *changes.Package, runID string, errOut io.Writer) (*ReviewerAnswer, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Env = append(os.Environ(),
		"XMODE_CR="+p.ID, "XMODE_CR_VERSION="+strconv.Itoa(p.At().Version),
		"XMODE_CR_PATCH="+filepath.Join(p.Dir, changes.PatchFile), "XMODE_CR_DIR="+p.Dir, "XMODE_RUN="+runID)
	cmd.Stdin = nil
	var out limitedBuffer
	cmd.Stdout, cmd.Stderr = &out, errOut
	if errOut == nil {
		cmd.Stderr = io.Discard
	}
	// the reviewer and what it starts end together with it
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, errInterrupted
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return nil, fail.Failedf("the reviewer command failed (%s) on version %d of %s: %s", exit.ProcessState, p.At().Version, p.ID, command)
	case err != nil:
		return nil, fail.Failedf("the reviewer command could not run: %v", err)
	case out.over:
		return nil, fail.Failedf("the reviewer command answered more than %d bytes", maxReviewerAnswer)
	}
	return ParseReviewerAnswer(out.Bytes())
}

// limitedBuffer keeps the first maxReviewerAnswer bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	over bool
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxReviewerAnswer - l.Len(); len(p) > room {
		l.over = true
		l.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return l.Buffer.Write(p)
}

// iterate hands the run's change request to the reviewer command and,
// while it asks for changes, back to the agent in the same session, up to
// n new versions; the reviewer's answer on each version is recorded as its
// review (by this xmode's user, as `cr review` records one). res is the
// run's result, updated as versions come.
func (l *Loop) iterate(ctx context.Context, sess *store.Session, plan *plans.Plan, o Options, at attempt, n int, res *Result, notes io.Writer) error {
	popts := l.planOptions(o)
	if at.n > 0 {
		popts.LiveStdout, popts.LiveStderr = nil, nil
	}
	for i := 0; ; i++ {
		p, err := l.Changes.Open(ctx, res.CR)
		if err != nil {
			return err
		}
		note(notes, "%s: asking the reviewer about version %d", p.ID, p.At().Version)
		ans, err := Reviewer(ctx, o.Reviewer, p, res.RunID, l.LiveStderr)
		if err != nil {
			return err
		}
		decision := map[string]string{ReviewApprove: store.ChangeApproved, ReviewReject: store.ChangeRejected, ReviewRequestChanges: store.ChangeChangesRequested}[ans.Decision]
		if _, err := l.Changes.Review(ctx, p, decision, changes.ReviewOptions{Note: ans.Note, Comments: ans.Comments}); err != nil {
			return fmt.Errorf("record the reviewer's answer on version %d: %w", p.At().Version, err)
		}
		c, err := l.Svc.Store.GetChange(ctx, p.ID)
		if err != nil {
			return err
		}
		review := c.Reviews[len(c.Reviews)-1]
		res.Reviews = append(res.Reviews, review)
		note(notes, "%s: the reviewer's answer on version %d: %s", p.ID, p.At().Version, ans.Decision)
		if decision != store.ChangeChangesRequested {
			return nil
		}
		if i == n {
			note(notes, "%s: %d new version(s) made, the most --iterate allows: it awaits a new version (`xmode run continue %s`)", p.ID, n, res.RunID)
			return nil
		}
		p.Change = c
		if err := l.revise(ctx, sess, plan, popts, at, p, review, res, notes); err != nil {
			return err
		}
		if res.Status != store.RunReview {
			return nil // no new version, or the agent failed: nothing more to ask
		}
	}
}
