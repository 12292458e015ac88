package reaper

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/internal/progress"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/store"
)

// Defaults of the Reaper's tuning fields.
const (
	// DefaultProvisionGrace: a create that has not finished after this long
	// died or hangs (clones and image pulls of a healthy create take less).
	// `xmode reap --provision-grace` defaults to it too.
	DefaultProvisionGrace = 15 * time.Minute
	// DefaultStaleAfter: a step whose heartbeat is this old no longer runs
	// (store.StepStaleAfter, the one rule every front end applies).
	DefaultStaleAfter = store.StepStaleAfter
	// DefaultParallel teardowns at once: docker calls overlap, and the
	// daemon is not flooded.
	DefaultParallel = 16
	// DefaultFullSweepEvery: how often a pass lists every run directory,
	// not only the runs that ended since the last pass.
	DefaultFullSweepEvery = 24 * time.Hour
)

// PassOptions tune one pass.
type PassOptions struct {
	// DryRun lists what the pass would do and changes nothing.
	DryRun bool
	// ReclaimUnknown also reclaims the worktrees of run directories the
	// store has no record of (after a lost store was adopted); this pass
	// then looks at every run directory.
	ReclaimUnknown bool
}

// Summary is what one pass did: docs/reference.md, "Reap summary".
//
// Expired counts the expired open sessions this pass took on (a session with
// a running step is not taken on; it is left for a later pass), Destroyed
// the sessions it ended (expired ones, and sessions stuck provisioning, which
// end failed/provision_failed). ContainersRemoved, VolumesRemoved,
// WorktreesReclaimed and WorktreesKeptShared are what those teardowns did;
// OrphansRemoved counts the leaked objects the sweep removed: containers and
// volumes of this install without an open session, and worktrees of runs
// without one. PoolFilled and PoolRetired are the pool entries made and
// retired after the pass (`xmode reap` keeps the project machines' pools).
// SnapshotsRemoved counts the snapshots it removed (expired, or never
// finished). Each session and object is counted by the one pass that
// handled it, however many passes overlap.
type Summary struct {
	DryRun              bool      `json:"dry_run"`
	Expired             int       `json:"expired"`
	Destroyed           int       `json:"destroyed"`
	ContainersRemoved   int       `json:"containers_removed"`
	VolumesRemoved      int       `json:"volumes_removed"`
	WorktreesReclaimed  int       `json:"worktrees_reclaimed"`
	WorktreesKeptShared int       `json:"worktrees_kept_shared"`
	OrphansRemoved      int       `json:"orphans_removed"`
	StepsLost           int       `json:"steps_lost"`
	PoolFilled          int       `json:"pool_filled"`
	PoolRetired         int       `json:"pool_retired"`
	SnapshotsRemoved    int       `json:"snapshots_removed"`
	Errors              []Failure `json:"errors"`
	DurationMS          int64     `json:"duration_ms"`
}

// Failure is one teardown or removal that failed; the next pass retries it.
type Failure struct {
	SessionID string `json:"session_id"` // "" for an object without a session
	Error     string `json:"error"`
}

// summer adds to a Summary from concurrent teardowns.
type summer struct {
	mu sync.Mutex
	s  Summary
}

func (m *summer) add(f func(*Summary)) {
	m.mu.Lock()
	f(&m.s)
	m.mu.Unlock()
}

func (m *summer) fail(sessionID string, err error) {
	m.add(func(s *Summary) { s.Errors = append(s.Errors, Failure{SessionID: sessionID, Error: err.Error()}) })
}

func (r *Reaper) provisionGrace() time.Duration {
	return cmp.Or(r.ProvisionGrace, DefaultProvisionGrace)
}

func (r *Reaper) staleAfter() time.Duration { return cmp.Or(r.StaleAfter, DefaultStaleAfter) }

func (r *Reaper) fullSweepEvery() time.Duration {
	return cmp.Or(r.FullSweepEvery, DefaultFullSweepEvery)
}

func (r *Reaper) parallel() int { return cmp.Or(r.Parallel, DefaultParallel) }

type job struct {
	sess         *store.Session
	provisioning bool // stuck provisioning, not expired
}

// Pass is one reaper pass (what cron runs as `xmode reap`):
//
//   - expired open sessions are torn down (Teardown, the code `sandbox stop`
//     runs) and end destroyed/expired — unless a step of theirs is still
//     running with a fresh heartbeat: those wait for a later pass;
//   - sessions provisioning for longer than ProvisionGrace end
//     failed/provision_failed;
//   - expired snapshots go, and those whose making died;
//   - orphans go: containers and per-session volumes of this install with no
//     open session, images of neither an open session nor a snapshot, and
//     worktrees of runs with no open session.
//
// A teardown that fails (the docker daemon is down) leaves its session open
// and is reported in Summary.Errors; the pass goes on, and the next one
// retries. The error return is for a pass that could not run at all, or
// was cancelled (with what it did so far).
func (r *Reaper) Pass(ctx context.Context, o PassOptions) (*Summary, error) {
	start := time.Now()
	now := r.now()
	sum := &summer{s: Summary{DryRun: o.DryRun, Errors: []Failure{}}}
	defer r.closeProviders()
	if !o.DryRun {
		if _, err := r.Store.DropStaleClaims(ctx, staleClaim); err != nil {
			return nil, err
		}
	}
	r.loseStaleSteps(ctx, o.DryRun, sum)
	expired, err := r.Store.ExpiredOpen(ctx, now)
	if err != nil {
		return nil, err
	}
	stuck, err := r.Store.StaleProvisioning(ctx, now.Add(-r.provisionGrace()))
	if err != nil {
		return nil, err
	}
	jobs := make([]job, 0, len(expired)+len(stuck))
	for _, s := range expired {
		jobs = append(jobs, job{sess: s})
	}
	for _, s := range stuck {
		jobs = append(jobs, job{sess: s, provisioning: true})
	}
	if o.DryRun {
		r.plan(ctx, jobs, sum)
	} else {
		r.reapAll(ctx, jobs, sum)
	}
	// Worktrees before engine objects: the run sweep moves its watermark
	// only when no teardown or removal of a worktree failed, and an
	// unreachable docker daemon is no reason to look at every run again.
	r.sweepRuns(ctx, o.DryRun, o.ReclaimUnknown, now, sum)
	r.sweepMachines(ctx, o.DryRun, sum)
	r.reapSnapshots(ctx, o.DryRun, now, sum)
	r.sweepEngine(ctx, o.DryRun, sum)
	sum.mu.Lock()
	out := sum.s
	sum.mu.Unlock()
	out.DurationMS = time.Since(start).Milliseconds()
	return &out, ctx.Err()
}

// sweepMachines removes the project machine directories a killed first
// warm left: no record, nobody holding their lock.
func (r *Reaper) sweepMachines(ctx context.Context, dry bool, sum *summer) {
	m := &machines.Manager{Cfg: r.Cfg, Store: r.Store, Guard: r.Guard, Now: r.Now}
	removed, err := m.RemoveUnrecorded(ctx, dry)
	for _, p := range removed {
		verb := "removed"
		if dry {
			verb = "would remove"
		}
		r.logf(p, "%s the checkout of a project machine that was never recorded (a warm that died)", verb)
		sum.add(func(s *Summary) { s.OrphansRemoved++ })
	}
	if err != nil {
		sum.fail("", err)
	}
}

// loseStaleSteps ends the steps whose xmode is gone (killed: its process
// ended, or no heartbeat for StaleAfter) — their processes, in a session
// that may live on — and records them as lost, so no row says "running"
// for ever.
func (r *Reaper) loseStaleSteps(ctx context.Context, dry bool, sum *summer) {
	stale := r.now().Add(-r.staleAfter())
	steps, err := r.Store.AllRunningSteps(ctx)
	if err != nil {
		sum.fail("", err)
		return
	}
	for _, st := range steps {
		if ctx.Err() != nil {
			return
		}
		if !st.Gone(stale) {
			continue
		}
		if dry {
			r.logf(st.SessionID, "would end step %d as lost: no heartbeat since %s", st.Seq, st.Heartbeat.Format(time.RFC3339))
			sum.add(func(s *Summary) { s.StepsLost++ })
			continue
		}
		sess, err := r.Store.Get(ctx, st.SessionID)
		if err != nil {
			sum.fail(st.SessionID, err)
			continue
		}
		provider, err := r.provider(sess.Engine)
		if err == nil {
			err = engine.KillStep(ctx, provider, sess.Sandbox(), st.Tag)
		}
		if err != nil {
			// Its processes may live: leave it running for the next pass.
			sum.fail(st.SessionID, fmt.Errorf("end lost step %d: %w", st.Seq, err))
			continue
		}
		lost, err := r.Store.LoseStep(ctx, st.RunID, st.Seq, r.now(), "its xmode was gone (last heartbeat "+st.Heartbeat.Format(time.RFC3339)+"); the reaper ended its processes")
		if err != nil {
			sum.fail(st.SessionID, err)
			continue
		}
		if lost {
			r.logf(st.SessionID, "step %d lost: its xmode was gone; ended its processes", st.Seq)
			sum.add(func(s *Summary) { s.StepsLost++ })
		}
	}
}

func (r *Reaper) reapAll(ctx context.Context, jobs []job, sum *summer) {
	ch := make(chan job)
	var wg sync.WaitGroup
	var bar *progress.Counter
	if len(jobs) > 1 {
		bar = progress.Count(r.Progress, len(jobs), "reaping")
		defer bar.Done()
	}
	for range min(r.parallel(), len(jobs)) {
		wg.Go(func() {
			for j := range ch {
				r.reapOne(ctx, j, sum)
				bar.Add()
			}
		})
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		ch <- j
	}
	close(ch)
	wg.Wait()
}

func (r *Reaper) ending(j job) (status, reason, msg string) {
	if j.provisioning {
		return store.StatusFailed, store.ReasonProvisionFailed,
			fmt.Sprintf("still provisioning %s after it began: the create died or hung; the reaper cleaned up", r.provisionGrace())
	}
	return store.StatusDestroyed, store.ReasonExpired, ""
}

// reapOne claims one session, tears it down and releases the claim.
func (r *Reaper) reapOne(ctx context.Context, j job, sum *summer) {
	id, h := j.sess.ID, r.holder()
	var c store.Claim
	var err error
	if j.provisioning {
		c, err = r.Store.ClaimProvisioning(ctx, id, h, r.now().Add(-r.provisionGrace()), r.now(), staleClaim)
	} else {
		c, err = r.Store.ClaimExpired(ctx, id, h, r.now(), r.now().Add(-r.staleAfter()), staleClaim)
	}
	if err != nil {
		sum.fail(id, err)
		return
	}
	switch c.Result {
	case store.StepRunning:
		r.logf(id, "kept: expired, but step %d is still running", c.Step)
		return
	case store.Busy:
		r.logf(id, "skipped: another reaper is tearing it down")
		return
	case store.Gone:
		return // extended, stopped or reaped since the pass listed it
	}
	defer r.Store.Release(context.WithoutCancel(ctx), id, h)
	if !j.provisioning {
		sum.add(func(s *Summary) { s.Expired++ })
	}
	status, reason, msg := r.ending(j)
	out, err := r.Teardown(ctx, j.sess, status, reason, msg)
	if err != nil {
		r.logf(id, "teardown failed, left %s for the next pass: %v", j.sess.Status, err)
		sum.fail(id, err)
		return
	}
	sum.add(func(s *Summary) {
		if out.Ended {
			s.Destroyed++
		}
		if out.ContainerRemoved {
			s.ContainersRemoved++
		}
		s.VolumesRemoved += out.VolumesRemoved
		if out.WorktreeReclaimed {
			s.WorktreesReclaimed++
		}
		if out.WorktreeKeptShared {
			s.WorktreesKeptShared++
		}
	})
}

// plan is a dry run of reapAll: it logs and counts what the pass would do,
// and changes nothing.
func (r *Reaper) plan(ctx context.Context, jobs []job, sum *summer) {
	remaining := map[string]int{} // open sessions per run, as the plan ends them
	for _, j := range jobs {
		if ctx.Err() != nil {
			return
		}
		s := j.sess
		if !j.provisioning {
			seq, err := r.Store.LiveStep(ctx, s.ID, r.now().Add(-r.staleAfter()))
			if err != nil {
				sum.fail(s.ID, err)
				continue
			}
			if seq != 0 {
				r.logf(s.ID, "would keep: expired, but step %d is still running", seq)
				continue
			}
		}
		n, ok := remaining[s.RunID]
		if !ok {
			var err error
			if n, err = r.Store.OpenOnRun(ctx, s.RunID); err != nil {
				sum.fail(s.ID, err)
				continue
			}
		}
		n--
		remaining[s.RunID] = n
		status, reason, _ := r.ending(j)
		r.logf(s.ID, "would end %s (%s)", status, reason)
		if s.ContainerID != "" {
			r.logf(s.ID, "would remove container %s", short(s.ContainerID))
		}
		wt, err := r.Guard.Worktree(s.RunID)
		_, statErr := os.Lstat(wt)
		reclaim := n <= 0 && err == nil && statErr == nil
		switch {
		case n > 0:
			r.logf(s.ID, "would keep worktree of %s: another open session shares it", s.RunID)
		case reclaim:
			r.logf(s.ID, "would reclaim worktree of %s", s.RunID)
		}
		sum.add(func(sm *Summary) {
			if !j.provisioning {
				sm.Expired++
			}
			sm.Destroyed++
			if s.ContainerID != "" {
				sm.ContainersRemoved++
			}
			sm.VolumesRemoved += len(s.Volumes)
			if n > 0 {
				sm.WorktreesKeptShared++
			}
			if reclaim {
				sm.WorktreesReclaimed++
			}
		})
	}
}
