package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/docker/internal/dockerapi"
	"github.com/xmode/xmode/storage"
)

// Mount modes (engine.Sandbox.MountMode).
const (
	MountBind   = "bind"
	MountVolume = "volume"
)

// BindWorkspace is where bind mode mounts the worktree (the design's
// historical `-v <worktree>:/workspace -w /workspace`).
const BindWorkspace = "/workspace"

// Isolation methods: how a volume-mode sandbox gets its own worktree and
// nothing else of the storage volume (IsolationMethod, docs/docker.md).
const (
	// IsolationBind: bind mode; only the worktree is mounted.
	IsolationBind = "bind"
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

// ContainerName is the name of a session's container (contract §5).
func ContainerName(sessionID string) string { return "xmode-" + sessionID }

// Provision creates and starts the session's container (contract §5): named
// xmode-<session>, labelled with spec.Labels, an init process and a
// keep-alive command, the worktree mounted per the mount model, and in volume
// mode every limit and hardening flag.
func (p *Provider) Provision(ctx context.Context, spec engine.Spec) (engine.Sandbox, error) {
	if !storage.ValidID("sbx_", spec.SessionID) {
		return engine.Sandbox{}, fail.Refusedf("session id %q is malformed: refusing to name a container after it", spec.SessionID)
	}
	if spec.Labels[LabelManaged] != "true" || spec.Labels[LabelSession] != spec.SessionID {
		// Exec and Destroy only touch containers that carry these.
		return engine.Sandbox{}, fmt.Errorf("provision %s: spec.Labels must carry %s=true and %s=%s (contract §5)", spec.SessionID, LabelManaged, LabelSession, spec.SessionID)
	}
	if err := p.guard.Within(spec.Worktree); err != nil {
		return engine.Sandbox{}, err
	}
	volumeMode := p.cfg.StorageVolume != ""
	if volumeMode {
		// The in-container path is derived from the run, so the worktree
		// must be exactly <root>/runs/<run>/worktree.
		if _, err := p.guard.CheckWorktree(spec.RunID, spec.Worktree); err != nil {
			return engine.Sandbox{}, err
		}
	}
	if st, err := os.Stat(spec.Worktree); err != nil || !st.IsDir() {
		return engine.Sandbox{}, fail.Failedf("worktree %s is not a directory: create the session's worktree before its container", spec.Worktree)
	}
	img := spec.Image
	if img == "" {
		img = p.cfg.Image
	}
	if _, err := p.Ping(ctx); err != nil {
		return engine.Sandbox{}, err
	}
	// The mounts first: a missing storage volume should not wait for a pull.
	cc, hc, err := p.containerConfig(ctx, spec, img)
	if err != nil {
		return engine.Sandbox{}, err
	}
	if err := p.EnsureImage(ctx, img); err != nil {
		return engine.Sandbox{}, err
	}
	name := ContainerName(spec.SessionID)
	cctx, cancel := p.call(ctx)
	defer cancel()
	created, err := p.cli.ContainerCreate(cctx, name, cc, hc)
	if err != nil && !dockerapi.IsConflict(err) {
		// The daemon may have created it before the call failed (a lost
		// answer, a cancelled context): leave nothing behind.
		_ = p.removeContainer(context.WithoutCancel(ctx), name, spec.SessionID)
	}
	if err != nil {
		if dockerapi.IsConflict(err) {
			return engine.Sandbox{}, fail.Failedf("a container named %s already exists (%v): destroy the session first (`xmode sandbox stop`) or remove it with `docker rm -f %s`", name, err, name)
		}
		if strings.Contains(err.Error(), "bind source path does not exist") || strings.Contains(err.Error(), "subpath") {
			return engine.Sandbox{}, fail.Failedf("create %s: %v: the worktree is not in storage volume %q — in volume mode the storage root (%s) must be that volume's mount", name, err, p.cfg.StorageVolume, p.cfg.StorageRoot)
		}
		return engine.Sandbox{}, p.wrap(err, "create container "+name)
	}
	for _, w := range created.Warnings {
		p.warnf("docker: %s (container %s)", w, name)
	}
	if err := p.cli.ContainerStart(cctx, created.ID); err != nil {
		// Leave nothing behind: a half-made sandbox is removed at once.
		rctx, rcancel := p.call(context.WithoutCancel(ctx))
		_ = p.cli.ContainerRemove(rctx, created.ID, dockerapi.RemoveOptions{Force: true, RemoveVolumes: true})
		rcancel()
		return engine.Sandbox{}, p.wrap(err, "start container "+name)
	}
	if spec.CacheVolume != "" && cc.User != "" && !strings.HasPrefix(cc.User, "0:") && cc.User != "0" {
		// A new volume's root belongs to root: let the (non-root) sandbox
		// user write its caches. Root owns it, so no capability is needed.
		mnt := p.cacheMount(spec)
		if _, out, err := p.runHelperAs(ctx, created.ID, "0:0", []string{"/bin/sh", "-c", `chmod 1777 "$1" 2>/dev/null; true`, "xmode-cache", mnt}, 30*time.Second); err != nil {
			p.warnf("could not open cache volume %s to the sandbox user %s: %v %s", spec.CacheVolume, cc.User, err, out)
		}
	}
	mode := MountBind
	if volumeMode {
		mode = MountVolume
	}
	return engine.Sandbox{
		Engine:      Name,
		ContainerID: created.ID,
		MountMode:   mode,
		Image:       img,
		Worktree:    spec.Worktree,
		RunID:       spec.RunID,
		SessionID:   spec.SessionID,
		Project:     spec.Project,
	}, nil
}

// containerConfig builds the create request for one session.
func (p *Provider) containerConfig(ctx context.Context, spec engine.Spec, img string) (*dockerapi.ContainerConfig, *dockerapi.HostConfig, error) {
	labels := make(map[string]string, len(spec.Labels))
	for k, v := range spec.Labels {
		labels[k] = v
	}
	yes := true
	cc := &dockerapi.ContainerConfig{
		Image:      img,
		Entrypoint: append([]string(nil), KeepAlive...),
		Labels:     labels,
		Env:        append([]string(nil), spec.Env...),
	}
	hc := &dockerapi.HostConfig{
		Init:          &yes,
		RestartPolicy: dockerapi.RestartPolicy{Name: "no"},
	}

	if p.cfg.StorageVolume == "" {
		// bind (dev): the lightweight historical argv, no limits.
		cc.WorkingDir = BindWorkspace
		hc.Mounts = []dockerapi.Mount{{Type: dockerapi.MountTypeBind, Source: spec.Worktree, Target: BindWorkspace}}
		extra, err := p.projectMounts(ctx, spec, BindWorkspace, IsolationBind, dockerapi.Volume{})
		if err != nil {
			return nil, nil, err
		}
		hc.Mounts = append(hc.Mounts, extra...)
		if err := p.checkNoSocket(hc.Mounts); err != nil {
			return nil, nil, err
		}
		return cc, hc, nil
	}

	// volume (prod): bounded and hardened, always.
	if !storage.ValidID("run_", spec.RunID) {
		return nil, nil, fail.Refusedf("run id %q is malformed; refusing to derive a path from it", spec.RunID)
	}
	method, detail, vol, err := p.isolation(ctx)
	if err != nil {
		return nil, nil, err
	}
	if method == IsolationWholeVolume {
		p.warnf("%s", detail)
	}
	workdir := p.containerWorktree(spec.RunID)
	mounts := p.storageMount(method, vol, path.Join("runs", spec.RunID, "worktree"), workdir, false)
	if method == IsolationWholeVolume {
		mounts = []dockerapi.Mount{{
			Type: dockerapi.MountTypeVolume, Source: vol.Name, Target: p.cfg.StorageMount,
			VolumeOptions: &dockerapi.VolumeOptions{NoCopy: true},
		}}
	}
	extra, err := p.projectMounts(ctx, spec, workdir, method, vol)
	if err != nil {
		return nil, nil, err
	}
	mounts = append(mounts, extra...)
	if err := p.checkNoSocket(mounts); err != nil {
		return nil, nil, err
	}
	cc.WorkingDir = workdir
	cc.User = p.sandboxUser(spec.Worktree)
	pids := p.cfg.PidsLimit
	hc.Mounts = mounts
	hc.NetworkMode = cmp.Or(spec.Network, p.cfg.Network)
	hc.CapDrop = []string{"ALL"}
	hc.SecurityOpt = []string{"no-new-privileges"}
	hc.ReadonlyRootfs = p.cfg.ReadonlyRoot
	hc.IpcMode = "private"
	if p.cfg.TmpfsPath != "" {
		hc.Tmpfs = map[string]string{p.cfg.TmpfsPath: p.cfg.TmpfsOptions}
	}
	hc.NanoCPUs = int64(p.cfg.CPUs * 1e9)
	hc.Memory = p.cfg.Memory
	hc.MemorySwap = p.cfg.Memory // no swap beyond the memory limit
	hc.PidsLimit = &pids
	hc.Ulimits = []*dockerapi.Ulimit{{Name: "nofile", Soft: NofileSoft, Hard: NofileHard}}
	return cc, hc, nil
}

// storageMount mounts <storage root>/<rel> at target the way the isolation
// method allows: a host bind (bind mode), a volume subpath, a bind from the
// volume's mountpoint on the daemon host; nothing with the whole volume
// (it is all mounted already).
func (p *Provider) storageMount(method string, vol dockerapi.Volume, rel, target string, readOnly bool) []dockerapi.Mount {
	switch method {
	case IsolationBind:
		return []dockerapi.Mount{{Type: dockerapi.MountTypeBind, Source: filepath.Join(p.cfg.StorageRoot, filepath.FromSlash(rel)), Target: target, ReadOnly: readOnly}}
	case IsolationSubpath:
		return []dockerapi.Mount{{
			Type: dockerapi.MountTypeVolume, Source: vol.Name, Target: target, ReadOnly: readOnly,
			VolumeOptions: &dockerapi.VolumeOptions{NoCopy: true, Subpath: rel},
		}}
	case IsolationMountpoint:
		return []dockerapi.Mount{{Type: dockerapi.MountTypeBind, Source: path.Join(vol.Mountpoint, rel), Target: target, ReadOnly: readOnly}}
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
func (p *Provider) projectMounts(ctx context.Context, spec engine.Spec, containerWorktree, method string, vol dockerapi.Volume) ([]dockerapi.Mount, error) {
	var out []dockerapi.Mount
	if spec.MachineGitDir != "" {
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
		out = append(out, p.storageMount(method, vol, path.Join(rel, "worktrees", name), path.Join(target, "worktrees", name), false)...)
	}
	if spec.CacheVolume != "" {
		mnt := p.cacheMount(spec)
		if !path.IsAbs(mnt) || mnt == "/" {
			return nil, fail.Usagef("XMODE_PROJECT_CACHE_MOUNT %q must be an absolute path other than /", mnt)
		}
		if err := p.ensureCacheVolume(ctx, spec); err != nil {
			return nil, err
		}
		out = append(out, dockerapi.Mount{Type: dockerapi.MountTypeVolume, Source: spec.CacheVolume, Target: mnt, VolumeOptions: &dockerapi.VolumeOptions{NoCopy: true}})
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

// worktreeAdminDir is the machine's record of a linked worktree
// (<gitdir>/worktrees/<name>), read from the worktree's .git file; it must
// lie directly in <gitdir>/worktrees.
func worktreeAdminDir(worktree, gitDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(worktree, ".git"))
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
	if !dockerapi.IsNotFound(err) {
		return p.wrap(err, "inspect cache volume "+spec.CacheVolume)
	}
	labels := map[string]string{}
	for k, v := range spec.Labels {
		if k != LabelSession && k != LabelRun {
			labels[k] = v
		}
	}
	labels[LabelProject] = spec.Project
	if _, err := p.cli.VolumeCreate(cctx, dockerapi.VolumeCreateRequest{Name: spec.CacheVolume, Labels: labels}); err != nil && !dockerapi.IsConflict(err) {
		return p.wrap(err, "create cache volume "+spec.CacheVolume)
	}
	return nil
}

// sandboxUser is the uid:gid volume-mode commands run as: XMODE_SANDBOX_USER
// when set explicitly; else the owner of the worktree (so files a step writes
// stay owned by whoever owns the rest), root's image default when that owner
// is root.
func (p *Provider) sandboxUser(worktree string) string {
	explicit := p.cfg.SandboxUser != "" && len(p.cfg.Values) == 0
	for _, v := range p.cfg.Values {
		if v.Name == "XMODE_SANDBOX_USER" && v.Source != "default" {
			explicit = p.cfg.SandboxUser != ""
		}
	}
	if explicit {
		return p.cfg.SandboxUser
	}
	var st syscall.Stat_t
	if err := syscall.Stat(worktree, &st); err == nil {
		if st.Uid == 0 {
			return ""
		}
		return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	if u := p.cfg.SandboxUser; u != "" && !strings.HasPrefix(u, "0:") {
		return u
	}
	return ""
}

// containerWorktree is where a volume-mode sandbox sees its worktree.
func (p *Provider) containerWorktree(runID string) string {
	return path.Join(filepath.ToSlash(p.cfg.StorageMount), "runs", runID, "worktree")
}

// IsolationMethod reports how volume mode isolates sandboxes from each other
// on this daemon (for `xmode doctor`): one of the Isolation* constants and a
// sentence saying why. In bind mode it is IsolationBind. A missing storage
// volume or an unreachable daemon is an error (fail.Enginef).
func (p *Provider) IsolationMethod(ctx context.Context) (method, detail string, err error) {
	if p.cfg.StorageVolume == "" {
		return IsolationBind, "bind mode: each sandbox mounts only its own worktree at " + BindWorkspace, nil
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
func (p *Provider) isolation(ctx context.Context) (string, string, dockerapi.Volume, error) {
	name := p.cfg.StorageVolume
	cctx, cancel := p.call(ctx)
	defer cancel()
	vol, err := p.cli.VolumeInspect(cctx, name)
	if dockerapi.IsNotFound(err) {
		return "", "", vol, fail.Enginef("storage volume %q does not exist on the docker daemon at %s: in volume mode the storage root must live in it — create it (`docker volume create %s`) and mount it at %s in the container xmode runs in, or unset XMODE_SANDBOX_STORAGE_VOLUME for bind mode", name, p.Host(), name, p.cfg.StorageMount)
	}
	if err != nil {
		return "", "", vol, p.wrap(err, "inspect storage volume "+name)
	}
	api := p.cli.Version()
	subpathOK := dockerapi.VersionAtLeast(api, "1.45")
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
	for _, h := range []string{p.cfg.DockerHost, os.Getenv("DOCKER_HOST"), p.Host()} {
		if s, ok := strings.CutPrefix(h, "unix://"); ok && s != "" {
			socks = append(socks, filepath.Clean(s))
		}
	}
	return socks
}

// checkNoSocket refuses any mount that is, or contains, a docker socket:
// the socket is root on the daemon host, so it never enters a sandbox,
// whatever the configuration says.
func (p *Provider) checkNoSocket(mounts []dockerapi.Mount) error {
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
		if m.Type == dockerapi.MountTypeBind {
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
	if _, err := dockerapi.ParseReference(ref); err != nil {
		return fail.Usagef("image %q is not a valid image reference (XMODE_SANDBOX_IMAGE or --image): %v", ref, err)
	}
	cctx, cancel := p.call(ctx)
	_, err := p.cli.ImageInspect(cctx, ref)
	cancel()
	if err == nil {
		return nil
	}
	if !dockerapi.IsNotFound(err) {
		return p.wrap(err, "inspect image "+ref)
	}

	out := p.Progress
	if out == nil {
		out = io.Discard
	} else {
		fmt.Fprintf(out, "Unable to find image '%s' locally\n", ref)
	}
	pctx, pcancel := context.WithTimeout(ctx, p.pullTimeout())
	defer pcancel()
	rc, err := p.cli.ImagePull(pctx, ref)
	if err != nil {
		if e := p.wrap(err, "pull "+ref); fail.KindOf(e) == fail.EngineUnavailable {
			return e
		}
		return pullFailed(ref, err)
	}
	defer rc.Close()
	if err := renderPull(rc, out); err != nil {
		if errors.Is(pctx.Err(), context.DeadlineExceeded) {
			return fail.Enginef("image %s is not present locally and pulling it took longer than %s: load it with `docker load` or check the daemon's registry access", ref, p.pullTimeout())
		}
		return pullFailed(ref, err)
	}
	cctx, cancel = p.call(ctx)
	defer cancel()
	if _, err := p.cli.ImageInspect(cctx, ref); err != nil {
		return pullFailed(ref, err)
	}
	return nil
}

func pullFailed(ref string, err error) error {
	return fail.Enginef("image %s is not present locally and the docker daemon could not pull it: %v — check the image name and the daemon's registry access, or load the image with `docker load`", ref, err)
}
