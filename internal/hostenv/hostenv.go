// Package hostenv is the environment policy of host steps (the shape of
// Codex's shell_environment_policy): which of xmode's own variables a step
// on the host inherits. A step's --env values and the variables an agent
// names are not the policy's: they are passed explicitly, on top of what it
// lets through.
//
// A policy starts from its inheritance — all of xmode's variables, the core
// ones a shell and its tools expect (CoreNames), or none — adds what its
// include patterns name, and leaves out what its exclude patterns name
// (exclusion wins) and, unless included by name, the variables whose names
// look like secrets (DefaultExcludes). Patterns are globs (* and ?) over
// variable names, matched case-insensitively.
package hostenv

import (
	"fmt"
	"strings"
)

// Inheritances.
const (
	All  = "all"
	Core = "core"
	None = "none"
)

// CoreNames are the variables `core` inherits: who and where the user is,
// how to find programs, the locale, the terminal and temporary files.
var CoreNames = []string{"HOME", "LOGNAME", "USER", "USERNAME", "PATH", "SHELL",
	"LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM", "TMPDIR", "TEMP", "TMP", "TZ"}

// DefaultExcludes are left out whatever the inheritance, unless an include
// pattern names the variable.
var DefaultExcludes = []string{"*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*"}

// Policy is one environment policy. Its String form is what a session
// records and `xmode config` shows, and Parse reads it back.
type Policy struct {
	Inherit string   // All, Core or None
	Include []string // patterns let through (and past DefaultExcludes)
	Exclude []string // patterns left out, whatever else says
}

// Filter returns the entries of environ (KEY=VALUE) the policy lets
// through, in their order.
func (p Policy) Filter(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if p.Passes(name) {
			out = append(out, kv)
		}
	}
	return out
}

// Passes reports whether the policy lets the variable name through.
func (p Policy) Passes(name string) bool {
	if name == "" || matchAny(p.Exclude, name) {
		return false
	}
	if matchAny(p.Include, name) {
		return true
	}
	var inherited bool
	switch p.Inherit {
	case All:
		inherited = true
	case Core:
		inherited = matchAny(CoreNames, name)
	}
	return inherited && !matchAny(DefaultExcludes, name)
}

// Recorded is the policy a session recorded, in its String form: ""
// for a session made before policies existed, whose host steps inherit
// all of xmode's environment, keys included, as they always did.
type Recorded string

// Filter returns the entries of environ a step of the session inherits.
func (r Recorded) Filter(environ []string) ([]string, error) {
	if r == "" {
		return environ, nil
	}
	p, err := Parse(string(r))
	if err != nil {
		return nil, err
	}
	return p.Filter(environ), nil
}

// Passes reports whether a step of the session inherits the variable
// name; a policy that does not parse lets nothing through.
func (r Recorded) Passes(name string) bool {
	if r == "" {
		return name != ""
	}
	p, err := Parse(string(r))
	return err == nil && p.Passes(name)
}

// String is the policy as one line: its inheritance, then include= and
// exclude= with their patterns comma-separated, when it has any.
func (p Policy) String() string {
	s := p.Inherit
	if len(p.Include) > 0 {
		s += " include=" + strings.Join(p.Include, ",")
	}
	if len(p.Exclude) > 0 {
		s += " exclude=" + strings.Join(p.Exclude, ",")
	}
	return s
}

// Parse reads a policy's String form.
func Parse(s string) (Policy, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return Policy{}, fmt.Errorf("an empty environment policy: use all, core or none")
	}
	inherit, err := ParseInherit(f[0])
	if err != nil {
		return Policy{}, err
	}
	p := Policy{Inherit: inherit}
	for _, w := range f[1:] {
		key, list, _ := strings.Cut(w, "=")
		pats, err := ParsePatterns(list)
		if err != nil {
			return Policy{}, err
		}
		switch key {
		case "include":
			p.Include = pats
		case "exclude":
			p.Exclude = pats
		default:
			return Policy{}, fmt.Errorf("%q in environment policy %q: want include= or exclude=", w, s)
		}
	}
	return p, nil
}

// ParseInherit checks an inheritance.
func ParseInherit(s string) (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case All, Core, None:
		return v, nil
	}
	return "", fmt.Errorf("%q is not an inheritance: use all, core or none", s)
}

// ParsePatterns reads a comma-separated list of variable-name patterns:
// letters, digits and _, with * and ? as wildcards ("" is no pattern).
func ParsePatterns(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if strings.Trim(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_*?") != "" {
			return nil, fmt.Errorf("%q is not a variable-name pattern: use letters, digits and _, with * and ? as wildcards (e.g. GOFLAGS,AWS_*)", p)
		}
		out = append(out, p)
	}
	return out, nil
}

func matchAny(patterns []string, name string) bool {
	up := strings.ToUpper(name)
	for _, p := range patterns {
		if match(strings.ToUpper(p), up) {
			return true
		}
	}
	return false
}

// match is a glob match of * (any run of bytes) and ? (one byte) where
// every byte counts alike: a name holds anything but '=', and one with a
// '/' must not slip past *TOKEN* (as it would past path.Match).
func match(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p++
			n++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
