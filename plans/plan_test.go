package plans

import (
	"reflect"
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
