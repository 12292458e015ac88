// Package pool is the warm pool of a project machine (docs/project-machines.md,
// "The pool"): sandboxes of the machine made ahead of time — a detached
// worktree at the machine's commit and, where the engine has one, its
// running container, made exactly as a create makes them — so that
// `sandbox create --project` only claims one. It owns all of the pool: its
// rows (pool_entries, rows.go), the claim a create makes (claim.go), the
// refill and retirement that `xmode reap` and `machine warm` run
// (upkeep.go, retire.go), and what `machine show` shows of it (view.go).
//
// It sits above machines (an entry's worktree is one of the machine's) and
// the reaper (whose teardown removes an entry's engine objects and
// worktree), and below sandbox, whose create claims from it.
package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/machines"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// Pools are the project machines' pools of one storage root.
type Pools struct {
	Cfg      *config.Config
	Store    *store.Store
	Guard    fsguard.Guard
	Progress io.Writer // clone and pull progress; nil for none
	Log      io.Writer // teardown actions; nil for none
	// Notices receives what a user should know about a create that
	// succeeds (a dead entry it retired on the way); nil for none.
	Notices io.Writer
	// Spec is the engine.Spec a create gives the sandbox of a session made
	// from a machine's checkout (sandbox.Service's): an entry must be
	// exactly what a create would make, so the pool asks the create's own
	// function instead of keeping a copy of it.
	Spec func(ctx context.Context, e *Entry, co *machines.Checkout) (engine.Spec, error)
	// Seed prepares a run's object store for the first diff of the
	// checkout at commit its worktree just got, before any step ran in it
	// (sandbox.Service's, which a create calls too); nil: nothing. Only a
	// cache: it reports no error.
	Seed func(ctx context.Context, runID, commit string)
	// Clock is the time entries are made, claimed and aged by (the
	// service's); nil: time.Now.
	Clock func() time.Time
}

func (p *Pools) seed(ctx context.Context, runID, commit string) {
	if p.Seed != nil {
		p.Seed(ctx, runID, commit)
	}
}

// now is the pools' time of day.
func (p *Pools) now() time.Time {
	if p.Clock != nil {
		return p.Clock()
	}
	return time.Now()
}

// Size is the number of ready sandboxes the machine's pool keeps: what
// `machine warm --pool N` set, else XMODE_POOL_SIZE.
func Size(mach *store.Machine, defaultSize int) int {
	if mach != nil && mach.PoolSize != nil {
		return *mach.PoolSize
	}
	return defaultSize
}

// Shape names the sandbox the provider makes under its configuration for
// user: a hash of its engine and of every setting that shapes its
// sandboxes, as the provider lists them (engine.Shape), and, where the
// engine mounts the project's cache (engine.Volumes), of the user whose
// cache it mounts (machines.CacheVolume). Entries of another shape are
// never claimed: an entry made by one user's refill mounts that user's
// cache, and no other user's create may take it.
func Shape(provider engine.Provider, user string) string {
	s := engine.Shape(provider)
	if _, ok := engine.Volumes(provider); ok {
		s += "\ncache-user=" + user
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// Users are the users the pool of project is filled for, an entry of each
// one's shape per slot (docs/project-machines.md, "Whose pool"). Where the
// engine mounts each user's cache of the project (engine.Volumes), an
// entry serves its user alone, so the pool is each user's: those
// XMODE_POOL_USERS names, else those who made a session of the project
// within XMODE_POOL_MAX_AGE (an entry older than that is retired anyway),
// else — a machine nobody has used yet — the user who runs the upkeep.
// Where it mounts none, every user's create claims any entry: one pool,
// made for no user ("").
func (p *Pools) Users(ctx context.Context, provider engine.Provider, project string) ([]string, error) {
	if _, ok := engine.Volumes(provider); !ok {
		return []string{""}, nil
	}
	if len(p.Cfg.PoolUsers) > 0 {
		return p.Cfg.PoolUsers, nil
	}
	users, err := p.Store.ProjectUsers(ctx, project, p.now().Add(-p.Cfg.PoolMaxAge))
	if err != nil || len(users) > 0 {
		return users, err
	}
	return []string{p.Cfg.User}, nil
}

// machines is the project machines of this storage root.
func (p *Pools) machines() *machines.Manager {
	return &machines.Manager{Cfg: p.Cfg, Store: p.Store, Guard: p.Guard, Progress: p.Progress}
}

// reaper is a Reaper for this storage root; Close it when done, as it
// keeps the engines it opened.
func (p *Pools) reaper() *reaper.Reaper {
	return &reaper.Reaper{Cfg: p.Cfg, Store: p.Store, Guard: p.Guard, Log: p.Log}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
