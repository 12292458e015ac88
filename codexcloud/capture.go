package codexcloud

import (
	"context"
	"fmt"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/store"
)

// DiffCapturer freezes a finished task's diff for review and returns what it
// recorded (a change request's ID). The poller calls it once per task, before
// the session becomes ready; a capture that fails parks the task, and the
// session stays submitted.
type DiffCapturer interface {
	Capture(ctx context.Context, sess *store.Session, taskID string, patch []byte, title string) (id string, err error)
}

// ChangeRequests is the DiffCapturer xmode uses: a finished task's diff
// becomes a change request (docs/change-requests.md) of its session, the patch
// applied to base_commit in the run's own object store and the tree recorded,
// so it is reviewed, verified and exported like any other.
type ChangeRequests struct{ Changes *changes.Service }

// Capture makes the change request, once: a session has one task, so a CR
// the session already has is the one an earlier poll made before it could
// record it (a crash), and is returned again.
func (c ChangeRequests) Capture(ctx context.Context, sess *store.Session, taskID string, patch []byte, title string) (string, error) {
	if !ValidTaskID(taskID) {
		return "", fmt.Errorf("capture the diff of %q: not a task ID", taskID)
	}
	have, err := c.Changes.Store.ListChanges(ctx, store.ChangeFilter{RunID: sess.RunID})
	if err != nil {
		return "", err
	}
	for _, ch := range have {
		if ch.SessionID == sess.ID {
			return ch.ID, nil
		}
	}
	if title == "" {
		title = "Codex cloud task " + taskID
	}
	p, err := c.Changes.CreateFromPatch(ctx, sess, patch, changes.CreateOptions{Title: title, Message: "Codex cloud task " + taskID})
	if err != nil {
		return "", fmt.Errorf("capture the diff of %s as a change request: %w", taskID, err)
	}
	return p.ID, nil
}
