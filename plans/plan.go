// Package plans is the plan of docs/agents.md, "Plans" — a YAML list of named
// steps, each an agent or a command — and the pipeline that runs a plan's
// steps in order in one session, each as a step with its own evidence.
package plans

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// FileName is the plan a repository carries at its root.
const FileName = "xmode.yaml"

// maxPlanBytes bounds a plan file: a worktree's xmode.yaml is a sandbox's
// writing, read on the host.
const maxPlanBytes = 1 << 20

// Plan is a parsed plan. Attempts and Iterate are what `xmode run` does
// with it unless its flags say otherwise (docs/agents.md, "Attempts",
// "Iterating with a reviewer command"): run it in that many sandboxes at
// once, and continue its change request up to that many times while a
// reviewer command asks for changes; 0 when the plan does not say.
type Plan struct {
	Steps    []Step `json:"steps"`
	Attempts int    `json:"attempts,omitempty"`
	Iterate  int    `json:"iterate,omitempty"`
	// Network is what the plan's steps need of a proxied sandbox's egress
	// policy, for the whole plan (docs/network.md, "Plans").
	Network *Network `json:"network,omitempty"`
}

// Network is a plan's (or a step's) egress rules: they apply to a sandbox
// whose network is proxied (--network allow or open), and are named after
// the plan ("plan") or the step ("plan step NAME") in its policy and in the
// decisions they make. A plan carries no credential: its file is the
// repository's, and a credential sends a secret of the host's.
type Network struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// PlanSource names a plan's rules.
const PlanSource = "plan"

// StepSource names a plan step's rules.
func StepSource(step string) string { return "plan step " + step }

// Source is the plan's rules as egress.Merge takes them (nil without any).
func (p *Plan) Source() []egress.Source {
	if p == nil || p.Network == nil {
		return nil
	}
	return []egress.Source{{Name: PlanSource, Allow: p.Network.Allow, Deny: p.Network.Deny}}
}

// The bounds of a plan's (and `xmode run`'s) attempts and iterations.
const (
	MaxAttempts = 16
	MaxIterate  = 10
)

// CheckAttempts refuses a number of attempts or iterations out of bounds;
// what names the input (a flag, a plan's field).
func CheckAttempts(attempts, iterate int) error {
	if attempts < 0 || attempts > MaxAttempts {
		return fail.Usagef("%s %d: from 1 to %d attempts", fail.Attempts, attempts, MaxAttempts)
	}
	if iterate < 0 || iterate > MaxIterate {
		return fail.Usagef("%s %d: from 0 to %d new versions", fail.Iterate, iterate, MaxIterate)
	}
	return nil
}

// Step is one step of a plan: an agent (Agent, Prompt) or a command (Run).
type Step struct {
	Name   string `json:"name"`
	Agent  string `json:"agent,omitempty"`
	Prompt string `json:"prompt,omitempty"`
	Model  string `json:"model,omitempty"`
	// Run is the command's argv; a plan's string form is ["sh", "-c", s].
	Run          []string      `json:"run,omitempty"`
	Timeout      time.Duration `json:"timeout,omitempty"`
	Env          []string      `json:"env,omitempty"` // KEY=VALUE, in the plan's order
	Workdir      string        `json:"workdir,omitempty"`
	AllowFailure bool          `json:"allow_failure,omitempty"`
	// Network is what the step needs of a proxied sandbox's policy while
	// it runs: added before it starts, taken out when it ends, each change
	// a network step of the session's.
	Network *Network `json:"network,omitempty"`
	// Line is where the step starts in its file (0 for a step xmode made).
	Line int `json:"-"`
}

// IsAgent reports whether the step runs an agent.
func (s Step) IsAgent() bool { return s.Agent != "" }

// JSON is the plan as the store keeps it.
func (p *Plan) JSON() string {
	b, _ := json.Marshal(p)
	return string(b)
}

// HasAgent reports whether any step runs an agent.
func (p *Plan) HasAgent() bool {
	for _, s := range p.Steps {
		if s.IsAgent() {
			return true
		}
	}
	return false
}

// Load reads and parses a plan file given on the command line. Only a
// regular file is read (fsguard.OpenRegularPath): a FIFO, a device or a
// directory is refused at once instead of blocking or reading for ever.
func Load(file string) (*Plan, error) {
	f, err := fsguard.OpenRegularPath(file)
	if err != nil {
		var nr *fsguard.NotRegularError
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fail.Usagef("-f %s: no such file", file)
		case errors.As(err, &nr):
			return nil, fail.Usagef("-f %s is %s: a plan must be a regular file", file, nr.Kind)
		}
		return nil, fail.Usagef("-f %s: %v", file, err)
	}
	defer f.Close()
	b, err := readCapped(f, file)
	if err != nil {
		return nil, err
	}
	return Parse(b, file)
}

// LoadWorktree reads <worktree>/xmode.yaml; nil, nil when there is none.
// The worktree is a sandbox's: the file is opened as fsguard.OpenRegular
// opens what a sandbox wrote (no link followed, a FIFO never waited on)
// and must be a regular file.
func LoadWorktree(worktree string) (*Plan, error) {
	root, err := fsguard.OpenRootPath(worktree)
	if err != nil {
		return nil, fmt.Errorf("open worktree %s: %w", worktree, err)
	}
	defer root.Close()
	f, err := fsguard.OpenRegular(root, FileName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		var nr *fsguard.NotRegularError
		if errors.As(err, &nr) {
			return nil, fail.Usagef("%s in the worktree is %s: a plan must be a regular file (xmode follows no link in a worktree)", FileName, nr.Kind)
		}
		return nil, fail.Usagef("%s in the worktree: %v", FileName, err)
	}
	defer f.Close()
	b, err := readCapped(f, FileName)
	if err != nil {
		return nil, err
	}
	return Parse(b, FileName)
}

func readCapped(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxPlanBytes+1))
	if err != nil {
		return nil, fail.Usagef("%s: %v", name, err)
	}
	if len(b) > maxPlanBytes {
		return nil, fail.Usagef("%s is larger than %d bytes: that is not a plan", name, maxPlanBytes)
	}
	return b, nil
}

// planError is a plan error naming the file, the line and the field.
func planError(file string, n *yaml.Node, field, format string, args ...any) error {
	return fail.Usagef("%s:%d: %s: %s", file, n.Line, field, fmt.Sprintf(format, args...))
}

// Parse parses a plan strictly: an unknown field, a missing one or a value
// of the wrong kind is an error naming the file, the line and the field
// (exit 2).
func Parse(src []byte, file string) (*Plan, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(src))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fail.Usagef("%s: the plan is empty: it needs a list of steps under \"steps:\"", file)
		}
		return nil, fail.Usagef("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fail.Usagef("%s: a plan is one YAML document", file)
	}
	top := &doc
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if top.Kind != yaml.MappingNode {
		return nil, planError(file, top, "plan", "must be a mapping with a list of steps under \"steps:\"")
	}
	var steps, network *yaml.Node
	p := &Plan{}
	if err := eachKey(file, top, "plan", func(key string, k, v *yaml.Node) error {
		switch key {
		case "steps":
			steps = v
		case "network":
			network = v
		case "attempts":
			n, err := count(file, v, key, 1, MaxAttempts)
			p.Attempts = n
			return err
		case "iterate":
			n, err := count(file, v, key, 0, MaxIterate)
			p.Iterate = n
			return err
		default:
			return planError(file, k, key, "unknown field: a plan has \"steps\", and may say \"attempts\", \"iterate\" and \"network\"")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if steps == nil {
		return nil, planError(file, top, "steps", "missing: list the plan's steps under \"steps:\"")
	}
	if steps.Kind != yaml.SequenceNode || len(steps.Content) == 0 {
		return nil, planError(file, steps, "steps", "must be a non-empty list of steps")
	}
	names := map[string]int{}
	for i, n := range steps.Content {
		field := fmt.Sprintf("steps[%d]", i)
		s, err := parseStep(file, field, n)
		if err != nil {
			return nil, err
		}
		if line, dup := names[strings.ToLower(s.Name)]; dup {
			return nil, planError(file, n, field+".name", "%q is already the name of the step on line %d: names must be unique", s.Name, line)
		}
		names[strings.ToLower(s.Name)] = n.Line
		p.Steps = append(p.Steps, s)
	}
	if network != nil {
		var err error
		if p.Network, err = parseNetwork(file, "network", PlanSource, network); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// parseNetwork reads a network: mapping of allow and deny lists, each rule
// checked as the egress proxy reads it.
func parseNetwork(file, field, source string, v *yaml.Node) (*Network, error) {
	if v.Kind != yaml.MappingNode {
		return nil, planError(file, v, field, "must be a mapping with allow and deny lists of rules (host, *.host, host:port, CIDR)")
	}
	n := &Network{}
	err := eachKey(file, v, field, func(key string, k, val *yaml.Node) error {
		f := field + "." + key
		var list *[]string
		switch key {
		case "allow":
			list = &n.Allow
		case "deny":
			list = &n.Deny
		default:
			if key == "credential" || key == "credentials" {
				return planError(file, k, f, "a plan carries no credential (its file is the repository's, and a credential sends a secret of this machine's): give it with sandbox create --credential")
			}
			return planError(file, k, f, "unknown field: network has allow and deny")
		}
		if val.Kind != yaml.SequenceNode {
			return planError(file, val, f, "must be a list of rules, e.g. [pypi.org, \"*.pythonhosted.org\"]")
		}
		for i, r := range val.Content {
			rf := fmt.Sprintf("%s[%d]", f, i)
			text, err := scalar(file, r, rf)
			if err != nil {
				return err
			}
			if _, err := egress.ParseRule(text, source, key == "deny"); err != nil {
				var re *egress.RuleError
				if errors.As(err, &re) {
					msg := re.Problem
					if re.Example != "" {
						msg += "; write e.g. " + re.Example
					}
					return planError(file, r, rf, "%q: %s", text, msg)
				}
				return planError(file, r, rf, "%v", err)
			}
			*list = append(*list, text)
		}
		return nil
	})
	return n, err
}

// eachKey walks a mapping, refusing duplicate and non-string keys.
func eachKey(file string, m *yaml.Node, field string, fn func(key string, k, v *yaml.Node) error) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return planError(file, k, field, "keys must be plain words")
		}
		if seen[k.Value] {
			return planError(file, k, field+"."+k.Value, "given twice")
		}
		seen[k.Value] = true
		if err := fn(k.Value, k, v); err != nil {
			return err
		}
	}
	return nil
}

// count reads a whole number from lo to hi.
func count(file string, n *yaml.Node, field string, lo, hi int) (int, error) {
	s, err := scalar(file, n, field)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, planError(file, n, field, "%q must be a whole number from %d to %d", s, lo, hi)
	}
	return v, nil
}

func scalar(file string, n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", planError(file, n, field, "must be a single value")
	}
	return n.Value, nil
}

func parseStep(file, field string, n *yaml.Node) (Step, error) {
	s := Step{Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return s, planError(file, n, field, "a step is a mapping with a name and either agent or run")
	}
	var hasPrompt bool
	err := eachKey(file, n, field, func(key string, k, v *yaml.Node) error {
		f := field + "." + key
		var err error
		switch key {
		case "name":
			if s.Name, err = scalar(file, v, f); err == nil && s.Name != "" {
				if nerr := evidence.CheckName(s.Name); nerr != nil {
					err = planError(file, v, f, "%s", nerr.Error())
				}
			}
		case "agent":
			if s.Agent, err = scalar(file, v, f); err == nil && agents.CheckKind(s.Agent) != nil {
				err = planError(file, v, f, "%q is not an agent: use codex, claude or command", s.Agent)
			}
		case "prompt":
			hasPrompt = true
			s.Prompt, err = scalar(file, v, f)
		case "model":
			s.Model, err = scalar(file, v, f)
		case "run":
			s.Run, err = parseRun(file, f, v)
		case "timeout":
			var t string
			if t, err = scalar(file, v, f); err == nil {
				if s.Timeout, err = config.ParseDuration(t); err != nil {
					err = planError(file, v, f, "%v", err)
				}
			}
		case "env":
			s.Env, err = parseEnv(file, f, v)
		case "workdir":
			if s.Workdir, err = scalar(file, v, f); err == nil && filepath.IsAbs(s.Workdir) {
				err = planError(file, v, f, "%q must be relative to the worktree", s.Workdir)
			}
		case "network":
			s.Network, err = parseNetwork(file, f, StepSource("step"), v)
		case "allow_failure":
			var b string
			if b, err = scalar(file, v, f); err == nil {
				switch b {
				case "true":
					s.AllowFailure = true
				case "false":
				default:
					err = planError(file, v, f, "%q must be true or false", b)
				}
			}
		default:
			err = planError(file, k, f, "unknown field: a step has name, agent, prompt, model, run, timeout, env, workdir, network and allow_failure")
		}
		return err
	})
	if err != nil {
		return s, err
	}
	switch {
	case s.Name == "":
		return s, planError(file, n, field+".name", "missing: every step has a name")
	case s.Agent != "" && s.Run != nil:
		return s, planError(file, n, field, "step %q has both agent and run: give one", s.Name)
	case s.Agent == "" && s.Run == nil:
		return s, planError(file, n, field, "step %q has neither agent nor run: give one", s.Name)
	case s.Agent != "" && strings.TrimSpace(s.Prompt) == "":
		return s, planError(file, n, field+".prompt", "missing: agent step %q needs a prompt (\"{objective}\" is the run's objective)", s.Name)
	case s.Agent == "" && (hasPrompt || s.Model != ""):
		return s, planError(file, n, field, "prompt and model belong to agent steps; step %q runs a command", s.Name)
	case s.Agent != "" && s.Workdir != "":
		return s, planError(file, n, field+".workdir", "agent step %q works in the whole worktree: workdir is for commands", s.Name)
	}
	return s, nil
}

func parseRun(file, field string, v *yaml.Node) ([]string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" || strings.TrimSpace(v.Value) == "" {
			return nil, planError(file, v, field, "the command is empty")
		}
		return []string{"sh", "-c", v.Value}, nil
	case yaml.SequenceNode:
		if len(v.Content) == 0 {
			return nil, planError(file, v, field, "the command is empty")
		}
		argv := make([]string, len(v.Content))
		for i, a := range v.Content {
			s, err := scalar(file, a, fmt.Sprintf("%s[%d]", field, i))
			if err != nil {
				return nil, err
			}
			argv[i] = s
		}
		if argv[0] == "" {
			return nil, planError(file, v, field, "the command's name is empty")
		}
		return argv, nil
	}
	return nil, planError(file, v, field, "must be an argv list ([go, test, ./...]) or a string run by sh -c")
}

func parseEnv(file, field string, v *yaml.Node) ([]string, error) {
	if v.Kind != yaml.MappingNode {
		return nil, planError(file, v, field, "must be a mapping of NAME: value")
	}
	var env []string
	err := eachKey(file, v, field, func(key string, k, val *yaml.Node) error {
		if !config.ValidEnvName(key) {
			return planError(file, k, field, "%q is not a variable name", key)
		}
		s, err := scalar(file, val, field+"."+key)
		env = append(env, key+"="+s)
		return err
	})
	return env, err
}
