package plans

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// The example plan of `xmode pipeline run --help` (docs/agents.md, "Plans"),
// with a string step and a map of variables added.
const contractPlan = `steps:
  - name: implement
    agent: codex              # codex | claude | command
    prompt: "{objective}"
  - name: test
    run: [go, test, ./...]    # an argv list; a string runs under sh -c
    timeout: 10m
    env: {GOFLAGS: -mod=mod}
    workdir: .
    allow_failure: false
  - name: lint
    run: go vet ./... && gofmt -l .
    allow_failure: true
    env:
      B: 2
      A: "1"
`

func TestParseTheContractsPlan(t *testing.T) {
	p, err := Parse([]byte(contractPlan), "xmode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{Name: "implement", Agent: "codex", Prompt: "{objective}", Line: 2},
		{Name: "test", Run: []string{"go", "test", "./..."}, Timeout: 10 * time.Minute, Env: []string{"GOFLAGS=-mod=mod"}, Workdir: ".", Line: 5},
		{Name: "lint", Run: []string{"sh", "-c", "go vet ./... && gofmt -l ."}, AllowFailure: true, Env: []string{"B=2", "A=1"}, Line: 11},
	}
	if !reflect.DeepEqual(p.Steps, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", p.Steps, want)
	}
	if !p.HasAgent() {
		t.Fatal("HasAgent")
	}
	back, err := Parse([]byte(`{"steps":[{"name":"a","run":["true"]}]}`), "json.yaml")
	if err != nil || back.Steps[0].Run[0] != "true" {
		t.Fatalf("YAML's JSON form: %+v %v", back, err)
	}
}

func TestCheckFrom(t *testing.T) {
	p, _ := Parse([]byte(contractPlan), "x")
	if err := Check(p, Options{From: "TEST", Objective: "o"}); err != nil {
		t.Fatalf("--from is case-insensitive like step names: %v", err)
	}
	if err := Check(p, Options{From: "nope", Objective: "o"}); err == nil {
		t.Fatal("--from an unknown step must fail")
	}
	if err := Check(p, Options{}); err == nil {
		t.Fatal("{objective} without an objective must fail")
	}
}

// A plan's network: and a step's: allow and deny rules, each checked as
// the egress proxy reads it; an error names the file, the line and the
// field; a plan carries no credential.
func TestParseNetwork(t *testing.T) {
	p, err := Parse([]byte(`network:
  allow: [pypi.org, "*.pythonhosted.org"]
  deny: [pastebin.example]
steps:
  - name: install
    run: pip install -r requirements.txt
    network:
      allow: [files.example.com:443]
  - name: test
    run: [make, test]
`), "xmode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Network{Allow: []string{"pypi.org", "*.pythonhosted.org"}, Deny: []string{"pastebin.example"}}
	if !reflect.DeepEqual(p.Network, want) || !reflect.DeepEqual(p.Steps[0].Network, &Network{Allow: []string{"files.example.com:443"}}) || p.Steps[1].Network != nil {
		t.Fatalf("parsed %+v %+v", p.Network, p.Steps)
	}
	src := p.Source()
	if len(src) != 1 || src[0].Name != PlanSource || len(src[0].Allow) != 2 || src[0].Deny[0] != "pastebin.example" {
		t.Fatalf("the plan's source: %+v", src)
	}
	for _, c := range []struct{ plan, want string }{
		{"network:\n  allow: [\"*.com\"]\nsteps: [{name: a, run: x}]\n", `xmode.yaml:2: network.allow[0]: "*.com": *.com would allow a whole top-level domain`},
		{"steps:\n  - name: a\n    run: x\n    network:\n      deny: [\"not a host\"]\n", `xmode.yaml:5: steps[0].network.deny[0]: "not a host"`},
		{"network:\n  credential: [a.example=x-api-key:HOME]\nsteps: [{name: a, run: x}]\n", "xmode.yaml:2: network.credential: a plan carries no credential"},
		{"network:\n  allow: pypi.org\nsteps: [{name: a, run: x}]\n", "xmode.yaml:2: network.allow: must be a list of rules"},
		{"network: [pypi.org]\nsteps: [{name: a, run: x}]\n", "xmode.yaml:1: network: must be a mapping with allow and deny"},
		{"netwrok: {}\nsteps: [{name: a, run: x}]\n", `xmode.yaml:1: netwrok: unknown field: a plan has "steps", and may say "attempts", "iterate" and "network"`},
	} {
		_, err := Parse([]byte(c.plan), "xmode.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want %q", c.plan, err, c.want)
		}
	}
}
