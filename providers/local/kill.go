package local

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xmode/xmode/engine"
)

// KillStep ends a step's processes: those that carry the step's tag in
// their environment, with their process groups — TERM (and CONT), then
// KILL after the grace period — and then everything left in the step's
// cgroup, wherever its xmode made it, whatever its processes did to their
// environment or session. The step's leader dies with the xmode that
// started it (Pdeathsig); this finds what the leader left behind.
func (p *Provider) KillStep(ctx context.Context, sb engine.Sandbox, tag string) error {
	return p.SignalStep(ctx, sb, tag, syscall.SIGTERM, engine.DefaultGrace)
}

// SignalStep is KillStep with the first signal and the grace period of the
// caller's choosing (engine.StepSignaler): `sandbox kill --signal INT`
// ends a step as Ctrl-C would, from another xmode.
func (p *Provider) SignalStep(ctx context.Context, _ engine.Sandbox, tag string, sig syscall.Signal, grace time.Duration) error {
	if tag == "" {
		return nil
	}
	if err := killTagged(ctx, tag, sig, grace); err != nil {
		return err
	}
	p.findParent()
	p.cgMu.Lock()
	mount, parent := p.cgMount, p.cgParent
	p.cgMu.Unlock()
	if dir := findCgroup(mount, parent, cgroupName(tag)); dir != "" {
		if err := endCgroup(dir); err != nil {
			return fmt.Errorf("host engine: %w", err)
		}
	}
	return nil
}

// killTagged ends the processes carrying the step's tag: sig and CONT,
// KILL to what is left after grace.
func killTagged(ctx context.Context, tag string, sig syscall.Signal, grace time.Duration) error {
	mark := []byte(engine.ExecTagEnv + "=" + tag)
	signal := func(sig syscall.Signal) int {
		n := 0
		self := syscall.Getpgrp()
		for _, p := range tagged(mark) {
			if pgid, err := syscall.Getpgid(p); err == nil && pgid > 1 && pgid != self {
				_ = syscall.Kill(-pgid, sig)
			}
			_ = syscall.Kill(p, sig)
			n++
		}
		return n
	}
	if signal(sig) == 0 {
		return nil
	}
	signal(syscall.SIGCONT)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && len(tagged(mark)) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	for range 10 {
		if signal(syscall.SIGKILL) == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	if left := tagged(mark); len(left) > 0 {
		return fmt.Errorf("host engine: processes %v of the step survived KILL", left)
	}
	return nil
}

// tagged lists the live (not zombie) processes whose environment holds
// mark, as far as /proc lets this user read them.
func tagged(mark []byte) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !hasEntry(env, mark) {
			continue
		}
		if st, err := os.ReadFile(d + "/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && strings.HasPrefix(string(st[i+1:]), " Z") {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}

// hasEntry reports whether the NUL-separated environment holds exactly the
// entry mark.
func hasEntry(env, mark []byte) bool {
	for _, e := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(e, mark) {
			return true
		}
	}
	return false
}
