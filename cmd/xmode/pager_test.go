package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no pseudo-terminal (/dev/ptmx: %v); CI=true requires one", err)
		}
		t.Skipf("SKIP: no /dev/ptmx (%v): the pager test needs a pseudo-terminal (with CI=true it fails)", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// On a terminal, `sandbox diff` and `cr show` go through the pager as git
// does ($PAGER, LESS=FRX unless set) and are coloured; NO_COLOR turns the
// colour off. (Not on a terminal they are never paged: cr.txt.)
func TestPagerAndColourOnATerminal(t *testing.T) {
	root, id := newSession(t)
	if out, err := xmode(t, root, "sandbox", "exec", id, "--", "sh", "-c", "echo changed >> README").CombinedOutput(); err != nil {
		t.Fatalf("exec: %v %s", err, out)
	}
	dir := t.TempDir()
	pager := filepath.Join(dir, "pager.sh")
	os.WriteFile(pager, []byte("#!/bin/sh\necho \"LESS=$LESS\" > "+dir+"/env\ncat > "+dir+"/paged\n"), 0o755)

	run := func(noColor bool, args ...string) string {
		t.Helper()
		_, slave := openPTY(t)
		os.Remove(filepath.Join(dir, "paged"))
		c := xmode(t, root, args...)
		c.Env = append(c.Env, "PAGER="+pager, "LESS=")
		if !noColor {
			env := c.Env[:0:0]
			for _, kv := range c.Env {
				if !strings.HasPrefix(kv, "NO_COLOR=") {
					env = append(env, kv)
				}
			}
			c.Env = append(env, "TERM=xterm")
		}
		var stderr bytes.Buffer
		c.Stdout, c.Stderr = slave, &stderr
		if err := c.Run(); err != nil {
			t.Fatalf("%v: %v %s", args, err, stderr.String())
		}
		b, err := os.ReadFile(filepath.Join(dir, "paged"))
		if err != nil {
			t.Fatalf("%v on a terminal did not run the pager", args)
		}
		if env, _ := os.ReadFile(filepath.Join(dir, "env")); strings.TrimSpace(string(env)) != "LESS=FRX" {
			t.Fatalf("pager environment %q, want LESS=FRX", env)
		}
		return string(b)
	}
	out := run(false, "sandbox", "diff", id)
	if !strings.Contains(out, "\x1b[32m+changed") || !strings.Contains(out, "\x1b[1mdiff --git a/README b/README") {
		t.Fatalf("coloured diff through the pager:\n%q", out)
	}
	out = run(true, "sandbox", "diff", id)
	if strings.Contains(out, "\x1b[") || !strings.Contains(out, "+changed") {
		t.Fatalf("NO_COLOR diff through the pager:\n%q", out)
	}
	crOut, err := xmode(t, root, "cr", "create", id, "-q").Output()
	if err != nil {
		t.Fatal(err)
	}
	out = run(true, "cr", "show", strings.TrimSpace(string(crOut)), "--patch")
	if !strings.Contains(out, "Evidence: 1 of 1 steps passed") || !strings.Contains(out, "+changed") {
		t.Fatalf("cr show through the pager:\n%s", out)
	}
}
