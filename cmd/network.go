package cmd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// networkFlags are a new sandbox's egress rules (sandbox create, run):
// each a source of its own, named by its flag in every decision it makes.
type networkFlags struct {
	allow, deny, credentials []string
}

func addNetworkFlags(cmd *cobra.Command, n *networkFlags) {
	f := cmd.Flags()
	f.StringArrayVar(&n.allow, "allow", nil, "with --network allow: a host, *.host, host:port or CIDR the sandbox may reach (repeatable)")
	f.StringArrayVar(&n.deny, "deny", nil, "a host, *.host, host:port or CIDR the sandbox may never reach; wins over --allow (repeatable)")
	f.StringArrayVar(&n.credentials, "credential", nil, "HOST=HEADER:VARIABLE (or :/path/to/file): the egress proxy adds this header from xmode's environment on requests to HOST; the sandbox gets a placeholder in VARIABLE (repeatable)")
}

// sources are the flags as egress.Merge takes them.
func (n networkFlags) sources() []egress.Source {
	var out []egress.Source
	if len(n.credentials) > 0 {
		out = append(out, egress.Source{Name: fail.Credential.Flag(), Credentials: n.credentials})
	}
	if len(n.allow) > 0 {
		out = append(out, egress.Source{Name: fail.Allow.Flag(), Allow: n.allow})
	}
	if len(n.deny) > 0 {
		out = append(out, egress.Source{Name: fail.Deny.Flag(), Deny: n.deny})
	}
	return out
}

// networkSource names the rules `sandbox network` adds to a live sandbox.
const networkSource = "sandbox network"

// networkOptions are `sandbox network`'s session and flags.
type networkOptions struct {
	session              string
	mode                 string
	allow, deny, remove  []string
	credentials          []string
	denied               bool
	limit                int
	changing, limitGiven bool
}

func (a *App) newNetwork() *cobra.Command {
	var o networkOptions
	cmd := &cobra.Command{
		Use:   "network SESSION [--allow RULE]... [--deny RULE]... [--remove RULE]... [--credential C]... [--mode none|allow|open]",
		Short: "Show a sandbox's egress policy and the proxy's latest decisions, or change the policy",
		Long: `Show the egress policy of a sandbox whose network is proxied (--network allow
or open: docs/network.md) — its mode, each rule with where it came from (a
flag, the plan, an agent, XMODE_SANDBOX_ALLOW…), its credentials (where the
secret is, never the secret), the names the proxy resolves itself — then the
egress proxy's latest decisions, each with the step that ran when the
connection began: what was reached, what was refused and by which rule.

--allow, --deny, --remove, --credential and --mode change the policy of the
live sandbox: the proxy serves it to every connection that starts after the
command returns (one already open keeps the policy it began with). The
change is a step of the session of its own, named network: its
command.json holds the change, its result.json the policy it left, so the
evidence shows when the sandbox could reach what. The rules it adds are
named "sandbox network" in the policy and in the decisions they make.
--remove takes out a rule, allow or deny, as the policy writes it. A policy
that carries a credential needs its variable in this environment for any
change (the proxy reads the secret again).

Rules: host (that name exactly), *.host (every name below host, not host
itself), host:port, a CIDR (10.0.0.0/8, [2001:db8::/32]:443). A deny rule
wins over any allow rule.

A session whose network is not proxied (none, a docker network, the host
engine's) has no policy: showing says so, changing it is refused (exit 4).` + exitStatusHelp,
		Example: `  xmode sandbox network sbx_7k2m9q4x
  xmode sandbox network 7k2m --denied             # the refused attempts only
  xmode sandbox network 7k2m --allow pypi.org --allow files.pythonhosted.org
  xmode sandbox network 7k2m --deny '*.pastebin.example' --remove pypi.org
  xmode sandbox network 7k2m --json | jq '.records[] | select(.verdict == "denied") | .host'`,
		Args:              exactArgs(1, "one session"),
		ValidArgsFunction: a.completeAnySession,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.session = args[0]
			f := cmd.Flags()
			o.changing = f.Changed("allow") || f.Changed("deny") || f.Changed("remove") || f.Changed("mode") || f.Changed("credential")
			o.limitGiven = f.Changed("limit")
			return a.runNetwork(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.mode, "mode", "", "switch the mode: none (nothing), allow (only what an allow rule names), open (every host but deny rules and the block list)")
	f.StringArrayVar(&o.allow, "allow", nil, "allow this rule from now on (repeatable)")
	f.StringArrayVar(&o.deny, "deny", nil, "deny this rule from now on; wins over allow rules (repeatable)")
	f.StringArrayVar(&o.remove, "remove", nil, "take this rule (allow or deny) out of the policy (repeatable)")
	f.StringArrayVar(&o.credentials, "credential", nil, "HOST=HEADER:VARIABLE: the proxy adds this header from xmode's environment on requests to HOST from now on (repeatable)")
	f.BoolVar(&o.denied, "denied", false, "show the refused attempts only")
	f.IntVar(&o.limit, "limit", 20, "show this many of the latest decisions (0: all)")
	return cmd
}

func (a *App) runNetwork(ctx context.Context, o networkOptions) error {
	if o.limit < 0 {
		return fail.Usagef("--limit %d: give 0 (all) or more", o.limit)
	}
	if o.changing && (o.denied || o.limitGiven) {
		return fail.Usagef("--denied and --limit go with showing the decisions, not with a change: change the policy first, then look")
	}
	svc, sess, err := a.session(ctx, o.session, anySession)
	if err != nil {
		return err
	}
	if o.changing {
		return a.changeNetwork(ctx, svc, sess, o)
	}
	v, err := svc.Network(ctx, sess, sandbox.NetworkQuery{Denied: o.denied, Limit: o.limit})
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(v)
	}
	if err := a.printPolicy(sess, v.Policy); err != nil {
		return err
	}
	if v.Policy == nil && v.Log == "" {
		return nil
	}
	fmt.Fprintln(a.Out)
	what := "Decisions"
	if o.denied {
		what = "Refused attempts"
	}
	shown := ""
	if o.limit > 0 && v.Matched > len(v.Records) {
		shown = fmt.Sprintf(" (the last %d of %d)", len(v.Records), v.Matched)
	}
	fmt.Fprintf(a.Out, "%s: %s%s\n", what, clean(v.SummaryLine), shown)
	if len(v.Records) == 0 {
		return nil
	}
	return a.printRecords(v.Records, true)
}

// changeNetwork is `sandbox network` with a change.
func (a *App) changeNetwork(ctx context.Context, svc *sandbox.Service, sess *store.Session, o networkOptions) error {
	out, err := svc.ChangeNetwork(ctx, sess, sandbox.NetworkChange{
		Mode: o.mode, Allow: o.allow, Deny: o.deny, Credentials: o.credentials, Remove: o.remove, Source: networkSource, MayWiden: true,
	})
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(struct {
			Step   any                  `json:"step"`
			Policy *store.NetworkPolicy `json:"policy"`
		}{out.Step, out.Policy})
	}
	if out.Step == nil {
		a.info("xmode: the policy of %s already is what was asked: nothing changed", sess.ID)
	} else {
		a.info("xmode: changed the network policy of %s as step %d (%s): new connections meet it from now on", sess.ID, out.Step.Seq, out.Step.Name)
	}
	return a.printPolicy(sess, out.Policy)
}

// printPolicy prints a session's mode and its policy's rules, credentials
// and resolved names, each with its source.
func (a *App) printPolicy(sess *store.Session, p *store.NetworkPolicy) error {
	if p == nil {
		net := sess.Network
		if net == "" {
			net = "the " + sess.Engine + " engine's"
		}
		fmt.Fprintf(a.Out, "Network: %s — no egress policy: no proxy decides this sandbox's connections (create it with --network allow for one)\n", clean(net))
		return nil
	}
	fmt.Fprintf(a.Out, "Network: %s (through xmode's egress proxy: %s)\n", p.Mode, modeWords(p.Mode))
	if len(p.Allow)+len(p.Deny) > 0 {
		fmt.Fprintln(a.Out)
		t := newTable(a.Out, "RULE", "ACTION", "SOURCE")
		for _, r := range p.Deny {
			t.row(clean(r.Rule), a.paint(color.FgRed, "deny"), clean(r.Source))
		}
		for _, r := range p.Allow {
			t.row(clean(r.Rule), a.paint(color.FgGreen, "allow"), clean(r.Source))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(p.Credentials) > 0 {
		fmt.Fprintln(a.Out)
		t := newTable(a.Out, "CREDENTIAL HOST", "HEADER", "FROM", "SOURCE")
		for _, c := range p.Credentials {
			t.row(clean(c.Host), clean(c.Header), clean(c.From)+" (the sandbox has a placeholder)", clean(c.Source))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(p.Resolve) > 0 {
		fmt.Fprintln(a.Out)
		t := newTable(a.Out, "RESOLVED NAME", "ADDRESSES", "SOURCE")
		for _, r := range p.Resolve {
			t.row(clean(r.Name), clean(strings.Join(r.Addresses, ", ")), clean(r.Source))
		}
		return t.flush()
	}
	return nil
}

func modeWords(mode string) string {
	switch egress.Mode(mode) {
	case egress.ModeAllow:
		return "only what an allow rule names"
	case egress.ModeOpen:
		return "every host but the deny rules and the block list"
	}
	return "nothing"
}

// printRecords prints the proxy's decisions, a line each; withStep adds
// the steps that ran when each connection began. Every field a sandbox
// chose (a host, a Host header, an SNI) is escaped.
func (a *App) printRecords(recs []sandbox.NetworkRecord, withStep bool) error {
	head := []string{"TIME", "VERDICT", "KIND", "DESTINATION"}
	if withStep {
		head = append(head, "STEP")
	}
	t := newTable(a.Out, append(head, "RULE / REASON")...)
	for _, r := range recs {
		verdict := r.Verdict
		switch r.Verdict {
		case egress.Denied:
			verdict = a.paint(color.FgRed, verdict)
		case egress.Failed:
			verdict = a.paint(color.FgYellow, verdict)
		}
		row := []string{r.Time.Local().Format("15:04:05.000"), verdict, r.Kind, clean(destination(&r))}
		if withStep {
			row = append(row, stepsCell(r.Steps))
		}
		t.row(append(row, clean(truncate(why(&r), 120)))...)
	}
	return t.flush()
}

// destination is where a record's connection went, as the client named it.
func destination(r *sandbox.NetworkRecord) string {
	switch {
	case r.Kind == "dns":
		return r.Host + " " + r.QType
	case r.Port != 0:
		return r.Host + ":" + strconv.Itoa(r.Port)
	}
	return r.Host
}

// why is the rule that decided (and its source), or why it was refused.
func why(r *sandbox.NetworkRecord) string {
	var parts []string
	if r.Verdict != egress.Allowed && r.Reason != "" {
		parts = append(parts, r.Reason)
	} else if r.Rule != "" {
		rule := r.Rule
		if r.Source != "" {
			rule += " (" + r.Source + ")"
		}
		parts = append(parts, rule)
	}
	if r.Credential != "" {
		parts = append(parts, "credential: "+r.Credential)
	}
	if r.Kind != "dns" && (r.BytesUp > 0 || r.BytesDown > 0) {
		parts = append(parts, fmt.Sprintf("%s up, %s down", bytesWord(r.BytesUp), bytesWord(r.BytesDown)))
	}
	return strings.Join(parts, "; ")
}

func bytesWord(n int64) string { return size(&n) }

func stepsCell(steps []int) string {
	if len(steps) == 0 {
		return "-"
	}
	s := make([]string, len(steps))
	for i, n := range steps {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// networkLines is `sandbox logs SESSION [STEP] --network`: the proxy's
// decisions for the connections that began while the step ran (every
// decision of the session without one).
func (a *App) networkLines(ctx context.Context, svc *sandbox.Service, sess *store.Session, step int) error {
	v, err := svc.Network(ctx, sess, sandbox.NetworkQuery{Step: step})
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(v.Records)
	}
	if v.Policy == nil && v.Log == "" {
		a.info("xmode: session %s has no network log: its network (%s) is not proxied", sess.ID, clean(sess.Network))
		return nil
	}
	if len(v.Records) == 0 {
		a.info("xmode: no connection or DNS question was recorded while step %d ran", step)
		return nil
	}
	return a.printRecords(v.Records, step == 0)
}

// networkLine is the one line a session's network comes to in `sandbox
// show`: its mode, its rules and what the proxy decided so far.
func networkLine(ctx context.Context, svc *sandbox.Service, sess *store.Session) string {
	p := sess.NetworkPolicy
	if p == nil {
		return sess.Network
	}
	line := fmt.Sprintf("%s (egress proxy: %d allow rule(s), %d deny rule(s), %d credential(s); `xmode sandbox network %s` shows them)",
		p.Mode, len(p.Allow), len(p.Deny), len(p.Credentials), sess.ID)
	if v, err := svc.Network(ctx, sess, sandbox.NetworkQuery{Limit: 1}); err == nil && v.Log != "" {
		line += "; " + v.SummaryLine
	}
	return line
}
