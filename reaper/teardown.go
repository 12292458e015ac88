// Package reaper tears sandboxes down: `xmode sandbox stop` for one session,
// and (run by cron as `xmode reap`) a pass over every expired one. Teardown
// removes what the engine created, then the worktree, and keeps the
// evidence; it is safe to repeat until it converges.
package reaper

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/store"
)

// Reaper tears down sessions.
type Reaper struct {
	Cfg   *config.Config
	Store *store.Store
	Guard engine.Guard
	Log   io.Writer // one line per action; nil for silence
	Now   func() time.Time
}

// Outcome says what one teardown did.
type Outcome struct {
	Ended              bool // this call ended the session
	ContainerRemoved   bool
	VolumesRemoved     int
	WorktreeReclaimed  bool
	WorktreeKeptShared bool
}

func (r *Reaper) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reaper) logf(sessionID, format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, "%s %s\n", sessionID, fmt.Sprintf(format, args...))
	}
}

// Stop is the reaper for one session, now: the design's SandboxSession#stop!.
func (r *Reaper) Stop(ctx context.Context, sess *store.Session) (Outcome, error) {
	return r.Teardown(ctx, sess, store.StatusDestroyed, store.ReasonStopped, "")
}

// Teardown ends a session: the engine's objects first (a session whose
// container may still live is never marked ended), then the row, then the
// worktree when no other open session shares the run.
func (r *Reaper) Teardown(ctx context.Context, sess *store.Session, status, reason, errMsg string) (Outcome, error) {
	var out Outcome
	if _, err := r.Guard.CheckWorktree(sess.RunID, sess.WorktreePath); err != nil {
		// A tampered row: still end the session and reclaim the derived
		// worktree, never the claimed path.
		r.logf(sess.ID, "ignoring stored worktree path: %v", err)
	}
	sb := sess.Sandbox()
	if sb.ContainerID != "" || len(sb.Volumes) > 0 {
		adapter, err := engine.Open(sess.Engine, r.Cfg)
		if err != nil {
			return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
		}
		if err := adapter.Destroy(ctx, sb); err != nil {
			return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
		}
		out.ContainerRemoved = sb.ContainerID != ""
		out.VolumesRemoved = len(sb.Volumes)
		if out.ContainerRemoved {
			r.logf(sess.ID, "removed container %s", short(sb.ContainerID))
		}
	}
	ended, last, err := r.Store.End(ctx, sess.ID, status, reason, errMsg, r.now())
	if err != nil {
		return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
	}
	out.Ended = ended
	if ended {
		r.logf(sess.ID, "%s (%s)", status, reason)
	}
	if !last {
		out.WorktreeKeptShared = true
		r.logf(sess.ID, "kept worktree of %s: another open session shares it", sess.RunID)
		return out, nil
	}
	removed, err := r.Guard.RemoveWorktree(sess.RunID)
	if err != nil {
		return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
	}
	out.WorktreeReclaimed = removed
	if removed {
		r.logf(sess.ID, "reclaimed worktree of %s", sess.RunID)
	}
	return out, nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
