package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/internal/archive"
)

// Sync mode: a daemon on another machine cannot mount this machine's
// worktree, so the sandbox gets a copy in a volume of its own, made at
// Provision (copyIn) and brought back on demand (SyncBack) through the
// Engine API's archive endpoints. xmode.db and the evidence never leave
// this machine; only the worktree travels.

// DefaultSyncTimeout bounds one copy of a worktree either way.
const DefaultSyncTimeout = 30 * time.Minute

func (p *Provider) syncTimeout() time.Duration { return cmp.Or(p.SyncTimeout, DefaultSyncTimeout) }

// copyIn fills a created (not yet started) sync-mode container's volume with
// the worktree: a tar of the host's worktree, read without following
// symlinks, every entry owned by the sandbox user, under SyncWorktree.
func (p *Provider) copyIn(ctx context.Context, containerID, worktree, user string) error {
	uid, gid := parseUser(user)
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		err := archive.WriteTree(pw, worktree, ".", uid, gid)
		pw.CloseWithError(err)
		read <- err
	}()
	cctx, cancel := context.WithTimeout(ctx, p.syncTimeout())
	defer cancel()
	err := p.cli.CopyToContainer(cctx, containerID, SyncMount, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errCopyEnded) // the writer stops, whatever happened
	if rerr := <-read; rerr != nil && !errors.Is(rerr, errCopyEnded) {
		// Our side failed (the request's error would only say the
		// connection broke).
		return fmt.Errorf("copy the worktree into the sandbox: %w", rerr)
	}
	if err != nil {
		return p.wrap(err, "copy the worktree into the sandbox")
	}
	return nil
}

// errCopyEnded stops the tar writer once the daemon stopped reading.
var errCopyEnded = errors.New("the copy ended")

// parseUser is the numeric uid and gid of "uid:gid" (root for "").
func parseUser(user string) (int, int) {
	u, g, _ := strings.Cut(user, ":")
	uid, _ := strconv.Atoi(u)
	gid, err := strconv.Atoi(g)
	if err != nil {
		gid = uid
	}
	return uid, gid
}

// PushPath brings rel of the host's worktree into a sync-mode sandbox's
// copy (engine.WorktreePusher), for `sandbox cp` into a session and file
// steps: a tar of it, made as copyIn makes one, unpacked by the daemon
// over SyncWorktree; a path the host no longer has is removed from the copy.
// The daemon unpacks as root and follows links inside the container, so
// every directory on the way to rel must be a directory in the sandbox's
// copy, not a link a step planted there.
func (p *Provider) PushPath(ctx context.Context, sb engine.Sandbox, rel string) error {
	if sb.MountMode != MountSync {
		return nil
	}
	if _, err := p.guard.CheckWorktree(sb.RunID, sb.Worktree); err != nil {
		return err
	}
	if _, err := p.Ping(ctx); err != nil {
		return err
	}
	ci, err := p.ownedContainer(ctx, sb)
	if err != nil {
		return err
	}
	rel = path.Clean(rel)
	if rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
		return fail.Usagef("%q is not a path inside the worktree", rel)
	}
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		cctx, cancel := p.call(ctx)
		st, err := p.cli.ContainerStatPath(cctx, ci.ID, path.Join(SyncWorktree, d))
		cancel()
		if err != nil {
			return p.wrap(err, "look up "+d+" in the sandbox's worktree")
		}
		if !st.Mode.IsDir() {
			return fail.Refusedf("%s is not a directory in the sandbox's worktree (a symlink?): refusing to copy through it", d)
		}
	}
	if gone, err := archive.MissingOnHost(sb.Worktree, rel); err != nil {
		return err
	} else if gone {
		// Deleted on the host (a file step's delete): deleted in the copy too.
		code, out, err := p.runHelperAs(ctx, ci.ID, ci.Config.User, []string{"rm", "-rf", "--", path.Join(SyncWorktree, rel)}, p.syncTimeout())
		if err != nil {
			return fmt.Errorf("remove %s from the sandbox: %w", rel, err)
		}
		if code != 0 {
			return fail.Failedf("remove %s from the sandbox: rm exited %d: %s", rel, code, strings.TrimSpace(out))
		}
		return nil
	}
	uid, gid := parseUser(ci.Config.User)
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		err := archive.WriteTree(pw, sb.Worktree, rel, uid, gid)
		pw.CloseWithError(err)
		read <- err
	}()
	cctx, cancel := context.WithTimeout(ctx, p.syncTimeout())
	defer cancel()
	err = p.cli.CopyToContainer(cctx, ci.ID, SyncMount, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errCopyEnded)
	if rerr := <-read; rerr != nil && !errors.Is(rerr, errCopyEnded) {
		return fmt.Errorf("copy %s into the sandbox: %w", rel, rerr)
	}
	if err != nil {
		return p.wrap(err, "copy "+rel+" into the sandbox")
	}
	return nil
}

// SyncBack makes the host's worktree what the sandbox's copy is now
// (engine.WorktreeSyncer); for sandboxes that mount the host's worktree
// (bind, volume) it does nothing. The copy comes from the sandbox and is
// hostile: it is unpacked into a fresh directory next to the worktree,
// confined with os.Root, and swapped in only when all of it was accepted,
// so a refused copy leaves the worktree as it was. See archive.Untar for what is
// refused and what is dropped.
func (p *Provider) SyncBack(ctx context.Context, sb engine.Sandbox) error {
	if sb.MountMode != MountSync {
		return nil
	}
	if _, err := p.guard.CheckWorktree(sb.RunID, sb.Worktree); err != nil {
		return err
	}
	if _, err := p.Ping(ctx); err != nil {
		return err
	}
	ci, err := p.ownedContainer(ctx, sb)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, p.syncTimeout())
	defer cancel()
	rc, _, err := p.cli.CopyFromContainer(cctx, ci.ID, SyncWorktree)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fail.Failedf("the sandbox of session %s has no worktree at %s: stop the session and create a new one", sb.SessionID, SyncWorktree)
		}
		return p.wrap(err, "copy the worktree out of the sandbox")
	}
	defer rc.Close()
	runDir, err := p.guard.RunDir(sb.RunID)
	if err != nil {
		return err
	}
	dropped, err := archive.ReplaceWorktree(runDir, rc, p.cfg.SyncMaxBytes, p.warnf, nil)
	if err != nil {
		return fmt.Errorf("sync back the worktree of session %s: %w", sb.SessionID, err)
	}
	if len(dropped) > 0 {
		p.warnf("sync back of session %s: left out %d entr%s the host must not have (%s)", sb.SessionID, len(dropped), map[bool]string{true: "y", false: "ies"}[len(dropped) == 1], strings.Join(archive.Head(dropped, 5), ", "))
	}
	return nil
}

// PathPresent reports whether path (absolute, as the container sees it)
// exists in the session's container: its image, or what is mounted there.
// It stats through the daemon's archive API, running nothing in the
// container.
func (p *Provider) PathPresent(ctx context.Context, sb engine.Sandbox, name string) (bool, error) {
	if !path.IsAbs(name) {
		return false, fail.Usagef("%q is not an absolute path", name)
	}
	ci, err := p.ownedContainer(ctx, sb)
	if err != nil {
		return false, err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	if _, err := p.cli.ContainerStatPath(cctx, ci.ID, path.Clean(name)); err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return false, p.wrap(err, "look up "+name+" in the sandbox")
	}
	return true, nil
}
