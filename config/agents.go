package config

import (
	"fmt"
	"regexp"
	"strings"
)

// TemplatePlaceholders are what XMODE_AGENT_COMMAND_TEMPLATE may name; the
// agent runtime fills them in after the template is split, so a value never
// becomes more than the one argument it sits in.
var TemplatePlaceholders = []string{"{worktree}", "{prompt_file}", "{session}", "{run}"}

var placeholderRE = regexp.MustCompile(`\{[a-z_]+\}`)

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
		for _, p := range placeholderRE.FindAllString(a, -1) {
			known := false
			for _, k := range TemplatePlaceholders {
				known = known || p == k
			}
			if !known {
				return nil, fmt.Errorf("%q: unknown placeholder %s: use %s", s, p, strings.Join(TemplatePlaceholders, ", "))
			}
		}
	}
	return argv, nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidEnvName reports whether s can name an environment variable.
func ValidEnvName(s string) bool { return envNameRE.MatchString(s) }

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
