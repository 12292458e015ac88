package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
)

// What a sandbox or the cloud can put in front of a reviewer's terminal:
// clear the screen, write the clipboard (OSC 52), disguise a link (OSC 8),
// ring the bell, reorder text (bidi override and isolate), a C1 CSI, a
// carriage return that rewrites the line.
const (
	hClear = "\x1b[2J\x1b[H"
	hClip  = "\x1b]52;c;cHduZWQ=\x07"
	hLink  = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
	hBidi  = "\u202e\u2066"
	hC1    = "\u009b31m"
	hText  = "evil" + hClear + hClip + hLink + "\a" + hBidi + hC1 + "\rend"
)

// rawControl finds what a terminal would act on in s: ESC, BEL, a C1
// control, a bidi control, a carriage return that is not a CRLF ending.
var rawControl = regexp.MustCompile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u0080-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]|\r[^\n]|\r$")

// sgr is the colour xmode itself paints.
var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

func checkInert(t *testing.T, what, s string, visible ...string) {
	t.Helper()
	if loc := rawControl.FindStringIndex(s); loc != nil {
		t.Errorf("%s: a raw %q reaches the terminal:\n%q", what, s[loc[0]:loc[1]], s)
	}
	for _, v := range visible {
		if !strings.Contains(s, v) {
			t.Errorf("%s: %q is not shown (escaped) at all:\n%q", what, v, s)
		}
	}
}

// Every command that prints text a sandbox or the Codex cloud chose —
// file names, commit subjects and messages, change-request titles, a
// command's argv, an objective, cloud task titles, transcripts and errors —
// shows it escaped: no control character, C1 control or bidi override
// reaches stdout or stderr (docs/conventions.md, "Hostile text on the
// terminal"). JSON stays exact.
func TestHostileTextIsInert(t *testing.T) {
	t.Parallel()
	r := newCloudRig(t)
	r.env = append(r.env, "CODEX_CLOUD_STATUS_COMMAND="+filepath.Join(r.bin, "fakecodex")+" result {task_id}")
	dir := t.TempDir()

	// The agent: hostile file names, contents, commit subject and body.
	agent := filepath.Join(dir, "agent.sh")
	script := "set -e\n" +
		"printf 'x\\n' > 'clear" + hClear + ".txt'\n" +
		"printf 'y\\n' > 'clip" + hClip + ".txt'\n" +
		"printf 'z\\n' > 'bidi" + hBidi + "txt.exe'\n" +
		"printf 'w\\n' > 'c1" + hC1 + "\a\rx'\n" +
		"printf 'code\\n" + hClear + "hidden\\r\\nok\\r\\n' >> README\n" +
		"git add -A\n" +
		"git -c user.name=agent -c user.email=a@example.com commit -qm 'subject " + hText + "' -m 'body " + hText + "'\n"
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"XMODE_AGENT_COMMAND_TEMPLATE=sh " + agent + " {prompt_file}"}
	escaped := `\x1b[2J`

	type result struct{ out, err string }
	run := func(want int, args ...string) result {
		t.Helper()
		out, errOut, code := r.run(env, args...)
		if code != want {
			t.Fatalf("xmode %q: exit %d, want %d: %s", args, code, want, errOut)
		}
		return result{out, errOut}
	}
	check := func(args []string, visible ...string) {
		t.Helper()
		res := run(0, args...)
		checkInert(t, strings.Join(args, " ")+" (stdout)", res.out, visible...)
		checkInert(t, strings.Join(args, " ")+" (stderr)", res.err)
	}

	// The loop: objective, agent, change request (titled by the objective).
	res := run(0, "run", "--repo", r.repo, "--agent", "command", "--objective", "objective "+hText, "--keep")
	checkInert(t, "run (stdout)", res.out)
	runID := field(t, res.out, "run:")
	sid := strings.Fields(field(t, res.out, "session:"))[0]
	crID := field(t, res.out, "cr:")
	// A step with a hostile command line, and a change request titled by
	// the agent's commit subject, with a hostile message.
	run(0, "sandbox", "exec", sid, "--", "true", "argv "+hText)
	cr2 := strings.TrimSpace(run(0, "cr", "create", sid, "--message", "message "+hText+"\nline two").out)
	checkInert(t, "cr create (stderr)", run(0, "cr", "create", sid).err)

	check([]string{"run", "list"}, escaped)
	check([]string{"run", "show", runID}, escaped)
	check([]string{"sandbox", "list"})
	check([]string{"sandbox", "show", sid}, `argv evil\x1b[2J`)
	check([]string{"sandbox", "logs", sid}, `argv evil\x1b[2J`)
	check([]string{"sandbox", "diff", sid, "--stat"}, `clear\x1b[2J\x1b[H.txt`, `bidi\u202e\u2066txt.exe`, `c1\u009b31m\x07\rx`)
	check([]string{"cr", "list"}, `objective evil\x1b[2J`, `subject evil\x1b[2J`)
	check([]string{"cr", "show", crID}, `objective evil\x1b[2J`, `clip\x1b]52;c;cHduZWQ=\x07.txt`)
	check([]string{"cr", "show", cr2}, `subject evil\x1b[2J\x1b[H\x1b]52;c;cHduZWQ=\x07\x1b]8;;https://evil.example/\x1b\click\x1b]8;;\x1b\\x07\u202e\u2066\u009b31m\rend`,
		`message evil\x1b[2J`, "\n    line two", `argv evil\x1b[2J`)
	// Completing a path of the worktree never offers such a name.
	check([]string{"__complete", "sandbox", "cp", sid + ":"}, sid+":README")
	// Piped, the patch is what git apply reads: byte for byte.
	if out := run(0, "sandbox", "diff", sid).out; !strings.Contains(out, "+"+hClear+"hidden\r\n+ok\r\n") {
		t.Errorf("sandbox diff to a pipe is not the exact patch:\n%q", out)
	}
	// On a terminal (through the pager), it is escaped, coloured or not;
	// CRLF endings stay.
	pagerOut := func(noColor bool, args ...string) string {
		t.Helper()
		_, slave := openPTY(t)
		paged := filepath.Join(dir, "paged")
		pager := filepath.Join(dir, "pager.sh")
		os.WriteFile(pager, []byte("#!/bin/sh\ncat > "+paged+"\n"), 0o755)
		c := reapCmd(t, r.root, args...)
		c.Env = append(append(c.Env, r.env...), "PAGER="+pager, "TERM=xterm")
		if !noColor {
			c.Env = append(withoutVar(c.Env, "NO_COLOR"), "TERM=xterm")
		}
		var stderr bytes.Buffer
		c.Stdout, c.Stderr = slave, &stderr
		if err := c.Run(); err != nil {
			t.Fatalf("%v: %v %s", args, err, stderr.String())
		}
		checkInert(t, strings.Join(args, " ")+" (stderr, terminal)", stderr.String())
		b, err := os.ReadFile(paged)
		if err != nil {
			t.Fatalf("%v: the pager did not run", args)
		}
		return string(b)
	}
	for _, noColor := range []bool{true, false} {
		for _, args := range [][]string{{"sandbox", "diff", sid}, {"cr", "show", cr2, "--patch"}} {
			out := pagerOut(noColor, args...)
			if !noColor && !sgr.MatchString(out) {
				t.Fatalf("%v: no colour on a terminal: the test proves nothing", args)
			}
			checkInert(t, strings.Join(args, " ")+" on a terminal", sgr.ReplaceAllString(out, ""), `+\x1b[2J\x1b[Hhidden`, "+ok\r\n")
		}
	}
	// JSON keeps the exact text.
	if out := run(0, "cr", "show", cr2, "--json").out; !strings.Contains(out, `subject evil\u001b[2J`) {
		t.Errorf("cr show --json lost the exact title:\n%s", out)
	}

	// The cloud: a task whose title, transcript and error are hostile.
	csid := strings.TrimSpace(run(0, "sandbox", "create", "--repo", r.repo, "--runner-mode", "cloud_subscription", "-q").out)
	tid := strings.TrimSpace(run(0, "cloud", "submit", csid, "--env", "env_1", "--prompt", "prompt "+hText).out)
	r.fake.Update(tid, func(tk *codexcloudtest.Task) {
		tk.Status, tk.Title = codexcloudtest.StatusRunning, "title "+hText
		tk.Transcript = []string{"line " + hText, hBidi + "reversed"}
	})
	check([]string{"cloud", "poll", "-v"}, "running")
	check([]string{"cloud", "show", csid}, `title evil\x1b[2J`)
	check([]string{"cloud", "log", csid}, `line evil\x1b[2J`, `\u202e\u2066reversed`)
	r.fake.Update(tid, func(tk *codexcloudtest.Task) {
		tk.Status, tk.Error = codexcloudtest.StatusError, "error "+hText
	})
	check([]string{"cloud", "poll", "-v"}, `error evil\x1b[2J`)
	check([]string{"cloud", "show", csid}, `error evil\x1b[2J`)
	check([]string{"sandbox", "show", csid}, `error evil\x1b[2J`)
	check([]string{"sandbox", "list", "--all"})
}

// field is the value of a "key:  value" line of a command's output.
func field(t *testing.T, out, key string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, key); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatalf("no %q line in:\n%s", key, out)
	return ""
}

func withoutVar(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
