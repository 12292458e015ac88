package mcpserver

import (
	"regexp"
	"strings"
	"sync"
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

// toolCommands maps an xmode command a message tells the user to run to
// the tool that does it.
var toolCommands = map[string]string{
	"xmode sandbox create": "sandbox_create",
	"xmode sandbox list":   "sandbox_list",
	"xmode sandbox show":   "sandbox_show",
	"xmode sandbox stop":   "sandbox_stop",
	"xmode sandbox extend": "sandbox_extend",
	"xmode sandbox exec":   "sandbox_exec",
	"xmode sandbox kill":   "step_kill",
	"xmode sandbox diff":   "sandbox_diff",
	"xmode cr create":      "cr_create",
	"xmode cr show":        "cr_show",
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
		cmd := msg[q[0]+1 : q[1]-1]
		if tool, ok := toolCommands[cmd]; ok {
			b.WriteString(tool)
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
