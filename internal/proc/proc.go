// Package proc names processes so that another xmode process can tell
// later whether the one named has ended: reap claims and running steps
// record their owner this way.
package proc

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var (
	selfOnce sync.Once
	self     string
)

// Self names this process: "<pid>:<start>@<pid namespace>", start being
// its start time in clock ticks since boot (so a recycled PID is not taken
// for it) and the namespace telling whether a reader can see it at all.
func Self() string {
	selfOnce.Do(func() {
		pid := os.Getpid()
		start, _ := Start(pid)
		self = strconv.Itoa(pid) + ":" + start + "@" + namespace()
	})
	return self
}

// Gone reports whether the process a name (from Self) stands for has
// certainly ended. It says false when it cannot tell: a name from another
// PID namespace, or written where /proc was unreadable. A name it cannot
// parse is gone.
func Gone(name string) bool {
	name, ns, hasNS := strings.Cut(name, "@")
	pidStr, start, ok := strings.Cut(name, ":")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil || pid <= 0 {
		return true
	}
	if start == "" || hasNS && ns != namespace() {
		return false
	}
	now, alive := Start(pid)
	return !alive || now != start
}

// Alive reports whether the process a name (from Self) stands for
// certainly still runs: this PID namespace, its pid alive with the start
// time recorded. It says false when it cannot tell, as Gone does.
func Alive(name string) bool {
	name, ns, hasNS := strings.Cut(name, "@")
	pidStr, start, ok := strings.Cut(name, ":")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil || pid <= 0 || start == "" || hasNS && ns != namespace() {
		return false
	}
	now, alive := Start(pid)
	return alive && now == start
}

// Start reads field 22 (starttime) of /proc/<pid>/stat; a zombie or a
// missing process is not alive.
func Start(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// The command name (field 2) is in parentheses and may hold anything.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return "", false
	}
	if f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}

func namespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return "?"
	}
	return strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
}

// Signal sends sig to the process a name (from Self) stands for, if it is
// still that process (its start time unchanged) in this PID namespace;
// false when it is gone or cannot be told apart from a recycled PID.
func Signal(name string, sig syscall.Signal) bool {
	id, ns, hasNS := strings.Cut(name, "@")
	pidStr, start, ok := strings.Cut(id, ":")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil || pid <= 0 || start == "" || hasNS && ns != namespace() {
		return false
	}
	if now, alive := Start(pid); !alive || now != start {
		return false
	}
	return syscall.Kill(pid, sig) == nil
}
