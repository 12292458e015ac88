package config

import (
	"fmt"
	"slices"
	"strings"
)

// TemplatePlaceholders are what XMODE_AGENT_COMMAND_TEMPLATE may name; the
// agent runtime fills them in after the template is split, so a value never
// becomes more than the one argument it sits in.
var TemplatePlaceholders = []string{"{worktree}", "{prompt_file}", "{session}", "{run}"}

// SplitTemplate splits an argv template into its elements the way a shell
// splits words, and does nothing else a shell does: whitespace separates,
// single quotes keep everything, double quotes keep everything but \" and
// \\, a backslash outside quotes keeps the next character. No variables,
// no globbing, no command substitution. A {word} placeholder other than
// TemplatePlaceholders is an error (a typo would reach the agent verbatim).
func SplitTemplate(s string) ([]string, error) {
	var argv []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				argv = append(argv, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("%q has an unclosed single quote", s)
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("%q has an unclosed double quote", s)
			}
			inWord = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("%q ends with a lone backslash", s)
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		argv = append(argv, cur.String())
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%q names no command", s)
	}
	for _, a := range argv {
		for _, p := range placeholders(a) {
			if !slices.Contains(TemplatePlaceholders, p) {
				return nil, fmt.Errorf("%q: unknown placeholder %s: use %s", s, p, strings.Join(TemplatePlaceholders, ", "))
			}
		}
	}
	return argv, nil
}

// placeholders lists the {word}s of s, a word being [a-z_]+; other braces
// are left alone (JSON in an argument, say). No regexp: compiling one at
// init would cost every xmode command.
func placeholders(s string) []string {
	var out []string
	for i := 0; i < len(s); i++ {
		if s[i] != '{' {
			continue
		}
		j := i + 1
		for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] == '_') {
			j++
		}
		if j > i+1 && j < len(s) && s[j] == '}' {
			out = append(out, s[i:j+1])
			i = j
		}
	}
	return out
}

// ValidEnvName reports whether s can name an environment variable:
// [A-Za-z_][A-Za-z0-9_]*.
func ValidEnvName(s string) bool {
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// ParseEnvNames reads a comma-separated list of variable names ("" is none).
func ParseEnvNames(v string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !ValidEnvName(n) {
			return nil, fmt.Errorf("%q is not a variable name: use letters, digits and _, comma-separated", n)
		}
		names = append(names, n)
	}
	return names, nil
}

func checkBin(v string) error {
	if strings.TrimSpace(v) == "" || strings.ContainsAny(v, "\x00\n") {
		return fmt.Errorf("%q is not a program: give a name on PATH or a path", v)
	}
	return nil
}
