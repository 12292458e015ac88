package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
	"github.com/xmode/xmode/store"
)

// cloudRig is a storage root, a repository and the codex stand-in (this
// test binary, linked as codex), for tests that drive real xmode processes.
type cloudRig struct {
	t    *testing.T
	root string
	repo string
	bin  string // directory with codex and fakecodex
	fake *codexcloudtest.Fake
	env  []string
}

func newCloudRig(t *testing.T) *cloudRig {
	t.Helper()
	dir := t.TempDir()
	r := &cloudRig{t: t, root: filepath.Join(dir, "root"), repo: filepath.Join(dir, "repo"), bin: codexcloudtest.Install(t), fake: codexcloudtest.New(t)}
	if err := makeRepo(r.repo); err != nil {
		t.Fatal(err)
	}
	r.env = append(r.fake.Env(), "XMODE_CODEX_BIN="+filepath.Join(r.bin, "codex"), "HOME="+filepath.Join(dir, "home"),
		"XMODE_SANDBOX_MAX_OPEN=0", "XMODE_USER=tester")
	return r
}

func (r *cloudRig) run(env []string, args ...string) (string, string, int) {
	r.t.Helper()
	return reapRun(r.t, r.root, append(append([]string{}, r.env...), env...), args...)
}

func (r *cloudRig) must(env []string, args ...string) string {
	r.t.Helper()
	out, errOut, code := r.run(env, args...)
	if code != 0 {
		r.t.Fatalf("xmode %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return strings.TrimSpace(out)
}

// submitted creates a cloud_subscription session and submits it.
func (r *cloudRig) submitted() (sid, tid string) {
	r.t.Helper()
	sid = r.must(nil, "sandbox", "create", "--repo", r.repo, "--runner-mode", "cloud_subscription", "-q")
	tid = r.must(nil, "cloud", "submit", sid, "--env", "env_1", "--prompt", "work on "+sid)
	return sid, tid
}

func (r *cloudRig) start(env []string, args ...string) *os.Process {
	r.t.Helper()
	c := reapCmd(r.t, r.root, args...)
	c.Env = append(append(c.Env, r.env...), env...)
	if err := c.Start(); err != nil {
		r.t.Fatal(err)
	}
	go c.Wait()
	return c.Process
}

// waitCalls waits until the stand-in has started n calls of op.
func (r *cloudRig) waitCalls(op string, n int) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got := 0
		for _, c := range r.fake.Calls() {
			if c.Op == op {
				got++
			}
		}
		if got >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Fatalf("the stand-in never got %d %s calls: %+v", n, op, r.fake.Calls())
}

func waitExit(t *testing.T, pid int) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if st := reapProcState(pid); st == "" || st == "Z" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d did not end", pid)
}

func (r *cloudRig) thread(st *store.Store, tid string) []string {
	r.t.Helper()
	lines, err := st.Thread(context.Background(), tid, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, l := range lines {
		out = append(out, l.Line)
	}
	return out
}

// kill -9 of `cloud poll` while the stand-in's status calls are slow, then
// while its diff calls are (the transcript already recorded), then a poll
// that converges: every transcript line once, every ready task captured
// once, no task lost, no lease left.
func TestCloudPollKilledMidPollConverges(t *testing.T) {
	t.Parallel()
	r := newCloudRig(t)
	// Transcripts come through a status command printing the JSON Result.
	r.env = append(r.env, "CODEX_CLOUD_STATUS_COMMAND="+filepath.Join(r.bin, "fakecodex")+" result {task_id}")
	const n = 4
	var sids, tids []string
	for range n {
		s, tk := r.submitted()
		sids, tids = append(sids, s), append(tids, tk)
	}
	patch := "diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-version two\n+version three\n"
	for i, tk := range tids {
		r.fake.Update(tk, func(t *codexcloudtest.Task) {
			t.Status, t.Transcript = "running", []string{"reading " + tk, "editing " + tk}
			if i%2 == 0 {
				t.Status, t.Diff = "ready", patch
			}
		})
	}

	// 1. Killed during slow status calls: nothing recorded, leases left.
	r.fake.Configure(func(c *codexcloudtest.Config) { c.StatusDelay = time.Minute })
	p := r.start(nil, "cloud", "poll")
	r.waitCalls("result", n)
	p.Signal(syscall.SIGKILL)
	waitExit(t, p.Pid)
	for _, c := range r.fake.Calls() {
		if c.Op != "result" {
			continue
		}
		if c.Finish {
			t.Fatalf("a status call finished: %+v", c)
		}
		waitExit(t, c.PID) // codex dies with the poll that started it
	}
	st := reapStore(t, r.root)
	if cl, _ := st.CloudClaims(context.Background()); len(cl) != n {
		t.Fatalf("leases after the kill: %v", cl)
	}

	// 2. Killed during slow diff calls: a ready task's transcript is in
	// (recorded before its diff is asked for); a running task's may be
	// (the recorder gathers answers for a moment), but never half.
	r.fake.Configure(func(c *codexcloudtest.Config) { c.StatusDelay, c.DiffDelay = 0, time.Minute })
	p = r.start(nil, "cloud", "poll")
	r.waitCalls("diff", n/2)
	p.Signal(syscall.SIGKILL)
	waitExit(t, p.Pid)
	for i, tk := range tids {
		if got := r.thread(st, tk); len(got) != 2 && (i%2 == 0 || len(got) != 0) {
			t.Fatalf("task %d thread after the second kill: %q", i, got)
		}
		s, _ := st.Get(context.Background(), sids[i])
		if s.Status != store.StatusSubmitted {
			t.Fatalf("session %d is %s before its diff was captured", i, s.Status)
		}
	}

	// 3. One more line for a running task, then a poll that converges.
	r.fake.Update(tids[1], func(t *codexcloudtest.Task) { t.Transcript = append(t.Transcript, "testing") })
	r.fake.Configure(func(c *codexcloudtest.Config) { c.DiffDelay = 0 })
	out, errOut, code := r.run(nil, "cloud", "poll", "--json")
	if code != 0 || errOut != "" {
		t.Fatalf("the poll after the kills: exit %d\n%s\n%s", code, out, errOut)
	}
	var sum struct {
		Ready           int `json:"ready"`
		Running         int `json:"running"`
		TranscriptLines int `json:"transcript_lines"`
	}
	json.Unmarshal([]byte(out), &sum)
	if sum.Ready != n/2 || sum.Running != n/2 {
		t.Fatalf("the poll after the kills: %s", out)
	}
	for i, tk := range tids {
		want := []string{"reading " + tk, "editing " + tk}
		if i == 1 {
			want = append(want, "testing")
		}
		if got := r.thread(st, tk); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("task %d thread %q, want %q", i, got, want)
		}
		s, _ := st.Get(context.Background(), sids[i])
		task, _ := st.CloudTask(context.Background(), tk)
		if i%2 == 0 {
			if s.Status != store.StatusReady || task.Capture == "" {
				t.Fatalf("task %d: session %s, capture %q", i, s.Status, task.Capture)
			}
			// the change request made of the diff, once, whatever the crash
			crs, err := st.ListChanges(context.Background(), store.ChangeFilter{RunID: s.RunID})
			if err != nil || len(crs) != 1 || crs[0].ID != task.Capture {
				t.Fatalf("task %d: change requests %v (%v), capture %q; want exactly the captured one", i, crs, err, task.Capture)
			}
		} else if s.Status != store.StatusSubmitted || task.Finished() {
			t.Fatalf("task %d: session %s, %+v", i, s.Status, task)
		}
	}
	if cl, _ := st.CloudClaims(context.Background()); len(cl) != 0 {
		t.Fatalf("leases left: %v", cl)
	}
	finishedDiffs := 0
	for _, c := range r.fake.Calls() {
		if c.Op == "diff" && c.Finish {
			finishedDiffs++
		}
	}
	if finishedDiffs != n/2 {
		t.Fatalf("%d diffs completed, want one per ready task", finishedDiffs)
	}
}

// Three `cloud poll` processes and a `cloud poll --sweep` started at once
// never ask about one task at the same time, and together poll every task,
// each transcript landing once.
func TestCloudPollersRace(t *testing.T) {
	t.Parallel()
	r := newCloudRig(t)
	r.env = append(r.env, "CODEX_CLOUD_STATUS_COMMAND="+filepath.Join(r.bin, "fakecodex")+" result {task_id}",
		"XMODE_CLOUD_STALE_AFTER=1ms")
	const n = 12
	var tids []string
	for range n {
		_, tk := r.submitted()
		tids = append(tids, tk)
		r.fake.Update(tk, func(t *codexcloudtest.Task) { t.Status, t.Transcript = "running", []string{"line of " + tk} })
	}
	r.fake.Configure(func(c *codexcloudtest.Config) { c.StatusDelay = 150 * time.Millisecond })
	var wg sync.WaitGroup
	for i := range 4 {
		args := []string{"cloud", "poll"}
		if i == 3 {
			args = append(args, "--sweep")
		}
		wg.Go(func() {
			if out, errOut, code := r.run(nil, args...); code != 0 || errOut != "" {
				t.Errorf("%v: exit %d\n%s\n%s", args, code, out, errOut)
			}
		})
	}
	wg.Wait()
	byTask := map[string][]codexcloudtest.Call{}
	for _, c := range r.fake.Calls() {
		if c.Op == "result" {
			byTask[c.Task] = append(byTask[c.Task], c)
		}
	}
	st := reapStore(t, r.root)
	for _, tk := range tids {
		calls := byTask[tk]
		if len(calls) == 0 {
			t.Fatalf("%s never polled", tk)
		}
		sort.Slice(calls, func(i, j int) bool { return calls[i].Start.Before(calls[j].Start) })
		for i := 1; i < len(calls); i++ {
			if !calls[i-1].Finish || calls[i].Start.Before(calls[i-1].End) {
				t.Fatalf("%s asked about by two pollers at once: %+v", tk, calls)
			}
		}
		if got := r.thread(st, tk); len(got) != 1 {
			t.Fatalf("%s thread %q", tk, got)
		}
		task, _ := st.CloudTask(context.Background(), tk)
		if task.Polls != len(calls) {
			t.Fatalf("%s: %d polls recorded, %d status calls made", tk, task.Polls, len(calls))
		}
	}
}

// SIGTERM ends `cloud poll --watch` cleanly (exit 0) even in the middle of a
// slow status call: the call is killed and its lease released.
func TestCloudWatchSIGTERM(t *testing.T) {
	t.Parallel()
	r := newCloudRig(t)
	r.submitted()
	r.fake.Configure(func(c *codexcloudtest.Config) { c.StatusDelay = time.Minute })
	c := reapCmd(t, r.root, "cloud", "poll", "--watch", "--interval", "50ms")
	c.Env = append(c.Env, r.env...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	r.waitCalls("status", 1)
	start := time.Now()
	c.Process.Signal(syscall.SIGTERM)
	err := c.Wait()
	if err != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("watch after SIGTERM: %v after %s", err, time.Since(start))
	}
	calls := r.fake.Calls()
	waitExit(t, calls[0].PID)
	st := reapStore(t, r.root)
	if cl, _ := st.CloudClaims(context.Background()); len(cl) != 0 {
		t.Fatalf("leases left: %v", cl)
	}
}

// The real Codex CLI (codexcloudtest.RealVersion, from npm), not signed in:
// `cloud submit` and `cloud poll` report a permanent failure naming `codex
// login`. Signed in (a ChatGPT token of our making) with the backend
// unreachable (a proxy that refuses connections): transient, backed off.
func TestCloudRealCodex(t *testing.T) {
	t.Parallel()
	real := codexcloudtest.RealCodex(t)
	r := newCloudRig(t)
	empty := []string{"XMODE_CODEX_BIN=" + real, "HOME=" + t.TempDir()}

	s1 := r.must(nil, "sandbox", "create", "--repo", r.repo, "--runner-mode", "cloud_subscription", "-q")
	_, errOut, code := r.run(empty, "cloud", "submit", s1, "--env", "env_1", "--prompt", "x")
	if code != 1 || !strings.Contains(errOut, "submit failed (permanent)") || !strings.Contains(errOut, "codex login") {
		t.Fatalf("submit, not signed in: exit %d: %s", code, errOut)
	}
	var sess store.Session
	json.Unmarshal([]byte(r.must(nil, "sandbox", "show", s1, "--json")), &sess)
	if sess.Status != store.StatusFailed || sess.EndReason != store.ReasonSubmitFailed {
		t.Fatalf("after a failed submit: %s (%s)", sess.Status, sess.EndReason)
	}

	// A task submitted through the stand-in, polled with the real CLI.
	s2, _ := r.submitted()
	out, errOut, code := r.run(empty, "cloud", "poll")
	if code != 1 || out != "" || !strings.Contains(errOut, "codex is not signed in; run `codex login`") {
		t.Fatalf("poll, not signed in: exit %d\n%s\n%s", code, out, errOut)
	}
	var task store.CloudTask
	json.Unmarshal([]byte(r.must(nil, "cloud", "show", s2, "--json")), &task)
	if task.ErrorClass != store.ErrPermanent || !task.Parked() || task.SessionStatus != store.StatusSubmitted {
		t.Fatalf("after a poll not signed in: %+v", task)
	}

	// Signed in, backend unreachable.
	home := t.TempDir()
	writeChatGPTAuth(t, home)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := "http://" + l.Addr().String()
	l.Close()
	offline := []string{"XMODE_CODEX_BIN=" + real, "HOME=" + home, "HTTPS_PROXY=" + proxy, "https_proxy=" + proxy,
		"NO_PROXY=", "no_proxy=", "XMODE_CLOUD_STALE_AFTER=1m"}
	advanceClock(t, r.root, 61*time.Second) // the parked task's last poll is stale
	out, errOut, code = r.run(offline, "cloud", "poll", "--sweep")
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("poll, backend unreachable: exit %d\n%s\n%s", code, out, errOut)
	}
	json.Unmarshal([]byte(r.must(nil, "cloud", "show", s2, "--json")), &task)
	if task.ErrorClass != store.ErrTransient || task.NextDueAt == nil || time.Until(*task.NextDueAt) < 20*time.Second ||
		!strings.Contains(task.LastError, "error sending request for url") {
		t.Fatalf("after a poll with the backend unreachable: %+v", task)
	}
	s3 := r.must(nil, "sandbox", "create", "--repo", r.repo, "--runner-mode", "cloud_subscription", "-q")
	_, errOut, code = r.run(offline, "cloud", "submit", s3, "--env", "env_1", "--prompt", "x")
	if code != 1 || !strings.Contains(errOut, "submit failed (transient)") || !strings.Contains(errOut, "unreachable") {
		t.Fatalf("submit, backend unreachable: exit %d: %s", code, errOut)
	}
}

// writeChatGPTAuth signs codex in with a ChatGPT token of our making: codex
// checks it only when it reaches the backend, which these tests never do.
func writeChatGPTAuth(t *testing.T, home string) {
	t.Helper()
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	jwt := b64(`{"alg":"none","typ":"JWT"}`) + "." +
		b64(`{"email":"t@example.com","exp":4102444800,"https://api.openai.com/auth":{"chatgpt_plan_type":"plus","chatgpt_account_id":"acc_test","chatgpt_user_id":"u"}}`) +
		".c2ln"
	auth := fmt.Sprintf(`{"OPENAI_API_KEY":null,"tokens":{"id_token":%q,"access_token":%q,"refresh_token":"r","account_id":"acc_test"},"last_refresh":%q}`,
		jwt, jwt, time.Now().UTC().Format(time.RFC3339))
	if err := os.MkdirAll(filepath.Join(home, ".codex"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".codex", "auth.json"), []byte(auth), 0o600); err != nil {
		t.Fatal(err)
	}
}
