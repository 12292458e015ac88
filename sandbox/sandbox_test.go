package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	_ "github.com/xmode/xmode/providers/local" // the host engine
	"github.com/xmode/xmode/store"
)

func newService(t *testing.T, env map[string]string) *Service {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	e := map[string]string{"XMODE_STORAGE_ROOT": root, "XMODE_USER": "tester", "HOME": t.TempDir()}
	for k, v := range env {
		e[k] = v
	}
	cfg, err := config.Load(func(k string) string { return e[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), cfg.StorageRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &Service{Cfg: cfg, Store: st, Guard: fsguard.Guard{Root: cfg.StorageRoot}}
}

// A session's lifetime counts from when it opens, not from the start of a
// create that spent time cloning (or pulling an image).
func TestSessionsAreBornAlive(t *testing.T) {
	f := newFixture(t)
	svc := newService(t, map[string]string{"XMODE_SANDBOX_TTL": "1h"})
	before := time.Now()
	sess, err := svc.Create(context.Background(), CreateOptions{Repo: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	if life := sess.ExpiresAt.Sub(sess.CreatedAt); life <= time.Hour {
		t.Fatalf("expires %s after it was created: the clone's time came out of its hour", life)
	}
	if sess.ExpiresAt.Before(before.Add(time.Hour)) {
		t.Fatalf("expires at %s, before an hour from the start of create", sess.ExpiresAt)
	}
}

// A negative --timeout is refused like a negative --ttl, before anything runs.
func TestNegativeTimeoutRefused(t *testing.T) {
	f := newFixture(t)
	svc := newService(t, nil)
	sess, err := svc.Create(context.Background(), CreateOptions{Repo: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Exec(context.Background(), sess, ExecOptions{Argv: []string{"true"}, Timeout: -time.Second})
	if fail.KindOf(err) != fail.Usage {
		t.Fatalf("--timeout -1s: %v; want a usage error", err)
	}
	if steps, _ := svc.Store.Steps(context.Background(), sess.RunID); len(steps) != 0 {
		t.Fatalf("a refused exec recorded a step: %+v", steps)
	}
}

// --run shares a worktree only between sessions of one engine and mount
// model, and the joined session records the run's repo, ref and base.
func TestJoinStaysOnOneSideOfTheTrustBoundary(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	svc := newService(t, nil)
	first, err := svc.Create(ctx, CreateOptions{Repo: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	joined, err := svc.Create(ctx, CreateOptions{RunID: first.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if joined.Repo != first.Repo || joined.Ref != first.Ref || joined.BaseCommit != first.BaseCommit || joined.BaseCommit == "" {
		t.Fatalf("joined session %+v lacks the run's repo, ref or base (%s %s %s)", joined, first.Repo, first.Ref, first.BaseCommit)
	}
	// A run a docker sandbox wrote: a host session may not join it.
	dockerWritten := store.Session{ID: store.NewSessionID(), RunID: store.NewRunID(), User: "tester", RunnerMode: "cloud_worker",
		Engine: "docker", MountMode: "volume", CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
	dockerWritten.WorktreePath, _ = svc.Guard.Worktree(dockerWritten.RunID)
	if err := svc.Store.CreateSession(ctx, store.NewSession{Session: dockerWritten, NewRun: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dockerWritten.WorktreePath, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = svc.Create(ctx, CreateOptions{RunID: dockerWritten.RunID})
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "docker (volume mode)") {
		t.Fatalf("a host session joining a docker sandbox's run: %v; want refused (exit 4) saying why", err)
	}
}
