package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/proc"
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/store"
)

// TestMain makes this test binary a background step's supervisor when
// ExecDetached starts it again as one (cmd does the same through its
// hidden command).
func TestMain(m *testing.M) {
	SuperviseIfAsked()
	code := m.Run()
	dockertest.RemoveBuilt()
	os.Exit(code)
}

// waitFor polls cond until it holds, failing t after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A background step returns its number at once and runs on in a supervisor
// of its own, the step's owner: its evidence is kept as any step's (the
// environment as recorded by a step in the foreground, secrets masked in
// the logs), and KillStep ends it as Ctrl-C would, which its result and row
// record.
func TestExecDetached(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	svc := newService(t, nil)
	sess, err := svc.Create(ctx, CreateOptions{Repo: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	seq, err := svc.ExecDetached(ctx, sess, ExecOptions{
		Name: "serve",
		Argv: []string{"sh", "-c", `echo "out $PLAIN $FROM_HOST $API_TOKEN"; echo $PPID > sup.pid; exec sleep 300`},
		Env:  []string{"PLAIN=p", "FROM_HOST"}, SecretEnv: []string{"API_TOKEN=s3cr3t-value"},
		LookupEnv: func(k string) (string, bool) { return "host-" + k, k == "FROM_HOST" },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ExecDetached returned step %d after %s", seq, time.Since(start))
	if seq != 1 {
		t.Fatalf("the first step is number %d", seq)
	}
	row, err := svc.Step(ctx, sess, seq)
	if err != nil {
		t.Fatal(err)
	}
	if row.State != store.StateRunning || !row.Detached || row.Owner == "" || row.Owner == proc.Self() {
		t.Fatalf("the background step's row: %+v; want running, detached, owned by its supervisor", row)
	}
	dir, err := evidence.StepDir(svc.Guard, sess.RunID, seq, "serve")
	if err != nil {
		t.Fatal(err)
	}
	supFile := filepath.Join(sess.WorktreePath, "sup.pid")
	waitFor(t, 10*time.Second, "the step's output in its log", func() bool {
		// Whole: the shell creates sup.pid before it writes the pid.
		b, err := os.ReadFile(supFile)
		return err == nil && strings.HasSuffix(string(b), "\n") && strings.Contains(readFile(t, filepath.Join(dir, evidence.StdoutFile)), "out")
	})
	sup, _ := strconv.Atoi(strings.TrimSpace(readFile(t, supFile)))
	if !strings.HasPrefix(row.Owner, strconv.Itoa(sup)+":") {
		t.Errorf("the step's owner is %q, its parent (the supervisor) %d", row.Owner, sup)
	}
	if out := readFile(t, filepath.Join(dir, evidence.StdoutFile)); out != "out p host-FROM_HOST ***\n" {
		t.Errorf("stdout.log: %q; want the host's value passed and the secret masked", out)
	}
	var cmdFile struct {
		Env      []string `json:"env"`
		Detached bool     `json:"detached"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, evidence.CommandFile))), &cmdFile); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cmdFile.Env, " ") != "PLAIN=p FROM_HOST API_TOKEN=***" || !cmdFile.Detached {
		t.Errorf("command.json: %+v; want the env as a foreground step records it, and detached", cmdFile)
	}

	if err := svc.KillStep(ctx, sess, seq, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	row, err = svc.Step(ctx, sess, seq)
	if err != nil {
		t.Fatal(err)
	}
	if row.State != "finished" || row.ExitCode == nil || *row.ExitCode != 130 || row.Signal != "SIGINT" || row.StoppedBy != store.StoppedByKill {
		t.Fatalf("after KillStep(SIGINT) the row is %+v; want finished, 130 (SIGINT), stopped by sandbox kill", row)
	}
	var res evidence.Result
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, evidence.ResultFile))), &res); err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 130 || res.Signal != "SIGINT" || res.StoppedBy != store.StoppedByKill || !res.Detached {
		t.Fatalf("result.json: %+v", res)
	}
	waitFor(t, 10*time.Second, "the supervisor's exit", func() bool { return syscall.Kill(sup, 0) != nil })

	if err := svc.KillStep(ctx, sess, seq, syscall.SIGTERM); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "not running (finished: exit 130)") {
		t.Errorf("KillStep of a finished step: %v; want refused, saying how it ended", err)
	}
	if err := svc.KillStep(ctx, sess, 7, syscall.SIGTERM); fail.KindOf(err) != fail.NotFound {
		t.Errorf("KillStep of no step: %v; want not found", err)
	}
}

// What ExecDetached refuses, it refuses before anything is recorded, with
// the kind of error a step in the foreground would get; a supervisor that
// finds the session unusable says so before it records a step.
func TestExecDetachedRefusals(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	svc := newService(t, nil)
	sess, err := svc.Create(ctx, CreateOptions{Repo: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		o      ExecOptions
		kind   fail.Kind
		saying string
	}{
		{"no command", ExecOptions{}, fail.Usage, "no command"},
		{"tty", ExecOptions{Argv: []string{"true"}, TTY: true}, fail.Usage, "no terminal"},
		{"stdin", ExecOptions{Argv: []string{"true"}, Stdin: strings.NewReader("x")}, fail.Usage, "reads no input"},
		{"live", ExecOptions{Argv: []string{"true"}, LiveStdout: os.Stdout}, fail.Usage, "logs only"},
		{"timeout", ExecOptions{Argv: []string{"true"}, Timeout: -time.Second}, fail.Usage, "must be positive"},
		{"env", ExecOptions{Argv: []string{"true"}, Env: []string{"=x"}}, fail.Usage, "KEY=VALUE"},
		// Found by the supervisor, through Exec:
		{"workdir", ExecOptions{Argv: []string{"true"}, Workdir: "../outside"}, fail.Usage, ".."},
		{"name", ExecOptions{Argv: []string{"true"}, Name: "123"}, fail.Usage, "not a step name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.ExecDetached(ctx, sess, tc.o)
			if fail.KindOf(err) != tc.kind || err == nil || !strings.Contains(err.Error(), tc.saying) {
				t.Fatalf("ExecDetached: %v; want a %v error saying %q", err, tc.kind, tc.saying)
			}
		})
	}
	// What the supervisor refuses still names its input, for each front
	// end to say in its own words.
	_, err = svc.ExecDetached(ctx, sess, ExecOptions{Argv: []string{"true"}, Workdir: "../outside"})
	if fail.InputOf(err) != fail.Workdir || !strings.HasPrefix(err.Error(), "--workdir ") ||
		!strings.HasPrefix((fail.Words{Input: func(in fail.Input) string { return "parameter " + string(in) }}).Render(err), "parameter workdir ") {
		t.Fatalf("a workdir the supervisor refused: %v (input %q)", err, fail.InputOf(err))
	}
	if steps, _ := svc.Store.Steps(ctx, sess.RunID); len(steps) != 0 {
		t.Fatalf("refused background steps were recorded: %+v", steps)
	}
	if _, err := svc.Stop(ctx, sess, false); err != nil {
		t.Fatal(err)
	}
	sess, _ = svc.Store.Get(ctx, sess.ID)
	if _, err := svc.ExecDetached(ctx, sess, ExecOptions{Argv: []string{"true"}}); fail.KindOf(err) != fail.Refused {
		t.Fatalf("a background step in a stopped session: %v; want refused", err)
	}
}
