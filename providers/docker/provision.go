package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/api/types/volume"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/internal/progress"
)

// Mount modes (engine.Sandbox.MountMode).
const (
	MountBind   = "bind"
	MountVolume = "volume"
	// MountSync: the daemon cannot see this machine's files (a remote
	// daemon); the sandbox works on a copy of the worktree in a volume of
	// its own, filled at Provision, brought back by SyncBack (sync.go).
	MountSync = "sync"
)

// SyncMount is where a sync-mode sandbox's own volume is mounted; the
// worktree is SyncWorktree, a directory in it (so that it can belong to the
// sandbox user: the volume's root stays root's).
const (
	SyncMount    = "/xmode"
	SyncWorktree = SyncMount + "/worktree"
)

// SyncVolumeName is the volume that holds a sync-mode session's copy of the
// worktree; it is the session's (Sandbox.Volumes), removed by Destroy.
func SyncVolumeName(sessionID string) string { return "xmode-wt-" + sessionID }

// BindWorkspace is where bind mode mounts the worktree (the design's
// historical `-v <worktree>:/workspace -w /workspace`).
const BindWorkspace = "/workspace"

// Isolation methods: how a volume-mode sandbox gets its own worktree and
// nothing else of the storage volume (IsolationMethod, docs/docker.md).
const (
	// IsolationBind: bind mode; only the worktree is mounted.
	IsolationBind = "bind"
	// IsolationSync: sync mode; only the session's own volume is mounted.
	IsolationSync = "sync"
	// IsolationSubpath: the storage volume mounted with
	// VolumeOptions.Subpath = runs/<run>/worktree (Engine API 1.45+).
	IsolationSubpath = "subpath"
	// IsolationMountpoint: the worktree's directory under the local volume's
	// mountpoint on the daemon host, bind-mounted (any API version, local
	// volume driver without driver options).
	IsolationMountpoint = "mountpoint"
	// IsolationWholeVolume: the whole storage volume; every sandbox can see
	// every run, the evidence and xmode.db. Only when nothing else works,
	// always with a warning.
	IsolationWholeVolume = "whole-volume"
)

// Nofile limits of a volume-mode sandbox (--ulimit nofile=soft:hard).
const (
	NofileSoft = 4096
	NofileHard = 8192
)

// KeepAlive is the command that keeps a session container running between
// steps (under the init process HostConfig.Init adds). It works with GNU
// coreutils and busybox alike.
var KeepAlive = []string{"sleep", "2147483647"}

// ContainerName is the name of a session's container (docs/reference.md,
// "Docker objects and labels").
func ContainerName(sessionID string) string { return "xmode-" + sessionID }

// Provision creates and starts the session's container (docs/docker.md): named
// xmode-<session>, labelled with spec.Labels, an init process and a
// keep-alive command, the worktree mounted (or, in sync mode, copied) per
// the mount model, and outside bind mode every limit and hardening flag.
// What it created before failing is in the returned Sandbox, so teardown
// can find it.
func (p *Provider) Provision(ctx context.Context, spec engine.Spec) (engine.Sandbox, error) {
	if !fsguard.ValidID("sbx_", spec.SessionID) {
		return engine.Sandbox{}, fail.Refusedf("session id %q is malformed: refusing to name a container after it", spec.SessionID)
	}
	if spec.Labels[LabelManaged] != "true" || spec.Labels[LabelSession] != spec.SessionID {
		// Exec and Destroy only touch containers that carry these.
		return engine.Sandbox{}, fmt.Errorf("provision %s: spec.Labels must carry %s=true and %s=%s (docs/reference.md, \"Docker objects and labels\")", spec.SessionID, LabelManaged, LabelSession, spec.SessionID)
	}
	if err := p.guard.Within(spec.Worktree); err != nil {
		return engine.Sandbox{}, err
	}
	mode := p.MountMode()
	if mode != MountBind {
		// The in-container path (volume) or the copy back (sync) is
		// derived from the run, so the worktree must be exactly
		// <root>/runs/<run>/worktree.
		if _, err := p.guard.CheckWorktree(spec.RunID, spec.Worktree); err != nil {
			return engine.Sandbox{}, err
		}
	}
	if err := p.checkEgressSpec(spec, mode); err != nil {
		return engine.Sandbox{}, err
	}
	if st, err := os.Stat(spec.Worktree); err != nil || !st.IsDir() {
		return engine.Sandbox{}, fail.Failedf("worktree %s is not a directory: create the session's worktree before its container", spec.Worktree)
	}
	img := spec.Image
	if img == "" {
		img = p.Image()
	}
	if err := checkImage(img); err != nil {
		return engine.Sandbox{}, err
	}
	if _, err := p.Ping(ctx); err != nil {
		return engine.Sandbox{}, err
	}
	user := p.sandboxUser(spec.Worktree)
	// The mounts first: a missing storage volume should not wait for a pull.
	cc, hc, err := p.containerConfig(ctx, spec, img, mode, user)
	if err != nil {
		return engine.Sandbox{}, err
	}
	if mode != MountSync {
		// A sync-mode copy is made owned by the user (copyIn).
		if err := p.giveWorktree(spec, user); err != nil {
			return engine.Sandbox{}, err
		}
	}
	if err := p.EnsureImage(ctx, img); err != nil {
		return engine.Sandbox{}, err
	}
	// A proxied network: the sandbox's own network and the proxy serving
	// its policy, before the container exists.
	var eg *egressSetup
	var netCfg *network.NetworkingConfig
	// dropEgress removes a failed create's network and policy, once the
	// proxy's side of it is done.
	dropEgress := func() {
		if eg != nil {
			_ = eg.wait()
			_ = p.destroyEgress(context.WithoutCancel(ctx), spec.SessionID, spec.RunID)
		}
	}
	if spec.Egress != nil {
		if eg, err = p.prepareEgress(ctx, spec); err != nil {
			_ = p.destroyEgress(context.WithoutCancel(ctx), spec.SessionID, spec.RunID)
			return engine.Sandbox{}, err
		}
		// However the create ends, the lock goes once the proxy answered.
		defer eg.wait()
		netCfg = applyEgress(cc, hc, eg)
	}
	sb := engine.Sandbox{
		Engine:    Name,
		MountMode: mode,
		Image:     img,
		Worktree:  spec.Worktree,
		RunID:     spec.RunID,
		SessionID: spec.SessionID,
		Project:   spec.Project,
	}
	if mode == MountSync {
		vol := SyncVolumeName(spec.SessionID)
		if err := p.createSessionVolume(ctx, vol, spec.Labels); err != nil {
			dropEgress()
			return engine.Sandbox{}, err
		}
		sb.Volumes = []string{vol}
	}
	name := ContainerName(spec.SessionID)
	cctx, cancel := p.call(ctx)
	defer cancel()
	created, err := p.cli.ContainerCreate(cctx, cc, hc, netCfg, nil, name)
	if err != nil && !cerrdefs.IsConflict(err) {
		// The daemon may have created it before the call failed (a lost
		// answer, a cancelled context): leave nothing behind.
		_ = p.removeContainer(context.WithoutCancel(ctx), name, spec.SessionID)
	}
	if err != nil {
		p.dropVolumes(ctx, &sb)
		if !cerrdefs.IsConflict(err) {
			dropEgress()
		}
		if cerrdefs.IsConflict(err) {
			return sb, fail.Failedf("a container named %s already exists (%v): destroy the session first (`xmode sandbox stop`) or remove it with `docker rm -f %s`", name, err, name)
		}
		if strings.Contains(err.Error(), "bind source path does not exist") || strings.Contains(err.Error(), "subpath") {
			return sb, fail.Failedf("create %s: %v: the worktree is not in storage volume %q — in volume mode the storage root (%s) must be that volume's mount", name, err, p.cfg.StorageVolume, p.cfg.StorageRoot)
		}
		if rt := p.cfg.Runtime; rt != "" && strings.Contains(strings.ToLower(err.Error()), "runtime") {
			return sb, fail.Enginef("the docker daemon at %s has no runtime %q (XMODE_SANDBOX_RUNTIME): %v — register it in the daemon's daemon.json (\"runtimes\") and restart dockerd, or unset XMODE_SANDBOX_RUNTIME; `xmode doctor` lists the daemon's runtimes", p.Host(), rt, err)
		}
		return sb, p.wrap(err, "create container "+name)
	}
	for _, w := range created.Warnings {
		p.warnf("docker: %s (container %s)", w, name)
	}
	// Leave nothing behind: a half-made sandbox is removed at once.
	discard := func() {
		rctx, rcancel := p.call(context.WithoutCancel(ctx))
		_ = p.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		rcancel()
		p.dropVolumes(ctx, &sb)
		dropEgress()
	}
	if mode == MountSync {
		// Before the start: no step ever sees a half-copied worktree.
		if err := p.copyIn(ctx, created.ID, spec.Worktree, cc.User); err != nil {
			discard()
			return sb, err
		}
	}
	if err := p.openTmp(cctx, created.ID, hc, cc.User); err != nil {
		discard()
		return sb, err
	}
	if err := p.cli.ContainerStart(cctx, created.ID, container.StartOptions{}); err != nil {
		discard()
		return sb, p.wrap(err, "start container "+name)
	}
	if err := p.checkRunning(cctx, created.ID); err != nil {
		discard()
		return sb, err
	}
	if eg != nil {
		// Before any step: the proxy serves the policy, the resolver is
		// the proxy's, and the CA of a policy with credentials is trusted.
		if err := eg.wait(); err != nil {
			discard()
			return sb, err
		}
		if err := p.setupInside(ctx, created.ID, eg.proxy, eg.resolv == nil, eg.caPEM, eg.caDir); err != nil {
			discard()
			return sb, err
		}
	}
	if spec.CacheVolume != "" && cc.User != "" && !strings.HasPrefix(cc.User, "0:") && cc.User != "0" {
		// A new volume's root belongs to root: let the (non-root) sandbox
		// user write its caches. Root owns it, so no capability is needed.
		mnt := p.cacheMount(spec)
		if _, out, err := p.runHelperAs(ctx, created.ID, "0:0", []string{"/bin/sh", "-c", `chmod 1777 "$1" 2>/dev/null; true`, "xmode-cache", mnt}, 30*time.Second); err != nil {
			p.warnf("could not open cache volume %s to the sandbox user %s: %v %s", spec.CacheVolume, cc.User, err, out)
		}
	}
	sb.ContainerID = created.ID
	return sb, nil
}

// openTmp gives a sandbox user other than root a /tmp it can write where
// xmode mounts no tmpfs there (bind mode leaves XMODE_SANDBOX_TMPFS
// unapplied unless asked): the image's own /tmp, which is 0755 root in some
// images, or missing, becomes 1777 in the container's own layer, before it
// starts. An image whose /tmp is already 1777 costs one stat; a read-only
// root or a /tmp that is a link is left as the image has it.
func (p *Provider) openTmp(ctx context.Context, id string, hc *container.HostConfig, user string) error {
	if rootUser(user) || hc.ReadonlyRootfs {
		return nil
	}
	if _, ok := hc.Tmpfs["/tmp"]; ok {
		return nil
	}
	st, err := p.cli.ContainerStatPath(ctx, id, "/tmp")
	switch {
	case err != nil && !cerrdefs.IsNotFound(err):
		return p.wrap(err, "stat /tmp in the new container "+shortID(id))
	case err == nil && (st.LinkTarget != "" || !st.Mode.IsDir()):
		return nil
	case err == nil && st.Mode.Perm() == 0o777 && st.Mode&os.ModeSticky != 0:
		return nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: time.Now()}); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := p.cli.CopyToContainer(ctx, id, "/", &buf, container.CopyToContainerOptions{}); err != nil {
		return p.wrap(err, "make /tmp writable in the new container "+shortID(id))
	}
	return nil
}

// rootUser reports whether a container user is root: "" (the image's,
// which xmode never leaves unset), uid 0 or "root", with or without a group.
func rootUser(user string) bool {
	u, _, _ := strings.Cut(user, ":")
	return u == "" || u == "0" || u == "root"
}

// MountMode is how this provider's sandboxes see their worktree: volume
// mode when a storage volume is configured, sync mode when the daemon is
// remote (XMODE_SANDBOX_DOCKER_REMOTE; by default any tcp:// daemon), bind
// mode otherwise.
func (p *Provider) MountMode() string {
	switch {
	case p.cfg.StorageVolume != "":
		return MountVolume
	case p.ep.remote:
		return MountSync
	}
	return MountBind
}

// WorktreeIn is where sb's steps see its worktree (engine.WorktreeMounter):
// the container's working directory, which Provision set from the same
// answer.
func (p *Provider) WorktreeIn(sb engine.Sandbox) (string, error) {
	wt, err := p.worktreeIn(sb.MountMode, sb.RunID)
	if err != nil {
		return "", fmt.Errorf("session %s: %w", sb.SessionID, err)
	}
	return wt, nil
}

// worktreeIn is where a sandbox of mount mode mode on run runID sees its
// worktree: BindWorkspace in bind mode, <XMODE_SANDBOX_STORAGE_MOUNT>/runs/
// <run>/worktree in volume mode, SyncWorktree in sync mode.
func (p *Provider) worktreeIn(mode, runID string) (string, error) {
	switch mode {
	case MountBind:
		return BindWorkspace, nil
	case MountSync:
		return SyncWorktree, nil
	case MountVolume:
		if !fsguard.ValidID("run_", runID) {
			return "", fail.Refusedf("run id %q is malformed; refusing to derive a path from it", runID)
		}
		return path.Join(filepath.ToSlash(p.cfg.StorageMount), "runs", runID, "worktree"), nil
	}
	return "", fmt.Errorf("docker session with unknown mount mode %q", mode)
}

// Network is the network a new sandbox gets (engine.Networker): the
// configured one, except in bind mode when it was not set explicitly, where
// docker's default stays (config.Config.BindLeaves).
func (p *Provider) Network() string { return p.network(p.MountMode()) }

func (p *Provider) network(mode string) string {
	if mode == MountBind && p.cfg.BindLeaves("XMODE_SANDBOX_NETWORK") {
		return ""
	}
	return p.cfg.Network
}

// Image is the image a new sandbox runs when its spec names none
// (engine.ImageRunner): XMODE_SANDBOX_IMAGE.
func (p *Provider) Image() string { return p.cfg.Image }

// createSessionVolume creates a volume of the session's (sync mode),
// labelled like its container; one of that name that is not the session's
// is refused.
func (p *Provider) createSessionVolume(ctx context.Context, name string, labels map[string]string) error {
	if err := checkRef("volume", name); err != nil {
		return err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	v, err := p.cli.VolumeCreate(cctx, volume.CreateOptions{Name: name, Labels: labels})
	if err != nil {
		return p.wrap(err, "create volume "+name)
	}
	if v.Labels[LabelManaged] != "true" || v.Labels[LabelSession] != labels[LabelSession] {
		return fail.Refusedf("volume %s exists and is not this session's (labels %v): remove it (`docker volume rm %s`)", name, v.Labels, name)
	}
	return nil
}

// dropVolumes removes a failed Provision's session volumes, best effort; the
// ones that are gone leave the Sandbox (teardown retries the rest).
func (p *Provider) dropVolumes(ctx context.Context, sb *engine.Sandbox) {
	var left []string
	for _, v := range sb.Volumes {
		if err := p.removeVolume(context.WithoutCancel(ctx), v, ""); err != nil {
			left = append(left, v)
		}
	}
	sb.Volumes = left
}

// containerConfig builds the create request for one session.
func (p *Provider) containerConfig(ctx context.Context, spec engine.Spec, img, mode, user string) (*container.Config, *container.HostConfig, error) {
	labels := make(map[string]string, len(spec.Labels))
	for k, v := range spec.Labels {
		labels[k] = v
	}
	yes := true
	cc := &container.Config{
		Image:      img,
		Entrypoint: append([]string(nil), KeepAlive...),
		Labels:     labels,
		Env:        append([]string(nil), spec.Env...),
	}
	if p.keepAliveOverride != nil {
		cc.Entrypoint = p.keepAliveOverride
	}
	if spec.MachineGitDir != "" {
		// The machine's .git belongs to xmode's user, the worktree to the
		// sandbox's: without this, git refuses the "dubious ownership".
		cc.Env = append(cc.Env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*")
	}
	hc := &container.HostConfig{
		Init:          &yes,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		// Stronger isolation (gVisor's runsc, sysbox-runc) is the daemon's
		// runtime of that name; "" is the daemon's default.
		Runtime: p.cfg.Runtime,
	}

	cc.User = user
	// Where the steps see the worktree, as WorktreeIn answers for them.
	workdir, err := p.worktreeIn(mode, spec.RunID)
	if err != nil {
		return nil, nil, err
	}
	if mode == MountBind {
		// bind (dev): the lightweight historical argv, limits only where
		// asked for (limits).
		cc.WorkingDir = workdir
		hc.Mounts = []mount.Mount{{Type: mount.TypeBind, Source: spec.Worktree, Target: cc.WorkingDir}}
		extra, err := p.projectMounts(ctx, spec, cc.WorkingDir, IsolationBind, volume.Volume{})
		if err != nil {
			return nil, nil, err
		}
		hc.Mounts = append(hc.Mounts, extra...)
		if err := p.checkNoSocket(hc.Mounts); err != nil {
			return nil, nil, err
		}
		p.limits(hc, mode, user)
		return cc, hc, nil
	}

	// volume (prod) and sync (a remote daemon): bounded and hardened, always.
	if !fsguard.ValidID("run_", spec.RunID) {
		return nil, nil, fail.Refusedf("run id %q is malformed; refusing to derive a path from it", spec.RunID)
	}
	var mounts []mount.Mount
	if mode == MountSync {
		mounts = []mount.Mount{{
			Type: mount.TypeVolume, Source: SyncVolumeName(spec.SessionID), Target: SyncMount,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true},
		}}
		extra, err := p.projectMounts(ctx, spec, workdir, MountSync, volume.Volume{})
		if err != nil {
			return nil, nil, err
		}
		mounts = append(mounts, extra...)
	} else {
		method, detail, vol, err := p.isolation(ctx)
		if err != nil {
			return nil, nil, err
		}
		if method == IsolationWholeVolume {
			p.warnf("%s", detail)
		}
		mounts = p.storageMount(method, vol, path.Join("runs", spec.RunID, "worktree"), workdir, false)
		if method == IsolationWholeVolume {
			mounts = []mount.Mount{{
				Type: mount.TypeVolume, Source: vol.Name, Target: p.cfg.StorageMount,
				VolumeOptions: &mount.VolumeOptions{NoCopy: true},
			}}
		}
		extra, err := p.projectMounts(ctx, spec, workdir, method, vol)
		if err != nil {
			return nil, nil, err
		}
		mounts = append(mounts, extra...)
		if method == IsolationSubpath && versions.LessThan(p.cli.ClientVersion(), "1.45") {
			// The SDK sends Subpath to any daemon, and an older one ignores
			// it and mounts the whole volume: never let that happen.
			return nil, nil, fail.Enginef("volume subpath mounts need Engine API 1.45; the daemon at %s speaks %s", p.Host(), p.cli.ClientVersion())
		}
	}
	if err := p.checkNoSocket(mounts); err != nil {
		return nil, nil, err
	}
	cc.WorkingDir = workdir
	hc.Mounts = mounts
	p.limits(hc, mode, user)
	return cc, hc, nil
}

// storageMount mounts <storage root>/<rel> at target the way the isolation
// method allows: a host bind (bind mode), a volume subpath, a bind from the
// volume's mountpoint on the daemon host; nothing with the whole volume
// (it is all mounted already).
func (p *Provider) storageMount(method string, vol volume.Volume, rel, target string, readOnly bool) []mount.Mount {
	switch method {
	case IsolationBind:
		return []mount.Mount{{Type: mount.TypeBind, Source: filepath.Join(p.cfg.StorageRoot, filepath.FromSlash(rel)), Target: target, ReadOnly: readOnly}}
	case IsolationSubpath:
		return []mount.Mount{{
			Type: mount.TypeVolume, Source: vol.Name, Target: target, ReadOnly: readOnly,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true, Subpath: rel},
		}}
	case IsolationMountpoint:
		return []mount.Mount{{Type: mount.TypeBind, Source: path.Join(vol.Mountpoint, rel), Target: target, ReadOnly: readOnly}}
	}
	return nil
}

// projectMounts are the mounts of a worktree branched from a project
// machine (engine.Spec.MachineGitDir, CacheVolume):
//
//   - the machine's .git, read-only, where the worktree's relative gitdir
//     points (Spec.GitDirIn), so git works in the sandbox; only the
//     worktree's own record (.git/worktrees/<name>: HEAD, index) is
//     writable. The objects, refs, config and hooks the machine's other
//     worktrees and xmode's own git commands use stay out of a sandbox's
//     reach: a writable .git would let one sandbox plant a hook or move a
//     ref that the host or the next session runs or checks out. Commits and
//     `git add` inside the sandbox therefore fail; xmode captures the diff of
//     the worktree on the host.
//   - the project's dependency-cache volume at CacheMount, read-write,
//     shared by the project's sessions and outliving them.
//
// A sync-mode sandbox (a remote daemon) gets the cache volume only: the
// machine's .git stays on this machine, so git does not work inside it
// (xmode's diff and change requests read the worktree here, after SyncBack).
func (p *Provider) projectMounts(ctx context.Context, spec engine.Spec, containerWorktree, method string, vol volume.Volume) ([]mount.Mount, error) {
	var out []mount.Mount
	if spec.MachineGitDir != "" && method != MountSync {
		gitDir := filepath.Clean(spec.MachineGitDir)
		if err := p.guard.Within(gitDir); err != nil {
			return nil, err
		}
		machines := p.guard.MachinesDir()
		if !isUnder(machines, gitDir) || gitDir == machines || filepath.Base(gitDir) != ".git" {
			return nil, fail.Refusedf("project machine git directory %s is not a .git under %s: refusing to mount it", gitDir, machines)
		}
		target := spec.GitDirIn(containerWorktree)
		rel, err := filepath.Rel(p.cfg.StorageRoot, gitDir)
		if err != nil || target == "" {
			return nil, fmt.Errorf("project machine git directory %s: %v", gitDir, err)
		}
		rel = filepath.ToSlash(rel)
		out = append(out, p.storageMount(method, vol, rel, target, true)...)
		admin, err := worktreeAdminDir(spec.Worktree, gitDir)
		if err != nil {
			return nil, err
		}
		if err := p.guard.Within(admin); err != nil {
			return nil, err
		}
		name := filepath.Base(admin)
		recordRel, recordTarget := path.Join(rel, "worktrees", name), path.Join(target, "worktrees", name)
		out = append(out, p.storageMount(method, vol, recordRel, recordTarget, false)...)
		// The files that send git elsewhere stay as xmode wrote them: the
		// worktree's .git, the record's commondir and gitdir. Rewritten,
		// they would make a person's `git status` on the host read a config
		// the sandbox planted (core.fsmonitor), or hide the record.
		wtRel, err := filepath.Rel(p.cfg.StorageRoot, spec.Worktree)
		if err != nil {
			return nil, err
		}
		out = append(out, p.storageMount(method, vol, path.Join(filepath.ToSlash(wtRel), ".git"), path.Join(containerWorktree, ".git"), true)...)
		for _, f := range []string{"commondir", "gitdir"} {
			out = append(out, p.storageMount(method, vol, path.Join(recordRel, f), path.Join(recordTarget, f), true)...)
		}
		// git writes (add, commit, branch, stash) go to the run's own
		// overlay in its record, mounted over the machine's objects, refs
		// and logs; the machine's objects stay readable as the alternate.
		if err := prepareOverlay(admin, gitDir); err != nil {
			return nil, err
		}
		overlay := path.Join(recordRel, fsguard.RecordOverlay)
		for _, d := range []string{"objects", "refs", "logs"} {
			out = append(out, p.storageMount(method, vol, path.Join(overlay, d), path.Join(target, d), false)...)
		}
		out = append(out, p.storageMount(method, vol, path.Join(rel, "objects"), fsguard.MachineObjectsMount, true)...)
	}
	if spec.CacheVolume != "" {
		mnt := p.cacheMount(spec)
		if !path.IsAbs(mnt) || mnt == "/" {
			return nil, fail.Usagef("XMODE_PROJECT_CACHE_MOUNT %q must be an absolute path other than /", mnt)
		}
		if err := p.ensureCacheVolume(ctx, spec); err != nil {
			return nil, err
		}
		out = append(out, mount.Mount{Type: mount.TypeVolume, Source: spec.CacheVolume, Target: mnt, VolumeOptions: &mount.VolumeOptions{NoCopy: true}})
	}
	return out, nil
}

// cacheMount is where the project's cache volume goes in the sandbox.
func (p *Provider) cacheMount(spec engine.Spec) string {
	mnt := spec.CacheMount
	if mnt == "" {
		mnt = p.cfg.ProjectCacheMount
	}
	if mnt == "" {
		return ""
	}
	return path.Clean(mnt)
}

// maxGitFile bounds a worktree's .git file: "gitdir: " and a path.
const maxGitFile = 4 << 10

// worktreeAdminDir is the machine's record of a linked worktree
// (<gitdir>/worktrees/<name>), read from the worktree's .git file — a
// sandbox's to rewrite once a step has run, so read as fsguard.OpenRegular
// reads what a sandbox wrote; it must lie directly in <gitdir>/worktrees.
func worktreeAdminDir(worktree, gitDir string) (string, error) {
	root, err := fsguard.OpenRootPath(worktree)
	if err != nil {
		return "", fmt.Errorf("worktree %s of a project machine: %w", worktree, err)
	}
	b, err := fsguard.ReadRegular(root, ".git", maxGitFile)
	root.Close()
	if err != nil {
		return "", fmt.Errorf("worktree %s of a project machine: %w", worktree, err)
	}
	ref, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok {
		return "", fmt.Errorf("worktree %s: its .git file does not name a gitdir", worktree)
	}
	if !filepath.IsAbs(ref) {
		ref = filepath.Join(worktree, ref)
	}
	admin := filepath.Clean(ref)
	if filepath.Dir(admin) != filepath.Join(gitDir, "worktrees") {
		return "", fail.Refusedf("worktree %s points at %s, not into %s/worktrees: refusing to mount it", worktree, admin, gitDir)
	}
	return admin, nil
}

// ensureCacheVolume creates a project's cache volume when it does not exist
// yet. Its labels are the session's minus xmode.session and xmode.run, plus
// xmode.project: it belongs to the project, outlives every session (never in
// Sandbox.Volumes), and the reaper leaves volumes without a session alone;
// `xmode machine rm` removes it (RemoveVolume).
//
// A volume of that name that is not this install's is refused, never
// mounted: volumes are named by project alone, and a cache another install
// (or a user) filled must not feed this install's untrusted steps, nor this
// install's steps write into theirs.
func (p *Provider) ensureCacheVolume(ctx context.Context, spec engine.Spec) error {
	if err := checkRef("volume", spec.CacheVolume); err != nil {
		return err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	v, err := p.cli.VolumeInspect(cctx, spec.CacheVolume)
	if err == nil {
		switch instance := spec.Labels[LabelInstance]; {
		case v.Labels[LabelManaged] != "true":
			return fail.Refusedf("cache volume %s exists but xmode did not create it (no %s=true label): remove or rename it (`docker volume rm %s`), or use another project name",
				spec.CacheVolume, LabelManaged, spec.CacheVolume)
		case v.Labels[LabelInstance] != instance:
			return fail.Refusedf("cache volume %s belongs to another xmode install on this daemon (%s=%s, this storage root's is %s): installs never share a project's cache; use another project name",
				spec.CacheVolume, LabelInstance, v.Labels[LabelInstance], instance)
		}
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return p.wrap(err, "inspect cache volume "+spec.CacheVolume)
	}
	labels := map[string]string{}
	for k, v := range spec.Labels {
		if k != LabelSession && k != LabelRun {
			labels[k] = v
		}
	}
	labels[LabelProject] = spec.Project
	if _, err := p.cli.VolumeCreate(cctx, volume.CreateOptions{Name: spec.CacheVolume, Labels: labels}); err != nil && !cerrdefs.IsConflict(err) {
		return p.wrap(err, "create cache volume "+spec.CacheVolume)
	}
	return nil
}

// IsolationMethod reports how volume mode isolates sandboxes from each other
// on this daemon (for `xmode doctor`): one of the Isolation* constants and a
// sentence saying why. In bind mode it is IsolationBind, in sync mode
// IsolationSync. A missing storage volume or an unreachable daemon is an
// error (fail.Enginef).
func (p *Provider) IsolationMethod(ctx context.Context) (method, detail string, err error) {
	switch p.MountMode() {
	case MountBind:
		return IsolationBind, "bind mode: each sandbox mounts only its own worktree at " + BindWorkspace, nil
	case MountSync:
		return IsolationSync, "sync mode: each sandbox has a copy of its own worktree in a volume of its own (" + SyncWorktree + ")", nil
	}
	if _, err := p.Ping(ctx); err != nil {
		return "", "", err
	}
	method, detail, _, err = p.isolation(ctx)
	return method, detail, err
}

// isolation decides the method: subpath mounts where the API has them
// (1.45+), else the local driver's mountpoint, else the whole volume. The
// storage volume must exist: xmode does not create it, because in volume
// mode the storage root xmode writes must already live in it — a fresh
// empty volume would give every sandbox an empty worktree, silently. It is
// shared by every session and never removed by Destroy.
func (p *Provider) isolation(ctx context.Context) (string, string, volume.Volume, error) {
	name := p.cfg.StorageVolume
	if err := checkRef("volume", name); err != nil {
		return "", "", volume.Volume{}, err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	vol, err := p.cli.VolumeInspect(cctx, name)
	if cerrdefs.IsNotFound(err) {
		return "", "", vol, fail.Enginef("storage volume %q does not exist on the docker daemon at %s: in volume mode the storage root must live in it — create it (`docker volume create %s`) and mount it at %s in the container xmode runs in, or unset XMODE_SANDBOX_STORAGE_VOLUME for bind mode", name, p.Host(), name, p.cfg.StorageMount)
	}
	if err != nil {
		return "", "", vol, p.wrap(err, "inspect storage volume "+name)
	}
	api := p.cli.ClientVersion()
	subpathOK := !versions.LessThan(api, "1.45")
	mountpointOK := vol.Driver == "local" && len(vol.Options) == 0 && vol.Mountpoint != ""
	method := ""
	switch {
	case p.isolationOverride != "":
		method = p.isolationOverride
	case subpathOK:
		method = IsolationSubpath
	case mountpointOK:
		method = IsolationMountpoint
	default:
		method = IsolationWholeVolume
	}
	switch method {
	case IsolationSubpath:
		return method, fmt.Sprintf("Engine API %s mounts only runs/<run>/worktree of volume %s into each sandbox (volume subpath)", api, name), vol, nil
	case IsolationMountpoint:
		return method, fmt.Sprintf("Engine API %s has no volume subpaths (1.45+); each sandbox bind-mounts its worktree from volume %s's mountpoint on the daemon host (%s/runs/<run>/worktree)", api, name, vol.Mountpoint), vol, nil
	}
	why := fmt.Sprintf("Engine API %s has no volume subpaths (needs 1.45+)", api)
	if !mountpointOK {
		why += fmt.Sprintf(" and volume %s (driver %q) has no plain local mountpoint to bind from", name, vol.Driver)
	}
	return IsolationWholeVolume, fmt.Sprintf("%s: every sandbox mounts the WHOLE storage volume %s at %s and can read other runs' worktrees, their evidence and xmode.db; upgrade the daemon to Engine 26+ or use a local-driver volume", why, name, p.cfg.StorageMount), vol, nil
}

// dockerSockets are paths that must never be mounted into a sandbox.
func (p *Provider) dockerSockets() []string {
	socks := []string{"/var/run/docker.sock", "/run/docker.sock"}
	for _, h := range []string{p.cfg.DockerHost, p.Host()} {
		if s, ok := strings.CutPrefix(h, "unix://"); ok && s != "" {
			socks = append(socks, filepath.Clean(s))
		}
	}
	return socks
}

// checkNoSocket refuses any mount that is, or contains, a docker socket:
// the socket is root on the daemon host, so it never enters a sandbox,
// whatever the configuration says.
func (p *Provider) checkNoSocket(mounts []mount.Mount) error {
	for _, m := range mounts {
		for _, end := range []string{m.Source, m.Target} {
			if end == "" {
				continue
			}
			clean := filepath.Clean(end)
			if filepath.Base(clean) == "docker.sock" {
				return fail.Refusedf("refusing to mount %s into a sandbox: it is a docker socket", end)
			}
			for _, s := range p.dockerSockets() {
				if isUnder(clean, s) {
					return fail.Refusedf("refusing to mount %s into a sandbox: it contains the docker socket %s", end, s)
				}
			}
		}
		if m.Type == mount.TypeBind {
			if st, err := os.Stat(m.Source); err == nil && st.Mode()&os.ModeSocket != 0 {
				return fail.Refusedf("refusing to mount %s into a sandbox: it is a socket", m.Source)
			}
		}
	}
	return nil
}

// isUnder reports whether path is dir or inside it.
func isUnder(dir, p string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// EnsureImage makes sure the image is in the daemon's store: present, go;
// missing, pull it with progress on Progress, like `docker run`. A failed
// pull is fail.Enginef (exit 5) with the daemon's reason; it never hangs
// longer than PullTimeout.
func (p *Provider) EnsureImage(ctx context.Context, ref string) error {
	if err := checkImage(ref); err != nil {
		return err
	}
	cctx, cancel := p.call(ctx)
	_, err := p.cli.ImageInspect(cctx, ref)
	cancel()
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return p.wrap(err, "inspect image "+ref)
	}
	if isSnapshotImage(ref) {
		return fail.Refusedf("image %s is gone (the reaper removes a fork's or a snapshot's image once it is not used): it was never in a registry, so it cannot be pulled", ref)
	}

	if p.Progress != nil {
		fmt.Fprintf(p.Progress, "Unable to find image '%s' locally\n", ref)
	}
	pctx, pcancel := context.WithTimeout(ctx, p.pullTimeout())
	defer pcancel()
	rc, err := p.cli.ImagePull(pctx, ref, image.PullOptions{})
	if err != nil {
		if e := p.wrap(err, "pull "+ref); fail.KindOf(e) == fail.EngineUnavailable {
			return e
		}
		return pullFailed(ref, err)
	}
	defer rc.Close()
	if err := progress.Pull(rc, p.Progress, ref); err != nil {
		if errors.Is(pctx.Err(), context.DeadlineExceeded) {
			return fail.Enginef("image %s is not present locally and pulling it took longer than %s: %s", ref, p.pullTimeout(), imageFix)
		}
		return pullFailed(ref, err)
	}
	// A stream that reported its error only as "error" (no errorDetail)
	// renders as success: the image itself says whether the pull worked.
	cctx, cancel = p.call(ctx)
	defer cancel()
	if _, err := p.cli.ImageInspect(cctx, ref); err != nil {
		return pullFailed(ref, err)
	}
	return nil
}

func pullFailed(ref string, err error) error {
	return fail.Enginef("image %s is not present locally and the docker daemon could not pull it: %v — %s", ref, err, imageFix)
}

// imageFix is what to do about an image the daemon does not have, for
// every front end: the image comes from XMODE_SANDBOX_IMAGE, or from the
// create that named one.
const imageFix = "give an image the daemon has: XMODE_SANDBOX_IMAGE for every sandbox, or the create's own (`xmode sandbox create --image`, MCP sandbox_create's image parameter); or load it with `docker load`, or check the image name and the daemon's registry access (docs/images.md builds one offline)"
