// Package agents runs coding agents bound to a sandbox (docs/agents.md): the
// codex and claude CLIs, and the command agent of
// XMODE_AGENT_COMMAND_TEMPLATE, each as one step through the engine seam
// (sandbox.Service.Exec), working in the session's worktree as the engine
// sees it. It builds each CLI's argv, hands the prompt over without a shell
// ever seeing it, passes credentials by name, refuses what cannot work
// before starting it, and summarises the agent's event stream into the
// step's result.json.
package agents

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// The agent kinds.
const (
	Codex   = "codex"
	Claude  = "claude"
	Command = "command"
)

// Kinds lists the kinds in the order the help shows them.
var Kinds = []string{Codex, Claude, Command}

// DefaultTimeout bounds an agent step given no --timeout: an agent CLI that
// waits for a network that never answers must not hold a sandbox for ever.
const DefaultTimeout = time.Hour

// loginTimeout bounds `codex login status`, which answers at once.
const loginTimeout = 30 * time.Second

// CheckKind refuses an unknown kind (exit 2).
func CheckKind(kind string) error {
	if !slices.Contains(Kinds, kind) {
		return fail.Usagef("%s %q is not an agent: use codex, claude or command", fail.Agent, kind)
	}
	return nil
}

// Preflight refuses, before any session exists, an agent that cannot run
// with this configuration (exit 2).
func Preflight(cfg *config.Config, kind, model string) error {
	if err := CheckKind(kind); err != nil {
		return err
	}
	if kind != Command {
		return nil
	}
	if model != "" {
		return fail.Usagef("%s is for the codex and claude agents; a command agent takes what it needs in XMODE_AGENT_COMMAND_TEMPLATE", fail.Model)
	}
	if len(cfg.AgentCommandTemplate) == 0 {
		return fail.Usagef(`XMODE_AGENT_COMMAND_TEMPLATE is not set: the command agent runs it, e.g. the stand-in agent installed with xmode: export XMODE_AGENT_COMMAND_TEMPLATE="sh '$(xmode examples)/agent.sh' {prompt_file}"`)
	}
	return nil
}

// Runner runs agent steps in sessions of one storage root.
type Runner struct {
	Svc *sandbox.Service
	// Notes receives xmode's own words about a step it ran for the agent or
	// a failure it recognised (a missing CLI, no login); nil for none.
	Notes io.Writer
}

// Request is one agent step.
type Request struct {
	Session *store.Session
	Kind    string
	Prompt  string
	Model   string
	Timeout time.Duration // 0: DefaultTimeout
	// Env is KEY=VALUE for the agent (a plan step's env).
	Env []string
	// EnvPass names host variables to pass to the step, besides
	// XMODE_AGENT_ENV's; their values are secrets.
	EnvPass []string
	// Name is the step's name; "" is agent-<kind>.
	Name                   string
	LiveStdout, LiveStderr io.Writer
}

// Run runs the agent as one step and returns its result. As with
// sandbox.Service.Exec, an error with a nil result means xmode refused or
// failed before anything ran. A codex step whose login check failed
// returns that check's result: it is the step that says why.
func (r *Runner) Run(ctx context.Context, req Request) (*evidence.Result, error) {
	if err := CheckKind(req.Kind); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, fail.Usagef("the prompt is empty: give %s TEXT, %s FILE or - for standard input", fail.Prompt, fail.PromptFile)
	}
	if req.Timeout < 0 {
		return nil, fail.Usagef("%s %s must be positive", fail.Timeout, req.Timeout)
	}
	if req.Timeout == 0 {
		req.Timeout = DefaultTimeout
	}
	if req.Name == "" {
		req.Name = "agent-" + req.Kind
	}
	sess, cfg := req.Session, r.Svc.Cfg
	if err := store.CheckOpen(sess, r.Svc.Now()); err != nil {
		return nil, err
	}
	// A session records the network its engine gave it: "none" only where
	// the engine can cut one off (engine.Network).
	if req.Kind != Command && sess.Network == "none" {
		return nil, fail.Refusedf("session %s has no network (network none), and the %s agent needs it to reach its model: create the session with %s (its API host through xmode's egress proxy, its key added at the edge), or set XMODE_SANDBOX_NETWORK=allow", sess.ID, req.Kind, fail.Do("sandbox create").With(fail.Network, "allow").With(fail.Agent, string(req.Kind)))
	}
	secretEnv, err := passEnv(cfg.AgentEnv, req.EnvPass)
	if err != nil {
		return nil, err
	}
	// A proxied sandbox reaches the agent's API host, and gets its key at
	// the edge: a placeholder in the variable, the key in the proxy.
	if err := r.ensureNetwork(ctx, sess, req.Kind, req.Name); err != nil {
		return nil, err
	}
	secretEnv, placeheld := keysAtTheEdge(sess, secretEnv, req.EnvPass)
	if len(placeheld) > 0 {
		r.note("%s: the sandbox gets a placeholder; the egress proxy adds the key on requests to the API host (docs/network.md)", strings.Join(placeheld, ", "))
	}
	dir, err := r.Svc.WorktreeInSandbox(sess)
	if err != nil {
		return nil, err
	}
	onHost := r.Svc.OnHost(sess)
	o := sandbox.ExecOptions{
		Name: req.Name, Timeout: req.Timeout, Env: req.Env, SecretEnv: secretEnv, Prompt: req.Prompt,
		LiveStderr: req.LiveStderr,
	}
	// The terminal gets the agent's events read for a person, not raw.
	var shown *live
	if req.LiveStdout != nil {
		shown = newLive(req.Kind, dir, req.LiveStdout)
		o.LiveStdout = shown
	}
	switch req.Kind {
	case Codex:
		o.Argv = codexArgv(cfg.CodexBin, dir, req.Model)
		o.Stdin = strings.NewReader(req.Prompt)
	case Claude:
		o.Argv = claudeArgv(cfg.ClaudeBin, req.Model)
		o.Stdin = strings.NewReader(req.Prompt)
	case Command:
		if err := Preflight(cfg, req.Kind, req.Model); err != nil {
			return nil, err
		}
		pf, err := r.writePrompt(sess, dir, req.Prompt)
		if err != nil {
			return nil, err
		}
		defer pf.remove()
		o.Argv = expand(cfg.AgentCommandTemplate, map[string]string{
			"{worktree}": dir, "{prompt_file}": pf.inSandbox, "{session}": sess.ID, "{run}": sess.RunID,
		})
		r.warnHostPaths(ctx, sess, dir, o.Argv)
	}
	missing := missingHint(sess, req.Kind, o.Argv[0], onHost)
	var events *parser
	o.Agent = func(w io.Writer) sandbox.AgentStream {
		events = newParser(req.Kind, dir, missing, w)
		return events
	}

	if req.Kind == Codex && !hasKey(secretEnv, func(name string) bool { return r.Svc.Inherits(sess, name) }) {
		res, err := r.codexLogin(ctx, req, secretEnv, missing)
		if res == nil || res.ExitCode != 0 {
			return res, err
		}
	}
	res, err := r.Svc.Exec(ctx, sess, o)
	if shown != nil {
		shown.flush()
	}
	if res == nil || res.ExitCode == 0 {
		return res, err
	}
	switch {
	case res.Agent != nil && res.Agent.Error == missing:
		res.Why = missing
	case req.Kind == Claude && events != nil && events.signIn && res.Agent != nil:
		res.Why = fmt.Sprintf("claude is not signed in where the session runs (claude: %q): run `claude /login` there, or pass a key with --env-pass ANTHROPIC_API_KEY (XMODE_AGENT_ENV passes it by default when it is set)", res.Agent.Error)
	case res.Agent != nil && res.Agent.Error != "":
		res.Why = fmt.Sprintf("the %s agent failed: %s", req.Kind, res.Agent.Error)
	case req.Kind == Command:
		// A command agent that printed no event of its own: its last words.
		if msg := r.lastLine(req.Session, res, evidence.StderrFile); msg != "" {
			res.Why = fmt.Sprintf("the command agent failed: %s", msg)
		}
	}
	if res.Why != "" {
		r.note("%s", res.Why)
	}
	return res, err
}

// warnHostPaths warns about each absolute path of a command agent's argv,
// outside the worktree, that the session's sandbox does not have: a
// template written for the host (sh /usr/local/share/xmode/examples/agent.sh)
// names a script a container never sees. The step still runs; its failure
// is the evidence.
func (r *Runner) warnHostPaths(ctx context.Context, sess *store.Session, worktree string, argv []string) {
	var paths []string
	for _, a := range argv {
		if path.IsAbs(a) && a != worktree && !strings.HasPrefix(a, strings.TrimSuffix(worktree, "/")+"/") && !slices.Contains(paths, a) {
			paths = append(paths, a)
		}
	}
	for _, p := range r.Svc.MissingPaths(ctx, sess, paths) {
		where := "the sandbox"
		if sess.Image != "" {
			where = "the sandbox's image " + sess.Image
		}
		host := ""
		if _, err := os.Stat(p); err == nil {
			host = " (it is a file on this host, and the sandbox sees only the worktree and its image)"
		}
		r.note("warning: XMODE_AGENT_COMMAND_TEMPLATE names %s, which %s does not have%s: copy it into the repository and name it {worktree}/%s in the template, or build it into the image", p, where, host, path.Base(p))
	}
}

// codexLogin runs `codex login status` as a step of its own: without an
// account or a key, `codex exec` waits for the network for ever, where the
// login check answers at once (docs/agents.md, "Failing clearly and fast"). missing is what to say when the
// codex CLI is not there (missingHint).
func (r *Runner) codexLogin(ctx context.Context, req Request, secretEnv []string, missing string) (*evidence.Result, error) {
	bin := r.Svc.Cfg.CodexBin
	res, err := r.Svc.Exec(ctx, req.Session, sandbox.ExecOptions{
		Name: req.Name[:min(len(req.Name), evidence.MaxNameLen-len("-login"))] + "-login", Argv: []string{bin, "login", "status"}, Timeout: loginTimeout, SecretEnv: secretEnv,
		LiveStderr: req.LiveStderr,
	})
	if res == nil {
		return nil, err
	}
	switch {
	case res.ExitCode == 127:
		res.Why = missing
	case res.ExitCode != 0:
		msg := r.lastLine(req.Session, res, evidence.StderrFile)
		if msg == "" {
			msg = r.lastLine(req.Session, res, evidence.StdoutFile)
		}
		res.Why = fmt.Sprintf("codex is not signed in where the session runs (`codex login status`: %q, exit %d): run `codex login` there, or pass a key with --env-pass OPENAI_API_KEY (XMODE_AGENT_ENV passes it by default when it is set)", msg, res.ExitCode)
	}
	if res.Why != "" {
		r.note("%s", res.Why)
	}
	return res, err
}

// missingHint says how to make the agent's CLI available where the session
// runs: on the host's PATH for steps that run on this host, else in the
// sandbox's image.
func missingHint(sess *store.Session, kind, bin string, onHost bool) string {
	pkg, variable := "", ""
	switch kind {
	case Codex:
		pkg, variable = "@openai/codex", "XMODE_CODEX_BIN"
	case Claude:
		pkg, variable = "@anthropic-ai/claude-code", "XMODE_CLAUDE_BIN"
	default:
		return fmt.Sprintf("%q was not found where session %s runs: XMODE_AGENT_COMMAND_TEMPLATE must name a program the sandbox has", bin, sess.ID)
	}
	if !onHost {
		return fmt.Sprintf("%s (%q) is not installed in the sandbox image %s: add it to the image (e.g. `RUN npm install -g %s`), or point %s at it, then create a new session", kind, bin, sess.Image, pkg, variable)
	}
	return fmt.Sprintf("%s (%q) is not on the host's PATH: install it (`npm install -g %s`) or point %s at it", kind, bin, pkg, variable)
}

func (r *Runner) note(format string, args ...any) {
	if r.Notes != nil {
		fmt.Fprintf(r.Notes, "xmode: "+format+"\n", args...)
	}
}

func codexArgv(bin, dir, model string) []string {
	argv := []string{bin, "exec", "-C", dir, "--json", "-s", "workspace-write"}
	if model != "" {
		argv = append(argv, "-m", model)
	}
	// "-": the prompt comes on standard input (it never shows in ps).
	return append(argv, "-")
}

func claudeArgv(bin, model string) []string {
	argv := []string{bin, "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"}
	if model != "" {
		argv = append(argv, "--model", model)
	}
	return argv
}

// expand fills the placeholders into each element of an argv template.
// Each element stays one argument, whatever the values hold, and a value
// is never expanded again (strings.Replacer does one pass).
func expand(template []string, values map[string]string) []string {
	var pairs []string
	for k, v := range values {
		pairs = append(pairs, k, v)
	}
	rep := strings.NewReplacer(pairs...)
	out := make([]string, len(template))
	for i, a := range template {
		out[i] = rep.Replace(a)
	}
	return out
}

// passEnv is NAME=value of every variable named by XMODE_AGENT_ENV (when
// set on the host) and by --env-pass (which must be set).
func passEnv(agentEnv, pass []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, n := range pass {
		if !config.ValidEnvName(n) {
			return nil, fail.Usagef("%s %q is not a variable name", fail.EnvPass, n)
		}
		if _, ok := os.LookupEnv(n); !ok {
			return nil, fail.Usagef("%s %s: %s is not set in xmode's environment", fail.EnvPass, n, n)
		}
	}
	for _, n := range append(slices.Clone(agentEnv), pass...) {
		if v := os.Getenv(n); v != "" && !seen[n] {
			seen[n] = true
			out = append(out, n+"="+v)
		}
	}
	return out, nil
}

// codexKeys are the variables that give codex an API key.
var codexKeys = []string{"OPENAI_API_KEY", "CODEX_API_KEY"}

// hasKey reports whether codex gets an API key: passed by name
// (secretEnv), or set in xmode's environment and inherited by the step
// (sandbox.Service.Inherits: a host step whose session's environment
// policy lets it through).
func hasKey(secretEnv []string, inherits func(name string) bool) bool {
	for _, name := range codexKeys {
		for _, kv := range secretEnv {
			if strings.HasPrefix(kv, name+"=") {
				return true
			}
		}
		if os.Getenv(name) != "" && inherits(name) {
			return true
		}
	}
	return false
}

// lastLine is the last non-empty line of one of a step's logs (at most its
// last 4 KB), opened as evidence.Open opens evidence: a host step could have
// put a FIFO or a link in its place.
func (r *Runner) lastLine(sess *store.Session, res *evidence.Result, file string) string {
	f, err := evidence.Open(r.Svc.Guard, sess.RunID, res.Seq, res.Name, file)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-4096, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
