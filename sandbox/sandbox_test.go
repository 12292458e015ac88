package sandbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	_ "github.com/xmode/xmode/providers/local" // the host engine
	"github.com/xmode/xmode/storage"
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
	return &Service{Cfg: cfg, Store: st, Guard: storage.Guard{Root: cfg.StorageRoot}}
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
