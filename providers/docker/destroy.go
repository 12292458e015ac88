package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/internal/archive"
)

// Labels xmode puts on everything it creates (docs/reference.md, "Docker
// objects and labels"). The caller fills
// them in engine.Spec.Labels; the provider adds nothing of its own.
const (
	LabelManaged  = "xmode.managed"
	LabelSession  = "xmode.session"
	LabelRun      = "xmode.run"
	LabelInstance = "xmode.instance"
	// LabelProject marks a project's cache volume (instead of a session).
	LabelProject = "xmode.project"
)

// Destroy removes what Provision created: the container (forced, with its
// anonymous volumes) and the per-session volumes in sb.Volumes. Something
// already gone is success, so teardown can be retried until it converges.
// It refuses objects that are not xmode's (no xmode.managed=true label, or
// another session's) and never removes the storage volume. An unreachable
// daemon is fail.Enginef: the session must not be marked destroyed then.
func (p *Provider) Destroy(ctx context.Context, sb engine.Sandbox) error {
	if _, err := p.Ping(ctx); err != nil {
		return err
	}
	// The port relay first: it shares the sandbox container's network.
	if err := p.removeRelay(ctx, sb.SessionID); err != nil {
		return err
	}
	ref := sb.ContainerID
	if ref == "" && sb.SessionID != "" {
		// Provisioning may have died between create and recording the id.
		ref = ContainerName(sb.SessionID)
	}
	if ref != "" {
		if err := p.removeContainer(ctx, ref, sb.SessionID); err != nil {
			return err
		}
		// A fork's image goes with the container it was made for.
		if err := p.dropOwnImage(ctx, sb); err != nil {
			return err
		}
	}
	// A proxied sandbox's network, policy and log (kept in the run's
	// evidence), found by the session; one inspect when there is none.
	if err := p.destroyEgress(ctx, sb.SessionID, sb.RunID); err != nil {
		return err
	}
	for _, v := range sb.Volumes {
		// The session's own volumes, recorded on its row (orphans come
		// from ListObjects, already filtered by instance).
		if err := p.removeVolume(ctx, v, ""); err != nil {
			return err
		}
	}
	if sb.MountMode == MountSync {
		// What a SyncBack that died left next to the worktree.
		if dir, err := p.guard.RunDir(sb.RunID); err == nil {
			if root, err := os.OpenRoot(dir); err == nil {
				archive.RemoveStale(root)
				root.Close()
			}
		}
	}
	return nil
}

func (p *Provider) removeContainer(ctx context.Context, ref, sessionID string) error {
	if err := checkRef("container", ref); err != nil {
		return err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	ci, err := p.cli.ContainerInspect(cctx, ref)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return p.wrap(err, "inspect container "+shortID(ref))
	}
	if ci.ContainerJSONBase == nil || ci.Config == nil {
		return fmt.Errorf("inspect container %s: the daemon's answer lacks its config", shortID(ref))
	}
	if err := checkOwned(ci.Config.Labels, sessionID); err != nil {
		return fail.Refusedf("will not remove container %s (%s): %v", shortID(ci.ID), strings.TrimPrefix(ci.Name, "/"), err)
	}
	for attempt := 0; ; attempt++ {
		err = p.cli.ContainerRemove(cctx, ci.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err == nil || cerrdefs.IsNotFound(err) {
			return nil
		}
		// "removal already in progress": another reaper got there first.
		if cerrdefs.IsConflict(err) && attempt < 20 {
			select {
			case <-cctx.Done():
				return p.wrap(cctx.Err(), "remove container "+shortID(ci.ID))
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		return p.wrap(err, "remove container "+shortID(ci.ID))
	}
}

// RemoveVolume removes a volume xmode created that outlives sessions — a
// project machine's cache volume (`xmode machine rm`) — for the install
// whose instance ID is instance. A volume that does not exist is success.
// It refuses the storage volume, any volume without the xmode.managed=true
// label, and one labelled with another install's xmode.instance (two
// installs sharing a daemon never remove each other's volumes); a volume
// still in use is an error.
func (p *Provider) RemoveVolume(ctx context.Context, name, instance string) error {
	if name == p.cfg.StorageVolume {
		return fail.Refusedf("will not remove %s: it is the storage volume (XMODE_SANDBOX_STORAGE_VOLUME)", name)
	}
	if instance == "" {
		return fmt.Errorf("remove volume %s: no instance ID to check it against", name)
	}
	if _, err := p.Ping(ctx); err != nil {
		return err
	}
	return p.removeVolume(ctx, name, instance)
}

// removeVolume removes a managed volume; instance, when not empty, must be
// the volume's xmode.instance.
func (p *Provider) removeVolume(ctx context.Context, name, instance string) error {
	if name == "" {
		return nil
	}
	if name == p.cfg.StorageVolume {
		// Shared by every session: never a session's to remove.
		return nil
	}
	if err := checkRef("volume", name); err != nil {
		return err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	v, err := p.cli.VolumeInspect(cctx, name)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return p.wrap(err, "inspect volume "+name)
	}
	if v.Labels[LabelManaged] != "true" {
		return fail.Refusedf("will not remove volume %s: it is not managed by xmode (no %s=true label)", name, LabelManaged)
	}
	if instance != "" && v.Labels[LabelInstance] != instance {
		return fail.Refusedf("will not remove volume %s: it belongs to another xmode install on this daemon (%s=%s, this storage root's is %s)",
			name, LabelInstance, v.Labels[LabelInstance], instance)
	}
	if err := p.cli.VolumeRemove(cctx, name, false); err != nil && !cerrdefs.IsNotFound(err) {
		return p.wrap(err, "remove volume "+name)
	}
	return nil
}

// ProjectVolumes lists the cache volumes of a project of this install
// (engine.VolumeRemover): managed, this instance's, labelled with the
// project and with no session.
func (p *Provider) ProjectVolumes(ctx context.Context, project, instance string) ([]string, error) {
	if instance == "" || project == "" {
		return nil, errors.New("list a project's cache volumes: no instance id or project: refusing to list others'")
	}
	if _, err := p.Ping(ctx); err != nil {
		return nil, err
	}
	f := filters.NewArgs(filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelInstance+"="+instance),
		filters.Arg("label", LabelProject+"="+project))
	cctx, cancel := p.call(ctx)
	defer cancel()
	vs, err := p.cli.VolumeList(cctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, p.wrap(err, "list the cache volumes of project "+project)
	}
	var out []string
	for _, v := range vs.Volumes {
		if v != nil && v.Labels[LabelSession] == "" && v.Name != p.cfg.StorageVolume {
			out = append(out, v.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ListObjects lists the containers (running or not), volumes and images labelled
// xmode.managed=true and xmode.instance=<instance> — what the reaper may
// consider for orphan removal (engine.OrphanLister). The storage volume is
// never listed.
func (p *Provider) ListObjects(ctx context.Context, instance string) ([]engine.Object, error) {
	if instance == "" {
		return nil, errors.New("list managed objects: no instance id: refusing to list every instance's objects")
	}
	if _, err := p.Ping(ctx); err != nil {
		return nil, err
	}
	f := filters.NewArgs(filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelInstance+"="+instance))
	cctx, cancel := p.call(ctx)
	defer cancel()
	cs, err := p.cli.ContainerList(cctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, p.wrap(err, "list containers")
	}
	var out []engine.Object
	for _, c := range cs {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		if c.Labels[LabelRole] == RoleEgressProxy && (c.NetworkSettings == nil || !proxyIdle(c.NetworkSettings.Networks)) {
			continue // the proxy of live sandboxes: an orphan only once it serves none
		}
		out = append(out, engine.Object{
			Kind: engine.KindContainer, ID: c.ID, Name: name, State: string(c.State),
			SessionID: c.Labels[LabelSession], Instance: c.Labels[LabelInstance],
		})
	}
	ns, err := p.cli.NetworkList(cctx, network.ListOptions{Filters: f})
	if err != nil {
		return nil, p.wrap(err, "list networks")
	}
	for _, n := range ns {
		out = append(out, engine.Object{
			Kind: engine.KindNetwork, ID: n.ID, Name: n.Name,
			SessionID: n.Labels[LabelSession], Instance: n.Labels[LabelInstance],
		})
	}
	vs, err := p.cli.VolumeList(cctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, p.wrap(err, "list volumes")
	}
	for _, v := range vs.Volumes {
		if v == nil || v.Name == p.cfg.StorageVolume {
			continue
		}
		out = append(out, engine.Object{
			Kind: engine.KindVolume, ID: v.Name, Name: v.Name,
			SessionID: v.Labels[LabelSession], Instance: v.Labels[LabelInstance],
		})
	}
	images, err := p.listImages(ctx, f)
	if err != nil {
		return nil, err
	}
	return append(out, images...), nil
}

// Alive reports whether the sandbox's container exists, is xmode's and the
// sandbox's, and runs (engine.LivenessChecker): one inspect, with no ping
// first (~1 ms on a local socket). A container that is gone, stopped, paused or someone else's is
// not alive; a daemon that does not answer is an error.
func (p *Provider) Alive(ctx context.Context, sb engine.Sandbox) (bool, error) {
	if sb.ContainerID == "" {
		return false, nil
	}
	if err := checkRef("container", sb.ContainerID); err != nil {
		return false, err
	}
	// As cheap as a ping, and bounded like one: a claim must not hang on a
	// daemon that does not answer.
	cctx, cancel := context.WithTimeout(ctx, p.pingTimeout())
	defer cancel()
	ci, err := p.cli.ContainerInspect(cctx, sb.ContainerID)
	switch {
	case cerrdefs.IsNotFound(err):
		return false, nil
	case err != nil && ctx.Err() != nil:
		return false, ctx.Err()
	case err != nil && (errors.Is(err, context.DeadlineExceeded) || client.IsErrConnectionFailed(err) || isNetErr(err)):
		return false, p.unreachable(err)
	case err != nil:
		return false, p.wrap(err, "inspect container "+shortID(sb.ContainerID))
	}
	if ci.Config == nil || ci.State == nil || checkOwned(ci.Config.Labels, sb.SessionID) != nil {
		return false, nil
	}
	return ci.State.Running && !ci.State.Paused && !ci.State.Restarting, nil
}

// RemoveObject removes one object ListObjects returned, through Destroy and
// its checks: only xmode-managed objects, a container only when its session
// label matches (engine.OrphanLister).
func (p *Provider) RemoveObject(ctx context.Context, o engine.Object) error {
	switch o.Kind {
	case engine.KindContainer:
		if o.SessionID == "" && o.Name == EgressProxyName(o.Instance) {
			return p.removeIdleProxy(ctx, o)
		}
		return p.Destroy(ctx, engine.Sandbox{Engine: Name, ContainerID: o.ID, SessionID: o.SessionID})
	case engine.KindNetwork:
		if _, err := p.Ping(ctx); err != nil {
			return err
		}
		if o.SessionID == "" {
			return fail.Refusedf("will not remove network %s: it carries no session", o.Name)
		}
		return p.destroyEgress(ctx, o.SessionID, "")
	case engine.KindVolume:
		return p.Destroy(ctx, engine.Sandbox{Engine: Name, Volumes: []string{o.ID}})
	case engine.KindImage:
		if _, err := p.Ping(ctx); err != nil {
			return err
		}
		return p.removeImage(ctx, o.ID, o.Instance, "")
	}
	return fmt.Errorf("unknown object kind %q", o.Kind)
}
