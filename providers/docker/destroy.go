package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/docker/internal/dockerapi"
)

// Labels xmode puts on everything it creates (contract §5). The caller fills
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
	ref := sb.ContainerID
	if ref == "" && sb.SessionID != "" {
		// Provisioning may have died between create and recording the id.
		ref = ContainerName(sb.SessionID)
	}
	if ref != "" {
		if err := p.removeContainer(ctx, ref, sb.SessionID); err != nil {
			return err
		}
	}
	for _, v := range sb.Volumes {
		// The session's own volumes, recorded on its row (orphans come
		// from ListManaged, already filtered by instance).
		if err := p.removeVolume(ctx, v, ""); err != nil {
			return err
		}
	}
	return nil
}

func (p *Provider) removeContainer(ctx context.Context, ref, sessionID string) error {
	cctx, cancel := p.call(ctx)
	defer cancel()
	ci, err := p.cli.ContainerInspect(cctx, ref)
	if dockerapi.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return p.wrap(err, "inspect container "+shortID(ref))
	}
	if err := checkOwned(ci.Config.Labels, sessionID); err != nil {
		return fail.Refusedf("will not remove container %s (%s): %v", shortID(ci.ID), strings.TrimPrefix(ci.Name, "/"), err)
	}
	for attempt := 0; ; attempt++ {
		err = p.cli.ContainerRemove(cctx, ci.ID, dockerapi.RemoveOptions{Force: true, RemoveVolumes: true})
		if err == nil || dockerapi.IsNotFound(err) {
			return nil
		}
		// "removal already in progress": another reaper got there first.
		if dockerapi.IsConflict(err) && attempt < 20 {
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
	cctx, cancel := p.call(ctx)
	defer cancel()
	v, err := p.cli.VolumeInspect(cctx, name)
	if dockerapi.IsNotFound(err) {
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
	if err := p.cli.VolumeRemove(cctx, name, false); err != nil && !dockerapi.IsNotFound(err) {
		return p.wrap(err, "remove volume "+name)
	}
	return nil
}

// ManagedContainer is a container carrying this instance's labels.
type ManagedContainer struct {
	ID      string
	Name    string
	Image   string
	State   string // created, running, exited, …
	Created time.Time
	Labels  map[string]string
}

// Session is the container's xmode.session label.
func (c ManagedContainer) Session() string { return c.Labels[LabelSession] }

// ManagedVolume is a volume carrying this instance's labels.
type ManagedVolume struct {
	Name      string
	CreatedAt string
	Labels    map[string]string
}

// Session is the volume's xmode.session label.
func (v ManagedVolume) Session() string { return v.Labels[LabelSession] }

// Managed is everything on the daemon that one xmode instance created.
type Managed struct {
	Containers []ManagedContainer
	Volumes    []ManagedVolume
}

// ListManaged lists the containers (running or not) and volumes labelled
// xmode.managed=true and xmode.instance=<instanceID> — what the reaper may
// consider for orphan removal. The storage volume is never listed.
func (p *Provider) ListManaged(ctx context.Context, instanceID string) (Managed, error) {
	var out Managed
	if instanceID == "" {
		return out, errors.New("list managed objects: no instance id: refusing to list every instance's objects")
	}
	if _, err := p.Ping(ctx); err != nil {
		return out, err
	}
	f := dockerapi.Filters{"label": {LabelManaged + "=true", LabelInstance + "=" + instanceID}}
	cctx, cancel := p.call(ctx)
	defer cancel()
	cs, err := p.cli.ContainerList(cctx, true, f)
	if err != nil {
		return out, p.wrap(err, "list containers")
	}
	for _, c := range cs {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out.Containers = append(out.Containers, ManagedContainer{
			ID: c.ID, Name: name, Image: c.Image, State: c.State,
			Created: time.Unix(c.Created, 0), Labels: c.Labels,
		})
	}
	vs, err := p.cli.VolumeList(cctx, f)
	if err != nil {
		return out, p.wrap(err, "list volumes")
	}
	for _, v := range vs {
		if v.Name == p.cfg.StorageVolume {
			continue
		}
		out.Volumes = append(out.Volumes, ManagedVolume{Name: v.Name, CreatedAt: v.CreatedAt, Labels: v.Labels})
	}
	return out, nil
}
