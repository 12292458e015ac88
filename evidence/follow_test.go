package evidence

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/internal/proc"
	"github.com/xmode/xmode/store"
)

// followWorld is a real store with one session, whose steps the tests
// record with Begin and follow.
type followWorld struct {
	st   *store.Store
	g    fsguard.Guard
	sess *store.Session
}

func newFollowWorld(t *testing.T) *followWorld {
	t.Helper()
	root := t.TempDir()
	st, err := store.Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now()
	s := store.Session{ID: store.NewSessionID(), RunID: store.NewRunID(), User: "tester", RunnerMode: "local_worktree",
		Engine: "host", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.CreateSession(context.Background(), store.NewSession{Session: s, NewRun: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.Provisioned(context.Background(), s.ID, "", "", "", "", nil, s.ExpiresAt); err != nil {
		t.Fatal(err)
	}
	return &followWorld{st: st, g: fsguard.Guard{Root: root}, sess: &s}
}

func (w *followWorld) begin(t *testing.T) (*Step, store.StepRow) {
	t.Helper()
	step, err := Begin(context.Background(), w.st, w.g, Request{Session: w.sess, Argv: []string{"make", "test"}})
	if err != nil {
		t.Fatal(err)
	}
	row, err := w.st.Step(context.Background(), w.sess.RunID, step.Seq())
	if err != nil {
		t.Fatal(err)
	}
	return step, row
}

// Run hands over every byte of both logs as the step writes them, in
// order, and returns once the step has ended — with its result.json there
// to be read, though the step's xmode writes it after the row says it
// ended.
func TestFollowerRunToTheEnd(t *testing.T) {
	w := newFollowWorld(t)
	step, row := w.begin(t)
	fw, err := Follow(w.st, w.g, time.Now, row, StdoutFile, StderrFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	var got [2]strings.Builder
	states := 0
	done := make(chan error, 1)
	var last store.StepRow
	go func() {
		var err error
		last, err = fw.Run(context.Background(), Stream{Poll: 5 * time.Millisecond, Chunk: 7,
			Out:   func(i int, p []byte) error { got[i].Write(p); return nil },
			State: func(store.StepRow) error { states++; return nil }})
		done <- err
	}()
	var want [2]strings.Builder
	for i := range 20 {
		line := strings.Repeat("x", i) + "\n"
		io.WriteString(step.Stdout, line)
		io.WriteString(step.Stderr, "e"+line)
		want[0].WriteString(line)
		want[1].WriteString("e" + line)
		time.Sleep(2 * time.Millisecond)
	}
	// The end as its xmode records it: the row, and result.json a moment
	// later (a slow disk, a busy machine).
	for _, l := range []*capLog{step.stdout, step.stderr} {
		l.close()
	}
	code := 3
	if _, err := w.st.FinishStep(context.Background(), store.StepEnd{RunID: row.RunID, Seq: row.Seq, Finished: time.Now(), ExitCode: code}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) before the step's result.json was written", err)
	case <-time.After(300 * time.Millisecond):
	}
	step.res.ExitCode = code
	if err := step.writeResult(); err != nil {
		t.Fatal(err)
	}
	step.close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got[i].String() != want[i].String() {
			t.Errorf("log %d: got %q, want %q", i, got[i].String(), want[i].String())
		}
	}
	if last.State != store.StateFinished || last.ExitCode == nil || *last.ExitCode != code || states == 0 {
		t.Errorf("the last row: %+v (%d state calls)", last, states)
	}
}

// A step still recorded running whose xmode is gone has ended for the
// follower: its logs will not grow. Its owner here is in another PID
// namespace, where only the heartbeat can tell (no heartbeat for
// StepStaleAfter: gone); an owner this machine sees alive keeps a step
// running whatever its heartbeat (store.StepRow.Gone).
func TestFollowerEndsWhenTheXmodeIsGone(t *testing.T) {
	w := newFollowWorld(t)
	step, row := w.begin(t)
	defer step.Finish(context.Background(), engine.Status{})
	name, _, _ := strings.Cut(proc.Self(), "@")
	if _, err := w.st.Exec(context.Background(), `UPDATE steps SET owner = ? WHERE run_id = ? AND seq = ?`, name+"@0", row.RunID, row.Seq); err != nil {
		t.Fatal(err)
	}
	row.Owner = name + "@0"
	io.WriteString(step.Stdout, "half a line")
	now := time.Now()
	clock := func() time.Time { return now }
	fw, err := Follow(w.st, w.g, func() time.Time { return clock() }, row, StdoutFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	ctx := context.Background()
	if ended, err := fw.Ended(ctx); err != nil || ended {
		t.Fatalf("a step with a fresh heartbeat: ended %v, %v", ended, err)
	}
	clock = func() time.Time { return now.Add(store.StepStaleAfter + time.Second) }
	ended, err := fw.Ended(ctx)
	if err != nil || !ended || fw.Step().State != store.StateRunning {
		t.Fatalf("a step whose heartbeat is stale: ended %v, %v, row %+v", ended, err, fw.Step())
	}
	buf := make([]byte, 64)
	n, err := fw.Read(0, buf)
	if err != nil || string(buf[:n]) != "half a line" || fw.Offset(0) != int64(n) {
		t.Errorf("read %q, %v, offset %d", buf[:n], err, fw.Offset(0))
	}
	if n, err := fw.Read(0, buf); n != 0 || err != nil {
		t.Errorf("a read past the end: %d, %v", n, err)
	}
}

// Seek stays within the log, and a follower opens only a step's logs.
func TestFollowerSeekAndFiles(t *testing.T) {
	w := newFollowWorld(t)
	step, row := w.begin(t)
	defer step.Finish(context.Background(), engine.Status{})
	io.WriteString(step.Stdout, "0123456789")
	if _, err := Follow(w.st, w.g, time.Now, row, ResultFile); err == nil {
		t.Error("a follower of result.json")
	}
	fw, err := Follow(w.st, w.g, time.Now, row, StdoutFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	for _, c := range []struct{ seek, want int64 }{{4, 4}, {-3, 0}, {99, 10}} {
		if err := fw.Seek(0, c.seek); err != nil || fw.Offset(0) != c.want {
			t.Errorf("Seek(%d): offset %d, %v; want %d", c.seek, fw.Offset(0), err, c.want)
		}
	}
}
