package sandbox

import (
	"context"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/store"
)

// FromVersionOptions are a session made from a change request's version.
type FromVersionOptions struct {
	// Of is the session the version was made in: the new one has its
	// repository, ref, project (and project machine), runner mode and
	// engine.
	Of *store.Session
	// Source is where the version's tree is kept (changes.VersionSource).
	Source *changes.Source
	Title  string
}

// FromVersion makes a session whose worktree is a change request
// version's tree, for `run continue` once the version's sandbox has ended:
// a checkout of the base, made as a create makes one (a worktree of the
// project machine, else a clone), into which git fetches the version's
// commit from the store that keeps it and checks out only what differs —
// as a fork's worktree is made (applySource), the agent's commits HEAD's
// history and what it had not committed uncommitted. The sandbox's
// filesystem outside the worktree is the engine's as configured now: an
// ended sandbox left none to take. It counts against the quota as any
// session.
func (s *Service) FromVersion(ctx context.Context, o FromVersionOptions) (*store.Session, error) {
	of, src := o.Of, o.Source
	provider, err := engine.Open(of.Engine, s.Cfg)
	if err != nil {
		return nil, err
	}
	defer engine.Close(provider)
	if err := s.Guard.CheckFree(s.Cfg.MinFree, "refusing to create a sandbox"); err != nil {
		return nil, err
	}
	machine, _, err := s.Store.RunMachine(ctx, of.RunID)
	if err != nil {
		return nil, err
	}
	now := s.Now().UTC()
	sess := store.Session{
		ID: store.NewSessionID(), RunID: store.NewRunID(), User: s.Cfg.User, Project: of.Project,
		RunnerMode: of.RunnerMode, Engine: of.Engine, CreatedAt: now, ExpiresAt: now.Add(s.Cfg.TTL),
		Repo: of.Repo, Ref: of.Ref, BaseCommit: src.Base, Origin: store.OriginCLI, Title: o.Title,
	}
	sess.Image, _ = engine.Image(provider)
	if network, ok := engine.Network(provider); ok {
		sess.Network = network
	}
	if sess.WorktreePath, err = s.Guard.Worktree(sess.RunID); err != nil {
		return nil, err
	}
	if err := s.Store.CreateSession(ctx, store.NewSession{Session: sess, NewRun: true, MaxOpen: s.Cfg.MaxOpen}); err != nil {
		return nil, err
	}
	created, err := s.fromSource(ctx, &sess, machine, &source{base: src.Base, head: src.Head, tree: src.Tree, commit: src.Commit,
		store: src.Store, ref: src.Ref}, provider)
	return created, s.undo(ctx, &sess, err)
}
