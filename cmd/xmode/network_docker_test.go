package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// netFixture is a storage root whose sandboxes run on the docker engine
// with their network proxied, and test hosts of the test's own on a
// network it made (allowed.test, denied.test, other.test), reached by
// names the proxy resolves for the test (XMODE_SANDBOX_RESOLVE). The
// xmode run is a static build of this tree, the one the proxy's image is
// made from.
type netFixture struct {
	t        *testing.T
	cli      *client.Client
	bin      string
	dir      string
	root     string
	repo     string
	instance string
	up       *dockertest.Upstream
	hosts    map[string]string // test host name → address
	env      []string          // on top of the fixture's own
}

func newNetFixture(t *testing.T, hosts ...string) *netFixture {
	t.Helper()
	cli := dockertest.Require(t)
	if !strings.HasPrefix(dockertest.Host(), "unix://") {
		testenv.Skip(t, "bind mode needs the daemon on this machine, and it is at %s", dockertest.Host())
	}
	f := &netFixture{t: t, cli: cli, bin: dockertest.XmodeBinary(t), dir: t.TempDir(), hosts: map[string]string{}}
	f.repo = filepath.Join(f.dir, "repo")
	if err := makeRepo(f.repo); err != nil {
		t.Fatal(err)
	}
	f.root = filepath.Join(f.dir, "root")
	// The upstream network is labelled with the storage root's instance
	// (for its cleanup), which the store makes on the first command.
	if r := f.xm("sandbox", "list"); r.code != 0 {
		t.Fatalf("sandbox list: %s", r.stderr)
	}
	inst, err := os.ReadFile(filepath.Join(f.root, "xmode.instance"))
	if err != nil {
		t.Fatal(err)
	}
	f.instance = strings.TrimSpace(string(inst))
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, f.instance) })
	f.up = dockertest.NewUpstream(t, cli, f.instance)
	for _, h := range hosts {
		f.hosts[h] = f.up.Host(t, h).String()
	}
	// The test hosts' network is the proxy's way out, which it blocks
	// unless a CIDR rule names it (the docker host's other containers).
	f.env = append(f.env, "XMODE_SANDBOX_ALLOW="+f.up.Subnet.String())
	return f
}

// resolve is XMODE_SANDBOX_RESOLVE for the fixture's test hosts.
func (f *netFixture) resolve() string {
	var rs []string
	for name, addr := range f.hosts {
		rs = append(rs, name+"="+addr)
	}
	return strings.Join(rs, ",")
}

type xmResult struct {
	code           int
	stdout, stderr string
}

// xm runs xmode with the fixture's environment (and extra variables).
func (f *netFixture) xm(args ...string) xmResult { return f.xmEnv(nil, args...) }

func (f *netFixture) xmEnv(extra []string, args ...string) xmResult {
	f.t.Helper()
	cmd := exec.Command(f.bin, args...)
	upstream := "bridge"
	if f.up != nil {
		upstream = f.up.Name
	}
	cmd.Env = append(cleanEnv(), "XMODE_STORAGE_ROOT="+f.root, "XMODE_USER=tester", "HOME="+f.dir,
		"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker",
		"XMODE_SANDBOX_IMAGE="+dockertest.ProbeImage(f.t),
		"XMODE_SANDBOX_EGRESS_BINARY="+f.bin, "XMODE_SANDBOX_EGRESS_NETWORK="+upstream,
		"XMODE_SANDBOX_RESOLVE="+f.resolve())
	cmd.Env = append(append(cmd.Env, f.env...), extra...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatal(err)
	}
	return xmResult{code, out.String(), errb.String()}
}

// must runs xmode and fails the test unless it exits 0.
func (f *netFixture) must(args ...string) string {
	f.t.Helper()
	r := f.xm(args...)
	if r.code != 0 {
		f.t.Fatalf("xmode %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// stepFile reads a file of a step's evidence.
func (f *netFixture) stepFile(id string, seq int, name string) []byte {
	f.t.Helper()
	m, _ := filepath.Glob(filepath.Join(f.root, "runs", "*", "steps", fmt.Sprintf("%04d-*", seq), name))
	if len(m) != 1 {
		f.t.Fatalf("step %d's %s: %v", seq, name, m)
	}
	b, err := os.ReadFile(m[0])
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// TestNetworkPolicyFromTheCLI: `sandbox create --network allow` with
// --allow and --deny makes a sandbox that reaches only what they say; the
// session records the policy with each rule's source (`sandbox show
// --json`); `sandbox network` shows it and the proxy's decisions, each
// with its step; --allow and --deny on the live sandbox change it for the
// next connection, each change a step of its own whose evidence holds the
// rules; `sandbox logs ID STEP --network` shows a step's lines. A bad rule
// is exit 2 and records nothing; a sandbox without a proxied network has
// no policy to change (exit 4).
func TestNetworkPolicyFromTheCLI(t *testing.T) {
	t.Parallel()
	f := newNetFixture(t, "allowed.test", "denied.test", "other.test")
	id := strings.TrimSpace(f.must("sandbox", "create", "--repo", f.repo, "-q", "--network", "allow",
		"--allow", "allowed.test:80", "--allow", "denied.test", "--deny", "denied.test:80"))
	t.Cleanup(func() { f.xm("sandbox", "stop", id) })

	var shown struct {
		Network string `json:"network"`
		Policy  struct {
			Mode  string `json:"mode"`
			Allow []struct{ Rule, Source string }
			Deny  []struct{ Rule, Source string }
		} `json:"network_policy"`
	}
	if err := json.Unmarshal([]byte(f.must("sandbox", "show", id, "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Network != "allow" || shown.Policy.Mode != "allow" || len(shown.Policy.Allow) != 3 || shown.Policy.Allow[0].Source != "--allow" || shown.Policy.Allow[2].Source != "XMODE_SANDBOX_ALLOW" ||
		len(shown.Policy.Deny) != 1 || shown.Policy.Deny[0].Rule != "denied.test:80" || shown.Policy.Deny[0].Source != "--deny" {
		t.Fatalf("sandbox show --json: the policy %+v", shown)
	}

	get := func(url string) xmResult { return f.xm("sandbox", "exec", id, "--", "egressprobe", "get", url) }
	if r := get("http://allowed.test/"); r.code != 0 || !strings.Contains(r.stdout, "hello from allowed.test") { // step 1
		t.Fatalf("allowed.test: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := get("http://denied.test/"); r.code == 0 || !strings.Contains(r.stdout, "STATUS 403") { // step 2: the deny rule wins
		t.Fatalf("denied.test: exit %d\n%s", r.code, r.stdout)
	}
	if r := get("http://other.test/"); r.code == 0 { // step 3: no rule
		t.Fatalf("other.test: exit %d\n%s", r.code, r.stdout)
	}
	out := f.must("sandbox", "network", id)
	for _, want := range []string{"Network: allow", "allowed.test:80", "--allow", "denied.test", "--deny", "XMODE_SANDBOX_RESOLVE",
		"2 denied", "denied.test:80", "other.test:80"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox network does not say %q:\n%s", want, out)
		}
	}
	var v struct {
		Records []struct {
			Host    string `json:"host"`
			Verdict string `json:"verdict"`
			Rule    string `json:"rule"`
			Source  string `json:"source"`
			Steps   []int  `json:"steps"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(f.must("sandbox", "network", id, "--json", "--denied")), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Records) != 2 || v.Records[0].Host != "denied.test" || v.Records[0].Rule != "denied.test:80" || v.Records[0].Source != "--deny" ||
		len(v.Records[0].Steps) != 1 || v.Records[0].Steps[0] != 2 || v.Records[1].Host != "other.test" || v.Records[1].Steps[0] != 3 {
		t.Errorf("sandbox network --denied --json: %+v", v.Records)
	}
	lines := f.must("sandbox", "logs", id, "1", "--network")
	if !strings.Contains(lines, "allowed.test:80") || !strings.Contains(lines, "allowed") || strings.Contains(lines, "denied.test") {
		t.Errorf("sandbox logs ID 1 --network:\n%s", lines)
	}

	// A change on the live sandbox: a step of its own (4), in force for the
	// next connection.
	f.must("sandbox", "network", id, "--allow", "other.test", "--remove", "denied.test:80")
	var asked struct {
		Argv    []string `json:"argv"`
		Network struct {
			Allow, Remove []string
			Source        string
		} `json:"network"`
	}
	if err := json.Unmarshal(f.stepFile(id, 4, "command.json"), &asked); err != nil || strings.Join(asked.Network.Allow, " ") != "other.test" ||
		strings.Join(asked.Network.Remove, " ") != "denied.test:80" || asked.Network.Source != "sandbox network" || asked.Argv[0] != "network" {
		t.Errorf("the change's command.json: %+v %v", asked, err)
	}
	var left struct {
		ExitCode int `json:"exit_code"`
		Network  struct {
			Policy struct {
				Allow []struct{ Rule, Source string }
				Deny  []struct{ Rule, Source string }
			}
		} `json:"network"`
	}
	if err := json.Unmarshal(f.stepFile(id, 4, "result.json"), &left); err != nil || left.ExitCode != 0 || len(left.Network.Policy.Deny) != 0 ||
		left.Network.Policy.Allow[len(left.Network.Policy.Allow)-1] != (struct{ Rule, Source string }{"other.test", "sandbox network"}) {
		t.Errorf("the change's result.json: %+v %v", left, err)
	}
	if r := get("http://other.test/"); r.code != 0 { // step 5
		t.Fatalf("other.test after --allow: exit %d\n%s", r.code, r.stdout)
	}
	if r := get("http://denied.test/"); r.code != 0 { // step 6: its allow rule alone is left
		t.Fatalf("denied.test after --remove denied.test:80: exit %d\n%s", r.code, r.stdout)
	}
	f.must("sandbox", "network", id, "--deny", "allowed.test") // step 7
	if r := get("http://allowed.test/"); r.code == 0 {         // step 8
		t.Fatalf("allowed.test after --deny allowed.test: exit %d\n%s", r.code, r.stdout)
	}

	// The change request's evidence says what the sandbox reached and was
	// refused, each refused attempt with its step.
	f.must("sandbox", "exec", id, "--", "sh", "-c", "echo changed > README")
	cr := strings.TrimSpace(f.must("cr", "create", id, "-q", "--title", "network"))
	if out := f.must("cr", "show", cr); !strings.Contains(out, "Network: 6 connections to [") || !strings.Contains(out, "3 denied [") ||
		!strings.Contains(out, "refused denied.test:80 (http, step 2): denied.test:80 is denied by") {
		t.Errorf("cr show does not say what the sandbox was refused:\n%s", out)
	}
	var crv struct {
		Evidence struct {
			Network struct {
				Summary     string `json:"summary"`
				Connections int    `json:"connections"`
				Denied      int    `json:"denied"`
				Refused     []struct {
					Host  string `json:"host"`
					Steps []int  `json:"steps"`
				} `json:"refused"`
			} `json:"network"`
			Steps []struct {
				Seq     int `json:"seq"`
				Network *struct {
					Connections, Denied int
				} `json:"network"`
				NetworkChange json.RawMessage `json:"network_change"`
			} `json:"steps"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(f.must("cr", "show", cr, "--json")), &crv); err != nil {
		t.Fatal(err)
	}
	n := crv.Evidence.Network
	if n.Connections != 6 || n.Denied != 3 || len(n.Refused) != 3 || n.Refused[0].Host != "denied.test" || n.Refused[0].Steps[0] != 2 || !strings.HasPrefix(n.Summary, "6 connections") {
		t.Errorf("evidence.json's network: %+v", n)
	}
	if st := crv.Evidence.Steps; st[1].Network == nil || st[1].Network.Denied != 1 || st[3].Network != nil || len(st[3].NetworkChange) == 0 {
		t.Errorf("evidence.json's steps: step 2's network %+v, step 4's %+v (a network step: its change %s)", st[1].Network, st[3].Network, st[3].NetworkChange)
	}

	// Refused before anything is recorded.
	if r := f.xm("sandbox", "network", id, "--allow", "*.com"); r.code != 2 || !strings.Contains(r.stderr, `"*.com"`) {
		t.Errorf("--allow '*.com': exit %d\n%s", r.code, r.stderr)
	}
	if r := f.xm("sandbox", "network", id, "--remove", "nothing.test"); r.code != 2 || !strings.Contains(r.stderr, "no such rule") {
		t.Errorf("--remove of a rule it lacks: exit %d\n%s", r.code, r.stderr)
	}
	var steps []struct{ Seq int }
	if err := json.Unmarshal([]byte(f.must("sandbox", "logs", id, "--json")), &steps); err != nil || len(steps) != 9 {
		t.Errorf("refused changes recorded steps: %d steps (%v)", len(steps), err)
	}

	// A sandbox without a proxied network has no policy to change.
	plain := strings.TrimSpace(f.must("sandbox", "create", "--repo", f.repo, "-q", "--network", "none"))
	t.Cleanup(func() { f.xm("sandbox", "stop", plain) })
	if out := f.must("sandbox", "network", plain); !strings.Contains(out, "no egress policy") {
		t.Errorf("sandbox network of a network-none sandbox:\n%s", out)
	}
	if r := f.xm("sandbox", "network", plain, "--allow", "allowed.test"); r.code != 4 || !strings.Contains(r.stderr, "--network allow") {
		t.Errorf("a change on a network-none sandbox: exit %d\n%s", r.code, r.stderr)
	}
	if r := f.xm("sandbox", "create", "--repo", f.repo, "-q", "--network", "none", "--allow", "allowed.test"); r.code != 2 || !strings.Contains(r.stderr, "--network allow") {
		t.Errorf("--allow without a proxied network: exit %d\n%s", r.code, r.stderr)
	}
}

// TestPlanNetwork: a plan's network: holds for the whole plan, a step's
// only while the step runs — each added (and a step's taken out again) as
// a network step of the session, so the evidence says when the sandbox
// could reach what; the decisions name the plan and the step as the rules'
// sources. A sandbox whose network is not proxied runs the plan with a
// note that its rules do not apply.
func TestPlanNetwork(t *testing.T) {
	t.Parallel()
	f := newNetFixture(t, "allowed.test", "other.test")
	plan := filepath.Join(f.dir, "plan.yaml")
	if err := os.WriteFile(plan, []byte(`network:
  allow: [allowed.test:80]
steps:
  - name: before
    run: egressprobe get http://other.test/
    allow_failure: true
  - name: fetch
    run: egressprobe get http://other.test/
    network:
      allow: [other.test:80]
  - name: after
    run: egressprobe get http://other.test/
    allow_failure: true
  - name: planned
    run: egressprobe get http://allowed.test/
`), 0o644); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(f.must("sandbox", "create", "--repo", f.repo, "-q", "--network", "allow"))
	t.Cleanup(func() { f.xm("sandbox", "stop", id) })
	if r := f.xm("pipeline", "run", id, "-f", plan); r.code != 0 {
		t.Fatalf("pipeline run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var steps []struct {
		Seq      int    `json:"seq"`
		Name     string `json:"name"`
		ExitCode *int   `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(f.must("sandbox", "logs", id, "--json")), &steps); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		got = append(got, fmt.Sprintf("%s:%d", s.Name, *s.ExitCode))
	}
	want := "plan-network:0 before:3 fetch-network:0 fetch:0 fetch-network:0 after:3 planned:0"
	if strings.Join(got, " ") != want {
		t.Fatalf("the session's steps: %s\nwant %s", strings.Join(got, " "), want)
	}
	var v struct {
		Records []struct {
			Host, Verdict, Rule, Source string
			Steps                       []int
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(f.must("sandbox", "network", id, "--json")), &v); err != nil {
		t.Fatal(err)
	}
	var decided []string
	for _, r := range v.Records {
		decided = append(decided, fmt.Sprintf("%v %s %s (%s)", r.Steps, r.Verdict, r.Rule, r.Source))
	}
	wantDecided := "[2] denied no rule () [4] allowed other.test:80 (plan step fetch) [6] denied no rule () [7] allowed allowed.test:80 (plan)"
	if strings.Join(decided, " ") != wantDecided {
		t.Errorf("the decisions: %s\nwant %s", strings.Join(decided, " "), wantDecided)
	}
	var shown struct {
		Policy struct {
			Allow []struct{ Rule, Source string }
		} `json:"network_policy"`
	}
	if err := json.Unmarshal([]byte(f.must("sandbox", "show", id, "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	for _, r := range shown.Policy.Allow {
		if r.Source == "plan step fetch" {
			t.Errorf("the step's rule outlived it: %+v", shown.Policy.Allow)
		}
	}

	plain := strings.TrimSpace(f.must("sandbox", "create", "--repo", f.repo, "-q", "--network", "none"))
	t.Cleanup(func() { f.xm("sandbox", "stop", plain) })
	r := f.xm("pipeline", "run", plain, "-f", plan)
	if !strings.Contains(r.stderr, "the plan's network rules do not apply") || strings.Contains(f.must("sandbox", "logs", plain), "network") {
		t.Errorf("a plan with network rules on a network-none sandbox: exit %d\n%s", r.code, r.stderr)
	}
}

// mcp starts `xmode mcp ARGS` on the fixture's storage root and connects
// a client to it.
func (f *netFixture) mcp(args ...string) *mcp.ClientSession {
	f.t.Helper()
	c := exec.Command(f.bin, append([]string{"mcp"}, args...)...)
	c.Env = append(append(cleanEnv(), "XMODE_STORAGE_ROOT="+f.root, "XMODE_USER=tester", "HOME="+f.dir,
		"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker",
		"XMODE_SANDBOX_IMAGE="+dockertest.ProbeImage(f.t),
		"XMODE_SANDBOX_EGRESS_BINARY="+f.bin, "XMODE_SANDBOX_EGRESS_NETWORK="+f.up.Name,
		"XMODE_SANDBOX_RESOLVE="+f.resolve(), "XMODE_MCP_REPOS="+f.repo), f.env...)
	c.Stderr = &testLog{t: f.t, prefix: "server: "}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "xmode-test", Version: "1.0"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: c}, nil)
	if err != nil {
		f.t.Fatalf("connect to xmode mcp: %v", err)
	}
	f.t.Cleanup(func() { cs.Close() })
	return cs
}

// TestMCPNetwork: through MCP, sandbox_create takes a policy, network_policy
// shows and changes it (each change a step), network_log reads the proxy's
// decisions; a client narrows a policy whenever it likes, and widens one —
// at its create or later — only when the user started the server with
// --allow-network-changes.
func TestMCPNetwork(t *testing.T) {
	t.Parallel()
	f := newNetFixture(t, "allowed.test", "denied.test", "other.test")
	f.env = append(f.env, "XMODE_SANDBOX_NETWORK=allow", "XMODE_SANDBOX_ALLOW="+f.up.Subnet.String()+" allowed.test:80 denied.test:80")
	cs := f.mcp()
	made := ok(t, cs, "sandbox_create", map[string]any{"repository": f.repo, "deny": []string{"denied.test"}})
	id := str(made, "session", "id")
	if n := str(made, "session", "network"); n != "allow" {
		t.Errorf("the sandbox's network: %q", n)
	}
	toolErr(t, cs, "sandbox_create", map[string]any{"repository": f.repo, "allow": []string{"other.test"}}, "--allow-network-changes")
	toolErr(t, cs, "sandbox_create", map[string]any{"repository": f.repo, "network": "open"}, "more network than the user's configuration")
	toolErr(t, cs, "sandbox_create", map[string]any{"repository": f.repo, "deny": []string{"*.com"}}, `rule "*.com"`)

	get := func(url string) string {
		t.Helper()
		return str(ok(t, cs, "sandbox_exec", map[string]any{"session": id, "argv": []string{"egressprobe", "get", url}}), "exit_code")
	}
	if get("http://allowed.test/") != "0" || get("http://denied.test/") == "0" || get("http://other.test/") == "0" {
		t.Fatal("the MCP sandbox's policy: allowed.test must answer, denied.test and other.test be refused")
	}
	logged := ok(t, cs, "network_log", map[string]any{"session": id, "denied_only": true})
	if d := str(logged, "decisions"); !strings.Contains(d, `"destination":"denied.test:80"`) || !strings.Contains(d, `"source":"sandbox_create"`) ||
		!strings.Contains(d, `"destination":"other.test:80"`) || !strings.Contains(d, `"steps":[3]`) || strings.Contains(d, "allowed.test") {
		t.Errorf("network_log denied_only: %s", d)
	}
	if d := str(ok(t, cs, "network_log", map[string]any{"session": id, "step": 1}), "decisions"); !strings.Contains(d, `"verdict":"allowed"`) || strings.Contains(d, "denied.test") {
		t.Errorf("network_log of step 1: %s", d)
	}
	shown := ok(t, cs, "network_policy", map[string]any{"session": id})
	if p := str(shown, "policy"); !strings.Contains(p, `{"rule":"denied.test","source":"sandbox_create"}`) || str(shown, "changed") != "false" ||
		!strings.Contains(str(shown, "summary"), "2 denied") {
		t.Errorf("network_policy: %v", shown)
	}

	// Widening is the user's; narrowing the client's.
	toolErr(t, cs, "network_policy", map[string]any{"session": id, "allow": []string{"other.test"}}, "would let sandbox "+id+" reach more (allow other.test)")
	toolErr(t, cs, "network_policy", map[string]any{"session": id, "remove": []string{"denied.test"}}, "no longer deny denied.test")
	toolErr(t, cs, "network_policy", map[string]any{"session": id, "mode": "open"}, "mode allow to open")
	narrowed := ok(t, cs, "network_policy", map[string]any{"session": id, "deny": []string{"allowed.test"}})
	if str(narrowed, "changed") != "true" || str(narrowed, "step", "name") != "network" {
		t.Errorf("a narrowing change: %v", narrowed)
	}
	if get("http://allowed.test/") == "0" {
		t.Error("allowed.test after the client denied it")
	}

	wide := f.mcp("--allow-network-changes")
	ok(t, wide, "network_policy", map[string]any{"session": id, "allow": []string{"other.test"}, "remove": []string{"allowed.test"}})
	if get("http://other.test/") != "0" || get("http://allowed.test/") != "0" {
		t.Error("other.test and allowed.test after a widening change of a server that lets clients widen")
	}
	ok(t, wide, "sandbox_create", map[string]any{"repository": f.repo, "allow": []string{"other.test"}})

	// sandbox_port: a background server's port, on a loopback port of the
	// user's machine, until the sandbox stops.
	ok(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "mkdir -p www && echo hello through mcp > www/index.html"})
	ok(t, cs, "sandbox_exec", map[string]any{"session": id, "argv": []string{"busybox", "httpd", "-f", "-p", "8080", "-h", "www"}, "background": true})
	pub := ok(t, cs, "sandbox_port", map[string]any{"session": id, "port": 8080})
	url := str(pub, "url")
	if !strings.HasPrefix(url, "http://127.0.0.1:") || str(pub, "forwarded") != "true" {
		t.Fatalf("sandbox_port: %v", pub)
	}
	httpGet(t, url, "hello through mcp")
	if p := str(ok(t, cs, "sandbox_show", map[string]any{"session": id}), "ports"); !strings.Contains(p, url) {
		t.Errorf("sandbox_show's ports: %s", p)
	}
	ok(t, cs, "sandbox_stop", map[string]any{"session": id})
	if c, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"), time.Second); err == nil {
		c.Close()
		t.Errorf("%s outlived sandbox_stop", url)
	}
}

// TestPortsOnDocker: `sandbox port` publishes a sandbox's port — a busybox
// httpd a background step started — on a loopback port of this host,
// whatever the sandbox's network (none: loopback is all it has; allow:
// the egress network the host has no address on; docker's bridge). The forwarder outlives
// the command that started it; `sandbox show` lists the port; it closes
// with the sandbox, and its relay container goes with it.
func TestPortsOnDocker(t *testing.T) {
	t.Parallel()
	f := newNetFixture(t)
	for _, network := range []string{"none", "allow", "bridge"} {
		t.Run(network, func(t *testing.T) {
			id := strings.TrimSpace(f.must("sandbox", "create", "--repo", f.repo, "-q", "--network", network))
			t.Cleanup(func() { f.xm("sandbox", "stop", id) })
			f.must("sandbox", "exec", id, "--", "sh", "-c", "mkdir -p www && echo hello from "+network+" > www/index.html")
			f.must("sandbox", "exec", id, "--detach", "--name", "web", "--", "busybox", "httpd", "-f", "-p", "8080", "-h", "www")
			if r := f.xm("sandbox", "port", id, "8080", "--host-port", "0.0.0.0:0"); r.code != 2 || !strings.Contains(r.stderr, "--expose-remote") {
				t.Errorf("a non-loopback --host-port without --expose-remote: exit %d\n%s", r.code, r.stderr)
			}
			url := strings.TrimSpace(f.must("sandbox", "port", id, "8080"))
			if !strings.HasPrefix(url, "http://127.0.0.1:") {
				t.Fatalf("sandbox port printed %q", url)
			}
			body := httpGet(t, url, "hello from "+network)
			if !strings.Contains(body, "hello from "+network) {
				t.Fatalf("GET %s: %q", url, body)
			}
			// Docker's bridge is reached straight, as docker's own published
			// ports are; the other networks through the sandbox's relay.
			_, rerr := f.cli.ContainerInspect(context.Background(), "xmode-relay-"+id)
			if (network == "bridge") != (rerr != nil) {
				t.Errorf("network %s: the relay container %s (inspect: %v)", network, map[bool]string{true: "was made", false: "was not made"}[rerr == nil], rerr)
			}
			if r := f.xm("sandbox", "port", id, "8080"); r.code != 4 || !strings.Contains(r.stderr, "published already") {
				t.Errorf("publishing it again: exit %d\n%s", r.code, r.stderr)
			}
			var shown struct {
				Ports []struct {
					Port     int    `json:"port"`
					HostAddr string `json:"host_addr"`
					URL      string `json:"url"`
				} `json:"ports"`
			}
			if err := json.Unmarshal([]byte(f.must("sandbox", "show", id, "--json")), &shown); err != nil || len(shown.Ports) != 1 ||
				shown.Ports[0].Port != 8080 || shown.Ports[0].URL != url {
				t.Errorf("sandbox show --json's ports: %+v %v", shown.Ports, err)
			}
			if out := f.must("sandbox", "show", id); !strings.Contains(out, "8080 → "+url) {
				t.Errorf("sandbox show does not list the port:\n%s", out)
			}
			// A port nothing listens on: the connection is closed, the
			// forwarder lives on.
			bad := strings.TrimSpace(f.must("sandbox", "port", id, "9999"))
			if _, err := http.Get(bad); err == nil {
				t.Errorf("GET %s (nothing listens on 9999 in the sandbox) answered", bad)
			}
			httpGet(t, url, "hello from "+network)

			f.must("sandbox", "stop", id)
			addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Errorf("%s still takes connections after sandbox stop", addr)
			}
			if _, err := f.cli.ContainerInspect(context.Background(), "xmode-relay-"+id); err == nil {
				t.Errorf("the port relay of %s outlived it", id)
			}
		})
	}
}

// httpGet GETs url, retrying for a while until the answer has want (a
// background server takes a moment to listen).
func httpGet(t *testing.T, url, want string) string {
	t.Helper()
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = string(b)
		if strings.Contains(last, want) {
			return last
		}
	}
	t.Fatalf("GET %s never answered %q: %s", url, want, last)
	return ""
}
