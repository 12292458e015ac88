package mcpserver

import (
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/xmode/xmode/fail"
)

// MCP's words for what a service's error names in the CLI's: a tool's
// parameter for a flag (repository for --repo), a tool for a command
// (sandbox_create for `xmode sandbox create`), the variable for a flag
// MCP has no parameter for (XMODE_SANDBOX_NETWORK for --network). An MCP
// user has no flags.

// toolParams maps a CLI flag, without its dashes, to the tool parameter
// (or, where no tool has one, the setting) that gives the same input.
var toolParams = map[string]string{
	"repo":          "repository",
	"ref":           "ref",
	"project":       "project",
	"title":         "title",
	"image":         "image",
	"ttl":           "ttl",
	"workdir":       "workdir",
	"timeout":       "timeout_seconds",
	"env":           "env",
	"env-pass":      "env",
	"name":          "name",
	"signal":        "signal",
	"force":         "force",
	"detach":        "background",
	"network":       "network",
	"allow":         "allow",
	"deny":          "deny",
	"remove":        "remove",
	"mode":          "mode",
	"credential":    "the user's --credential",
	"host-port":     "host_port",
	"expose-remote": "the user's --expose-remote",
	"runner-mode":   "XMODE_RUNNER_MODE",
	"user":          "XMODE_USER",
	"storage-root":  "XMODE_STORAGE_ROOT",
}

// toolCommands maps an xmode command a message tells the user to run (the
// CLI's, without "xmode") to the tool that does it, and names the tool's
// parameter for each of the command's operands, in order.
var toolCommands = map[string]toolCommand{
	"sandbox create":  {"sandbox_create", nil},
	"sandbox list":    {"sandbox_list", nil},
	"sandbox show":    {"sandbox_show", []string{"session"}},
	"sandbox stop":    {"sandbox_stop", []string{"session"}},
	"sandbox extend":  {"sandbox_extend", []string{"session"}},
	"sandbox exec":    {"sandbox_exec", []string{"session"}},
	"sandbox kill":    {"step_kill", []string{"session", "step"}},
	"sandbox diff":    {"sandbox_diff", []string{"session"}},
	"cr create":       {"cr_create", []string{"session"}},
	"cr show":         {"cr_show", []string{"change_request"}},
	"sandbox network": {"network_policy", []string{"session"}},
	"sandbox port":    {"sandbox_port", []string{"session", "port"}},
}

type toolCommand struct {
	tool     string
	operands []string
}

// The expressions are compiled on first use, not at start-up, which every
// xmode command pays (cmd/xmode's TestPackageInitBudget).
var (
	quoted = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("`[^`]*`") })
	flagRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|[^\w-])--([a-z][a-z-]*)\b`) })
)

// mcpWords is msg with the CLI's flags and commands in MCP's words: a
// flag outside backticks becomes its parameter, a backticked command that
// a tool does becomes the tool; any other backticked command (one the
// user runs) stays as it is.
func mcpWords(msg string) string {
	var b strings.Builder
	last := 0
	for _, q := range quoted().FindAllStringIndex(msg, -1) {
		b.WriteString(flagWords(msg[last:q[0]]))
		cmd, xmode := strings.CutPrefix(msg[q[0]+1:q[1]-1], "xmode ")
		if tc, ok := toolCommands[cmd]; ok && xmode {
			b.WriteString(tc.tool)
		} else {
			b.WriteString(msg[q[0]:q[1]])
		}
		last = q[1]
	}
	b.WriteString(flagWords(msg[last:]))
	return b.String()
}

// flagWords replaces the flags of text that MCP has a word for.
func flagWords(text string) string {
	return flagRE().ReplaceAllStringFunc(text, func(m string) string {
		i := strings.Index(m, "--")
		if p, ok := toolParams[m[i+2:]]; ok {
			return m[:i] + p
		}
		return m
	})
}

// toolAction is an action a service's error names (fail.Action) in MCP's
// words: the tool that does it with its parameters — sandbox_extend with
// session "sbx_1" and ttl "1h" — a placeholder left out, and an input
// MCP gives as a setting of the server (network: XMODE_SANDBOX_NETWORK)
// said as one. An action no tool does stays the CLI's command line: the
// user runs it.
func toolAction(a fail.Action) string {
	tc, ok := toolCommands[a.Command]
	if !ok {
		return a.String()
	}
	var params, settings []string
	operand := 0
	for _, arg := range a.Args {
		switch {
		case arg.Input == "":
			if !arg.Placeholder && operand < len(tc.operands) {
				params = append(params, tc.operands[operand]+" "+paramValue(arg.Value))
			}
			operand++
		case isSetting(parameter(arg.Input)):
			settings = append(settings, parameter(arg.Input)+"="+arg.Value)
		case arg.Value == "":
			params = append(params, parameter(arg.Input)+" true")
		default:
			params = append(params, parameter(arg.Input)+" "+paramValue(arg.Value))
		}
	}
	s := tc.tool
	if len(params) > 0 {
		s += " with " + joinAnd(params)
	}
	if len(settings) > 0 {
		s += " once the server's environment has " + joinAnd(settings)
	}
	return s
}

// paramValue is a parameter's value as the model writes it: a number as
// it is, anything else a JSON string.
func paramValue(v string) string {
	if _, err := strconv.Atoi(v); err == nil {
		return v
	}
	return strconv.Quote(v)
}

// isSetting reports whether an input's word is a variable of the server's
// (toolParams: XMODE_SANDBOX_NETWORK) rather than a tool's parameter.
func isSetting(word string) bool {
	return word != "" && strings.Trim(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == ""
}

func joinAnd(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
