package reaper

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxClaimAge is how long a claim holds even when its holder cannot be
// checked (a process in another PID namespace): no teardown takes that long,
// so an older claim is a dead reaper's.
const MaxClaimAge = time.Hour

var (
	holderOnce sync.Once
	holderID   string
)

// processHolder names this process in the store's claims:
// "<pid>:<start>", start being the process's start time in clock ticks since
// boot, so a recycled PID is not mistaken for the reaper that died.
func processHolder() string {
	holderOnce.Do(func() {
		pid := os.Getpid()
		start, _ := procStart(pid)
		holderID = strconv.Itoa(pid) + ":" + start
	})
	return holderID
}

// holder names this Reaper: its process and a random tag, so two Reapers of
// one process (tests, a long-lived server) exclude each other too.
func (r *Reaper) holder() string {
	r.holderOnce.Do(func() { r.holderID = NewHolder() })
	return r.holderID
}

// NewHolder names a claimant in the store's claims (a reaper, the cloud
// poller): this process and a random tag.
func NewHolder() string {
	var b [4]byte
	rand.Read(b[:])
	return processHolder() + "/" + hex.EncodeToString(b[:])
}

// StaleClaim reports whether a claim's holder (named by NewHolder) is gone,
// so others may take the claim over: the store.Stale every claimant uses.
func StaleClaim(holder string, claimedAt time.Time) bool { return staleClaim(holder, claimedAt) }

// procStart reads field 22 (starttime) of /proc/<pid>/stat.
func procStart(pid int) (string, bool) {
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
		return "", false // a zombie holds no claim
	}
	return f[19], true
}

// staleClaim reports whether a claim's holder is gone: its process ended or
// its PID now belongs to another process, or the claim is older than
// MaxClaimAge.
func staleClaim(h string, at time.Time) bool {
	if time.Since(at) > MaxClaimAge {
		return true
	}
	h, _, _ = strings.Cut(h, "/")
	pidStr, start, ok := strings.Cut(h, ":")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil || pid <= 0 {
		return true // not a holder this xmode writes
	}
	if start == "" {
		return false // written where /proc was unreadable: only age tells
	}
	now, alive := procStart(pid)
	return !alive || now != start
}
