package docker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// Every flag of a volume-mode sandbox reached the daemon (docs/docker.md,
// "Hardening"; CIS Docker Benchmark section 5; docs/docker.md maps each item
// to these checks).
func TestVolumeModeFlagsReachDaemon(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, map[string]string{
		"XMODE_SANDBOX_CPUS":          "1.5",
		"XMODE_SANDBOX_MEMORY":        "256m",
		"XMODE_SANDBOX_PIDS_LIMIT":    "128",
		"XMODE_SANDBOX_TMPFS":         "/tmp:rw,nosuid,nodev,size=64m",
		"XMODE_SANDBOX_NETWORK":       "none",
		"XMODE_SANDBOX_READONLY_ROOT": "1",
	})
	spec := e.spec(newRun())
	if err := os.Chown(spec.Worktree, 1234, 2345); err != nil {
		t.Fatal(err)
	}
	sb := e.provisionSpec(spec)
	if sb.Engine != "docker" || sb.MountMode != MountVolume || sb.Image != e.cfg.Image ||
		sb.RunID != spec.RunID || sb.SessionID != spec.SessionID || sb.Project != "proj" || sb.Worktree != spec.Worktree || sb.ContainerID == "" {
		t.Errorf("Provision returned %+v", sb)
	}
	ci, err := e.cli.ContainerInspect(context.Background(), sb.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	hc := ci.HostConfig
	check := func(what string, ok bool, got any) {
		t.Helper()
		if !ok {
			t.Errorf("%s: got %v", what, got)
		}
	}
	check("name xmode-<session>", ci.Name == "/xmode-"+spec.SessionID, ci.Name)
	for k, v := range spec.Labels {
		check("label "+k, ci.Config.Labels[k] == v, ci.Config.Labels)
	}
	img, err := e.cli.ImageInspect(context.Background(), sb.Image)
	if err != nil {
		t.Fatal(err)
	}
	union := map[string]bool{}
	for k := range spec.Labels {
		union[k] = true
	}
	for k := range img.Config.Labels {
		union[k] = true
	}
	check("no labels beyond the caller's (and the image's)", len(ci.Config.Labels) == len(union), ci.Config.Labels)
	check("Init (5.x: an init reaps zombies)", hc.Init != nil && *hc.Init, hc.Init)
	check("running", ci.State.Running, ci.State)
	check("NanoCPUs (5.12)", hc.NanoCPUs == 1_500_000_000, hc.NanoCPUs)
	check("Memory (5.11)", hc.Memory == 256<<20, hc.Memory)
	check("MemorySwap = Memory", hc.MemorySwap == 256<<20, hc.MemorySwap)
	check("PidsLimit (5.29)", hc.PidsLimit != nil && *hc.PidsLimit == 128, hc.PidsLimit)
	check("Tmpfs /tmp, 1777 and the sandbox user's", hc.Tmpfs["/tmp"] == "rw,nosuid,nodev,size=64m,mode=1777,uid=1234,gid=2345", hc.Tmpfs)
	check("NetworkMode none (5.10, 5.30)", hc.NetworkMode == "none", hc.NetworkMode)
	check("CapDrop ALL (5.4)", slices.Equal(hc.CapDrop, []string{"ALL"}), hc.CapDrop)
	check("no CapAdd", len(hc.CapAdd) == 0, hc.CapAdd)
	check("no-new-privileges (5.26)", slices.Contains(hc.SecurityOpt, "no-new-privileges"), hc.SecurityOpt)
	check("seccomp not disabled (5.22)", !slices.ContainsFunc(hc.SecurityOpt, func(s string) bool { return strings.Contains(s, "unconfined") }), hc.SecurityOpt)
	check("ReadonlyRootfs (5.13)", hc.ReadonlyRootfs, hc.ReadonlyRootfs)
	check("User = worktree owner", ci.Config.User == "1234:2345", ci.Config.User)
	check("Ulimits nofile (5.19)", len(hc.Ulimits) == 1 && hc.Ulimits[0].Name == "nofile" && hc.Ulimits[0].Soft == NofileSoft && hc.Ulimits[0].Hard == NofileHard, hc.Ulimits)
	check("no restart policy (5.15)", hc.RestartPolicy.Name == "no" || hc.RestartPolicy.Name == "", hc.RestartPolicy)
	check("not privileged (5.5)", !hc.Privileged, hc.Privileged)
	check("pid namespace not host (5.16)", hc.PidMode == "", hc.PidMode)
	check("ipc namespace private (5.17)", hc.IpcMode == "private", hc.IpcMode)
	check("uts namespace not host (5.21)", hc.UTSMode == "", hc.UTSMode)
	check("userns not host (5.31)", hc.UsernsMode == "", hc.UsernsMode)
	check("no devices (5.18)", len(hc.Devices) == 0, hc.Devices)
	check("no cgroup parent (5.25)", hc.CgroupParent == "", hc.CgroupParent)
	check("no published ports", len(hc.PortBindings) == 0 && !hc.PublishAllPorts, hc.PortBindings)
	check("no binds", len(hc.Binds) == 0, hc.Binds)
	check("workdir", ci.Config.WorkingDir == StorageMountForTests+"/runs/"+spec.RunID+"/worktree", ci.Config.WorkingDir)
	// 5.6 / 5.32: the only mount is the run's worktree; no docker socket.
	check("one mount", len(ci.Mounts) == 1, ci.Mounts)
	for _, m := range ci.Mounts {
		check("mount target is the worktree", m.Destination == ci.Config.WorkingDir, m)
		check("mount source is the run's worktree in the volume", strings.HasSuffix(m.Source, "/runs/"+spec.RunID+"/worktree"), m.Source)
		check("no docker socket", !strings.Contains(m.Source, "docker.sock") && !strings.Contains(m.Destination, "docker.sock"), m)
	}
}

// Bind mode keeps the historical lightweight argv: no limits, no hardening.
func TestBindModeIsLightweight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	spec := e.spec(newRun())
	sb := e.provisionSpec(spec)
	if sb.MountMode != MountBind {
		t.Errorf("MountMode %q", sb.MountMode)
	}
	ci, err := e.cli.ContainerInspect(context.Background(), sb.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	hc := ci.HostConfig
	if hc.Memory != 0 || hc.NanoCPUs != 0 || hc.PidsLimit != nil && *hc.PidsLimit > 0 || len(hc.CapDrop) != 0 || hc.ReadonlyRootfs || len(hc.SecurityOpt) != 0 {
		t.Errorf("bind mode carries limits or hardening: %+v", hc.Resources)
	}
	if hc.Init == nil || !*hc.Init || ci.Config.WorkingDir != BindWorkspace || ci.Name != "/xmode-"+spec.SessionID {
		t.Errorf("init %v workdir %q name %q", hc.Init, ci.Config.WorkingDir, ci.Name)
	}
	if len(ci.Mounts) != 1 || ci.Mounts[0].Type != mount.TypeBind || ci.Mounts[0].Source != spec.Worktree || ci.Mounts[0].Destination != BindWorkspace {
		t.Errorf("mounts %+v, want only %s:%s", ci.Mounts, spec.Worktree, BindWorkspace)
	}
	// The worktree is shared both ways.
	if err := os.WriteFile(filepath.Join(spec.Worktree, "from-host"), []byte("h"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := e.ok(sb, "cat from-host; echo c > from-sandbox; pwd"); got != "h\n/workspace" && got != "h/workspace" && !strings.HasSuffix(got, "/workspace") {
		t.Errorf("got %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(spec.Worktree, "from-sandbox")); err != nil || string(b) != "c\n" {
		t.Errorf("from-sandbox: %q %v", b, err)
	}
}

// The limits and the hardening bite (each one, in a real sandbox).
func TestHardeningBites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, map[string]string{
		"XMODE_SANDBOX_MEMORY":        "32m",
		"XMODE_SANDBOX_PIDS_LIMIT":    "64",
		"XMODE_SANDBOX_READONLY_ROOT": "1",
	})
	sb := e.provision()

	t.Run("OOMKilled", func(t *testing.T) {
		// dd allocates its 64 MiB buffer: the memory cgroup kills it.
		r := e.run(sb, "echo before; exec dd if=/dev/zero of=/dev/null bs=64M count=1")
		want := engine.Status{ExitCode: 137, Signal: "SIGKILL", OOMKilled: true}
		if r.err != nil || r.st != want {
			t.Fatalf("memory hog: status %+v err %v, want %+v\nstderr: %s", r.st, r.err, want, r.stderr)
		}
		// A plain KILL is not an OOM kill.
		r = e.run(sb, "kill -KILL $$")
		if r.st != (engine.Status{ExitCode: 137, Signal: "SIGKILL"}) {
			t.Errorf("kill -KILL: status %+v, want 137 without OOMKilled", r.st)
		}
		e.ok(sb, "true")
	})

	t.Run("PidsLimitStopsForkBomb", func(t *testing.T) {
		// A bomb that never ends on its own: processes that stay, forking
		// until the limit says no. It must time out, and the session must
		// work afterwards.
		start := time.Now()
		r := e.run(sb, `awk 'BEGIN { while (1) system("sleep 60 &") }'`, withTimeout(3*time.Second))
		if r.err != nil || r.st.ExitCode != 124 || !r.st.TimedOut {
			t.Fatalf("fork bomb: status %+v err %v, want a timeout", r.st, r.err)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("ending the fork bomb took %v", took)
		}
		t.Logf("fork bomb ended after %v; warnings: %s", time.Since(start), e.warnings)
		// A bomb that ends by itself: it hits the limit, then its leader exits
		// and leaves the processes it made behind.
		// (busybox sh gives up at the first failed fork; the count uses
		// builtins only: there is no process left to spare.)
		r = e.run(sb, `(i=0; while [ $i -lt 150 ]; do sleep 60 & i=$((i+1)); done) 2>/dev/null; n=0; for d in /proc/[0-9]*; do n=$((n+1)); done; echo $n`)
		if r.err != nil || r.st.ExitCode != 0 {
			t.Fatalf("bounded bomb: %+v %v %s", r.st, r.err, r.stderr)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(r.stdout))
		if n == 0 || n > 64 {
			t.Errorf("processes in the sandbox at the peak: %d, want at most the pids limit 64", n)
		}
		if got := e.ok(sb, "echo alive; ls -d /proc/[0-9]* | wc -l"); !strings.HasPrefix(got, "alive") {
			t.Errorf("the session after the bomb: %q", got)
		} else if procs, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(got, "alive"))); procs > 10 {
			t.Errorf("%d processes left in the sandbox after the bomb's step ended", procs)
		}
	})

	t.Run("NoNetwork", func(t *testing.T) {
		got := e.ok(sb, "ip route; cat /proc/net/route | tail -n +2; ls /sys/class/net")
		if got != "lo" {
			t.Errorf("network none: routes and interfaces %q, want only lo", got)
		}
	})

	t.Run("ReadOnlyRoot", func(t *testing.T) {
		r := e.run(sb, "touch /rootfile")
		if r.err != nil || r.st.ExitCode == 0 || !strings.Contains(strings.ToLower(r.stderr), "read-only") {
			t.Errorf("write to /: status %+v err %v stderr %q, want a read-only failure", r.st, r.err, r.stderr)
		}
		e.ok(sb, "echo w > in-worktree && cat in-worktree && echo t > /tmp/t && cat /tmp/t")
	})

	t.Run("NoCapabilities", func(t *testing.T) {
		got := e.ok(sb, "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status")
		for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(got, want) {
				t.Errorf("/proc/self/status: %q lacks %q", got, want)
			}
		}
	})

	t.Run("Ulimit", func(t *testing.T) {
		got := e.ok(sb, "grep 'open files' /proc/self/limits")
		if f := strings.Fields(got); len(f) < 5 || f[3] != strconv.Itoa(NofileSoft) || f[4] != strconv.Itoa(NofileHard) {
			t.Errorf("nofile: %q, want soft %d hard %d", got, NofileSoft, NofileHard)
		}
	})

	t.Run("CgroupLimits", func(t *testing.T) {
		// What the kernel enforces (cgroup v1 here, v2 elsewhere).
		got := e.ok(sb, `for f in cpu/cpu.cfs_quota_us cpu,cpuacct/cpu.cfs_quota_us cpu.max memory/memory.limit_in_bytes memory.max pids/pids.max pids.max; do
			[ -r /sys/fs/cgroup/$f ] && echo "$f=$(cat /sys/fs/cgroup/$f)"; done; true`)
		for _, want := range [][]string{{"cpu.cfs_quota_us=200000", "cpu.max=200000 100000"}, {"limit_in_bytes=33554432", "memory.max=33554432"}, {"pids.max=64"}} {
			found := false
			for _, w := range want {
				found = found || strings.Contains(got, w)
			}
			if !found {
				t.Errorf("cgroup limits %q lack %v", got, want)
			}
		}
	})

	t.Run("NoDockerSocket", func(t *testing.T) {
		e.ok(sb, "! test -e /var/run/docker.sock && ! test -e /run/docker.sock && ! grep -q docker.sock /proc/mounts")
	})
}

// A volume-mode sandbox sees its own worktree and /tmp only: not another
// run's worktree, not the evidence, not xmode.db.
func TestIsolationBetweenSandboxes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	m, detail, err := e.p.IsolationMethod(context.Background())
	if err != nil || m != IsolationMountpoint {
		t.Fatalf("IsolationMethod = %q (%s) %v; on Engine API < 1.45 with a local volume want %q", m, detail, err, IsolationMountpoint)
	}
	t.Logf("isolation: %s: %s", m, detail)
	mine, other := newRun(), newRun()
	write := func(rel, s string) {
		p := filepath.Join(e.root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("xmode.db", "token-db-"+other)
	write("runs/"+other+"/worktree/secret.txt", "other's secret")
	write("runs/"+mine+"/steps/0001-build/stdout.log", "token-evidence-"+other)
	write("runs/"+mine+"/worktree/mine.txt", "mine")
	sbMine := e.provisionSpec(e.specFor(mine))
	sbOther := e.provisionSpec(e.specFor(other))

	mount := StorageMountForTests
	got := e.ok(sbMine, "cat mine.txt; echo; ls "+mount+"/runs; ls -a "+mount+"/runs/"+mine)
	if got != "mine\n"+mine+"\n.\n..\nworktree" {
		t.Errorf("the sandbox sees:\n%s\nwant its worktree only", got)
	}
	for _, p := range []string{mount + "/xmode.db", mount + "/runs/" + other, mount + "/runs/" + mine + "/steps"} {
		if r := e.run(sbMine, "test -e "+p); r.st.ExitCode == 0 {
			t.Errorf("%s is visible inside another run's sandbox", p)
		}
	}
	if r := e.run(sbMine, "for d in /*; do case $d in /proc|/sys|/dev|/bin) ;; *) grep -rls 'token-.*-"+other+"\\|other.s secret' $d;; esac; done"); r.stdout != "" {
		t.Errorf("the storage volume's other contents are readable: %s", r.stdout)
	}
	if got := e.ok(sbOther, "cat secret.txt"); got != "other's secret" {
		t.Errorf("the other sandbox sees %q", got)
	}
	if e.warnings.String() != "" {
		t.Errorf("warnings: %s", e.warnings)
	}
}

// Without subpaths or a local mountpoint the whole volume is mounted, and
// xmode says so loudly.
func TestWholeVolumeFallbackWarns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	e.p.isolationOverride = IsolationWholeVolume
	sb := e.provision()
	if !strings.Contains(e.warnings.String(), "WHOLE storage volume") {
		t.Errorf("no warning about the whole volume: %q", e.warnings)
	}
	if got := e.ok(sb, "pwd; ls "+StorageMountForTests); !strings.HasSuffix(strings.Split(got, "\n")[0], "/runs/"+sb.RunID+"/worktree") || !strings.Contains(got, "runs") {
		t.Errorf("whole-volume sandbox: %q", got)
	}
	ci, err := e.cli.ContainerInspect(context.Background(), sb.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ci.Mounts) != 1 || ci.Mounts[0].Type != mount.TypeVolume || ci.Mounts[0].Name != e.volume || ci.Mounts[0].Destination != StorageMountForTests {
		t.Errorf("mounts %+v", ci.Mounts)
	}
}

// Sandboxes run steps as the worktree's owner, or as XMODE_SANDBOX_USER
// when it is set, and never as root by default.
func TestSandboxUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	spec := e.spec(newRun())
	if err := os.Chown(spec.Worktree, 1500, 1600); err != nil {
		t.Fatal(err)
	}
	sb := e.provisionSpec(spec)
	if got := e.ok(sb, "id -u; id -g; echo x > owned; ls -n owned | awk '{print $3\":\"$4}'"); got != "1500\n1600\n1500:1600" {
		t.Errorf("steps run as %q, want the worktree owner 1500:1600 writing files it owns", got)
	}

	// XMODE_SANDBOX_USER gets the worktree: it can write its own checkout.
	e2 := newEnv(t, MountVolume, map[string]string{"XMODE_SANDBOX_USER": "4321:4321"})
	sb2 := e2.provision()
	if got := e2.ok(sb2, "id -u; echo x > mine && echo wrote"); got != "4321\nwrote" {
		t.Errorf("XMODE_SANDBOX_USER=4321:4321: %q, want steps as 4321 that can write the worktree", got)
	}

	// A root-owned worktree: never root, an unprivileged user that owns it
	// (bind mode too).
	for _, env := range []*tenv{e, newEnv(t, MountBind, nil)} {
		sb3 := env.provision()
		if got := env.ok(sb3, "id -u; echo x > mine && echo wrote"); got != "65532\nwrote" {
			t.Errorf("root-owned worktree (%s): %q, want steps as 65532 that can write", sb3.MountMode, got)
		}
	}
}

// A setuid or setgid bit a step sets never outlives the step on the host's
// filesystem, on a file or a directory (the worktree itself included); a
// directory keeps its sticky bit.
func TestSetuidBitsDoNotSurviveAStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	sb := e.provision()
	e.ok(sb, "cp /bin/sh ./suid && chmod 6755 ./suid && mkdir -p d && cp /bin/sh d/sgid && chmod 2755 d/sgid && "+
		"mkdir -p sd/inner && chmod 6755 sd && chmod 3777 sd/inner && chmod g+s . && ls -l suid")
	want := map[string]os.FileMode{
		".": os.ModeDir | 0o755, "suid": 0o755, "d/sgid": 0o755,
		"sd": os.ModeDir | 0o755, "sd/inner": os.ModeDir | os.ModeSticky | 0o777,
	}
	for f, mode := range want {
		st, err := os.Lstat(filepath.Join(sb.Worktree, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != mode {
			t.Errorf("%s is %v on the host after the step, want %v", f, st.Mode(), mode)
		}
	}
}

// The hardened /tmp is writable by the sandbox user (65532 here) in an
// image whose /tmp is 0755: docker would give the tmpfs that mode, and runc
// before 1.1.8 does so over mode= too. A mode the user sets stays theirs.
func TestTmpfsWritableInAnImageWithTmp0755(t *testing.T) {
	t.Parallel()
	img := dockertest.ImageTmp0755(t)
	e := newEnv(t, MountVolume, map[string]string{"XMODE_SANDBOX_IMAGE": img})
	sb := e.provision()
	if got := e.ok(sb, "id -u; touch /tmp/x && echo wrote"); got != "65532\nwrote" {
		t.Errorf("/tmp in an image whose /tmp is 0755: %q, want 65532 writing it", got)
	}
	if got := tmpfsOptions("rw,size=1m,mode=0700", "65532:65532"); got != "rw,size=1m,mode=0700,uid=65532,gid=65532" {
		t.Errorf("a mode the user set: %q", got)
	}
	if got := tmpfsOptions("rw,uid=1000", "65532:65532"); got != "rw,uid=1000,mode=1777" {
		t.Errorf("an owner the user set: %q", got)
	}
	if got := tmpfsOptions("rw", "0:0"); got != "rw,mode=1777" {
		t.Errorf("root: %q", got)
	}
}

// Bind mode without hardening keeps the image's own /tmp (no tmpfs), and
// still gives the sandbox user (65532 here) a /tmp it can write in an image
// whose /tmp is 0755 root.
func TestBindTmpWritableInAnImageWithTmp0755(t *testing.T) {
	t.Parallel()
	img := dockertest.ImageTmp0755(t)
	e := newEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_IMAGE": img})
	sb := e.provision()
	if got := e.ok(sb, "id -u; touch /tmp/x && echo wrote"); got != "65532\nwrote" {
		t.Errorf("/tmp in bind mode, an image whose /tmp is 0755: %q, want 65532 writing it", got)
	}
	// Still the image's directory, not a tmpfs: bind mode applies no
	// limit it was not asked for.
	if got := e.ok(sb, "grep -c ' /tmp ' /proc/mounts || true"); got != "0" {
		t.Errorf("bind mode mounted something at /tmp: %q mounts", got)
	}
	if got := e.ok(sb, "stat -c %a /tmp"); got != "1777" {
		t.Errorf("/tmp's mode: %s, want 1777", got)
	}
}

func (e *tenv) specFor(run string) engine.Spec {
	s := e.spec(run)
	return s
}

// Concurrent steps share a container: ending one must leave the others be.
func TestTimeoutKillsOnlyItsOwnStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	sb := e.provision()
	// The other step runs from before the timed one starts until after it
	// was killed: it waits on a FIFO the test writes to at the end.
	e.ok(sb, "mkfifo gate")
	var started syncBuffer
	done := make(chan execResult, 1)
	go func() {
		done <- e.run(sb, "echo started; read x < gate; echo survived", func(r *engine.ExecRequest) { r.Stdout = &started })
	}()
	if !waitFor(30*time.Second, func() bool { return strings.Contains(started.String(), "started") }) {
		t.Fatal("the first step never started")
	}
	r := e.run(sb, "sleep 30 & sleep 30", withTimeout(300*time.Millisecond))
	if !r.st.TimedOut {
		t.Errorf("timed step: %+v", r.st)
	}
	e.ok(sb, "echo go > gate")
	other := <-done
	if other.st != (engine.Status{}) || started.String() != "started\nsurvived\n" {
		t.Errorf("the concurrent step was hurt: %+v %q %q", other.st, started.String(), other.stderr)
	}
	// Nothing of the timed-out step is left, the keep-alive is.
	if got := e.ok(sb, "ps -o comm | grep -c sleep"); got != "1" {
		t.Errorf("sleep processes left: %s (want only the keep-alive)", got)
	}
}

// A session whose container stopped (daemon restart) comes back on the next
// step; one whose container is gone gives a clear error.
func TestExecRevivesStoppedContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	sb := e.provision()
	ctx := context.Background()
	zero := 0
	if err := e.cli.ContainerStop(ctx, sb.ContainerID, container.StopOptions{Timeout: &zero}); err != nil {
		t.Fatal(err)
	}
	if got := e.ok(sb, "echo back"); got != "back" {
		t.Errorf("got %q", got)
	}
	if !strings.Contains(e.warnings.String(), "had stopped") {
		t.Errorf("no warning about the restart: %q", e.warnings)
	}
	if err := e.cli.ContainerRemove(ctx, sb.ContainerID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	r := e.run(sb, "true")
	if r.err == nil || !strings.Contains(r.err.Error(), "gone") {
		t.Errorf("exec in a removed container: %+v %v", r.st, r.err)
	}
}

// A process that escapes both the step's session and its tag (a cleared
// environment and a new session) while holding the output open ends with
// the step, and Exec returns.
func TestEscapedProcessDoesNotHangExec(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	sb := e.provision()
	r := e.run(sb, "env -i setsid sleep 31 & echo done")
	if r.err != nil || r.st != (engine.Status{}) || strings.TrimSpace(r.stdout) != "done" {
		t.Errorf("status %+v err %v stdout %q", r.st, r.err, r.stdout)
	}
	if r.took > 10*time.Second {
		t.Errorf("Exec took %v", r.took)
	}
	if left := e.running(sb, "sleep 31"); len(left) > 0 {
		t.Errorf("the escaped process outlived its step: %q", left)
	}
	t.Logf("returned after %v; warnings: %q", r.took, e.warnings)
}

// A deadline that comes before the step is even running still ends it,
// without restarting the container.
func TestTinyTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	sb := e.provision()
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, 20 * time.Millisecond} {
		r := e.run(sb, "sleep 30", withTimeout(d))
		if r.err != nil || !r.st.TimedOut || r.took > 8*time.Second {
			t.Errorf("timeout %v: %+v %v after %v", d, r.st, r.err, r.took)
		}
	}
	if e.warnings.String() != "" {
		t.Errorf("warnings: %s", e.warnings)
	}
	if got := e.ok(sb, "ps -o comm | grep -c sleep"); got != "1" {
		t.Errorf("sleep processes left: %s", got)
	}
}

// A container that stops as soon as it starts is not a session: create
// fails, saying why, and leaves nothing behind.
func TestContainerThatDiesAtOnceFailsCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	e.p.keepAliveOverride = []string{"false"}
	spec := e.spec(newRun())
	sb, err := e.p.Provision(context.Background(), spec)
	if err == nil {
		// It died a moment after create looked: the first step says so
		// instead of starting it again and again.
		t.Cleanup(func() { e.p.Destroy(context.Background(), sb) })
		r := e.run(sb, "true")
		err = r.err
	} else if _, ierr := e.cli.ContainerInspect(context.Background(), ContainerName(spec.SessionID)); ierr == nil {
		t.Fatal("the dead container was left behind")
	}
	if err == nil || !strings.Contains(err.Error(), "stopped as soon as it started") {
		t.Fatalf("a keep-alive that exits at once: %v", err)
	}
}

// Bind mode keeps the lightweight argv, but applies a limit the user set
// explicitly, and all of them with XMODE_SANDBOX_BIND_HARDENED=1.
func TestBindModeAppliesWhatWasAskedFor(t *testing.T) {
	t.Parallel()
	inspect := func(e *tenv) *container.HostConfig {
		sb := e.provision()
		ci, err := e.cli.ContainerInspect(context.Background(), sb.ContainerID)
		if err != nil {
			t.Fatal(err)
		}
		return ci.HostConfig
	}
	plain := inspect(newEnv(t, MountBind, nil))
	if plain.NetworkMode == "none" || plain.Memory != 0 || len(plain.CapDrop) != 0 {
		t.Errorf("default bind mode applied limits: network %q memory %d capdrop %v", plain.NetworkMode, plain.Memory, plain.CapDrop)
	}
	asked := inspect(newEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_NETWORK": "none", "XMODE_SANDBOX_MEMORY": "256m"}))
	if asked.NetworkMode != "none" || asked.Memory != 256<<20 || asked.NanoCPUs != 0 {
		t.Errorf("explicit values in bind mode: network %q memory %d cpus %d; want none, 256m and the rest left", asked.NetworkMode, asked.Memory, asked.NanoCPUs)
	}
	hard := inspect(newEnv(t, MountBind, map[string]string{"XMODE_SANDBOX_BIND_HARDENED": "1"}))
	if hard.NetworkMode != "none" || hard.Memory == 0 || hard.PidsLimit == nil || len(hard.CapDrop) != 1 || len(hard.SecurityOpt) != 1 {
		t.Errorf("XMODE_SANDBOX_BIND_HARDENED=1: %+v", hard)
	}
}
