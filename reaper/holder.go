package reaper

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	"github.com/xmode/xmode/internal/proc"
)

// MaxClaimAge is how long a claim holds even when its holder cannot be
// checked (a process in another PID namespace): no teardown takes that long,
// so an older claim is a dead reaper's.
const MaxClaimAge = time.Hour

// holder names this Reaper: its process and a random tag, so two Reapers of
// one process (tests, a long-lived server) exclude each other too.
func (r *Reaper) holder() string {
	r.holderOnce.Do(func() { r.holderID = NewHolder() })
	return r.holderID
}

// Holder names this Reaper as the owner of what it takes (claims, pool
// entries it retires): its process and a tag of its own.
func (r *Reaper) Holder() string { return r.holder() }

// NewHolder names a claimant in the store's claims (a reaper, the cloud
// poller): this process and a random tag.
func NewHolder() string {
	var b [4]byte
	rand.Read(b[:])
	return proc.Self() + "/" + hex.EncodeToString(b[:])
}

// StaleClaim reports whether a claim's holder (named by NewHolder) is gone,
// so others may take the claim over: the store.Stale every claimant uses.
func StaleClaim(holder string, claimedAt time.Time) bool { return staleClaim(holder, claimedAt) }

// staleClaim reports whether a claim's holder is gone: its process ended or
// its PID now belongs to another process, or the claim is older than
// MaxClaimAge.
func staleClaim(h string, at time.Time) bool {
	if time.Since(at) > MaxClaimAge {
		return true
	}
	h, _, _ = strings.Cut(h, "/")
	return proc.Gone(h)
}
