package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
)

// Every command that prints, with its stdout a pipe nobody reads any more
// (`| head -1` that has its line): no "write /dev/stdout: broken pipe",
// nothing at all on stderr, and 141 (128+SIGPIPE) as git or any program
// killed by SIGPIPE gives, never 1; a command that runs a step keeps the
// step's status.
func TestClosedPipeIsSilent(t *testing.T) {
	t.Parallel()
	r := newCloudRig(t)
	r.env = append(r.env, "CODEX_CLOUD_STATUS_COMMAND="+filepath.Join(r.bin, "fakecodex")+" result {task_id}")
	sid := r.must(nil, "sandbox", "create", "--repo", r.repo, "-q")
	// Enough output that no pipe buffer could hide a write that failed.
	r.must(nil, "sandbox", "exec", sid, "--", "sh", "-c", "seq 1 100000 > big.txt; seq 1 100000")
	cr := r.must(nil, "cr", "create", sid, "-q")
	runID := r.must(nil, "run", "list", "--all", "-q")
	csid, tid := r.submitted()
	r.fake.Update(tid, func(tk *codexcloudtest.Task) {
		tk.Status, tk.Transcript = codexcloudtest.StatusRunning, []string{"reading", "editing"}
	})
	r.must(nil, "cloud", "poll")

	cases := []struct {
		code int
		args []string
	}{
		{141, nil}, // getting started
		{141, []string{"--help"}},
		{141, []string{"sandbox", "--help"}},
		{141, []string{"version"}},
		{141, []string{"config"}},
		{141, []string{"completion", "bash"}},
		{141, []string{"sandbox", "list"}},
		{141, []string{"sandbox", "list", "-q"}},
		{141, []string{"sandbox", "list", "--json"}},
		{141, []string{"sandbox", "show", sid}},
		{141, []string{"sandbox", "logs", sid}},
		{141, []string{"sandbox", "logs", sid, "1"}},
		{141, []string{"sandbox", "logs", sid, "1", "--json"}},
		{141, []string{"sandbox", "logs", sid, "--follow"}},
		{141, []string{"sandbox", "diff", sid}},
		{141, []string{"sandbox", "diff", sid, "--stat"}},
		{141, []string{"sandbox", "diff", sid, "--json"}},
		{141, []string{"cr", "list"}},
		{141, []string{"cr", "show", cr}},
		{141, []string{"cr", "show", cr, "--patch"}},
		{141, []string{"cr", "show", cr, "--json", "--patch"}},
		{141, []string{"cr", "verify", cr}},
		{141, []string{"cr", "create", sid, "-q"}},
		{141, []string{"run", "list", "--all"}},
		{141, []string{"run", "show", runID}},
		{141, []string{"cloud", "show", csid}},
		{141, []string{"cloud", "log", csid}},
		{141, []string{"cloud", "log", csid, "--follow"}},
		{141, []string{"cloud", "poll", "--json"}},
		{141, []string{"cloud", "poll", "--watch", "--json", "--interval", "50ms"}},
		{141, []string{"cloud", "poll", "--watch", "-v", "--interval", "50ms"}},
		{141, []string{"machine", "list"}},
		{141, []string{"sandbox", "snapshots"}},
		{141, []string{"sandbox", "snapshots", "--json"}},
		{141, []string{"reap", "--dry-run", "--json"}},
		{141, []string{"ui"}}, // it prints its URL before it serves
		// The step's status, whatever became of its output.
		{0, []string{"sandbox", "exec", sid, "--", "seq", "1", "100000"}},
		{3, []string{"sandbox", "exec", sid, "--", "sh", "-c", "seq 1 100000; exit 3"}},
		// A background step (step 4) starts whatever became of its number;
		// the kill that ends it prints the number too.
		{0, []string{"sandbox", "exec", sid, "--detach", "-q", "--", "sleep", "300"}},
		{141, []string{"sandbox", "kill", sid, "4", "-q"}},
	}
	for _, c := range cases {
		cmd := reapCmd(t, r.root, c.args...)
		cmd.Env = append(cmd.Env, r.env...)
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		pr.Close() // the reader is gone before xmode writes a byte
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = pw, &stderr
		// A command that keeps going (--follow, --watch) must end too.
		hung := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
		err = cmd.Run()
		if !hung.Stop() {
			t.Errorf("xmode %s | (closed): still running a minute later", strings.Join(c.args, " "))
		}
		pw.Close()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || stderr.Len() > 0 {
			t.Errorf("xmode %s | (closed): exit %d, want %d; stderr %q", strings.Join(c.args, " "), code, c.code, stderr.String())
		}
	}
}
