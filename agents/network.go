package agents

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// What an agent's CLI needs of a sandbox whose network is proxied
// (docs/agents.md, "Network"; docs/network.md): the API host of its model,
// and its key as a credential added at the edge. The sandbox then gets a
// placeholder in the key's variable, so the CLI starts, and the egress
// proxy puts the key in the header on requests to that host only: neither
// the agent's own code nor a dependency's install script can read it.

// apiKey is a variable an agent's CLI takes its key from, and the header
// the key goes in on requests to host.
type apiKey struct{ env, host, header string }

// agentNetwork names each CLI's API hosts and its keys, the first that is
// set winning (one credential per host and header).
var agentNetwork = map[string]struct {
	hosts []string
	keys  []apiKey
}{
	// codex exec with an API key talks to the Responses API only; a
	// ChatGPT sign-in inside the sandbox needs chatgpt.com too (--allow).
	Codex: {hosts: []string{"api.openai.com"}, keys: []apiKey{
		{"CODEX_API_KEY", "api.openai.com", "authorization"},
		{"OPENAI_API_KEY", "api.openai.com", "authorization"},
	}},
	Claude: {hosts: []string{"api.anthropic.com"}, keys: []apiKey{
		{"ANTHROPIC_API_KEY", "api.anthropic.com", "x-api-key"},
	}},
}

// keyNames are every agent's key variables.
func keyNames() []string {
	var out []string
	for _, n := range agentNetwork {
		for _, k := range n.keys {
			out = append(out, k.env)
		}
	}
	return out
}

// SourceName is how an agent's rules are named in a policy and in every
// decision they make.
func SourceName(kind string) string { return "agent " + kind }

// NetworkSource is what the agent kind needs of a proxied sandbox's
// policy: its API hosts, and its key as a credential when getenv has one.
// The command agent names nothing (its template is the user's).
func NetworkSource(kind string, getenv func(string) string) egress.Source {
	n, ok := agentNetwork[kind]
	src := egress.Source{Name: SourceName(kind)}
	if !ok {
		return src
	}
	src.Allow = slices.Clone(n.hosts)
	if k, ok := firstKey(n.keys, getenv); ok {
		src.Credentials = []string{k.host + "=" + k.header + ":" + k.env}
	}
	return src
}

func firstKey(keys []apiKey, getenv func(string) string) (apiKey, bool) {
	for _, k := range keys {
		if getenv(k.env) != "" {
			return k, true
		}
	}
	return apiKey{}, false
}

// NetworkSources are the sources of the agent kinds given (each once, the
// command agent's left out), for a sandbox made to run them.
func NetworkSources(kinds []string, getenv func(string) string) []egress.Source {
	var out []egress.Source
	seen := map[string]bool{}
	for _, k := range kinds {
		if _, ok := agentNetwork[k]; ok && !seen[k] {
			seen[k] = true
			out = append(out, NetworkSource(k, getenv))
		}
	}
	return out
}

// ensureNetwork gives a proxied session what the agent needs before its
// step runs: the rules and the credential its policy lacks, added as a
// network step (named after the agent's).
func (r *Runner) ensureNetwork(ctx context.Context, sess *store.Session, kind, stepName string) error {
	src := NetworkSource(kind, r.getenv())
	if sess.NetworkPolicy == nil || len(src.Allow)+len(src.Credentials) == 0 {
		return nil
	}
	name := stepName + "-network"
	if len(name) > evidence.MaxNameLen {
		name = "network"
	}
	_, err := r.Svc.EnsureNetwork(ctx, sess, sandbox.NetworkWanted{
		Source: src.Name, Allow: src.Allow, Credentials: src.Credentials, MayWiden: true, StepName: name,
	})
	return err
}

// keysAtTheEdge is secretEnv for a step of a proxied session: a key
// variable a credential of its policy names carries the credential's
// placeholder instead of the key (the proxy adds the key); another agent's
// key that XMODE_AGENT_ENV would pass is left out (a proxied sandbox gets
// its keys at the edge); what --env-pass names explicitly goes as asked.
func keysAtTheEdge(sess *store.Session, secretEnv, envPass []string) (out []string, placeheld []string) {
	if sess.NetworkPolicy == nil {
		return secretEnv, nil
	}
	keys := keyNames()
	for _, kv := range secretEnv {
		name, _, _ := strings.Cut(kv, "=")
		if ph, ok := sandbox.CredentialFor(sess, name); ok {
			out = append(out, name+"="+ph)
			placeheld = append(placeheld, name)
			continue
		}
		if slices.Contains(keys, name) && !slices.Contains(envPass, name) {
			continue
		}
		out = append(out, kv)
	}
	return out, placeheld
}

// CredentialCheck is `xmode doctor`'s line on the agents' keys: whether
// those set where xmode runs reach a sandbox, or only its edge.
func CredentialCheck(cfg *config.Config, getenv func(string) string, enforced bool) engine.Check {
	c := engine.Check{Name: "agent keys", Status: engine.CheckOK}
	var set []string
	for _, kind := range []string{Codex, Claude} {
		if k, ok := firstKey(agentNetwork[kind].keys, getenv); ok {
			set = append(set, fmt.Sprintf("%s (%s, for %s)", k.env, kind, k.host))
		}
	}
	_, proxied := cfg.EgressMode()
	switch {
	case len(set) == 0:
		c.Detail = "no agent key is set here (CODEX_API_KEY, OPENAI_API_KEY, ANTHROPIC_API_KEY): agents sign in where they run"
	case proxied && enforced:
		c.Method = "edge"
		c.Detail = strings.Join(set, ", ") + ": added at the edge by the egress proxy (XMODE_SANDBOX_NETWORK=" + cfg.Network + "); a sandbox gets a placeholder, never the key"
	default:
		c.Method = "environment"
		c.Detail = strings.Join(set, ", ") + ": passed into agent steps as it is (XMODE_AGENT_ENV), where the agent's code and every dependency it installs can read it"
		if enforced {
			c.Status = engine.CheckWarn
			c.Fix = "XMODE_SANDBOX_NETWORK=allow: the egress proxy adds the key on requests to the API host only, and the sandbox gets a placeholder (docs/network.md, \"Credentials at the edge\")"
		}
	}
	return c
}

// getenv is where the runner reads keys: the service's (xmode's
// environment).
func (r *Runner) getenv() func(string) string {
	if r.Svc.Getenv != nil {
		return r.Svc.Getenv
	}
	return os.Getenv
}
