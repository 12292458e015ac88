package cmd

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/xmode/xmode/fail"
)

// --signal takes what kill(1) and docker take: a name with or without SIG,
// in any case, or a number; anything else is a usage error naming it.
func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{
		"TERM": syscall.SIGTERM, "sigint": syscall.SIGINT, "SIGHUP": syscall.SIGHUP, "kill": syscall.SIGKILL,
		"usr1": syscall.SIGUSR1, "9": syscall.SIGKILL, " 15 ": syscall.SIGTERM, "64": syscall.Signal(64),
	} {
		if got, err := parseSignal(in); err != nil || got != want {
			t.Errorf("parseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "65", "-1", "NOPE", "SIG", "TERM9"} {
		if _, err := parseSignal(in); fail.KindOf(err) != fail.Usage {
			t.Errorf("parseSignal(%q): %v; want a usage error", in, err)
		}
	}
}

// exec --detach and kill, in-process: the step's number (or, with --json,
// the step as far as known), what --detach refuses (125, as any failure of
// exec's own), and kill's exit codes.
func TestDetachAndKill(t *testing.T) {
	c := newTestCLI(t)
	id := c.session()
	c.fails(125, "--detach and -t do not go together", "sandbox", "exec", id, "-d", "-t", "--", "true")
	c.fails(125, "--detach and -i do not go together", "sandbox", "exec", id, "-d", "-i", "--", "true")
	if out := c.ok("sandbox", "exec", id, "--detach", "--name", "srv", "--", "sleep", "300"); out != "1\n" {
		t.Fatalf("exec --detach printed %q; want the step's number", out)
	}
	if !strings.Contains(c.stderr.String(), "step 1 runs in the background: `xmode sandbox logs "+id+" 1 --follow` follows it") {
		t.Errorf("exec --detach says: %q", c.stderr.String())
	}
	var step struct {
		Seq       int    `json:"seq"`
		State     string `json:"state"`
		ExitCode  *int   `json:"exit_code"`
		Detached  bool   `json:"detached"`
		StoppedBy string `json:"stopped_by"`
		Signal    string `json:"signal"`
	}
	if err := json.Unmarshal([]byte(c.ok("sandbox", "exec", id, "-d", "--json", "--", "sleep", "300")), &step); err != nil {
		t.Fatal(err)
	}
	if step.Seq != 2 || step.State != "running" || step.ExitCode != nil || !step.Detached {
		t.Errorf("exec --detach --json: %+v", step)
	}
	c.fails(2, `--signal "BOGUS" is not a signal`, "sandbox", "kill", id, "srv", "-s", "BOGUS")
	c.fails(3, "no step 5 in session", "sandbox", "kill", id, "5")
	c.fails(2, "expected a session and a step", "sandbox", "kill", id)
	if out := c.ok("sandbox", "kill", id, "srv", "--signal", "KILL"); out != "1\n" {
		t.Errorf("kill printed %q; want the step's number", out)
	}
	if err := json.Unmarshal([]byte(c.ok("sandbox", "kill", id, "2", "--json")), &step); err != nil {
		t.Fatal(err)
	}
	if step.State != "finished" || step.ExitCode == nil || *step.ExitCode != 143 || step.Signal != "SIGTERM" || step.StoppedBy != "sandbox kill" {
		t.Errorf("kill --json: %+v", step)
	}
	c.fails(4, "step 1 (srv) is not running (finished: exit 137)", "sandbox", "kill", id, "1")
	out := c.ok("sandbox", "logs", id)
	if !strings.Contains(out, "137 (killed)") || !strings.Contains(out, "143 (killed)") {
		t.Errorf("logs after kill:\n%s", out)
	}
}
