package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
)

// ImageRepo is the repository of the images xmode commits of sandboxes
// (`sandbox fork`, `sandbox snapshot`): xmode-image:<name>, where name is
// the fork's session or the snapshot (docs/reference.md, "Docker objects
// and labels"). Never pulled: one that is gone is gone.
const ImageRepo = "xmode-image"

// LabelSnapshot marks a snapshot's image with the snapshot's ID.
const LabelSnapshot = "xmode.snapshot"

var _ engine.Snapshotter = (*Provider)(nil)

// isSnapshotImage reports a reference of ImageRepo.
func isSnapshotImage(ref string) bool {
	return strings.HasPrefix(ref, ImageRepo+":") || strings.HasPrefix(ref, "docker.io/library/"+ImageRepo+":")
}

// SnapshotImage commits the sandbox's container — its root filesystem
// outside the worktree and the other mounts, which a commit never takes —
// as xmode-image:<name>, labelled with labels (engine.Snapshotter). The
// container is paused meanwhile, as `docker commit` does. It refuses a
// container that is not the sandbox's.
func (p *Provider) SnapshotImage(ctx context.Context, sb engine.Sandbox, name string, labels map[string]string) (string, error) {
	if sb.ContainerID == "" {
		return "", fail.Refusedf("session %s has no container to take its filesystem from", sb.SessionID)
	}
	if err := checkRef("container", sb.ContainerID); err != nil {
		return "", err
	}
	if err := checkRef("image name", name); err != nil {
		return "", err
	}
	if labels[LabelManaged] != "true" || labels[LabelInstance] == "" {
		return "", fmt.Errorf("commit %s: labels must carry %s=true and %s (docs/reference.md, \"Docker objects and labels\")", sb.SessionID, LabelManaged, LabelInstance)
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	ci, err := p.cli.ContainerInspect(cctx, sb.ContainerID)
	if cerrdefs.IsNotFound(err) {
		return "", fail.Refusedf("the container of session %s (%s) is gone: nothing to take its filesystem from", sb.SessionID, shortID(sb.ContainerID))
	}
	if err != nil {
		return "", p.wrap(err, "inspect container "+shortID(sb.ContainerID))
	}
	if ci.Config == nil {
		return "", fmt.Errorf("inspect container %s: the daemon's answer lacks its config", shortID(sb.ContainerID))
	}
	if err := checkOwned(ci.Config.Labels, sb.SessionID); err != nil {
		return "", fail.Refusedf("will not commit container %s: %v", shortID(sb.ContainerID), err)
	}
	// Every xmode label is set, to "" where it does not apply: the
	// container's own (its session, its run) would otherwise carry over.
	own := map[string]string{LabelSession: "", LabelRun: "", LabelSnapshot: ""}
	for k, v := range labels {
		own[k] = v
	}
	ref := ImageRepo + ":" + name
	if _, err := p.cli.ContainerCommit(cctx, ci.ID, container.CommitOptions{
		Reference: ref, Pause: true, Comment: "xmode: the filesystem of session " + sb.SessionID,
		Config: &container.Config{Labels: own},
	}); err != nil {
		return "", p.wrap(err, "commit container "+shortID(ci.ID))
	}
	return ref, nil
}

// listImages lists the images labelled xmode.managed=true and
// xmode.instance=<instance> that carry a reference of ImageRepo.
func (p *Provider) listImages(ctx context.Context, f filters.Args) ([]engine.Object, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	is, err := p.cli.ImageList(cctx, image.ListOptions{Filters: f})
	if err != nil {
		return nil, p.wrap(err, "list images")
	}
	var out []engine.Object
	for _, i := range is {
		for _, tag := range i.RepoTags {
			if !isSnapshotImage(tag) {
				continue
			}
			out = append(out, engine.Object{
				Kind: engine.KindImage, ID: tag, Name: tag,
				SessionID: i.Labels[LabelSession], Instance: i.Labels[LabelInstance], Snapshot: i.Labels[LabelSnapshot],
			})
		}
	}
	return out, nil
}

// removeImage removes one of xmode's images by its reference: an image of
// ImageRepo labelled xmode.managed=true (and xmode.instance=instance when
// instance is given; session, when given, must be its xmode.session). One
// that is gone is success; one a container still uses is engine.ErrInUse.
// Removing the reference of an image another one was committed from only
// untags it: the daemon deletes it with the last image made from it.
func (p *Provider) removeImage(ctx context.Context, ref, instance, session string) error {
	if !isSnapshotImage(ref) {
		return fail.Refusedf("image %q is not one xmode made (%s:…): refusing to remove it", ref, ImageRepo)
	}
	if err := checkImage(ref); err != nil {
		return err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	ii, err := p.cli.ImageInspect(cctx, ref)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return p.wrap(err, "inspect image "+ref)
	}
	var labels map[string]string
	if ii.Config != nil {
		labels = ii.Config.Labels
	}
	switch {
	case labels[LabelManaged] != "true":
		return fail.Refusedf("will not remove image %s: it is not managed by xmode (no %s=true label)", ref, LabelManaged)
	case instance != "" && labels[LabelInstance] != instance:
		return fail.Refusedf("will not remove image %s: it belongs to another xmode install on this daemon (%s=%s, this storage root's is %s)",
			ref, LabelInstance, labels[LabelInstance], instance)
	case session != "" && labels[LabelSession] != session:
		return fail.Refusedf("will not remove image %s: it belongs to session %q, not %s", ref, labels[LabelSession], session)
	}
	if _, err := p.cli.ImageRemove(cctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil {
		switch {
		case cerrdefs.IsNotFound(err):
			return nil
		case cerrdefs.IsConflict(err):
			return fmt.Errorf("image %s: %w (%v)", ref, engine.ErrInUse, err)
		}
		return p.wrap(err, "remove image "+ref)
	}
	return nil
}

// dropOwnImage removes the image a session's container ran when it was
// committed for that session (a fork's), once the container is gone; an
// image still in use (a snapshot taken of the fork runs from it) is left to
// the reaper's orphan sweep.
func (p *Provider) dropOwnImage(ctx context.Context, sb engine.Sandbox) error {
	if !isSnapshotImage(sb.Image) || sb.SessionID == "" || sb.Image != ImageRepo+":"+sb.SessionID {
		return nil
	}
	err := p.removeImage(ctx, sb.Image, "", sb.SessionID)
	if err != nil && (errors.Is(err, engine.ErrInUse) || fail.KindOf(err) == fail.Refused) {
		return nil
	}
	return err
}
