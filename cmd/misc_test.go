package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/reaper"
	"github.com/xmode/xmode/store"
)

// reap: --provision-grace checked first; silent on success; -v --dry-run
// says what it would do and changes nothing; --json is the summary; a pass
// ends an expired session.
func TestReap(t *testing.T) {
	c := newTestCLI(t)
	c.fails(2, "--provision-grace: ", "reap", "--provision-grace", "soon")
	if out := c.ok("reap"); out != "" || c.stderr.Len() != 0 {
		t.Errorf("reap of nothing is not silent: %q %q", out, c.stderr.String())
	}
	c.rows(map[string]string{"sbx_cccccccc": "expired", "sbx_aaaaaaaa": "open"})

	out := c.ok("-v", "reap", "--dry-run")
	if !strings.Contains(out, "sbx_cccccccc") || strings.Contains(out, "sbx_aaaaaaaa") {
		t.Errorf("reap -v --dry-run:\n%s", out)
	}
	if out := c.ok("sandbox", "list", "-q"); !strings.Contains(out, "sbx_cccccccc") {
		t.Errorf("reap --dry-run ended the session: %q", out)
	}

	var sum reaper.Summary
	if err := json.Unmarshal([]byte(c.ok("sandbox", "reap", "--json")), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.DryRun || sum.Expired != 1 || sum.Errors == nil || len(sum.Errors) != 0 {
		t.Errorf("reap --json: %+v, want one expired session and errors: []", sum)
	}
	var s store.Session
	if err := json.Unmarshal([]byte(c.ok("sandbox", "show", "sbx_cccc", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Status != store.StatusDestroyed || s.EndReason != store.ReasonExpired {
		t.Errorf("after reap the expired session is %s (%s)", s.Status, s.EndReason)
	}
}

// doctor: a line per check with its fix when it is not ok, --json the
// checks, exit 1 when one failed.
func TestDoctor(t *testing.T) {
	c := newTestCLI(t)
	var checks []engine.Check
	if err := json.Unmarshal([]byte(c.ok("doctor", "--json")), &checks); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, ch := range checks {
		names[ch.Name] = ch.Status
	}
	if names["storage root"] != "ok" || names["database"] != "ok" || names["git"] != "ok" || names["engine"] != "warn" {
		t.Errorf("doctor --json: %+v", checks)
	}
	out := c.ok("doctor")
	if !regexp.MustCompile(`(?m)^ok    storage root +`+regexp.QuoteMeta(c.root)+` does not exist yet`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^warn  engine +XMODE_SANDBOX_ENGINE is unset.*\n {6} +fix: for hardened docker containers`).MatchString(out) {
		t.Errorf("doctor:\n%s", out)
	}

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.env["XMODE_STORAGE_ROOT"] = file
	if code := c.run("doctor"); code != 1 || !strings.Contains(c.stdout.String(), "fail  storage root     "+file+" is not a directory") ||
		!strings.Contains(c.stderr.String(), "check(s) failed") {
		t.Errorf("doctor with a file as storage root: exit %d\n%s%s", code, c.stdout.String(), c.stderr.String())
	}
	if code := c.run("doctor", "--json"); code != 1 || c.stderr.Len() != 0 {
		t.Errorf("doctor --json with a failure: exit %d, stderr %q; want 1 and the JSON alone", code, c.stderr.String())
	}
}

// config: every setting with its value and source; --storage-root
// overrides the variable; a bad value is a usage error naming it.
func TestConfig(t *testing.T) {
	c := newTestCLI(t)
	out := c.ok("config")
	if !regexp.MustCompile(`^VARIABLE +VALUE +SOURCE\n`).MatchString(out) || !regexp.MustCompile(`(?m)^XMODE_USER +tester +env XMODE_USER$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^XMODE_SANDBOX_ENGINE +\(unset\) +default$`).MatchString(out) {
		t.Errorf("config:\n%s", out)
	}
	var values []config.Value
	other := filepath.Join(t.TempDir(), "other")
	if err := json.Unmarshal([]byte(c.ok("--storage-root", other, "config", "--json")), &values); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range values {
		if v.Name == "XMODE_STORAGE_ROOT" {
			found = v.Value == other && v.Source == "flag --storage-root"
		}
	}
	if !found {
		t.Errorf("config --json under --storage-root: %+v", values)
	}
	c.env["XMODE_SANDBOX_TTL"] = "soon"
	c.fails(2, "XMODE_SANDBOX_TTL", "config")
}

// version, --version, completion, examples and xmode alone.
func TestMiscCommands(t *testing.T) {
	c := newTestCLI(t)
	want := "xmode dev (" + runtime.Version() + ", store schema "
	if out := c.ok("--version"); !strings.HasPrefix(out, want) || out != c.ok("version") {
		t.Errorf("--version and version: %q, want %q…", out, want)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(c.ok("version", "--json")), &v); err != nil || v["version"] != "dev" || v["schema"] != float64(store.SchemaVersion()) {
		t.Errorf("version --json: %v (%v)", v, err)
	}
	if out := c.ok("completion", "bash"); !strings.Contains(out, "No bash-completion package") || strings.Count(out, "_get_comp_words_by_ref \"$@\" cur prev words cword") != 1 {
		t.Errorf("completion bash does not carry its fallback")
	}
	for _, sh := range []string{"zsh", "fish", "powershell"} {
		if out := c.ok("completion", sh); !strings.Contains(out, "xmode") {
			t.Errorf("completion %s: %.200q", sh, out)
		}
	}
	c.fails(2, `no completion for shell "tcsh"`, "completion", "tcsh")
	c.fails(3, "no examples beside this xmode", "examples")
	if out := c.ok(); !strings.HasPrefix(out, "xmode runs sandboxes for coding agents") || !regexp.MustCompile(`\n  id=\$\(xmode sandbox create --repo \.\) +# a sandbox`).MatchString(out) {
		t.Errorf("xmode alone:\n%s", out)
	}
	c.fails(2, `unknown command "sandbx" for "xmode": did you mean sandbox?`, "sandbx")
}

// A network with an egress policy on an engine that cannot enforce it is
// refused before anything exists (exit 4, naming the docker engine), and
// doctor says which engines enforce one, warning for the one new sessions
// would get.
func TestEgressOnTheHostEngine(t *testing.T) {
	c := newTestCLI(t)
	c.env["XMODE_SANDBOX_NETWORK"] = "allow"
	c.env["XMODE_SANDBOX_ALLOW"] = "api.example.test"
	c.fails(4, "network allow needs an engine that enforces an egress policy, and the host engine cannot", "sandbox", "create", "--repo", testRepo(t))
	if out := c.ok("sandbox", "list", "--all"); strings.Contains(out, "sbx_") {
		t.Errorf("a refused create left a session:\n%s", out)
	}
	c.fails(4, "the cloud engine cannot", "sandbox", "create", "--repo", testRepo(t), "--runner-mode", "cloud_subscription")
	var checks []engine.Check
	_ = json.Unmarshal([]byte(c.ok("doctor", "--json")), &checks)
	got := map[string]engine.Check{}
	for _, ch := range checks {
		got[ch.Name] = ch
	}
	if h := got["host network policy"]; h.Status != "warn" || h.Method != "none" || !strings.Contains(h.Fix, "XMODE_SANDBOX_ENGINE=docker") {
		t.Errorf("doctor's host network policy line: %+v", h)
	}
	if d := got["docker network policy"]; d.Method != "proxy" {
		t.Errorf("doctor's docker network policy line: %+v", d)
	}
	c.env["XMODE_SANDBOX_NETWORK"] = "none"
	_ = json.Unmarshal([]byte(c.ok("doctor", "--json")), &checks)
	for _, ch := range checks {
		if ch.Name == "host network policy" && ch.Status != "ok" {
			t.Errorf("without a policy asked for: %+v", ch)
		}
	}
}
