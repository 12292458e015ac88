package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// ClaimOptions are what `sandbox create --project` asks of the project's
// pool.
type ClaimOptions struct {
	Project string
	// Repo, Ref and Refresh are the create's --repo, --ref and --refresh:
	// with any of them the wanted commit is resolved in the machine.
	Repo, Ref string
	Refresh   bool
	// Loop makes the claimed run a run of the loop (xmode run), in the
	// transaction that claims it.
	Loop *store.NewLoop
}

// Claim gives the session a ready entry of the project's pool, when one of
// this create's shape exists. Without --ref, --refresh or --repo it runs
// no git at all: the session is at the machine's commit as of its last
// warm, like a create from the machine. With them, the ref is resolved as
// a create resolves it (the machine locked), and that checkout is returned
// for the caller's fallback when no entry is claimed. An entry at another
// commit is moved there by a detached checkout in its worktree, unless a
// fresh worktree would be faster. It returns a nil session (and no error)
// for the caller to make the sandbox; with no provider (a session whose
// work runs in the Codex cloud) there is nothing to claim.
func (p *Pools) Claim(ctx context.Context, o ClaimOptions, sess store.Session, provider engine.Provider) (*store.Session, *machines.Checkout, error) {
	if provider == nil {
		return nil, nil, nil // the cloud's session: no sandbox here to claim
	}
	shape := Shape(provider, sess.User)
	commits, err := p.readyCommits(ctx, o.Project, shape)
	if err != nil || len(commits) == 0 {
		return nil, nil, err
	}
	var co *machines.Checkout
	if o.Ref == "" && !o.Refresh && o.Repo == "" {
		mach, err := p.Store.GetMachine(ctx, o.Project)
		if err != nil {
			return nil, nil, err
		}
		sess.Repo, sess.Ref, sess.BaseCommit = mach.Repo, mach.DefaultRef, mach.HeadCommit
	} else {
		if co, err = p.machines().Checkout(ctx, o.Project, o.Repo, o.Ref, o.Refresh); err != nil {
			return nil, nil, err
		}
		sess.Repo, sess.Ref, sess.BaseCommit = co.Machine.Repo, co.Ref, co.Commit
	}
	want, also := sess.BaseCommit, ""
	if !slices.ContainsFunc(commits, func(c readyCommit) bool { return c.Commit == want }) {
		if !p.moveIsFaster(ctx, o.Project, provider, commits[0], want) {
			return nil, co, nil
		}
		also = commits[0].Commit
	}
	entry, claimed, err := p.claimLive(ctx, pick{
		Project: o.Project, Shape: shape, Want: want, Also: also, Session: sess, MaxOpen: p.Cfg.MaxOpen, Loop: o.Loop,
	}, provider)
	if claimed == nil {
		if err != nil {
			co.Close()
			return nil, nil, err
		}
		if entry == nil {
			return nil, co, nil // taken by racing creates meanwhile
		}
	}
	co.Close() // a move does not need the machine: it writes the worktree's own record only
	if err == nil && claimed.Status == store.StatusOpen {
		return claimed, nil, nil
	}
	if err == nil {
		err = p.moveClaimed(ctx, claimed, want)
	}
	if err != nil {
		cleanup := context.WithoutCancel(ctx)
		r := p.reaper()
		defer r.Close()
		if _, terr := r.Teardown(cleanup, claimed, store.StatusFailed, store.ReasonProvisionFailed, err.Error()); terr != nil {
			return nil, nil, fmt.Errorf("%w (and cleaning up failed: %v)", err, terr)
		}
		return nil, nil, err
	}
	got, err := p.Store.Get(ctx, claimed.ID)
	return got, nil, err
}

// maxClaimTries bounds the entries one claim looks at: dead ones retired,
// live ones taken by racing creates.
const maxClaimTries = 16

// claimLive claims the entry a claim would take once its sandbox is known
// to live — its worktree there, its engine objects running (engine.Alive:
// one inspect of its container on docker) — so a claim never hands out a
// dead sandbox. A dead one (its container removed or stopped behind
// xmode's back) is retired through TeardownEntry and the next entry is
// tried; with none left it returns nil, and the create makes a sandbox.
//
// Where the engine keeps a mark of its own (engine.Claimer: a pod on a
// cluster other xmodes share), the store's claim is followed by the
// engine's: one that finds another claimer's mark leaves that sandbox to
// it (disown) and tries the next entry. An error with a session returned
// came after the store's claim: the caller tears the session down.
func (p *Pools) claimLive(ctx context.Context, c pick, provider engine.Provider) (*Entry, *store.Session, error) {
	var r *reaper.Reaper
	for range maxClaimTries {
		c.Entry = ""
		e, err := p.next(ctx, c)
		if err != nil || e == nil {
			return nil, nil, err
		}
		why, err := deadEntry(ctx, provider, e)
		if err != nil {
			return nil, nil, err
		}
		if why == "" {
			c.Entry = e.SessionID
			entry, claimed, err := p.takeEntry(ctx, c)
			if err != nil || entry == nil {
				if err != nil {
					return nil, nil, err
				}
				continue // a racing create took it
			}
			// The entry's sandbox was made to last the pool's maximum age:
			// its engine's deadline (a pod's dead-man switch) becomes the
			// session's, with the engine's own mark where it keeps one.
			err = engine.Claim(ctx, provider, claimed.Sandbox(), claimed.ID, claimed.ExpiresAt)
			if !errors.Is(err, engine.ErrClaimed) {
				return entry, claimed, err
			}
			if err := p.disown(ctx, claimed, err); err != nil {
				return nil, nil, err
			}
			if p.Notices != nil {
				fmt.Fprintf(p.Notices, "xmode: note: pool entry %s of %s was claimed by another xmode first (%v): left its sandbox to it\n", e.SessionID, e.Project, err)
			}
			continue
		}
		if r == nil {
			r = p.reaper()
			defer r.Close()
		}
		if _, err := p.TeardownEntry(ctx, r, e, why); err != nil {
			return nil, nil, err
		}
		if p.Notices != nil {
			fmt.Fprintf(p.Notices, "xmode: note: pool entry %s of %s was dead (%s): retired it\n", e.SessionID, e.Project, why)
		}
	}
	return nil, nil, nil
}

// disown ends a session whose entry's sandbox another claimer marked
// first in the engine (engine.ErrClaimed): that sandbox is theirs, so the
// session forgets it before its teardown, which then ends the session
// (failed) and reclaims only its worktree.
func (p *Pools) disown(ctx context.Context, sess *store.Session, why error) error {
	if err := p.Store.RecordEngine(ctx, sess.ID, "", sess.MountMode, sess.Image, nil); err != nil {
		return err
	}
	s := *sess
	s.ContainerID, s.Volumes = "", nil
	r := p.reaper()
	defer r.Close()
	_, err := r.Teardown(context.WithoutCancel(ctx), &s, store.StatusFailed, store.ReasonProvisionFailed,
		"its pool entry's sandbox was claimed by another xmode first: "+why.Error())
	return err
}

// deadEntry says why an entry's sandbox cannot be handed out ("" when it
// can): its worktree is gone, or its engine objects are.
func deadEntry(ctx context.Context, provider engine.Provider, e *Entry) (string, error) {
	if st, err := os.Lstat(e.WorktreePath); err != nil || !st.IsDir() {
		return "its worktree is gone", nil
	}
	alive, err := engine.Alive(ctx, provider, e.Sandbox())
	if err != nil {
		return "", fmt.Errorf("check pool entry %s: %w", e.SessionID, err)
	}
	if !alive {
		return "its sandbox is gone or not running", nil
	}
	return "", nil
}

// moveClaimed moves a claimed entry's worktree to commit and opens the
// session there; its lifetime starts now.
func (p *Pools) moveClaimed(ctx context.Context, sess *store.Session, commit string) error {
	_, record, err := p.Store.RunMachine(ctx, sess.RunID)
	if err != nil {
		return err
	}
	if err := p.machines().MoveWorktree(ctx, sess.Project, record, sess.WorktreePath, commit); err != nil {
		return err
	}
	// The move rewrote the files that differ: recorded again, at the new
	// base, before the session opens.
	p.seed(ctx, sess.RunID, commit)
	return p.Store.Provisioned(ctx, sess.ID, commit, sess.ContainerID, sess.MountMode, sess.Image, sess.Volumes, p.now().Add(p.Cfg.TTL))
}

// moveIsFaster says whether moving an entry at from to want beats making a
// sandbox, as the provider weighs it (engine.Move): never when its
// sandboxes work on a copy of the worktree made with them, always when
// making one starts a container (a checkout writes at most both trees),
// and otherwise when fewer paths change than a fresh worktree of the
// machine checks out.
func (p *Pools) moveIsFaster(ctx context.Context, project string, provider engine.Provider, from readyCommit, want string) bool {
	switch engine.Move(provider) {
	case engine.MoveNever:
		return false
	case engine.MoveCheaper:
		return true
	}
	n, err := p.machines().Changed(ctx, project, from.Commit, want)
	return err == nil && n < from.Files
}
