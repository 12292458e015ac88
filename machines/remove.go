package machines

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// Removed says what Remove did.
type Removed struct {
	Project  string `json:"project"`
	Record   bool   `json:"record_removed"`
	Checkout bool   `json:"checkout_removed"`
	// Volume is the base name of the project's cache volumes
	// (VolumeName), Volumes those removed: each user's (CacheVolume), and
	// the one shared before caches were per user.
	Volume        string   `json:"volume"`
	Volumes       []string `json:"volumes_removed"`
	VolumeRemoved bool     `json:"volume_removed"`
	// VolumeNote says why the volume was not removed, when it was not.
	VolumeNote string `json:"volume_note,omitempty"`
	// VolumeKept: the configured engine keeps volumes (or could not be
	// asked), so the volume may still exist; not so on the host.
	VolumeKept bool `json:"-"`
}

// Remove deletes a machine: its cache volume (through the configured engine,
// when it keeps volumes: docker), its checkout (only
// <root>/project_machines/<project>, through the guard) and its record. It
// refuses while provisioning or open sessions use the machine; the caller
// stops them first for --force. Sessions are checked with the machine
// locked exclusively, so no create can branch a worktree between the check
// and the removal.
func (m *Manager) Remove(ctx context.Context, project string) (Removed, error) {
	out := Removed{Project: project, Volume: VolumeName(project), Volumes: []string{}}
	dir, err := m.Guard.MachineDir(project)
	if err != nil {
		return out, err
	}
	mach, err := m.machine(ctx, project)
	if err != nil {
		return out, err
	}
	if _, err := os.Lstat(dir); mach == nil && errors.Is(err, os.ErrNotExist) {
		return out, fail.NotFoundf("no project machine %s: `xmode machine list` shows them", project)
	}
	lk, err := lockMachine(ctx, dir, project, m.Progress)
	switch {
	case errors.Is(err, errGone):
		lk = nil // the directory went meanwhile; the record may remain
	case err != nil:
		return out, err
	}
	defer lk.unlock()
	users, err := m.Store.MachineSessions(ctx, project)
	if err != nil {
		return out, err
	}
	if len(users) > 0 {
		ids := make([]string, len(users))
		for i, s := range users {
			ids[i] = s.ID
		}
		return out, fail.Refusedf("project machine %s is in use by %d open session(s): %s; stop them (`xmode sandbox stop ID`) or use %s", project, len(ids), strings.Join(ids, ", "), fail.Force)
	}
	// The caller drains the pool first; an entry left is one being made
	// right now (a refill that has not reached `git worktree add`).
	if m.PoolEntries != nil {
		if n, err := m.PoolEntries(ctx, project); err != nil {
			return out, err
		} else if n > 0 {
			return out, fail.Refusedf("project machine %s still has %d pool entries (a refill is running): try again in a moment", project, n)
		}
	}
	// The volume first: when the engine is unreachable nothing is removed
	// and the command can simply be repeated.
	if out.Volumes, out.VolumeKept, out.VolumeNote, err = m.removeVolumes(ctx, project); err != nil {
		return out, err
	}
	out.VolumeRemoved = !out.VolumeKept && out.VolumeNote == ""
	if out.Checkout, err = m.Guard.RemoveMachine(project); err != nil {
		return out, err
	}
	out.Record, err = m.Store.DeleteMachine(ctx, project)
	return out, err
}

// dropUnrecorded removes the directory of a machine that has no record
// (its first warm failed). Caller holds the machine's lock.
func (m *Manager) dropUnrecorded(ctx context.Context, project string) {
	if mach, err := m.machine(ctx, project); err == nil && mach == nil {
		_, _ = m.Guard.RemoveMachine(project)
	}
}

// UnrecordedGrace is how old a machine directory without a record must be
// before the reaper removes it: a first warm creates the directory a moment
// before it takes the machine's lock.
const UnrecordedGrace = time.Minute

// RemoveUnrecorded removes the machine directories that have no record
// and that no xmode is using (their lock is free): what a killed first warm
// left, a lock file and maybe a clone of hundreds of MB. It returns the
// projects removed (or, dry, that would be).
func (m *Manager) RemoveUnrecorded(ctx context.Context, dry bool) ([]string, error) {
	entries, err := os.ReadDir(m.Guard.MachinesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look for unrecorded project machines: %w", err)
	}
	var out []string
	for _, e := range entries {
		project := e.Name()
		if !e.IsDir() || !fsguard.ValidProject(project) || ctx.Err() != nil {
			continue
		}
		if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < UnrecordedGrace {
			continue
		}
		if mach, err := m.machine(ctx, project); err != nil || mach != nil {
			continue
		}
		lk, err := tryLockMachine(filepath.Join(m.Guard.MachinesDir(), project))
		if err != nil || lk == nil {
			continue // in use, or gone meanwhile
		}
		// Under the lock: a warm that recorded it meanwhile wins.
		if mach, err := m.machine(ctx, project); err == nil && mach == nil {
			if dry {
				out = append(out, project)
			} else if removed, err := m.Guard.RemoveMachine(project); err != nil {
				lk.unlock()
				return out, err
			} else if removed {
				out = append(out, project)
			}
		}
		lk.unlock()
	}
	return out, nil
}

// removeVolumes removes the project's cache volumes — each user's, and the
// one all shared before caches were per user — through the configured
// engine (engine.Configured) when it keeps volumes (engine.VolumeRemover:
// only its sandboxes mount them). kept says volumes may still exist, and
// note why they were not removed.
func (m *Manager) removeVolumes(ctx context.Context, project string) (removed []string, kept bool, note string, err error) {
	const none = "no docker engine configured (XMODE_SANDBOX_ENGINE)"
	removed = []string{}
	if m.Cfg == nil {
		return removed, false, none, nil
	}
	configured := engine.Configured(m.Cfg)
	provider, err := engine.Open(configured, m.Cfg)
	if err != nil {
		return removed, true, fmt.Sprintf("the %s engine is not available (%v): remove them with `docker volume rm` (%s and %s.u*)", configured, err, VolumeName(project), VolumeName(project)), nil
	}
	defer engine.Close(provider)
	vr, ok := engine.Volumes(provider)
	if !ok {
		return removed, false, none, nil
	}
	instance, err := m.Store.InstanceID(ctx)
	if err != nil {
		return removed, true, "", err
	}
	names, err := vr.ProjectVolumes(ctx, project, instance)
	if err != nil {
		return removed, true, "", fmt.Errorf("list the cache volumes of project machine %s: %w", project, err)
	}
	for _, name := range names {
		if err := vr.RemoveVolume(ctx, name, instance); err != nil {
			return removed, true, "", fmt.Errorf("remove cache volume %s of the project machine: %w", name, err)
		}
		removed = append(removed, name)
	}
	return removed, false, "", nil
}

// View is a machine as `machine list` and `machine show` print it (package
// pool adds its pool: pool.MachineView).
type View struct {
	store.Machine
	Path         string `json:"path"`
	OpenSessions int    `json:"open_sessions"`
}

// Views returns every machine, or only project's when it is not empty
// (fail.NotFound when it has none).
func (m *Manager) Views(ctx context.Context, project string) ([]View, error) {
	var ms []*store.Machine
	if project != "" {
		if _, err := m.Guard.MachineDir(project); err != nil {
			return nil, err
		}
		mach, err := m.Store.GetMachine(ctx, project)
		if err != nil {
			return nil, err
		}
		ms = []*store.Machine{mach}
	} else {
		var err error
		if ms, err = m.Store.ListMachines(ctx); err != nil {
			return nil, err
		}
	}
	views := make([]View, 0, len(ms))
	for _, mach := range ms {
		users, err := m.Store.MachineSessions(ctx, mach.Project)
		if err != nil {
			return nil, err
		}
		repoDir, _ := m.RepoDir(mach.Project)
		views = append(views, View{Machine: *mach, Path: repoDir, OpenSessions: len(users)})
	}
	return views, nil
}
