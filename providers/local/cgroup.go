package local

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/engine"
)

// A host step runs in a cgroup v2 of its own where the machine allows it
// (docs/host.md, "Host steps end whole"): every process the step
// starts stays in it, whatever it does to its session, process group or
// environment, so the step's end (and a kill -9 of xmode, through a
// watcher) ends all of them. Where no cgroup can be made, steps keep the
// process-group and Pdeathsig path.

// Containment methods (engine.Containment.Method).
const (
	MethodCgroup       = "cgroup"
	MethodProcessGroup = "process-group"
)

// cgroupPrefix names a step's cgroup: cgroupPrefix + the step's tag.
const cgroupPrefix = "xmode-step-"

// cgroupMounts are where a cgroup v2 hierarchy is looked for: the whole of
// /sys/fs/cgroup on a pure v2 machine, else the unified hierarchy of the
// hybrid layout.
var cgroupMounts = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}

// cgroupParent finds where this process may make step cgroups: as a child
// of its own cgroup in the v2 hierarchy, which it must be allowed to move
// processes in (the common ancestor of where a step is started from and
// where it goes). It returns the hierarchy's mount, the parent directory,
// or why there is none.
func cgroupParent() (mount, parent string, err error) {
	for _, m := range cgroupMounts {
		var st unix.Statfs_t
		if unix.Statfs(m, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			mount = m
			break
		}
	}
	if mount == "" {
		return "", "", fmt.Errorf("no cgroup v2 hierarchy at %s", strings.Join(cgroupMounts, " or "))
	}
	own, err := ownCgroup()
	if err != nil {
		return mount, "", err
	}
	parent = filepath.Join(mount, own)
	if err := unix.Access(filepath.Join(parent, "cgroup.procs"), unix.W_OK); err != nil {
		return mount, "", fmt.Errorf("no permission to move processes in %s (%v)", parent, err)
	}
	return mount, parent, nil
}

// ownCgroup is this process's cgroup in the v2 hierarchy ("0::/path" in
// /proc/self/cgroup).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && strings.HasPrefix(p, "/") {
			if strings.Contains(p, "..") || strings.HasSuffix(p, " (deleted)") {
				break
			}
			return filepath.Clean(p), nil
		}
	}
	return "", errors.New("this process is in no cgroup of the v2 hierarchy")
}

// cgroupName is the directory name of a step's cgroup: its tag when the tag
// is a plain word (sandbox.Exec's are hex), else a digest of it, so that
// KillStep finds it from the tag alone; a random one for a step without a
// tag.
func cgroupName(tag string) string {
	switch {
	case tag == "":
		var b [8]byte
		_, _ = rand.Read(b[:])
		return cgroupPrefix + hex.EncodeToString(b[:])
	case len(tag) <= 64 && strings.Trim(tag, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-") == "":
		return cgroupPrefix + tag
	}
	sum := sha256.Sum256([]byte(tag))
	return cgroupPrefix + hex.EncodeToString(sum[:8])
}

// stepCgroup is one step's cgroup, open for clone3 (SysProcAttr.CgroupFD).
type stepCgroup struct {
	dir   string
	fd    *os.File
	mu    sync.Mutex
	timer *time.Timer
	ended bool
	// hold is the write end of the watcher's pipe: when it closes (xmode
	// ends, however it ends), the watcher ends the cgroup.
	hold *os.File
}

// newStepCgroup makes the step's cgroup under parent.
func newStepCgroup(parent, name string) (*stepCgroup, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make cgroup %s: %w", dir, err)
	}
	fd, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return &stepCgroup{dir: dir, fd: fd}, nil
}

// watchScript ends a step's cgroup ($1) once its standard input reaches
// EOF: when the xmode that holds the other end is gone. A cgroup already
// removed (the step ended normally) leaves it nothing to do. Kernels
// before 5.14 have no cgroup.kill: each process is KILLed then.
const watchScript = `read -r _
i=0
while [ -d "$1" ] && [ "$i" -lt 300 ]; do
	{ echo 1 > "$1/cgroup.kill"; } 2>/dev/null || while read -r p; do kill -9 "$p"; done < "$1/cgroup.procs"
	rmdir "$1" 2>/dev/null || sleep 0.1
	i=$((i+1))
done`

// watchDelay is how long a step runs before its watcher starts. The
// watcher costs a process (~1.5 ms of CPU, and as much of an exec's wall
// time when it starts with the step); most short steps end before it would
// matter. A kill -9 of xmode within a step's first watchDelay leaves its
// escaped processes to the reaper, which ends the cgroup by the step's tag.
const watchDelay = 50 * time.Millisecond

// watchLater starts the watcher after watchDelay, unless the step has
// ended by then.
func (c *stepCgroup) watchLater() {
	c.timer = time.AfterFunc(watchDelay, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.ended {
			_ = c.watch()
		}
	})
}

// watch starts the watcher: a shell in a session of its own (a terminal's
// signals do not reach it), outside the step's cgroup, reading a pipe whose
// only writer is this process.
func (c *stepCgroup) watch() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", "-c", watchScript, "xmode-watch", c.dir)
	cmd.Stdin = r
	cmd.Env = []string{"PATH=" + defaultPath}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return err
	}
	c.hold = w
	go func() { _ = cmd.Wait() }()
	return nil
}

// end ends every process left in the cgroup and removes it; the watcher,
// if it started, then finds nothing to do. A cgroup with only zombies
// counts as empty.
func (c *stepCgroup) end() error {
	c.mu.Lock()
	c.ended = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	err := endCgroup(c.dir)
	c.fd.Close()
	c.mu.Lock()
	if c.hold != nil {
		c.hold.Close()
	}
	c.mu.Unlock()
	return err
}

// endCgroup KILLs every process of a cgroup and removes it; one already
// gone is success.
func endCgroup(dir string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of cgroup %s survived KILL", dir)
		}
		killCgroup(dir)
		waitEmpty(dir, 100*time.Millisecond)
	}
}

// killCgroup KILLs every process of the cgroup: at once through
// cgroup.kill, else one by one from cgroup.procs.
func killCgroup(dir string) {
	if os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) == nil {
		return
	}
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// signalCgroup sends sig to every process of the cgroup (cgroup v2 has no
// way to signal them all at once but cgroup.kill, which only KILLs). A
// process forked while the list is read is caught by the KILL that
// follows the grace period.
func signalCgroup(dir string, sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		killCgroup(dir)
		return
	}
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// waitEmpty waits up to d for the cgroup's "populated 0", as the kernel
// reports it in cgroup.events (a change wakes poll with POLLPRI).
func waitEmpty(dir string, d time.Duration) {
	f, err := os.Open(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return
	}
	defer f.Close()
	deadline := time.Now().Add(d)
	buf := make([]byte, 256)
	for {
		n, err := f.ReadAt(buf, 0)
		if n == 0 && err != nil || bytes.Contains(buf[:n], []byte("populated 0")) {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI}}
		_, _ = unix.Poll(fds, int(left/time.Millisecond)+1)
	}
}

// findCgroup looks for a step's cgroup by name: first under parent (where
// this process makes them), then anywhere in the hierarchy (the step's
// xmode may have run in another cgroup), a few levels deep.
func findCgroup(mount, parent, name string) string {
	if parent != "" {
		if st, err := os.Stat(filepath.Join(parent, name)); err == nil && st.IsDir() {
			return filepath.Join(parent, name)
		}
	}
	if mount == "" {
		return ""
	}
	found := ""
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if found != "" || depth > 12 {
			return
		}
		f, err := os.Open(dir)
		if err != nil {
			return
		}
		ents, _ := f.ReadDir(-1)
		f.Close()
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			if e.Name() == name {
				found = filepath.Join(dir, name)
				return
			}
			walk(filepath.Join(dir, e.Name()), depth+1)
		}
	}
	walk(mount, 0)
	return found
}

// findParent finds, once, where this Provider makes step cgroups.
func (p *Provider) findParent() {
	p.cgOnce.Do(func() {
		if p.noCgroup {
			p.cgWhy = "XMODE_HOST_CGROUP=off"
			return
		}
		var err error
		p.cgMount, p.cgParent, err = cgroupParent()
		if err != nil {
			p.cgWhy = err.Error()
		}
	})
}

// stepCgroup makes the cgroup of a step about to start, or returns nil when
// steps run without one (the reason is kept for Containment).
func (p *Provider) stepCgroup(tag string) *stepCgroup {
	p.findParent()
	p.cgMu.Lock()
	parent := p.cgParent
	p.cgMu.Unlock()
	if parent == "" {
		return nil
	}
	cg, err := newStepCgroup(parent, cgroupName(tag))
	if err != nil {
		p.noCgroups(err)
		return nil
	}
	return cg
}

// noCgroups makes this Provider's later steps run without a cgroup: one
// could not be made or used.
func (p *Provider) noCgroups(why error) {
	p.cgMu.Lock()
	defer p.cgMu.Unlock()
	p.cgParent, p.cgWhy = "", why.Error()
}

// Containment says how this Provider keeps a step's processes together
// (engine.StepContainer): it makes and removes a probe cgroup to be sure.
func (p *Provider) Containment() engine.Containment {
	p.findParent()
	p.cgMu.Lock()
	parent, why := p.cgParent, p.cgWhy
	p.cgMu.Unlock()
	if parent != "" {
		cg, err := newStepCgroup(parent, cgroupName(""))
		if err == nil {
			cg.fd.Close()
			err = endCgroup(cg.dir)
		}
		if err == nil {
			return engine.Containment{
				Method: MethodCgroup,
				Detail: "each step runs in a cgroup of its own under " + parent + ": all its processes end with it (setsid or not), and a watcher ends them if xmode is killed",
			}
		}
		why = err.Error()
	}
	return engine.Containment{
		Method: MethodProcessGroup,
		Detail: "each step runs in a process group of its own, its leader dying with xmode (Pdeathsig): a process that leaves the group (setsid) outlives a kill -9 of xmode until `xmode reap` ends it by its tag (no cgroup: " + why + ")",
		Fix:    "mount a cgroup v2 hierarchy (/sys/fs/cgroup, or /sys/fs/cgroup/unified), run xmode where it may make child cgroups of its own (a delegated systemd scope: systemd-run --user --scope -p Delegate=yes), or unset XMODE_HOST_CGROUP=off",
		Weak:   true,
	}
}
