package mcpserver

import (
	"context"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// A sandbox's network: network_policy (show or change its egress policy)
// and network_log (the egress proxy's decisions), over the service the
// CLI's `sandbox network` and `sandbox logs --network` call. An MCP client
// may always narrow a policy; it widens one (an allow rule, a wider mode,
// a deny rule taken out) only when the user started the server with
// --allow-network-changes (Options.AllowNetworkChanges).

// mcpSource names the rules an MCP client gives, in the policy and in the
// decisions they make.
const (
	createSource  = "sandbox_create"
	networkSource = "network_policy"
)

// widenFix is what a refused widening tells the model.
func widenFix(id string) string {
	return "ask the user to make the change (`xmode sandbox network " + id + " --allow RULE`), or to start the server with `xmode mcp --allow-network-changes`"
}

// modeRank orders networks by what they let through: a docker network
// other than none is the whole network.
func modeRank(network string) int {
	switch egress.Mode(network) {
	case egress.ModeNone:
		return 0
	case egress.ModeAllow:
		return 1
	case egress.ModeOpen:
		return 2
	}
	return 3
}

// createNetwork checks sandbox_create's network, allow and deny: a mode and
// rules the server may give, and, unless the server lets clients widen,
// nothing beyond what its configuration would give (a narrower mode, deny
// rules). It returns the overrides and sources of the create.
func (s *Server) createNetwork(in createIn) (map[string]config.Flag, []egress.Source, error) {
	ov := map[string]config.Flag{}
	configured := s.o.Sandbox.Cfg.Network
	mode := configured
	if in.Network != "" {
		m, err := egress.ParseMode(in.Network)
		if err != nil {
			return nil, nil, fail.Usagef("%s %q: use none, allow or open", fail.Network, in.Network)
		}
		mode = string(m)
		if mode != configured {
			ov["XMODE_SANDBOX_NETWORK"] = config.Flag{Name: "network", Value: mode}
		}
	}
	var src []egress.Source
	if len(in.Allow) > 0 || len(in.Deny) > 0 {
		if _, proxied := (&config.Config{Network: mode}).EgressMode(); !proxied {
			return nil, nil, fail.Usagef("%s and %s need %s allow (or open): the sandbox's connections then go through xmode's egress proxy, which applies them", fail.Allow, fail.Deny, fail.Network)
		}
		src = append(src, egress.Source{Name: createSource, Allow: in.Allow, Deny: in.Deny})
	}
	if s.o.AllowNetworkChanges {
		return ov, src, nil
	}
	if modeRank(mode) > modeRank(configured) {
		return nil, nil, fail.Refusedf("%s %s would give the sandbox more network than the user's configuration (%s), which this server does not let a client do: ask the user, or leave %s out", fail.Network, mode, configured, fail.Network)
	}
	if len(in.Allow) > 0 {
		return nil, nil, fail.Refusedf("%s would let the sandbox reach more than the user's configuration does, which this server does not let a client do: ask the user to allow it (`xmode sandbox network ID --allow RULE` once the sandbox exists), or to start the server with `xmode mcp --allow-network-changes`", fail.Allow)
	}
	return ov, src, nil
}

type policyIn struct {
	Session string   `json:"session" jsonschema:"the sandbox's ID"`
	Mode    string   `json:"mode,omitempty" jsonschema:"switch the mode: none (nothing), allow (only what an allow rule names) or open (every host but deny rules and the block list)"`
	Allow   []string `json:"allow,omitempty" jsonschema:"rules to allow from now on: host, *.host (every name below host), host:port or a CIDR"`
	Deny    []string `json:"deny,omitempty" jsonschema:"rules to deny from now on; a deny rule wins over every allow rule"`
	Remove  []string `json:"remove,omitempty" jsonschema:"rules to take out of the policy (allow or deny), as the policy writes them"`
}

type policyOut struct {
	Session string `json:"session"`
	Network string `json:"network" jsonschema:"the sandbox's network: allow or open (through xmode's egress proxy), none, or a docker network"`
	// Policy is null for a sandbox whose network no proxy decides.
	Policy  *store.NetworkPolicy `json:"policy" jsonschema:"its egress policy: each rule with where it came from; null when its network is not proxied"`
	Changed bool                 `json:"changed" jsonschema:"this call changed the policy (recorded as a step)"`
	Step    *stepView            `json:"step,omitempty" jsonschema:"the step that recorded the change"`
	Summary string               `json:"summary" jsonschema:"what the proxy decided so far: N connections to [hosts], M denied"`
}

func (s *Server) addNetworkPolicy() {
	add(s, &mcp.Tool{Name: "network_policy", Title: "Show or change a sandbox's network policy",
		Description: `Show the egress policy of a sandbox whose network goes through xmode's egress proxy (created with network allow or open): its mode, each rule with where it came from, the credentials the proxy adds (never their secrets), and a line on what the proxy decided so far. Give mode, allow, deny or remove to change it: the change holds for every connection that starts after the call and is recorded as a step of the sandbox. Rules: host, *.host (names below host), host:port, a CIDR; a deny rule wins over allow rules. You may always narrow the policy (deny, remove an allow rule, a narrower mode); widening it (allow, remove a deny rule, a wider mode) is refused unless the user started the server to let clients do so — ask the user instead. Tools that ignore HTTP_PROXY/HTTPS_PROXY have no network in such a sandbox, by design.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)}}, s.networkPolicy)
}

func (s *Server) networkPolicy(ctx context.Context, _ *mcp.CallToolRequest, in policyIn) (*mcp.CallToolResult, policyOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, policyOut{}, err
	}
	out := policyOut{Session: sess.ID, Network: sess.Network, Policy: sess.NetworkPolicy}
	if in.Mode != "" || len(in.Allow)+len(in.Deny)+len(in.Remove) > 0 {
		ch, err := s.o.Sandbox.ChangeNetwork(ctx, sess, sandbox.NetworkChange{
			Mode: in.Mode, Allow: in.Allow, Deny: in.Deny, Remove: in.Remove, Source: networkSource,
			MayWiden: s.o.AllowNetworkChanges, WidenFix: widenFix(sess.ID),
		})
		if err != nil {
			return nil, policyOut{}, err
		}
		out.Policy = ch.Policy
		if ch.Step != nil {
			out.Changed = true
			if row, err := s.o.Sandbox.Step(ctx, sess, ch.Step.Seq); err == nil {
				v := viewStep(row)
				out.Step = &v
			}
		}
	}
	if v, err := s.o.Sandbox.Network(ctx, sess, sandbox.NetworkQuery{Limit: 1}); err == nil {
		out.Summary = v.SummaryLine
	}
	return nil, out, nil
}

type logIn struct {
	Session    string `json:"session" jsonschema:"the sandbox's ID"`
	Step       int    `json:"step,omitempty" jsonschema:"only the connections that began while this step ran"`
	DeniedOnly bool   `json:"denied_only,omitempty" jsonschema:"only the refused attempts"`
	Limit      int    `json:"limit,omitempty" jsonschema:"the latest this many (default 50, at most 500)"`
}

// decisionView is one decision of the proxy as the tools show it.
type decisionView struct {
	Time        string `json:"time"`
	Steps       []int  `json:"steps" jsonschema:"the steps that ran when the connection began"`
	Kind        string `json:"kind" jsonschema:"connect (an HTTPS tunnel), http, https (a request the proxy added a credential to) or dns"`
	Destination string `json:"destination" jsonschema:"host:port as the sandbox asked (a DNS question: the name and its type)"`
	Verdict     string `json:"verdict" jsonschema:"allowed, denied, or error (allowed, but the upstream failed)"`
	Rule        string `json:"rule,omitempty" jsonschema:"the rule that decided"`
	Source      string `json:"source,omitempty" jsonschema:"where that rule came from"`
	Reason      string `json:"reason,omitempty" jsonschema:"why it was refused"`
	BytesUp     int64  `json:"bytes_up"`
	BytesDown   int64  `json:"bytes_down"`
}

type logOut struct {
	Session   string         `json:"session"`
	Summary   string         `json:"summary" jsonschema:"N connections to [hosts], M denied"`
	Decisions []decisionView `json:"decisions"`
	Matched   int            `json:"matched" jsonschema:"how many decisions matched (the latest limit of them are above)"`
}

// maxLogLimit bounds network_log's reply.
const maxLogLimit = 500

func (s *Server) addNetworkLog() {
	add(s, &mcp.Tool{Name: "network_log", Title: "Read a sandbox's network log",
		Description: `The egress proxy's decisions for a sandbox whose network it decides (network allow or open): each connection or DNS question, when, while which step, where to, allowed or denied, by which rule (or why refused), bytes each way. step keeps one step's; denied_only the refused attempts. Use it when a command fails to reach something: a refusal names the rule to ask for.`,
		Annotations: readOnly}, s.networkLog)
}

func (s *Server) networkLog(ctx context.Context, _ *mcp.CallToolRequest, in logIn) (*mcp.CallToolResult, logOut, error) {
	if in.Limit < 0 || in.Limit > maxLogLimit {
		return nil, logOut{}, fail.Usagef("limit %d: give 1 to %d (default 50)", in.Limit, maxLogLimit)
	}
	if in.Limit == 0 {
		in.Limit = 50
	}
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, logOut{}, err
	}
	v, err := s.o.Sandbox.Network(ctx, sess, sandbox.NetworkQuery{Step: in.Step, Denied: in.DeniedOnly, Limit: in.Limit})
	if err != nil {
		return nil, logOut{}, err
	}
	if v.Policy == nil && v.Log == "" {
		return nil, logOut{}, fail.Refusedf("sandbox %s's network (%s) goes through no egress proxy: nothing records its connections (a sandbox made with network allow has a log)", sess.ID, sess.Network)
	}
	out := logOut{Session: sess.ID, Summary: v.SummaryLine, Decisions: []decisionView{}, Matched: v.Matched}
	for _, r := range v.Records {
		dest := r.Host
		switch {
		case r.Kind == "dns":
			dest += " " + r.QType
		case r.Port != 0:
			dest += ":" + strconv.Itoa(r.Port)
		}
		out.Decisions = append(out.Decisions, decisionView{Time: stamp(r.Time), Steps: r.Steps, Kind: r.Kind, Destination: dest,
			Verdict: r.Verdict, Rule: r.Rule, Source: r.Source, Reason: r.Reason, BytesUp: r.BytesUp, BytesDown: r.BytesDown})
	}
	return nil, out, nil
}

type portIn struct {
	Session  string `json:"session" jsonschema:"the sandbox's ID"`
	Port     int    `json:"port" jsonschema:"the port a server in the sandbox listens on (a background step's)"`
	HostPort int    `json:"host_port,omitempty" jsonschema:"the loopback port of the user's machine to publish it on; default a free one"`
	Close    bool   `json:"close,omitempty" jsonschema:"stop publishing the port"`
}

type portOut struct {
	Session   string `json:"session"`
	Port      int    `json:"port"`
	URL       string `json:"url,omitempty" jsonschema:"where the user opens it (tell the user); only on the user's machine: it listens on loopback"`
	HostAddr  string `json:"host_addr,omitempty"`
	Forwarded bool   `json:"forwarded" jsonschema:"a forwarder serves it (false: a host step's server, on the user's machine already)"`
	Closed    bool   `json:"closed,omitempty"`
}

func (s *Server) addSandboxPort() {
	add(s, &mcp.Tool{Name: "sandbox_port", Title: "Publish a sandbox's port",
		Description: `Publish a port of the sandbox — a server you started with sandbox_exec's background — on a loopback port of the user's machine, and return its URL for the user to open (tell them). It works whatever the sandbox's network, stays published until the sandbox ends or close, and only ever listens on loopback through this tool (the user can expose it further). Start the server first; a port nothing listens on yet is published all the same, and its connections are closed until something does.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}}, s.sandboxPort)
}

func (s *Server) sandboxPort(ctx context.Context, _ *mcp.CallToolRequest, in portIn) (*mcp.CallToolResult, portOut, error) {
	if in.HostPort < 0 || in.HostPort > 65535 {
		return nil, portOut{}, fail.Usagef("%s %d: a port is 1 to 65535 (0 or left out: a free one)", fail.HostPort, in.HostPort)
	}
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, portOut{}, err
	}
	out := portOut{Session: sess.ID, Port: in.Port}
	if in.Close {
		if err := s.o.Sandbox.ClosePort(ctx, sess, in.Port); err != nil {
			return nil, portOut{}, err
		}
		out.Closed = true
		return nil, out, nil
	}
	o := sandbox.PortOptions{Port: in.Port}
	if in.HostPort != 0 {
		o.HostPort = strconv.Itoa(in.HostPort)
	}
	p, err := s.o.Sandbox.PublishPort(ctx, sess, o)
	if err != nil {
		return nil, portOut{}, err
	}
	out.URL, out.HostAddr, out.Forwarded = sandbox.PortURL(*p), p.HostAddr, p.Owner != ""
	s.logf("published port %d of %s at %s", in.Port, sess.ID, p.HostAddr)
	return nil, out, nil
}
