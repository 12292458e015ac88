package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/docker/docker/api/types/container"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// What keeps the host safe from what a sandbox leaves behind on the host's
// filesystem (docs/docker.md, "The host-trust model").

// sandboxUser is the uid:gid a sandbox's steps run as: XMODE_SANDBOX_USER
// when set; else the worktree's owner, unless that is root: then
// config.NonRootUser. A sandbox never runs as root on the host's files
// unless told to.
func (p *Provider) sandboxUser(worktree string) string {
	if p.cfg.Explicit("XMODE_SANDBOX_USER") && p.cfg.SandboxUser != "" {
		return p.cfg.SandboxUser
	}
	var st syscall.Stat_t
	if err := syscall.Stat(worktree, &st); err == nil && st.Uid != 0 {
		return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	if u := p.cfg.SandboxUser; u != "" && !strings.HasPrefix(u, "0:") && u != "0" {
		return u
	}
	return config.NonRootUser
}

// giveWorktree makes the sandbox user own the worktree (and, for a project
// machine's worktree, its record: HEAD, index), so the steps can write
// their own checkout. It runs before any step, on what xmode itself just
// checked out, following no symlink. An xmode that is not root can only
// give what it owns to itself: another user is refused, naming the way out.
func (p *Provider) giveWorktree(spec engine.Spec, user string) error {
	uid, gid := parseUser(user)
	var st syscall.Stat_t
	if err := syscall.Lstat(spec.Worktree, &st); err != nil {
		return fmt.Errorf("worktree %s: %w", spec.Worktree, err)
	}
	if int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	if os.Geteuid() != 0 {
		return fail.Refusedf("steps would run as %s (XMODE_SANDBOX_USER), but the worktree belongs to uid %d and xmode, not running as root, cannot give it to them: unset XMODE_SANDBOX_USER (steps then run as the worktree's owner) or run xmode as root", user, st.Uid)
	}
	dirs := []string{spec.Worktree}
	if spec.MachineGitDir != "" {
		admin, err := worktreeAdminDir(spec.Worktree, filepath.Clean(spec.MachineGitDir))
		if err != nil {
			return err
		}
		dirs = append(dirs, admin)
	}
	for _, d := range dirs {
		if err := fsguard.ChownTree(d, uid, gid); err != nil {
			return fmt.Errorf("give the worktree to the sandbox user %s: %w", user, err)
		}
	}
	return nil
}

// stripSetuid removes the setuid and setgid bits a step left on files and
// directories of the worktree: on the host's filesystem a setuid file of
// the sandbox user (or of root) would let anyone who runs it become them,
// and a setgid directory gives its group to whatever is made in it later.
// It walks the worktree as it is, confined with os.Root, changing modes
// through file descriptors opened without following links; a directory
// keeps its sticky bit.
func stripSetuid(worktree string) error {
	root, err := os.OpenRoot(worktree)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() && !d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) == 0 {
			return nil
		}
		open := fsguard.OpenRegular
		if d.IsDir() {
			open = fsguard.OpenDir
		}
		f, err := open(root, name)
		if err != nil {
			return nil // gone, or not the same kind of file any more
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || fi.IsDir() != d.IsDir() || !fi.IsDir() && !fi.Mode().IsRegular() {
			return nil
		}
		return f.Chmod(fi.Mode().Perm() | fi.Mode()&fs.ModeSticky)
	})
}

// limits applies the configured limits and hardening to a sandbox. Volume
// and sync mode get all of them, always. Bind mode keeps the design's
// lightweight argv, except for what the user set explicitly (a value asked
// for is honoured, never dropped), or everything with
// XMODE_SANDBOX_BIND_HARDENED=1 (config.Config.BindLeaves).
func (p *Provider) limits(hc *container.HostConfig, mode, user string) {
	bind := mode == MountBind
	on := func(name string) bool { return !bind || !p.cfg.BindLeaves(name) }
	if _, proxied := p.cfg.EgressMode(); !proxied {
		if n := p.network(mode); n != "" {
			hc.NetworkMode = container.NetworkMode(n)
		}
	}
	if on("XMODE_SANDBOX_CPUS") {
		hc.NanoCPUs = int64(p.cfg.CPUs * 1e9)
	}
	if on("XMODE_SANDBOX_MEMORY") {
		hc.Memory = p.cfg.Memory
		hc.MemorySwap = p.cfg.Memory // no swap beyond the memory limit
	}
	if on("XMODE_SANDBOX_PIDS_LIMIT") {
		pids := p.cfg.PidsLimit
		hc.PidsLimit = &pids
	}
	if on("XMODE_SANDBOX_TMPFS") && p.cfg.TmpfsPath != "" {
		hc.Tmpfs = map[string]string{p.cfg.TmpfsPath: tmpfsOptions(p.cfg.TmpfsOptions, user)}
	}
	if on("XMODE_SANDBOX_READONLY_ROOT") {
		hc.ReadonlyRootfs = p.cfg.ReadonlyRoot
	}
	if !bind || p.cfg.BindHardened {
		hc.CapDrop = []string{"ALL"}
		hc.SecurityOpt = []string{"no-new-privileges"}
		hc.IpcMode = container.IPCModePrivate
		hc.Ulimits = []*container.Ulimit{{Name: "nofile", Soft: NofileSoft, Hard: NofileHard}}
	}
}

// tmpfsOptions are the sandbox's tmpfs options: the configured ones, with
// mode=1777 unless they set a mode, owned by the sandbox user unless they
// set uid= or gid=. Docker gives a tmpfs the mode of the image's directory
// under it, and runc before 1.1.8 does so even over mode=: in an image
// whose /tmp is 0755 the sandbox user (65532) could not write /tmp. Owned
// by that user, it can, whichever runc mounts it.
func tmpfsOptions(opts, user string) string {
	has := func(key string) bool {
		for _, o := range strings.Split(opts, ",") {
			if strings.HasPrefix(o, key+"=") {
				return true
			}
		}
		return false
	}
	add := func(o string) {
		if opts != "" {
			opts += ","
		}
		opts += o
	}
	if !has("mode") {
		add("mode=1777")
	}
	if uid, gid := parseUser(user); uid != 0 && !has("uid") && !has("gid") {
		add(fmt.Sprintf("uid=%d,gid=%d", uid, gid))
	}
	return opts
}

// checkRunning makes sure a container just started is still running: one
// whose init or keep-alive could not start (an image without sleep, a
// memory limit too small for them) would otherwise become a session that
// cannot run a step. One that dies a moment later is caught by the first
// step (diedAtStart).
func (p *Provider) checkRunning(ctx context.Context, id string) error {
	ci, err := p.cli.ContainerInspect(ctx, id)
	if err != nil {
		return p.wrap(err, "inspect the new container "+shortID(id))
	}
	if ci.State == nil || ci.State.Running {
		return nil
	}
	return diedError(ci)
}

// diedAtStart reports a stopped container whose keep-alive ended on its
// own (an exit status, not a signal): it never worked, and starting it again
// would not help. A daemon restart or `docker stop` ends it by a signal
// (128+N), and such a container is started again by the next step.
func diedAtStart(ci container.InspectResponse) bool {
	return ci.State != nil && !ci.State.Running && !ci.State.Paused && !ci.State.OOMKilled &&
		ci.State.ExitCode < 128 && ci.State.FinishedAt != "" && !strings.HasPrefix(ci.State.FinishedAt, "0001-")
}

func diedError(ci container.InspectResponse) error {
	why := fmt.Sprintf("%s, exit code %d", ci.State.Status, ci.State.ExitCode)
	if ci.State.Error != "" {
		why += ": " + ci.State.Error
	}
	return fail.Failedf("the sandbox's container stopped as soon as it started (%s): its init and keep-alive (%s) could not run — check XMODE_SANDBOX_PIDS_LIMIT and XMODE_SANDBOX_MEMORY, and that the image has %s; stop this session and create a new one", why, strings.Join(KeepAlive, " "), KeepAlive[0])
}

// prepareOverlay makes the run's git overlay in its record (see
// fsguard.RecordOverlay): objects/ with the machine's objects as its
// alternate (the path the sandbox sees them at), and a copy of the
// machine's refs, so branches and tags read as in the machine. It runs on
// the host before any step, on what xmode made; a record that has it
// already (a pool entry claimed) is left as it is.
func prepareOverlay(record, gitDir string) error {
	rec, err := os.OpenRoot(record)
	if err != nil {
		return fmt.Errorf("open worktree record %s: %w", record, err)
	}
	defer rec.Close()
	if _, err := rec.Lstat(fsguard.RecordOverlay); err == nil {
		return nil
	}
	for _, d := range []string{"objects/info", "objects/pack", "logs"} {
		if err := rec.MkdirAll(path.Join(fsguard.RecordOverlay, d), 0o755); err != nil {
			return fmt.Errorf("make the run's git overlay: %w", err)
		}
	}
	if err := rec.WriteFile(path.Join(fsguard.RecordOverlay, "objects/info/alternates"), []byte(fsguard.MachineObjectsMount+"\n"), 0o644); err != nil {
		return fmt.Errorf("make the run's git overlay: %w", err)
	}
	machine, err := os.OpenRoot(gitDir)
	if err != nil {
		return fmt.Errorf("open %s: %w", gitDir, err)
	}
	defer machine.Close()
	if _, err := fsguard.CopyTree(machine, "refs", rec, path.Join(fsguard.RecordOverlay, "refs"), fsguard.CopyOptions{}); err != nil {
		return fmt.Errorf("copy the machine's refs into the run's overlay: %w", err)
	}
	// The record's owner (who the steps run as) owns its overlay too.
	var st syscall.Stat_t
	if err := syscall.Stat(record, &st); err != nil {
		return err
	}
	return fsguard.ChownTree(filepath.Join(record, fsguard.RecordOverlay), int(st.Uid), int(st.Gid))
}
