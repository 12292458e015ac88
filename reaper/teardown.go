// Package reaper tears sandboxes down: `xmode sandbox stop` for one session,
// and (run by cron as `xmode reap`) a pass over every expired one. Teardown
// removes what the engine created, then the worktree, and keeps the
// evidence; it is safe to repeat until it converges.
package reaper

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/store"
)

// Reaper tears down sessions. The zero values of the tuning fields are the
// defaults; a Reaper is safe for concurrent use once set up.
type Reaper struct {
	Cfg   *config.Config
	Store *store.Store
	Guard fsguard.Guard
	Log   io.Writer // one line per action; nil for silence
	// Progress, a terminal, shows a bar over a pass's teardowns; nil for none.
	Progress io.Writer
	Now      func() time.Time

	// ProvisionGrace is how long a session may stay provisioning before a
	// pass ends it as failed (provision_failed): DefaultProvisionGrace.
	ProvisionGrace time.Duration
	// StaleAfter is how old a running step's heartbeat may be before the
	// step no longer keeps its expired session alive: DefaultStaleAfter.
	StaleAfter time.Duration
	// Parallel bounds the teardowns a pass runs at once: DefaultParallel.
	Parallel int
	// FullSweepEvery is how often a pass looks at every run directory for
	// orphan worktrees (DefaultFullSweepEvery); other passes look only at
	// the runs that ended since.
	FullSweepEvery time.Duration
	// Orphans finds the engine objects of this install; nil: the docker
	// engine's, when XMODE_SANDBOX_ENGINE=docker, else none.
	Orphans OrphanSource

	logMu       sync.Mutex
	holderOnce  sync.Once
	holderID    string
	providersMu sync.Mutex
	providers   map[string]engine.Provider // opened once per engine, for a whole pass
}

// provider opens the named engine's provider once and keeps it: a pass over
// many docker sessions uses one client and its connections.
func (r *Reaper) provider(name string) (engine.Provider, error) {
	r.providersMu.Lock()
	defer r.providersMu.Unlock()
	if a, ok := r.providers[name]; ok {
		return a, nil
	}
	a, err := engine.Open(name, r.Cfg)
	if err != nil {
		return nil, err
	}
	if r.providers == nil {
		r.providers = map[string]engine.Provider{}
	}
	r.providers[name] = a
	return a, nil
}

// closeProviders releases the providers a pass opened.
func (r *Reaper) closeProviders() {
	r.providersMu.Lock()
	defer r.providersMu.Unlock()
	for name, a := range r.providers {
		if c, ok := a.(io.Closer); ok {
			c.Close()
		}
		delete(r.providers, name)
	}
}

// Close releases the engine connections this Reaper opened (a Pass closes
// its own).
func (r *Reaper) Close() { r.closeProviders() }

// Outcome says what one teardown did.
type Outcome struct {
	Ended              bool // this call ended the session
	ContainerRemoved   bool
	VolumesRemoved     int
	WorktreeReclaimed  bool
	WorktreeKeptShared bool
}

func (r *Reaper) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Logf writes one line of the Reaper's log, about sessionID: for a caller
// that tears down with it (package pool), so the lines of both stay whole.
func (r *Reaper) Logf(sessionID, format string, args ...any) { r.logf(sessionID, format, args...) }

func (r *Reaper) logf(sessionID, format string, args ...any) {
	if r.Log != nil {
		line := fmt.Sprintf("%s %s\n", sessionID, fmt.Sprintf(format, args...))
		r.logMu.Lock()
		io.WriteString(r.Log, line)
		r.logMu.Unlock()
	}
}

// Stop is the reaper for one session, now: the design's SandboxSession#stop!.
// While a step of the session runs in the foreground of a live xmode
// (another terminal's `sandbox exec`) it refuses, naming the step, and
// changes nothing; with force, as `docker rm -f`, it records the step as
// stopped by `sandbox stop`, ends it, and lets its xmode record its end
// before the sandbox goes. Background steps (`exec --detach`) are the
// session's own, as a container's processes are: they are recorded as
// stopped and ended without force, as `docker stop` ends them.
func (r *Reaper) Stop(ctx context.Context, sess *store.Session, force bool) (Outcome, error) {
	steps, err := r.Store.RunningSteps(ctx, sess.ID)
	if err != nil {
		return Outcome{}, fmt.Errorf("stop %s: %w", sess.ID, err)
	}
	stale := r.now().Add(-r.staleAfter())
	var live []string
	detached := false
	for _, st := range steps {
		switch {
		case st.Gone(stale):
		case st.Detached:
			detached = true
		default:
			pid, _, _ := strings.Cut(st.Owner, ":")
			live = append(live, fmt.Sprintf("step %d (%s, xmode pid %s)", st.Seq, st.Name, pid))
		}
	}
	if len(live) > 0 && !force {
		return Outcome{}, fail.Refusedf("session %s has a running step: %s; wait for it to end, or end it with the session: %s",
			sess.ID, strings.Join(live, ", "), fail.Do("sandbox stop").With(fail.Force, "").Arg(sess.ID))
	}
	if len(live) > 0 || detached {
		if err := r.Store.StopSteps(ctx, sess.ID, store.StoppedBySandboxStop, len(live) > 0); err != nil {
			return Outcome{}, err
		}
	}
	return r.Teardown(ctx, sess, store.StatusDestroyed, store.ReasonStopped, "")
}

// Teardown ends a session: its running steps first (their processes are
// ended, and a step whose xmode is gone is recorded as lost), then the
// engine's objects (a session whose container may still live is never
// marked ended), then the row, then the worktree when no other open session
// shares the run. On a full disk the worktree goes before anything is
// written to the store (see record).
func (r *Reaper) Teardown(ctx context.Context, sess *store.Session, status, reason, errMsg string) (Outcome, error) {
	var out Outcome
	if _, err := r.Guard.CheckWorktree(sess.RunID, sess.WorktreePath); err != nil {
		// A tampered row: still end the session and reclaim the derived
		// worktree, never the claimed path.
		r.logf(sess.ID, "ignoring stored worktree path: %v", err)
	}
	gone, err := r.endSteps(ctx, sess)
	if err != nil {
		return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
	}
	// Its published ports close before its sandbox goes.
	if err := r.closePorts(ctx, sess.ID); err != nil {
		return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
	}
	sb := sess.Sandbox()
	if sb.ContainerID != "" || len(sb.Volumes) > 0 {
		provider, err := r.provider(sess.Engine)
		if err != nil {
			return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
		}
		if err := provider.Destroy(ctx, sb); err != nil {
			return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
		}
		out.ContainerRemoved = sb.ContainerID != ""
		out.VolumesRemoved = len(sb.Volumes)
		if out.ContainerRemoved {
			r.logf(sess.ID, "removed container %s", short(sb.ContainerID))
		}
	}
	// Nothing runs in the worktree any more: on a full disk it can go now.
	fr := &freer{r: r, sess: sess}
	if fsguard.Full(r.Guard.Root, store.ReserveChunk) {
		if err := fr.free(ctx); err != nil {
			return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
		}
	}
	for _, st := range gone {
		var lost bool
		err := fr.record(ctx, func() (err error) {
			lost, err = r.Store.LoseStep(ctx, st.RunID, st.Seq, r.now(), "its xmode was gone (last heartbeat "+st.Heartbeat.Format(time.RFC3339)+"); the session was torn down")
			return err
		})
		if err != nil {
			return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
		}
		if lost {
			r.logf(sess.ID, "step %d lost: its xmode was gone", st.Seq)
		}
	}
	var ended, last bool
	err = fr.record(ctx, func() (err error) {
		ended, last, err = r.Store.End(ctx, sess.ID, status, reason, errMsg, r.now())
		return err
	})
	if err != nil {
		return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
	}
	out.Ended = ended
	if ended {
		r.logf(sess.ID, "%s (%s)", status, reason)
	}
	if !last {
		out.WorktreeKeptShared = true
		r.logf(sess.ID, "kept worktree of %s: another open session shares it", sess.RunID)
		return out, nil
	}
	size := fr.size
	if !fr.freed {
		size = r.measure(sess)
	}
	removed, c, err := r.reclaim(ctx, sess.RunID, false)
	if err != nil {
		return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
	}
	switch c {
	case store.Gone:
		// A session joined the run after all: its worktree stays.
		out.WorktreeKeptShared = true
		r.logf(sess.ID, "kept worktree of %s: another open session shares it", sess.RunID)
	case store.Busy:
		r.logf(sess.ID, "left the worktree of %s to the reaper already removing it", sess.RunID)
	}
	out.WorktreeReclaimed = removed || fr.freed
	if out.WorktreeReclaimed {
		r.logf(sess.ID, "reclaimed worktree of %s", sess.RunID)
		// Room again, perhaps: the reserve comes back now, not at the next
		// command (a reap pass may go on to fill pools).
		r.Store.KeepReserve()
	}
	if size >= 0 {
		_ = r.Store.SetWorktreeBytes(ctx, sess.ID, size)
	}
	// Project machines: git's record of the worktree goes with it, so
	// `git worktree prune` in the machine finds nothing stale.
	if c == store.Claimed {
		if _, err := machines.ReleaseRun(ctx, r.Store, r.Guard, sess.RunID); err != nil {
			return out, fmt.Errorf("tear down %s: %w", sess.ID, err)
		}
	}
	return out, nil
}

// endSteps ends the processes of the session's running steps (a step must
// not outlive its session, nor run in a worktree about to be removed) and
// returns those whose xmode is gone, for the caller to record as lost; a
// step whose xmode still runs is finished by it, with the status its
// processes died of. It writes nothing to the store.
func (r *Reaper) endSteps(ctx context.Context, sess *store.Session) ([]store.StepRow, error) {
	steps, err := r.Store.RunningSteps(ctx, sess.ID)
	if err != nil || len(steps) == 0 {
		return nil, err
	}
	provider, err := r.provider(sess.Engine)
	if err != nil {
		return nil, err
	}
	stale := r.now().Add(-r.staleAfter())
	var gone []store.StepRow
	for _, st := range steps {
		if err := engine.KillStep(ctx, provider, sess.Sandbox(), st.Tag); err != nil {
			return nil, fmt.Errorf("end step %d: %w", st.Seq, err)
		}
		if !st.Gone(stale) {
			r.awaitEnd(ctx, st, stale)
		}
		if st.Gone(stale) {
			gone = append(gone, st)
		}
	}
	return gone, nil
}

// freer frees a session's worktree ahead of the store's writes, the way
// out of a full disk: a sandbox filled it, and the store's reserve may be
// spent.
type freer struct {
	r     *Reaper
	sess  *store.Session
	tried bool  // free ran
	freed bool  // it removed the worktree
	size  int64 // what the worktree held, when freed
}

// free removes the worktree (once), unless another open session shares it.
func (f *freer) free(ctx context.Context) error {
	if f.tried {
		return nil
	}
	f.tried = true
	var err error
	f.freed, f.size, err = f.r.freeFirst(ctx, f.sess)
	return err
}

// record runs one of the teardown's writes; when it finds the disk full,
// the worktree goes first and the write is tried again.
func (f *freer) record(ctx context.Context, write func() error) error {
	err := write()
	if err == nil || !fsguard.IsDiskFull(err) || f.tried {
		return err
	}
	if ferr := f.free(ctx); ferr != nil {
		return ferr
	}
	return write()
}

// stepEndWait bounds how long a teardown waits for the xmode of a step it
// ended to record the step's end.
const stepEndWait = 15 * time.Second

// awaitEnd waits, bounded, for the live xmode of a step whose processes
// were just ended to record its end (its status, its evidence), so that the
// sandbox is not removed under it; it stops waiting when that xmode is gone.
func (r *Reaper) awaitEnd(ctx context.Context, st store.StepRow, stale time.Time) {
	deadline := time.Now().Add(stepEndWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		row, err := r.Store.Step(ctx, st.RunID, st.Seq)
		if err != nil || row.State != store.StateRunning || row.Gone(stale) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freeFirst removes the session's worktree before the store can record
// anything, when no other open session shares it. It reports whether it
// removed it, and what it held.
func (r *Reaper) freeFirst(ctx context.Context, sess *store.Session) (bool, int64, error) {
	n, err := r.Store.OpenOnRun(ctx, sess.RunID)
	if err != nil || n > 1 {
		return false, -1, err
	}
	size := r.measure(sess)
	removed, err := r.Guard.RemoveWorktree(sess.RunID)
	if removed {
		r.logf(sess.ID, "disk full: removed the worktree of %s (%d MiB) before recording the end", sess.RunID, size>>20)
	}
	return removed, size, err
}

// measure is the disk space of the session's worktree, -1 when it is gone.
func (r *Reaper) measure(sess *store.Session) int64 {
	wt, err := r.Guard.Worktree(sess.RunID)
	if err != nil {
		return -1
	}
	n, err := fsguard.DiskUsage(wt)
	if err != nil {
		return -1
	}
	return n
}

// Reclaim removes the worktree of a run no session uses any more (a
// retired pool entry's) as a teardown does: see reclaim.
func (r *Reaper) Reclaim(ctx context.Context, runID string) (bool, store.ClaimResult, error) {
	return r.reclaim(ctx, runID, false)
}

// RemoveObjects removes the engine objects of a sandbox that no session
// holds (a pool entry's, named by of in the log): those recorded in sb,
// through Destroy, or, when none were recorded (its maker died between
// making and recording them: a container left Created), those labelled
// with its session among this install's, so nothing of another instance,
// nor of another entry or session, is touched. An engine without such
// objects has none to remove.
func (r *Reaper) RemoveObjects(ctx context.Context, sb engine.Sandbox, of, why string) error {
	provider, err := r.provider(sb.Engine)
	if err != nil {
		return err
	}
	if sb.ContainerID != "" || len(sb.Volumes) > 0 {
		if err := provider.Destroy(ctx, sb); err != nil {
			return err
		}
		if sb.ContainerID != "" {
			r.logf(sb.SessionID, "removed container %s of %s (%s)", short(sb.ContainerID), of, why)
		}
		return nil
	}
	lister, ok := engine.Orphans(provider)
	if !ok {
		return nil
	}
	instance, err := r.Store.InstanceID(ctx)
	if err != nil {
		return err
	}
	objs, err := lister.ListObjects(ctx, instance)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.SessionID != sb.SessionID || o.Instance != instance {
			continue
		}
		if err := lister.RemoveObject(ctx, o); err != nil {
			return fmt.Errorf("remove %s %s: %w", o.Kind, shortName(o), err)
		}
		r.logf(sb.SessionID, "removed %s %s of %s, never recorded (%s)", o.Kind, shortName(o), of, why)
	}
	return nil
}

// reclaim removes a run's worktree under a claim on the run, so two
// processes never remove one worktree at once and no session joins the run
// meanwhile. It reports whether it removed anything, and the claim's result
// (Gone: the run has an open session; Busy: someone else is removing it).
func (r *Reaper) reclaim(ctx context.Context, runID string, sweep bool) (bool, store.ClaimResult, error) {
	if _, err := r.Guard.RunDir(runID); err != nil {
		return false, store.Gone, err
	}
	h := r.holder()
	c, err := r.Store.ClaimRun(ctx, runID, h, sweep, r.now(), staleClaim)
	if err != nil || c.Result != store.Claimed {
		return false, c.Result, err
	}
	defer r.Store.Release(context.WithoutCancel(ctx), runID, h)
	removed, err := r.Guard.RemoveWorktree(runID)
	return removed, store.Claimed, err
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
