package cmd

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/store"
)

// rows inserts sessions with the IDs given straight into c's store (no
// worktree: for what reads only the store), open unless a status says
// otherwise, each in a run of its own.
func (c *testCLI) rows(sessions map[string]string) {
	c.t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, c.root)
	if err != nil {
		c.t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for id, status := range sessions {
		s := store.Session{ID: id, RunID: store.NewRunID(), User: "tester", RunnerMode: "local_worktree", Engine: "host",
			CreatedAt: now, ExpiresAt: now.Add(time.Hour), Repo: "/src/" + id, Ref: "main"}
		if status == "expired" {
			s.ExpiresAt = now.Add(-time.Minute)
		}
		if err := st.CreateSession(ctx, store.NewSession{Session: s, NewRun: true}); err != nil {
			c.t.Fatal(err)
		}
		if status == store.StatusProvisioning {
			continue
		}
		if err := st.Provisioned(ctx, id, "0123456789abcdef0123", "", "", "", nil, time.Time{}); err != nil {
			c.t.Fatal(err)
		}
		if status == store.StatusDestroyed {
			if _, _, err := st.End(ctx, id, store.StatusDestroyed, store.ReasonStopped, "", now); err != nil {
				c.t.Fatal(err)
			}
		}
	}
}

// The resolve-session helper: a unique prefix finds its session, an
// ambiguous one is a usage error naming both, an unknown one is not found,
// and openSession refuses a session that cannot run a step, in the words
// the services use.
func TestSessionHelper(t *testing.T) {
	c := newTestCLI(t)
	c.rows(map[string]string{
		"sbx_aaaaaaaa": "open", "sbx_aaaabbbb": "open",
		"sbx_cccccccc": "expired", "sbx_dddddddd": store.StatusDestroyed, "sbx_eeeeeeee": store.StatusProvisioning,
	})
	a := c.app()
	ctx := context.Background()
	for _, tc := range []struct {
		ref    string
		want   sessionWant
		id     string    // found
		kind   fail.Kind // else this error
		saying string
	}{
		{ref: "sbx_aaaaa", want: anySession, id: "sbx_aaaaaaaa"},
		{ref: "aaaab", want: openSession, id: "sbx_aaaabbbb"},
		{ref: "sbx_aaaa", want: anySession, kind: fail.Usage, saying: "ambiguous: it matches sbx_aaaaaaaa, sbx_aaaabbbb"},
		{ref: "sbx_zzzz", want: anySession, kind: fail.NotFound, saying: "no session sbx_zzzz"},
		{ref: "sbx", want: anySession, kind: fail.Usage, saying: "too short"},
		{ref: "sbx_cccc", want: anySession, id: "sbx_cccccccc"},
		{ref: "sbx_cccc", want: openSession, kind: fail.Refused, saying: "expired at"},
		{ref: "sbx_dddd", want: anySession, id: "sbx_dddddddd"},
		{ref: "sbx_dddd", want: openSession, kind: fail.Refused, saying: "is destroyed, not open"},
		{ref: "sbx_eeee", want: openSession, kind: fail.Refused, saying: "still provisioning"},
	} {
		svc, sess, err := a.session(ctx, tc.ref, tc.want)
		switch {
		case tc.id != "" && err != nil:
			t.Errorf("session(%q, %v): %v, want %s", tc.ref, tc.want, err, tc.id)
		case tc.id != "" && (sess.ID != tc.id || svc == nil):
			t.Errorf("session(%q, %v) = %s, want %s", tc.ref, tc.want, sess.ID, tc.id)
		case tc.id == "" && err == nil:
			t.Errorf("session(%q, %v) = %s, want a %v error", tc.ref, tc.want, sess.ID, tc.kind)
		case tc.id == "" && (fail.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.saying)):
			t.Errorf("session(%q, %v): %v (kind %v), want kind %v saying %q", tc.ref, tc.want, err, fail.KindOf(err), tc.kind, tc.saying)
		}
	}
}

// sandbox list: a table of open sessions (--all adds ended ones), their IDs
// with -q, and a JSON array, empty rather than null, with --json.
func TestSandboxList(t *testing.T) {
	c := newTestCLI(t)
	if out := c.ok("sandbox", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("list --json of no sessions: %q, want []", out)
	}
	c.rows(map[string]string{"sbx_aaaaaaaa": "open", "sbx_dddddddd": store.StatusDestroyed})

	out := c.ok("sandbox", "list")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("list: want a header and one open session:\n%s", out)
	}
	header := regexp.MustCompile(`^ID +STATUS +USER +ENGINE +REPO +REF +SIZE +CREATED +EXPIRES$`)
	row := regexp.MustCompile(`^sbx_aaaaaaaa +open +tester +host +sbx_aaaaaaaa +main +\S+ +\d+s ago +\d+m left$`)
	if !header.MatchString(lines[0]) || !row.MatchString(lines[1]) {
		t.Errorf("list:\n%s", out)
	}
	if col := strings.Index(lines[0], "EXPIRES"); strings.Index(lines[1], strings.Fields(lines[1])[9]) != col {
		t.Errorf("EXPIRES is not aligned:\n%s", out)
	}

	out = c.ok("sandbox", "list", "--all", "-q")
	if got := strings.Fields(out); len(got) != 2 || !strings.Contains(out, "sbx_aaaaaaaa\n") || !strings.Contains(out, "sbx_dddddddd\n") {
		t.Errorf("list --all -q: %q, want the two IDs, one a line", out)
	}

	var got []store.Session
	if err := json.Unmarshal([]byte(c.ok("sandbox", "list", "--all", "--user", "tester", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Errorf("list --all --json: %d sessions, want 2", len(got))
	}
	if out := c.ok("sandbox", "list", "--all", "--user", "nobody", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("list --user nobody --json: %q, want []", out)
	}
}

// An ended session's worktree is gone: list shows no size for it, show says
// it was removed and what it held at teardown; an open one's is measured.
func TestEndedSessionSize(t *testing.T) {
	c := newTestCLI(t)
	id := c.session()
	c.ok("sandbox", "exec", id, "--", "sh", "-c", "head -c 300000 /dev/zero > big")
	if out := c.ok("sandbox", "show", id); !regexp.MustCompile(`\nWorktree: +\S+/worktree \(\d+\.\dK\)\n`).MatchString(out) {
		t.Errorf("show of an open session:\n%s", out)
	}
	if out := c.ok("sandbox", "list"); !regexp.MustCompile(`\n` + id + ` +open .* \d+\.\dK +\d+s ago`).MatchString(out) {
		t.Errorf("list of an open session:\n%s", out)
	}
	c.ok("sandbox", "stop", id)
	if out := c.ok("sandbox", "list", "--all"); !regexp.MustCompile(`\n` + id + ` +destroyed \(stopped\) .* - +\d+s ago +ended\n`).MatchString(out) {
		t.Errorf("list of an ended session shows a size:\n%s", out)
	}
	if out := c.ok("sandbox", "show", id); !regexp.MustCompile(`\nWorktree: +\S+/worktree \(removed; it held \d+\.\dK at teardown\)\n`).MatchString(out) {
		t.Errorf("show of an ended session:\n%s", out)
	}
}

// sandbox show: its fields as aligned "Label: value" lines, its steps under
// them; --json is the session with its steps.
func TestSandboxShow(t *testing.T) {
	c := newTestCLI(t)
	id := c.session()
	c.ok("sandbox", "exec", id, "--name", "hello", "--", "echo", "hello")

	out := c.ok("sandbox", "show", id[:8])
	for _, want := range []string{
		"ID:           " + id + "\n",
		"Status:       open\n",
		"Engine:       host\n",
		"Ref:          main ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show does not have %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`\n\nSTEP +SESSION +COMMAND +EXIT +DURATION\n0001-hello +` + id + ` +echo hello +0 +\S+\n$`).MatchString(out) {
		t.Errorf("show does not end with its steps:\n%s", out)
	}

	var v struct {
		ID    string `json:"id"`
		Steps []struct {
			Seq      int      `json:"seq"`
			Name     string   `json:"name"`
			Argv     []string `json:"argv"`
			ExitCode *int     `json:"exit_code"`
			State    string   `json:"state"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(c.ok("sandbox", "show", id, "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.ID != id || len(v.Steps) != 1 || v.Steps[0].Name != "hello" || v.Steps[0].ExitCode == nil || *v.Steps[0].ExitCode != 0 ||
		strings.Join(v.Steps[0].Argv, " ") != "echo hello" || v.Steps[0].State != "finished" {
		t.Errorf("show --json: %+v", v)
	}
}

// sandbox extend: --ttl is required and checked before anything changes;
// the new expiry is now + TTL.
func TestSandboxExtend(t *testing.T) {
	c := newTestCLI(t)
	c.rows(map[string]string{"sbx_aaaaaaaa": "open", "sbx_dddddddd": store.StatusDestroyed})
	c.fails(2, "--ttl is required, e.g. --ttl 2h", "sandbox", "extend", "sbx_aaaa")
	c.fails(2, "--ttl: ", "sandbox", "extend", "sbx_aaaa", "--ttl", "soon")
	c.fails(2, "--ttl: ", "sandbox", "extend", "sbx_aaaa", "--ttl", "100000h")
	c.fails(3, "no session sbx_zzzz", "sandbox", "extend", "sbx_zzzz", "--ttl", "1h")
	c.fails(4, "only open sessions can be extended", "sandbox", "extend", "sbx_dddd", "--ttl", "1h")

	before := time.Now()
	var s store.Session
	if err := json.Unmarshal([]byte(c.ok("sandbox", "extend", "sbx_aaaa", "--ttl", "3h", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	if s.ID != "sbx_aaaaaaaa" || s.ExpiresAt.Before(before.Add(3*time.Hour-time.Second)) || s.ExpiresAt.After(time.Now().Add(3*time.Hour)) {
		t.Errorf("extend --ttl 3h: %s expires at %s, want %s + 3h", s.ID, s.ExpiresAt, before)
	}
	if out := c.ok("sandbox", "extend", "sbx_aaaa", "--ttl", "30m"); out != "sbx_aaaaaaaa\n" || !strings.Contains(c.stderr.String(), "now expires at") {
		t.Errorf("extend: stdout %q, stderr %q", out, c.stderr.String())
	}
}

// sandbox stop: each session stopped is printed; with several, one that
// cannot be stopped is said on stderr with its reference, the others are
// still stopped, and the exit status is its failure's.
func TestSandboxStop(t *testing.T) {
	c := newTestCLI(t)
	c.rows(map[string]string{"sbx_dddddddd": store.StatusDestroyed})
	id := c.session()

	code := c.run("sandbox", "stop", "sbx_zzzz", id, "sbx_dddd", "--json")
	if code != 3 {
		t.Fatalf("stop of a missing and two real sessions: exit %d, want 3 (the first failure's): %s", code, c.stderr.String())
	}
	if !strings.Contains(c.stderr.String(), "xmode: sbx_zzzz: no session sbx_zzzz") {
		t.Errorf("stderr does not name the session that failed: %q", c.stderr.String())
	}
	var stopped []store.Session
	if err := json.Unmarshal(c.stdout.Bytes(), &stopped); err != nil {
		t.Fatalf("stop --json of several: %v\n%s", err, c.stdout.String())
	}
	if len(stopped) != 2 || stopped[0].ID != id || stopped[0].Status != store.StatusDestroyed || stopped[1].ID != "sbx_dddddddd" {
		t.Errorf("stop --json: %+v, want %s (now destroyed) and sbx_dddddddd", stopped, id)
	}

	// One session: its object, and an ended one is no error.
	var one store.Session
	if err := json.Unmarshal([]byte(c.ok("sandbox", "stop", id, "--json")), &one); err != nil || one.ID != id {
		t.Errorf("stop --json of one session: %v, %+v", err, one)
	}
	if out := c.ok("sandbox", "stop", id); out != id+"\n" || !strings.Contains(c.stderr.String(), "had already ended (destroyed)") {
		t.Errorf("stop of an ended session: stdout %q, stderr %q", out, c.stderr.String())
	}
	// One session that fails: its own error and code, not a summary.
	c.fails(3, "xmode: no session sbx_zzzz", "sandbox", "stop", "sbx_zzzz")
}

// sandbox logs: the flags that do not go together, the steps table, a step
// by number, by name and by words of its name, and the errors for a step
// that is not there or is ambiguous.
func TestSandboxLogs(t *testing.T) {
	c := newTestCLI(t)
	id := c.session()
	c.fails(2, "--stderr and --all do not go together", "sandbox", "logs", id, "1", "--stderr", "--all")
	c.fails(2, "--follow and --json do not go together", "sandbox", "logs", id, "--follow", "--json")
	c.fails(3, "has no steps yet", "sandbox", "logs", id, "--follow")
	c.ok("sandbox", "logs", id)
	if !strings.Contains(c.stderr.String(), "has no steps yet") {
		t.Errorf("logs of a session without steps: stderr %q", c.stderr.String())
	}

	c.ok("sandbox", "exec", id, "--", "sh", "-c", "echo one; echo err1 >&2")
	c.ok("sandbox", "exec", id, "--name", "make-test", "--", "echo", "two")
	c.run("sandbox", "exec", id, "--name", "unit-test", "--", "sh", "-c", "echo three; exit 4")

	out := c.ok("sandbox", "logs", id)
	table := regexp.MustCompile(`^STEP +NAME +EXIT +DURATION +STARTED +COMMAND
1 +sh-c-echo-one-echo-err1-2 +0 +\S+ +\d+s ago +sh -c echo one; echo err1 >&2
2 +make-test +0 +\S+ +\d+s ago +echo two
3 +unit-test +4 +\S+ +\d+s ago +sh -c echo three; exit 4
$`)
	if !table.MatchString(out) {
		t.Errorf("logs table:\n%s", out)
	}
	for _, tc := range []struct {
		args           []string
		stdout, stderr string
	}{
		{[]string{"1"}, "one\n", ""},
		{[]string{"1", "--stderr"}, "err1\n", ""},
		{[]string{"1", "--all"}, "one\n", "err1\n"},
		{[]string{"make-test"}, "two\n", ""},
		{[]string{"unit"}, "three\n", ""},
	} {
		c.ok(append([]string{"sandbox", "logs", id}, tc.args...)...)
		if c.stdout.String() != tc.stdout || c.stderr.String() != tc.stderr {
			t.Errorf("logs %s: stdout %q stderr %q, want %q and %q", strings.Join(tc.args, " "), c.stdout.String(), c.stderr.String(), tc.stdout, tc.stderr)
		}
	}
	c.fails(2, `step "test" is ambiguous in session `+id+": it matches make-test (step 2), unit-test (step 3)", "sandbox", "logs", id, "test")
	c.fails(3, "no step 9 in session "+id, "sandbox", "logs", id, "9")
	c.fails(3, `no step named "lint"`, "sandbox", "logs", id, "lint")

	var step struct {
		Seq    int     `json:"seq"`
		Stdout *string `json:"stdout"`
		Stderr *string `json:"stderr"`
	}
	if err := json.Unmarshal([]byte(c.ok("sandbox", "logs", id, "1", "--all", "--json")), &step); err != nil {
		t.Fatal(err)
	}
	if step.Seq != 1 || step.Stdout == nil || *step.Stdout != "one\n" || step.Stderr == nil || *step.Stderr != "err1\n" {
		t.Errorf("logs 1 --all --json: %+v", step)
	}
}

// sandbox cp needs exactly one SESSION:PATH.
func TestSandboxCpOperands(t *testing.T) {
	c := newTestCLI(t)
	c.fails(2, "one of the two must be SESSION:PATH", "sandbox", "cp", "a", "b")
	c.fails(2, "one of the two must be SESSION:PATH", "sandbox", "cp", "sbx_aaaa:a", "sbx_bbbb:b")
	c.fails(3, "no session sbx_zzzz", "sandbox", "cp", "sbx_zzzz:a", "./b")
	for arg, want := range map[string][3]string{
		"sbx_7k2m:dir/x": {"sbx_7k2m", "dir/x", "true"},
		"./a:b":          {"", "./a:b", "false"},
		"/abs:x":         {"", "/abs:x", "false"},
		"plain":          {"", "plain", "false"},
	} {
		ref, path, remote := splitRemote(arg)
		if got := [3]string{ref, path, map[bool]string{true: "true", false: "false"}[remote]}; got != want {
			t.Errorf("splitRemote(%q) = %v, want %v", arg, got, want)
		}
	}
}

// sandbox create: --image for a host sandbox is refused before anything is
// made, saying what to set.
func TestSandboxCreateImageOnHost(t *testing.T) {
	c := newTestCLI(t)
	repo := testRepo(t)
	c.fails(2, "--image is for docker sandboxes, and this one runs on the host", "sandbox", "create", "--repo", repo, "--image", "alpine")
	c.env["XMODE_SANDBOX_ENGINE"] = "docker"
	c.fails(2, "add --runner-mode cloud_worker", "sandbox", "create", "--repo", repo, "--image", "alpine")
	if out := c.ok("sandbox", "list", "--all", "-q"); out != "" {
		t.Errorf("a refused create left sessions: %q", out)
	}
}
