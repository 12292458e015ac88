package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

func TestMachinesRecordAndUsers(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := s.GetMachine(ctx, "p"); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("missing machine: %v", err)
	}
	m := Machine{Project: "p", Repo: "/src", DefaultRef: "main", HeadCommit: "abc", Volume: "xmode_proj_p", CreatedAt: now, LastFetchAt: now}
	if err := s.PutMachine(ctx, m); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Minute)
	m2 := m
	m2.DefaultRef, m2.HeadCommit, m2.CreatedAt, m2.LastFetchAt = "v1", "def", later, later
	if err := s.PutMachine(ctx, m2); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetMachine(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got.DefaultRef != "v1" || got.HeadCommit != "def" || !got.CreatedAt.Equal(now) || !got.LastFetchAt.Equal(later) {
		t.Fatalf("after update: %+v (created_at must stay %s)", got, now)
	}
	s.PutMachine(ctx, Machine{Project: "a", Repo: "/a", DefaultRef: "main", Volume: "xmode_proj_a", CreatedAt: now, LastFetchAt: now})
	if all, err := s.ListMachines(ctx); err != nil || len(all) != 2 || all[0].Project != "a" {
		t.Fatalf("list: %v %v", all, err)
	}

	// Sessions use the machine when their run is marked; ended ones do not.
	onMachine, cloned, ended := newSess("u", now), newSess("u", now), newSess("u", now)
	onMachine.Project, cloned.Project, ended.Project = "p", "p", "p"
	for _, n := range []NewSession{onMachine, cloned, ended} {
		if err := s.CreateSession(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	s.MarkRunMachine(ctx, onMachine.RunID, "p")
	s.MarkRunMachine(ctx, ended.RunID, "p")
	s.End(ctx, ended.ID, StatusDestroyed, ReasonStopped, "", now)
	users, err := s.MachineSessions(ctx, "p")
	if err != nil || len(users) != 1 || users[0].ID != onMachine.ID {
		t.Fatalf("machine sessions: %v %v", users, err)
	}
	if err := s.SetRunRecord(ctx, onMachine.RunID, "worktree3"); err != nil {
		t.Fatal(err)
	}
	if mach, rec, _ := s.RunMachine(ctx, onMachine.RunID); mach != "p" || rec != "worktree3" {
		t.Fatalf("RunMachine = %q, %q", mach, rec)
	}
	if mach, _, _ := s.RunMachine(ctx, cloned.RunID); mach != "" {
		t.Fatalf("RunMachine of a clone = %q", mach)
	}
	if had, err := s.DeleteMachine(ctx, "p"); err != nil || !had {
		t.Fatalf("DeleteMachine: %v, %v", had, err)
	}
	if had, err := s.DeleteMachine(ctx, "p"); err != nil || had {
		t.Fatalf("DeleteMachine of a machine already gone: %v, %v", had, err)
	}
	if _, err := s.GetMachine(ctx, "p"); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("after delete: %v", err)
	}
}

// The pool size of a machine is recorded; nil follows XMODE_POOL_SIZE.
func TestPoolSize(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	now := time.Now()
	s.PutMachine(ctx, Machine{Project: "p", Repo: "/src", DefaultRef: "main", Volume: "v", CreatedAt: now, LastFetchAt: now})
	if m, _ := s.GetMachine(ctx, "p"); m.PoolSize != nil {
		t.Fatalf("a new machine's pool size is %d, want unset", *m.PoolSize)
	}
	if err := s.SetPoolSize(ctx, "p", 3); err != nil {
		t.Fatal(err)
	}
	s.PutMachine(ctx, Machine{Project: "p", Repo: "/src", DefaultRef: "main", Volume: "v", CreatedAt: now, LastFetchAt: now})
	if m, _ := s.GetMachine(ctx, "p"); m.PoolSize == nil || *m.PoolSize != 3 {
		t.Fatalf("the pool size did not survive a warm: %v", m.PoolSize)
	}
	if err := s.SetPoolSize(ctx, "nope", 3); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("pool size of no machine: %v", err)
	}
}

// ProjectUsers: who made a session of the project since then, once each,
// by name; sessions of no project or of another are not counted.
func TestProjectUsers(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	now := time.Now()
	for _, c := range []struct {
		user, project string
		ago           time.Duration
	}{{"bob", "p", time.Minute}, {"alice", "p", time.Hour}, {"bob", "p", 2 * time.Minute}, {"carol", "p", 48 * time.Hour},
		{"dave", "q", time.Minute}, {"erin", "", time.Minute}} {
		n := newSess(c.user, now.Add(-c.ago))
		n.Project = c.project
		if err := s.CreateSession(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ProjectUsers(ctx, "p", now.Add(-24*time.Hour))
	if err != nil || strings.Join(got, ",") != "alice,bob" {
		t.Fatalf("ProjectUsers = %q, %v; want alice,bob", got, err)
	}
	if got, err := s.ProjectUsers(ctx, "", now.Add(-24*time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("users of no project: %q, %v", got, err)
	}
}
