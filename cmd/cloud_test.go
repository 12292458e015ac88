package cmd

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
	"github.com/xmode/xmode/store"
)

// cloudCLI is a testCLI whose codex is the stand-in (this test binary),
// its status command printing the JSON Result so that transcripts arrive.
func cloudCLI(t *testing.T) (*testCLI, *codexcloudtest.Fake) {
	c := newTestCLI(t)
	fake := codexcloudtest.New(t)
	bin := codexcloudtest.Install(t)
	t.Setenv(codexcloudtest.DirEnv, fake.Dir) // for the stand-in, a child of this process
	c.env["XMODE_CODEX_BIN"] = filepath.Join(bin, "codex")
	c.env["CODEX_CLOUD_STATUS_COMMAND"] = filepath.Join(bin, "fakecodex") + " result {task_id}"
	return c, fake
}

// cloud submit's flags are checked before the session is looked at or
// codex runs; a session that runs locally is refused.
func TestCloudSubmitFlags(t *testing.T) {
	c, fake := cloudCLI(t)
	c.fails(2, "--prompt is required", "cloud", "submit", "sbx_zzzz", "--env", "env_1")
	c.fails(2, "--attempts 0: codex runs 1 to 4 attempts", "cloud", "submit", "sbx_zzzz", "--env", "env_1", "--prompt", "x", "--attempts", "0")
	c.in = strings.Repeat("x", 1<<20+1)
	c.fails(2, "longer than 1 MiB", "cloud", "submit", "sbx_zzzz", "--env", "env_1", "--prompt", "-")
	c.in = ""
	c.fails(3, "no session sbx_zzzz", "cloud", "submit", "sbx_zzzz", "--env", "env_1", "--prompt", "x")
	host := c.session()
	c.fails(4, "runs locally: only cloud_subscription sessions go to the Codex cloud", "cloud", "submit", host, "--env", "env_1", "--prompt", "x")
	c.fails(3, "has no cloud task", "cloud", "show", host)
	c.fails(3, "has no cloud task", "cloud", "log", host)
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("codex ran for refused submits: %+v", calls)
	}
}

// The loop in-process: submit (the prompt from standard input), show
// before and after a poll, the thread with its times, poll's JSON summary.
func TestCloudLoop(t *testing.T) {
	c, fake := cloudCLI(t)
	sid := strings.TrimSpace(c.ok("sandbox", "create", "--repo", testRepo(t), "--runner-mode", "cloud_subscription", "-q"))
	c.in = "fix the flaky test\n"
	tid := strings.TrimSpace(c.ok("cloud", "submit", sid, "--env", "env_1", "--prompt", "-", "--attempts", "2"))
	c.in = ""
	if got := fake.Task(tid); got.Prompt != "fix the flaky test\n" || got.Attempts != 2 || got.Branch != "main" {
		t.Errorf("the stand-in got %+v", got)
	}
	if !strings.Contains(c.stderr.String(), "follow it with `xmode cloud log "+sid+" --follow`") {
		t.Errorf("submit says: %q", c.stderr.String())
	}

	out := c.ok("cloud", "show", sid)
	for _, want := range []string{
		"Session:      " + sid + " (submitted)\n", "Task:         " + tid + "\n", "Environment:  env_1, branch main, 2 attempt(s)\n",
		"Last poll:    never, 0 poll(s)\n", "Next due:     now (the next `xmode cloud poll`)\n", "Transcript:   0 line(s): `xmode cloud log " + sid + "`\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cloud show has no %q:\n%s", want, out)
		}
	}

	fake.Update(tid, func(tk *codexcloudtest.Task) {
		tk.Status, tk.Transcript = codexcloudtest.StatusRunning, []string{"reading the tests", "found it"}
	})
	var sum map[string]any
	if err := json.Unmarshal([]byte(c.ok("cloud", "poll", "--json")), &sum); err != nil {
		t.Fatal(err)
	}
	if sum["polled"] != float64(1) {
		t.Errorf("poll --json: %v, want one task polled", sum)
	}
	out = c.ok("cloud", "log", sid)
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  reading the tests\n\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  found it\n$`).MatchString(out) {
		t.Errorf("cloud log:\n%s", out)
	}
	var line struct {
		Index int    `json:"index"`
		Line  string `json:"line"`
	}
	first, _, _ := strings.Cut(c.ok("cloud", "log", sid, "--json"), "\n")
	if err := json.Unmarshal([]byte(first), &line); err != nil || line.Line != "reading the tests" {
		t.Errorf("cloud log --json: %q (%v)", first, err)
	}

	var task store.CloudTask
	if err := json.Unmarshal([]byte(c.ok("cloud", "show", sid, "--json")), &task); err != nil {
		t.Fatal(err)
	}
	if task.TaskID != tid || task.Polls != 1 || task.TranscriptLen != 2 || task.Finished() {
		t.Errorf("cloud show --json: %+v", task)
	}
	if out := c.ok("cloud", "poll"); out != "" || c.stderr.Len() != 0 {
		t.Errorf("cloud poll is not silent on success: %q %q", out, c.stderr.String())
	}
}
