package codexcloud

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// EndFunc ends a session and reclaims what it held (reaper.Reaper.Teardown
// in xmode): how the loop marks a session ready or failed.
type EndFunc func(ctx context.Context, sess *store.Session, status, reason, errMsg string) error

// Teardown is the EndFunc of a reaper.
func Teardown(r *reaper.Reaper) EndFunc {
	return func(ctx context.Context, sess *store.Session, status, reason, errMsg string) error {
		_, err := r.Teardown(ctx, sess, status, reason, errMsg)
		return err
	}
}

// SubmitOptions are `xmode cloud submit`'s inputs.
type SubmitOptions struct {
	Env      string // the Codex cloud environment ID (required)
	Branch   string // default: the session's ref
	Attempts int    // best-of-N, 1-4 (0: 1)
	Prompt   string
}

// Submitter sends a cloud_subscription session's work to the Codex cloud.
type Submitter struct {
	Store  *store.Store
	Client Client
	End    EndFunc
	Now    func() time.Time
}

func (s *Submitter) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Submit runs `codex cloud exec` for an open cloud_subscription session,
// records the task and moves the session to submitted. A submit that fails
// ends the session failed (submit_failed) with the error: it never becomes
// ready.
func (s *Submitter) Submit(ctx context.Context, sess *store.Session, o SubmitOptions) (*store.CloudTask, error) {
	if err := o.check(sess); err != nil {
		return nil, err
	}
	if sess.RunnerMode != config.ModeCloudSubscription {
		return nil, fail.Refusedf("session %s is a %s session, which runs locally: only cloud_subscription sessions go to the Codex cloud; create one with `xmode sandbox create --runner-mode cloud_subscription --repo …`",
			sess.ID, sess.RunnerMode)
	}
	if err := checkSubmittable(sess, s.now()); err != nil {
		return nil, err
	}
	holder := reaper.NewHolder()
	c, err := s.Store.ClaimSubmit(ctx, sess.ID, holder, s.now(), reaper.StaleClaim)
	if err != nil {
		return nil, err
	}
	switch c.Result {
	case store.Busy:
		return nil, fail.Refusedf("session %s is being submitted or reaped by another xmode process: wait for it, then `xmode cloud show %s`", sess.ID, sess.ID)
	case store.Gone:
		cur, err := s.Store.Get(ctx, sess.ID)
		if err != nil {
			return nil, err
		}
		if err := checkSubmittable(cur, s.now()); err != nil {
			return nil, err
		}
		return nil, fail.Refusedf("session %s changed while being submitted: try again", sess.ID)
	}
	// RecordSubmitted releases the claim; this is for every other way out.
	defer s.Store.Release(context.WithoutCancel(ctx), sess.ID, holder)
	submittedAt := s.now()
	taskID, url, err := s.Client.Submit(ctx, SubmitRequest{Env: o.Env, Branch: o.branch(sess), Attempts: o.attempts(), Prompt: o.Prompt})
	if err != nil {
		why := err.Error()
		if ctx.Err() != nil {
			why = "the submit was interrupted before codex printed a task ID: " + why
		} else {
			why = fmt.Sprintf("submit failed (%s): %s", ClassOf(err), why)
		}
		if eerr := s.End(context.WithoutCancel(ctx), sess, store.StatusFailed, store.ReasonSubmitFailed, why); eerr != nil {
			return nil, fmt.Errorf("%s (and ending the session failed: %v)", why, eerr)
		}
		return nil, fail.Failedf("%s; session %s is now failed", why, sess.ID)
	}
	task := &store.CloudTask{TaskID: taskID, SessionID: sess.ID, URL: url, EnvID: o.Env, Branch: o.branch(sess),
		Attempts: o.attempts(), Title: firstLine(o.Prompt), SubmittedAt: submittedAt}
	if err := s.Store.RecordSubmitted(context.WithoutCancel(ctx), task, holder); err != nil {
		return nil, err
	}
	return s.Store.CloudTaskOf(ctx, sess.ID)
}

func checkSubmittable(sess *store.Session, now time.Time) error {
	if sess.Status == store.StatusSubmitted || sess.Status == store.StatusReady {
		return fail.Refusedf("session %s was already submitted (%s): follow it with `xmode cloud show %s`", sess.ID, sess.Status, sess.ID)
	}
	return store.CheckOpen(sess, now)
}

func (o SubmitOptions) check(sess *store.Session) error {
	if o.Env == "" {
		return fail.Usagef("%s is required: the Codex cloud environment ID to run in (see docs/codex-cloud.md)", fail.Env)
	}
	if !cliWord(o.Env) {
		return fail.Usagef("%s %q is not an environment ID: no spaces, control characters or leading '-'", fail.Env, o.Env)
	}
	if o.Attempts < 0 || o.Attempts > 4 {
		return fail.Usagef("%s %d: codex runs 1 to 4 attempts", fail.Attempts, o.Attempts)
	}
	if strings.TrimSpace(o.Prompt) == "" {
		return fail.Usagef("the prompt is empty: give %s TEXT, or %s - with the prompt on standard input", fail.Prompt, fail.Prompt)
	}
	b := o.branch(sess)
	if b == "" {
		return fail.Usagef("%s is required: session %s has no ref to default to", fail.Branch, sess.ID)
	}
	if !cliWord(b) {
		return fail.Usagef("%s %q is not a branch name: no spaces, control characters or leading '-'", fail.Branch, b)
	}
	return nil
}

func (o SubmitOptions) branch(sess *store.Session) string {
	if o.Branch != "" {
		return o.Branch
	}
	return sess.Ref
}

func (o SubmitOptions) attempts() int { return max(o.Attempts, 1) }

// cliWord: safe as one argument of codex's (no option, nothing unprintable).
func cliWord(s string) bool {
	if s == "" || len(s) > 256 || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// firstLine is a task's title until the cloud names it.
func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	l = strings.TrimSpace(l)
	if len(l) > 100 {
		l = l[:100] + "…"
	}
	return l
}
