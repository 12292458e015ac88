package reaper_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// outside makes a directory outside the storage root with files that must
// survive everything the reaper does.
func outside(t *testing.T, e *env, name string) (dir string, files []string) {
	t.Helper()
	dir = filepath.Join(e.dir, name)
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	for _, f := range []string{"precious.txt", "sub/deep.txt"} {
		p := filepath.Join(dir, f)
		if err := os.WriteFile(p, []byte("keep me\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	return dir, files
}

func survive(t *testing.T, files []string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || string(b) != "keep me\n" {
			t.Errorf("%s did not survive the reaper: %q %v", f, b, err)
		}
	}
}

// Tampered rows: whatever worktree_path says — /, a home directory, ../.., another
// session's worktree — the reaper removes <root>/runs/<run>/worktree of the
// session's own run, and nothing else.
func TestTamperedWorktreePathDeletesNothingOutside(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	home, homeFiles := outside(t, e, "home")
	victim := e.create("") // another open session: its worktree must stay
	claims := []string{"/", home, "../..", e.root, filepath.Join(e.root, "runs"), victim.WorktreePath, e.worktree(victim) + "/../../.."}
	var sessions []*store.Session
	for _, claim := range claims {
		s := e.create("")
		e.exec(s, "true") // evidence
		e.sql(`UPDATE sessions SET worktree_path = ? WHERE id = ?`, claim, s.ID)
		sessions = append(sessions, s)
		e.expire(s.ID)
	}
	sum := e.pass(nil, false)
	want(t, sum, reaper.Summary{Expired: len(claims), Destroyed: len(claims), WorktreesReclaimed: len(claims)})
	survive(t, homeFiles)
	if !exists(filepath.Join(e.worktree(victim), "README")) || e.get(victim.ID).Status != store.StatusOpen {
		t.Fatal("another session's worktree was touched")
	}
	for _, s := range sessions {
		if exists(e.worktree(s)) {
			t.Errorf("%s: own worktree not reclaimed", s.ID)
		}
		if !exists(filepath.Join(e.root, "runs", s.RunID, "steps", "0001-true", "result.json")) {
			t.Errorf("%s: evidence lost", s.ID)
		}
	}
	if !exists(filepath.Join(e.root, store.FileName)) {
		t.Fatal("the database is gone")
	}
	if !strings.Contains(e.log.String(), "ignoring stored worktree path") {
		t.Fatalf("the tampered path was not reported:\n%s", e.log)
	}
}

// A sandboxed command replaced its worktree with a symlink to an outside
// directory, or planted symlinks (and a hard link) to outside files and
// directories inside it: the links go, their targets stay.
func TestPlantedSymlinksDeleteNothingOutside(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	dir1, files1 := outside(t, e, "target1")
	dir2, files2 := outside(t, e, "target2")

	replaced := e.create("")
	e.exec(replaced, "sh", "-c", `cd .. && rm -rf worktree && ln -s "$0" worktree`, dir1)

	planted := e.create("")
	e.exec(planted, "sh", "-c", `ln -s "$0" dirlink; ln -s "$0/precious.txt" filelink; mkdir -p x/y; ln -s "$0/sub" x/y/deeplink; ln -s / rootlink; ln "$0/sub/deep.txt" hardlink || true`, dir2)

	e.expire(replaced.ID, planted.ID)
	sum := e.pass(nil, false)
	want(t, sum, reaper.Summary{Expired: 2, Destroyed: 2, WorktreesReclaimed: 2})
	survive(t, append(files1, files2...))
	if !exists(dir1) || !exists(dir2) {
		t.Fatal("a symlink target directory went")
	}
	if exists(e.worktree(replaced)) || exists(e.worktree(planted)) {
		t.Fatal("the worktree (or the symlink standing in for it) is still there")
	}
}

// The orphan sweep of run directories never follows a symlinked run
// directory, leaves directories that are not runs alone, keeps runs with an
// open session, and keeps runs the store never knew unless asked.
func TestOrphanWorktreeSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	// a teardown that died between ending the session and removing the worktree
	crashed := e.create("")
	e.exec(crashed, "true")
	if _, _, err := e.st.End(ctx, crashed.ID, store.StatusDestroyed, store.ReasonStopped, "", crashed.CreatedAt); err != nil {
		t.Fatal(err)
	}
	// a run the database does not know (restored from a backup, say)
	unknown := filepath.Join(e.root, "runs", store.NewRunID(), "worktree")
	os.MkdirAll(unknown, 0o755)
	os.WriteFile(filepath.Join(unknown, "f"), nil, 0o644)
	// an open session
	live := e.create("")
	// things that are not runs
	odd := filepath.Join(e.root, "runs", "not-a-run", "worktree")
	os.MkdirAll(odd, 0o755)
	target, files := outside(t, e, "linked-run")
	os.MkdirAll(filepath.Join(target, "worktree"), 0o755)
	os.WriteFile(filepath.Join(target, "worktree", "precious.txt"), []byte("keep me\n"), 0o644)
	files = append(files, filepath.Join(target, "worktree", "precious.txt"))
	if err := os.Symlink(target, filepath.Join(e.root, "runs", store.NewRunID())); err != nil {
		t.Fatal(err)
	}

	want(t, e.pass(nil, true), reaper.Summary{DryRun: true, OrphansRemoved: 1})
	if !exists(e.worktree(crashed)) || !exists(unknown) {
		t.Fatal("dry run removed something")
	}
	want(t, e.pass(nil, false), reaper.Summary{OrphansRemoved: 1})
	if exists(e.worktree(crashed)) {
		t.Fatal("orphan worktree left")
	}
	// The run the store never knew is kept until asked for.
	if !exists(unknown) || !strings.Contains(e.log.String(), "kept worktree of a run the store does not know") {
		t.Fatalf("the worktree of an unknown run was reclaimed unasked, or silently kept:\n%s", e.log)
	}
	want(t, e.passWith(nil, reaper.PassOptions{ReclaimUnknown: true}), reaper.Summary{OrphansRemoved: 1})
	if exists(unknown) {
		t.Fatal("--reclaim-unknown left the unknown run's worktree")
	}
	if !exists(filepath.Join(e.root, "runs", crashed.RunID, "steps", "0001-true", "result.json")) {
		t.Fatal("evidence of the orphaned run lost")
	}
	if !exists(filepath.Join(e.worktree(live), "README")) || !exists(odd) {
		t.Fatal("the sweep removed a live worktree or something that is not a run")
	}
	survive(t, files)
	if !strings.Contains(e.log.String(), crashed.RunID+" reclaimed orphan worktree") {
		t.Fatalf("no log line for the orphan:\n%s", e.log)
	}
	want(t, e.pass(nil, false), reaper.Summary{})
}

// fakeSource is an engine with objects of two installs.
type fakeSource struct {
	mu      sync.Mutex
	objs    []engine.Object
	removed []string
	listErr error
}

func (f *fakeSource) ListObjects(_ context.Context, instance string) ([]engine.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	// A sloppy engine that returns other installs' objects too: the reaper
	// checks the label itself.
	return append([]engine.Object(nil), f.objs...), nil
}

func (f *fakeSource) RemoveObject(_ context.Context, o engine.Object) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, o.Name)
	return nil
}

// Orphan engine objects: this install's containers and per-session volumes
// whose session is not open go; open sessions' objects, shared volumes and
// everything of another install stay.
func TestOrphanEngineObjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	me, err := e.st.InstanceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := e.create("")
	ended := e.create("")
	e.svc.Stop(ctx, ended, false)
	src := &fakeSource{objs: []engine.Object{
		{Kind: engine.KindVolume, ID: "vol-ended", Name: "vol-ended", SessionID: ended.ID, Instance: me},
		{Kind: engine.KindContainer, ID: "c1", Name: "xmode-live", SessionID: live.ID, Instance: me},
		{Kind: engine.KindContainer, ID: "c2", Name: "xmode-ended", SessionID: ended.ID, Instance: me},
		{Kind: engine.KindContainer, ID: "c3", Name: "xmode-unknown", SessionID: "sbx_zzzzzzzz", Instance: me},
		{Kind: engine.KindContainer, ID: "c4", Name: "xmode-theirs", SessionID: "sbx_yyyyyyyy", Instance: "other-install"},
		{Kind: engine.KindVolume, ID: "vol-theirs", Name: "vol-theirs", SessionID: "sbx_yyyyyyyy", Instance: "other-install"},
		{Kind: engine.KindVolume, ID: "vol-shared", Name: "vol-shared", Instance: me},
		{Kind: engine.KindVolume, ID: "vol-live", Name: "vol-live", SessionID: live.ID, Instance: me},
	}}
	r := e.reaper()
	r.Orphans = src
	want(t, e.pass(r, true), reaper.Summary{DryRun: true, OrphansRemoved: 3})
	if len(src.removed) != 0 {
		t.Fatalf("dry run removed %v", src.removed)
	}
	want(t, e.pass(r, false), reaper.Summary{OrphansRemoved: 3})
	got := append([]string(nil), src.removed...)
	// containers before volumes (a volume in use cannot go)
	if len(got) != 3 || got[2] != "vol-ended" {
		t.Fatalf("removed %v", got)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "vol-ended xmode-ended xmode-unknown" {
		t.Fatalf("removed %v", got)
	}
	if !strings.Contains(e.log.String(), ended.ID+" removed orphan container xmode-ended") {
		t.Fatalf("no log line:\n%s", e.log)
	}

	// An engine that cannot be listed is an error of the pass; the rest of
	// the pass still runs.
	src.listErr = errors.New("daemon unreachable")
	s := e.create("")
	e.expire(s.ID)
	sum := e.pass(r, false)
	if len(sum.Errors) != 1 || !strings.Contains(sum.Errors[0].Error, "daemon unreachable") || sum.Destroyed != 1 {
		t.Fatalf("summary %+v", sum)
	}
}

// The run sweep is incremental: after the first pass it only looks at the
// runs that ended since the last one (a worktree a crashed teardown left is
// found at once), and at every run directory once per FullSweepEvery (a run
// whose end the watermark already passed waits for that).
func TestOrphanSweepIsIncremental(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.pass(nil, false)
	wm, ok, _ := e.st.MetaTime(ctx, store.KeySweepWatermark)
	full, ok2, _ := e.st.MetaTime(ctx, store.KeySweepFull)
	if !ok || !ok2 || full.Sub(wm) != reaper.WatermarkMargin {
		t.Fatalf("after the first pass: watermark %v (%v), full sweep %v (%v)", wm, ok, full, ok2)
	}
	crashed := e.create("")
	// a run that ended in the store but whose worktree a crashed teardown
	// left, and which the incremental sweep is not told about
	stale := e.create("")
	if _, _, err := e.st.End(ctx, stale.ID, store.StatusDestroyed, store.ReasonStopped, "", time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetMetaTime(ctx, store.KeySweepWatermark, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.End(ctx, crashed.ID, store.StatusDestroyed, store.ReasonStopped, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	want(t, e.pass(nil, false), reaper.Summary{OrphansRemoved: 1})
	if exists(e.worktree(crashed)) || !exists(e.worktree(stale)) {
		t.Fatal("the incremental sweep missed the ended run or listed every directory")
	}
	r := e.reaper()
	r.FullSweepEvery = time.Nanosecond
	want(t, e.pass(r, false), reaper.Summary{OrphansRemoved: 1})
	if exists(e.worktree(stale)) {
		t.Fatal("the full sweep missed the stale run")
	}
	if f2, _, _ := e.st.MetaTime(ctx, store.KeySweepFull); !f2.After(full) {
		t.Fatal("the full sweep was not recorded")
	}
}

// A first `machine warm` that was killed leaves a machine directory with no
// record (its lock file, maybe a clone of hundreds of MB): the reaper
// removes it once nobody holds its lock, and never a recorded machine, one
// in use, or one just being created.
func TestUnrecordedMachineCheckoutsAreRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	machinesDir := filepath.Join(e.root, "project_machines")
	mk := func(project string, age time.Duration) string {
		dir := filepath.Join(machinesDir, project)
		clone := filepath.Join(dir, "clone-0123456789ab")
		if err := os.MkdirAll(filepath.Join(clone, ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(clone, ".git", "packfile"), make([]byte, 1<<20), 0o644)
		os.WriteFile(filepath.Join(dir, "lock"), nil, 0o644)
		old := time.Now().Add(-age)
		os.Chtimes(dir, old, old)
		return dir
	}
	killed := mk("killed", time.Hour)
	fresh := mk("fresh", 0)
	busy := mk("busy", time.Hour)
	lock, err := os.OpenFile(filepath.Join(busy, "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	recorded := mk("recorded", time.Hour)
	if err := e.st.PutMachine(ctx, store.Machine{Project: "recorded", Repo: "/r", DefaultRef: "main", Volume: "v", CreatedAt: time.Now(), LastFetchAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	want(t, e.pass(nil, true), reaper.Summary{DryRun: true, OrphansRemoved: 1})
	if !exists(killed) {
		t.Fatal("a dry run removed the killed warm's checkout")
	}
	want(t, e.pass(nil, false), reaper.Summary{OrphansRemoved: 1})
	if exists(killed) {
		t.Fatal("the killed warm's checkout is still there")
	}
	for _, d := range []string{fresh, busy, recorded} {
		if !exists(filepath.Join(d, "clone-0123456789ab")) {
			t.Fatalf("%s was removed", d)
		}
	}
	if !strings.Contains(e.log.String(), "killed removed the checkout of a project machine that was never recorded") {
		t.Fatalf("no log line:\n%s", e.log)
	}
}
