package reaper

import (
	"context"
	"syscall"
	"time"

	"github.com/xmode/xmode/internal/proc"
	"github.com/xmode/xmode/store"
)

// ClosePorts ends the forwarders of published ports (docs/network.md,
// "Ports") and marks the ports closed, waiting a few seconds at most for
// each forwarder to be gone, so that its host port is free when this
// returns. A forwarder is named by its process (internal/proc): a recycled
// PID is never signalled.
func ClosePorts(ctx context.Context, st *store.Store, ps []store.Port, now time.Time, why string) error {
	var first error
	for _, p := range ps {
		if p.Owner != "" && proc.Signal(p.Owner, syscall.SIGTERM) {
			deadline := time.Now().Add(5 * time.Second)
			for !proc.Gone(p.Owner) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if !proc.Gone(p.Owner) {
				proc.Signal(p.Owner, syscall.SIGKILL)
			}
		}
		if err := st.ClosePort(ctx, p.SessionID, p.Port, now, why); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// closePorts closes a session's published ports as it is torn down.
func (r *Reaper) closePorts(ctx context.Context, sessionID string) error {
	ps, err := r.Store.Ports(ctx, sessionID, false)
	if err != nil || len(ps) == 0 {
		return err
	}
	r.logf(sessionID, "closing %d published port(s)", len(ps))
	return ClosePorts(ctx, r.Store, ps, r.now(), "its sandbox ended")
}
