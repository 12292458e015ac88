package docker

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/providers/internal/stepshell"
)

// Nothing a step starts outlives it (docs/docker.md, "When a step ends"):
// these steps leave processes that cleared their environment (no tag) and
// started sessions of their own, and each test checks what they could do
// to later steps had they survived.

// running lists the container's processes whose command line starts with what,
// as the daemon sees them (no process in the container).
func (e *tenv) running(sb engine.Sandbox, what string) []string {
	e.t.Helper()
	top, err := e.cli.ContainerTop(context.Background(), sb.ContainerID, []string{"-o", "pid,stat,args"})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, row := range top.Processes {
		if len(row) == 3 && strings.HasPrefix(row[2], what) && !strings.HasPrefix(row[1], "Z") {
			out = append(out, strings.Join(row, " "))
		}
	}
	return out
}

// escape is shell that starts script as a step's process that escaped
// everything a tag or a session could find: a session of its own, an empty
// environment, no file of the step's open. The step goes on once it has.
func escape(script string) string {
	return "rm -f escaped; setsid env -i sh -c 'touch escaped; " + strings.ReplaceAll(script, "'", `'\''`) +
		"' >/dev/null 2>&1 </dev/null &\nuntil [ -e escaped ]; do :; done\n"
}

// waitFor polls cond until it holds or d has passed, and reports whether it
// held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// A process that left the step's session and cleared its environment
// (`setsid env -i`) ends with the step.
func TestUntaggedProcessEndsWithItsStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	sb := e.provision()
	r := e.run(sb, escape("sleep 300")+"echo started")
	if r.err != nil || r.st != (engine.Status{}) || strings.TrimSpace(r.stdout) != "started" {
		t.Fatalf("status %+v err %v stdout %q stderr %q", r.st, r.err, r.stdout, r.stderr)
	}
	if left := e.running(sb, "sleep 300"); len(left) > 0 {
		t.Fatalf("the step's processes outlived it: %q", left)
	}
	// Its leftovers were ended, not the session: the keep-alive runs on.
	if got := e.ok(sb, "echo still"); got != "still" {
		t.Fatalf("the next step: %q", got)
	}
}

// An orphan that keeps forking while the step's sweep runs is still ended:
// the sweep repeats until it finds nothing.
func TestForkingOrphanEndsWithItsStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	sb := e.provision()
	e.ok(sb, escape("while :; do (setsid sleep 301 &); done")+
		"until [ \"$(ps -o args | grep -c '^sleep 301')\" -gt 3 ]; do :; done; echo forking")
	if left := e.running(sb, "sleep 301"); len(left) > 0 {
		t.Fatalf("%d processes of the step outlived it: %q", len(left), left)
	}
	if left := e.running(sb, "while :"); len(left) > 0 {
		t.Fatalf("the forking orphan outlived its step: %q", left)
	}
}

// An orphan of one step that would read the next step's environment (its
// secrets) from /proc is gone before the next step starts.
func TestNextStepSecretDoesNotLeak(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	sb := e.provision()
	e.ok(sb, escape(`while :; do
	for f in /proc/[0-9]*/environ; do
		if tr "\0" "\n" < $f | grep MY_TOKEN= > found; then mv found leak; exit; fi
	done
done`)+"echo planted")
	const secret = "s3cret-value-of-step-2"
	// Step 2 carries the secret and gives a surviving orphan 3 s to find it.
	e.ok(sb, "i=0; while [ ! -e leak ] && [ $i -lt 60 ]; do sleep 0.05; i=$((i+1)); done; echo waited",
		func(r *engine.ExecRequest) { r.Env = []string{"MY_TOKEN=" + secret} })
	err := filepath.WalkDir(sb.Worktree, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
			t.Errorf("step 2's secret reached the worktree: %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// An orphan that sets setuid and setgid bits on a file and a directory once
// its step is over (after the strip) is gone before it can.
func TestLateSetuidBitsDoNotAppear(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	sb := e.provision()
	e.ok(sb, "cp /bin/sh f && mkdir d\n"+escape(`while [ ! -e go ]; do sleep 0.02; done
chmod 6755 f d && touch did`)+"echo planted")
	// The step is over and its strip done: now the orphan may act.
	if err := os.WriteFile(filepath.Join(sb.Worktree, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if waitFor(3*time.Second, func() bool { _, err := os.Lstat(filepath.Join(sb.Worktree, "did")); return err == nil }) {
		t.Error("the step's orphan acted after the step")
	}
	for _, f := range []string{"f", "d"} {
		st, err := os.Lstat(filepath.Join(sb.Worktree, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s is %v on the host after the step", f, st.Mode())
		}
	}
}

// Another step that is still running keeps its processes when a step ends:
// those in its session, those below its wrapper in sessions of their own,
// and a daemon that left both but carries its tag.
func TestLiveStepSurvivesAnotherStepsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	sb := e.provision()
	tag := stepshell.Tag("")
	done := make(chan execResult, 1)
	go func() {
		done <- e.run(sb, `sleep 302 &
setsid sh -c 'sleep 303' &
(setsid sleep 304 &)
touch up; wait`, func(r *engine.ExecRequest) { r.Tag = tag })
	}()
	all := func() bool {
		return len(e.running(sb, "sleep 302")) == 1 && len(e.running(sb, "sleep 303")) == 1 && len(e.running(sb, "sleep 304")) == 1
	}
	if !waitFor(20*time.Second, func() bool { _, err := os.Lstat(filepath.Join(sb.Worktree, "up")); return err == nil }) || !waitFor(5*time.Second, all) {
		t.Fatal("the long step never started its processes")
	}
	e.ok(sb, escape("sleep 305")+"echo short")
	if !all() {
		t.Errorf("another step's end hurt the running step: %q %q %q", e.running(sb, "sleep 302"), e.running(sb, "sleep 303"), e.running(sb, "sleep 304"))
	}
	if left := e.running(sb, "sleep 305"); len(left) > 0 {
		t.Errorf("the short step's orphan outlived it: %q", left)
	}
	// Ending the long step ends all of it.
	select {
	case <-done:
		t.Fatal("the long step ended early")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.p.KillStep(ctx, sb, tag); err != nil {
		t.Fatal(err)
	}
	<-done
	for _, s := range []string{"sleep 302", "sleep 303", "sleep 304"} {
		if left := e.running(sb, s); len(left) > 0 {
			t.Errorf("%s outlived its step: %q", s, left)
		}
	}
}
