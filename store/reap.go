package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// What the reaper needs from the store: the sessions a pass works on, the
// step leases that keep it away from a running command, and claims so that
// overlapping reapers (cron runs that pile up) do each session once.
//
// A claim is a row in meta, key "reap:<session or run id>", value
// "<claimed_at_ms> <holder>". It is taken in an immediate transaction that
// also re-checks why the reaper wanted the session, so a claim is never
// taken on a session that was extended, ended or started a step meanwhile.
// The holder names the reaping process; a claim whose holder is dead (a
// reaper killed with -9) is taken over, so a crashed pass never blocks the
// next one.

// ClaimPrefix starts the meta key of every reap claim.
const ClaimPrefix = "reap:"

func claimKey(id string) string { return ClaimPrefix + id }

// Stale reports whether a claim's holder is gone (its process ended), so the
// claim may be taken over.
type Stale func(holder string, claimedAt time.Time) bool

// ClaimResult says whether a claim was taken and, if not, why.
type ClaimResult int

const (
	// Claimed: the caller holds the claim and must Release it.
	Claimed ClaimResult = iota
	// Gone: the session no longer qualifies (ended, extended, opened) or
	// the run has an open session again.
	Gone
	// Busy: a live reaper holds the claim.
	Busy
	// StepRunning: the session has a running step whose xmode is not gone
	// (a foreground one: LiveStep).
	StepRunning
)

func (c ClaimResult) String() string {
	switch c {
	case Claimed:
		return "claimed"
	case Gone:
		return "gone"
	case Busy:
		return "busy"
	case StepRunning:
		return "step running"
	}
	return "claim(" + strconv.Itoa(int(c)) + ")"
}

// Claim is the outcome of a claim attempt.
type Claim struct {
	Result ClaimResult
	Step   int    // StepRunning: the running step's number
	Holder string // Busy: who holds it
}

// ExpiredOpen lists the open sessions whose expiry is at or before now,
// oldest expiry first.
func (s *Store) ExpiredOpen(ctx context.Context, now time.Time) ([]*Session, error) {
	return s.query(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE status = 'open' AND expires_at <= ? ORDER BY expires_at, id`, millis(now))
}

// StaleProvisioning lists the sessions still provisioning that were created
// at or before before (their create died or hangs).
func (s *Store) StaleProvisioning(ctx context.Context, before time.Time) ([]*Session, error) {
	return s.query(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE status = 'provisioning' AND created_at <= ? ORDER BY created_at, id`, millis(before))
}

// ActiveSessions returns the IDs of every provisioning, open or submitted
// session and the runs they are on, pool entries included: an entry is a
// session made ahead of time, whose container and worktree are not orphans.
// One statement, so an entry being claimed is seen in one table or the
// other.
func (s *Store) ActiveSessions(ctx context.Context) (sessions, runs map[string]bool, err error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, run_id FROM sessions WHERE status IN (`+activeStatuses+`)
		UNION ALL SELECT session_id, run_id FROM pool_entries`)
	if err != nil {
		return nil, nil, fmt.Errorf("list open sessions: %w", err)
	}
	defer rows.Close()
	sessions, runs = map[string]bool{}, map[string]bool{}
	for rows.Next() {
		var id, run string
		if err := rows.Scan(&id, &run); err != nil {
			return nil, nil, err
		}
		sessions[id], runs[run] = true, true
	}
	return sessions, runs, rows.Err()
}

// Heartbeat renews a running step's lease. It never takes from the reserve:
// a step filling the disk would eat each chunk a heartbeat gave back, and
// leave nothing for the write that records its end.
func (s *Store) Heartbeat(ctx context.Context, runID string, seq int, now time.Time) error {
	_, err := s.execNoReserve(ctx, `UPDATE steps SET heartbeat_at = ? WHERE run_id = ? AND seq = ? AND state = 'running'`,
		millis(now), runID, seq)
	if err != nil {
		return fmt.Errorf("heartbeat of step %s/%d: %w", runID, seq, err)
	}
	return nil
}

// LiveStep returns the number of a running step of the session whose
// xmode is not gone (StepRow.Gone: its owner lives, or, where this process
// cannot see the owner, its heartbeat is after freshAfter), or 0. A
// background step does not count: it runs until it is ended, so it must
// not keep an expired session (and its quota) alive; the session's
// teardown ends it.
func (s *Store) LiveStep(ctx context.Context, sessionID string, freshAfter time.Time) (int, error) {
	return liveStep(ctx, s.db, sessionID, freshAfter)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func liveStep(ctx context.Context, q queryer, sessionID string, freshAfter time.Time) (int, error) {
	rows, err := q.QueryContext(ctx, `SELECT seq, heartbeat_at, owner FROM steps
		WHERE session_id = ? AND state = 'running' AND NOT detached ORDER BY seq`, sessionID)
	if err != nil {
		return 0, fmt.Errorf("look for running steps of %s: %w", sessionID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int
		var beat int64
		var owner string
		if err := rows.Scan(&seq, &beat, &owner); err != nil {
			return 0, fmt.Errorf("look for running steps of %s: %w", sessionID, err)
		}
		if !stepGone(fromMillis(beat), owner, freshAfter) {
			return seq, nil
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("look for running steps of %s: %w", sessionID, err)
	}
	return 0, nil
}

// takeClaim inserts the claim unless a live holder has it.
func takeClaim(ctx context.Context, tx *sql.Tx, key, holder string, now time.Time, stale Stale) (Claim, error) {
	var value string
	err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&value)
	switch {
	case err == sql.ErrNoRows:
	case err != nil:
		return Claim{}, fmt.Errorf("read claim %s: %w", key, err)
	default:
		other, at := parseClaim(value)
		if other != holder && (stale == nil || !stale(other, at)) {
			return Claim{Result: Busy, Holder: other}, nil
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, claimValue(now, holder))
	if err != nil {
		return Claim{}, fmt.Errorf("take claim %s: %w", key, err)
	}
	return Claim{Result: Claimed}, nil
}

// claimValue is a claim's meta value: "<claimed_at_ms> <holder>".
func claimValue(now time.Time, holder string) string {
	return strconv.FormatInt(millis(now), 10) + " " + holder
}

func parseClaim(value string) (holder string, at time.Time) {
	ms, holder, _ := strings.Cut(value, " ")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return holder, fromMillis(n)
}

// ClaimExpired claims an expired open session for teardown. It re-checks,
// in the same transaction, that the session is still open and expired at
// now (not extended meanwhile) and that no step of it is running with a
// xmode that is not gone (background steps aside: LiveStep).
func (s *Store) ClaimExpired(ctx context.Context, id, holder string, now, freshAfter time.Time, stale Stale) (Claim, error) {
	var c Claim
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE id = ? AND status = 'open' AND expires_at <= ?`,
			id, millis(now)).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			c = Claim{Result: Gone}
			return nil
		}
		seq, err := liveStep(ctx, tx, id, freshAfter)
		if err != nil {
			return err
		}
		if seq != 0 {
			c = Claim{Result: StepRunning, Step: seq}
			return nil
		}
		c, err = takeClaim(ctx, tx, claimKey(id), holder, now, stale)
		return err
	})
	return c, err
}

// ClaimProvisioning claims a session still provisioning that was created at
// or before before.
func (s *Store) ClaimProvisioning(ctx context.Context, id, holder string, before, now time.Time, stale Stale) (Claim, error) {
	var c Claim
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE id = ? AND status = 'provisioning' AND created_at <= ?`,
			id, millis(before)).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			c = Claim{Result: Gone}
			return nil
		}
		var err error
		c, err = takeClaim(ctx, tx, claimKey(id), holder, now, stale)
		return err
	})
	return c, err
}

// ClaimRun claims a run's worktree for removal. It refuses a run with a
// provisioning or open session or a pool entry, and marks the run reclaimed
// (if it has a row and is not yet) in the same transaction, so no session
// can join it while its worktree goes. A run without a row (a database reset under an old
// storage root) can be claimed too. An orphan sweep (sweep set) also leaves
// a run alone while another reaper holds one of its sessions: that reaper
// removes the worktree itself once it has ended the session.
func (s *Store) ClaimRun(ctx context.Context, runID, holder string, sweep bool, now time.Time, stale Stale) (Claim, error) {
	var c Claim
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var open int
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM sessions WHERE run_id = ? AND status IN (`+activeStatuses+`))
			+ (SELECT count(*) FROM pool_entries WHERE run_id = ?)`, runID, runID).Scan(&open); err != nil {
			return err
		}
		if open > 0 {
			c = Claim{Result: Gone}
			return nil
		}
		if sweep {
			// A reaper tearing down a session of this run reclaims the
			// worktree itself, right after ending the session: leave it that.
			other, err := sessionClaimOnRun(ctx, tx, runID, holder, stale)
			if err != nil || other != "" {
				c = Claim{Result: Busy, Holder: other}
				return err
			}
		}
		var err error
		if c, err = takeClaim(ctx, tx, claimKey(runID), holder, now, stale); err != nil || c.Result != Claimed {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE runs SET reclaimed_at = ? WHERE id = ? AND reclaimed_at IS NULL`, millis(now), runID)
		return err
	})
	return c, err
}

// sessionClaimOnRun returns the holder of a live claim, not holder's, on a
// session of the run, or "".
func sessionClaimOnRun(ctx context.Context, tx *sql.Tx, runID, holder string, stale Stale) (string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT m.value FROM meta m JOIN sessions s ON m.key = ? || s.id WHERE s.run_id = ?`,
		ClaimPrefix, runID)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return "", err
		}
		if other, at := parseClaim(v); other != holder && (stale == nil || !stale(other, at)) {
			return other, nil
		}
	}
	return "", rows.Err()
}

// Release drops a claim the holder took (someone who took it over keeps it).
func (s *Store) Release(ctx context.Context, id, holder string) error {
	return s.releaseKey(ctx, claimKey(id), holder)
}

// releaseKey drops the claim or lease at key if holder still holds it.
func (s *Store) releaseKey(ctx context.Context, key, holder string) error {
	_, err := s.exec(ctx, `DELETE FROM meta WHERE key = ? AND substr(value, instr(value, ' ') + 1) = ?`, key, holder)
	if err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

// Claims lists the reap claims: session or run ID → holder.
func (s *Store) Claims(ctx context.Context) (map[string]string, error) {
	return s.claimsUnder(ctx, ClaimPrefix)
}

// claimsUnder lists the claims whose key starts with prefix: the rest of
// the key → holder.
func (s *Store) claimsUnder(ctx context.Context, prefix string) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT key, value FROM meta WHERE key >= ? AND key < ?`, prefix, prefix+"~")
	if err != nil {
		return nil, fmt.Errorf("list claims %s*: %w", prefix, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		h, _ := parseClaim(v)
		out[strings.TrimPrefix(k, prefix)] = h
	}
	return out, rows.Err()
}

// DropStaleClaims deletes the claims whose holder is gone, so a reaper
// killed mid-teardown leaves nothing behind once the next pass ran.
func (s *Store) DropStaleClaims(ctx context.Context, stale Stale) (int, error) {
	return s.dropStaleClaims(ctx, ClaimPrefix, stale)
}

// dropStaleClaims deletes the claims under prefix whose holder is gone.
func (s *Store) dropStaleClaims(ctx context.Context, prefix string, stale Stale) (int, error) {
	dropped := 0
	err := s.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT key, value FROM meta WHERE key >= ? AND key < ?`, prefix, prefix+"~")
		if err != nil {
			return err
		}
		var dead []string
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				rows.Close()
				return err
			}
			if h, at := parseClaim(v); stale(h, at) {
				dead = append(dead, k)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, k := range dead {
			if _, err := tx.ExecContext(ctx, `DELETE FROM meta WHERE key = ?`, k); err != nil {
				return err
			}
		}
		dropped = len(dead)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("drop stale claims: %w", err)
	}
	return dropped, nil
}

// claimed reports whether a reap claim exists on id (live or not: a dead
// one is only ever on a session the next pass reaps).
func claimed(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM meta WHERE key = ?`, claimKey(id)).Scan(&n)
	return n > 0, err
}

// Meta keys of the reaper's run-directory sweep (see reaper.Reaper.sweepRuns).
const (
	// KeySweepWatermark: every run reclaimed before it had its worktree
	// checked by a sweep that succeeded.
	KeySweepWatermark = "sweep_watermark"
	// KeySweepFull: when the last sweep over every run directory ran.
	KeySweepFull = "sweep_full_at"
)

// MetaTime reads a time kept in meta; ok is false when it was never set.
func (s *Store) MetaTime(ctx context.Context, key string) (t time.Time, ok bool, err error) {
	var v string
	err = s.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v)
	if err == sql.ErrNoRows {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read %s: %w", key, err)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false, nil // unreadable: as if never set
	}
	return fromMillis(ms), true, nil
}

// SetMetaTime keeps a time in meta.
func (s *Store) SetMetaTime(ctx context.Context, key string, t time.Time) error {
	_, err := s.exec(ctx, `INSERT INTO meta (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, strconv.FormatInt(millis(t), 10))
	if err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

// RunsReclaimedSince returns the runs marked reclaimed at or after since,
// with that time: the runs whose worktree a sweep must still check.
func (s *Store) RunsReclaimedSince(ctx context.Context, since time.Time) (map[string]time.Time, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, reclaimed_at FROM runs WHERE reclaimed_at >= ?`, millis(since))
	if err != nil {
		return nil, fmt.Errorf("list reclaimed runs: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var at int64
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		out[id] = fromMillis(at)
	}
	return out, rows.Err()
}
