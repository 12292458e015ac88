package sandbox

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/store"
)

// A sandbox's egress policy (docs/network.md): made from its sources when
// the sandbox is created (flags, a plan, an agent's definition,
// configuration), recorded on the session with each rule's source, served
// by the engine's egress proxy, and changed on a live sandbox as a step of
// its own (a network step: command.json has the change, result.json the
// policy it left) so that the evidence shows what the sandbox could reach
// and when. The proxy's decision log is read back here, each line
// attributed to the steps that ran when the connection began.

// egressPolicy is a new sandbox's egress policy when its network is
// proxied (XMODE_SANDBOX_NETWORK=allow or open; docs/network.md): the
// front ends' sources first (flags, a plan, an agent), configuration's
// last, as egress.Merge orders them. nil for any other network. A rule
// that does not parse is a usage error naming its source.
// ifProxied are sources that apply only to a proxied network (an agent's
// hosts): another network needs none of them.
func (s *Service) egressPolicy(sessionID string, sources, ifProxied []egress.Source) (*egress.Policy, error) {
	mode, proxied := s.Cfg.EgressMode()
	if proxied {
		sources = append(append([]egress.Source(nil), sources...), ifProxied...)
	}
	if !proxied {
		if len(sources) > 0 {
			return nil, fail.Usagef("network rules (%s) need a network with a policy: give %s allow (or open), or set XMODE_SANDBOX_NETWORK=allow", sources[0].Name, fail.Network)
		}
		return nil, nil
	}
	p, err := egress.Merge(sessionID, mode, append(append([]egress.Source(nil), sources...), s.Cfg.EgressSources()...)...)
	if err != nil {
		return nil, fail.As(fail.Usage, err)
	}
	return &p, nil
}

// checkEgress refuses a policy the session's engine cannot enforce (the
// host's; the cloud's), before anything exists.
func checkEgress(pol *egress.Policy, engineName string, provider engine.Provider) error {
	if pol == nil {
		return nil
	}
	return engine.CheckEgress(provider, engineName, pol.Mode)
}

// RecordPolicy is p as a session records it.
func RecordPolicy(p *egress.Policy) *store.NetworkPolicy {
	if p == nil {
		return nil
	}
	np := &store.NetworkPolicy{Mode: string(p.Mode), Allow: []store.NetworkRule{}, Deny: []store.NetworkRule{},
		Credentials: []store.NetworkCredential{}, Resolve: []store.NetworkResolve{}}
	for _, r := range p.Allow {
		np.Allow = append(np.Allow, store.NetworkRule{Rule: r.Text, Source: r.Source})
	}
	for _, r := range p.Deny {
		np.Deny = append(np.Deny, store.NetworkRule{Rule: r.Text, Source: r.Source})
	}
	for _, c := range p.Credentials {
		np.Credentials = append(np.Credentials, store.NetworkCredential{Host: c.Host, Header: c.Header, From: c.From(), Placeholder: c.Placeholder, Source: c.Source})
	}
	for _, r := range p.Resolve {
		addrs := make([]string, len(r.Addrs))
		for i, a := range r.Addrs {
			addrs[i] = a.String()
		}
		np.Resolve = append(np.Resolve, store.NetworkResolve{Name: r.Name, Addresses: addrs, Source: r.Source})
	}
	return np
}

// PolicyOf is the egress policy a session's recorded one stands for, each
// rule parsed again (a recorded rule that no longer parses is an error).
func PolicyOf(sessionID string, np *store.NetworkPolicy) (egress.Policy, error) {
	mode, err := egress.ParseMode(np.Mode)
	if err != nil {
		return egress.Policy{}, err
	}
	p := egress.Policy{Sandbox: sessionID, Mode: mode}
	for _, r := range np.Allow {
		rule, err := egress.ParseRule(r.Rule, r.Source, false)
		if err != nil {
			return egress.Policy{}, err
		}
		p.Allow = append(p.Allow, rule)
	}
	for _, r := range np.Deny {
		rule, err := egress.ParseRule(r.Rule, r.Source, true)
		if err != nil {
			return egress.Policy{}, err
		}
		p.Deny = append(p.Deny, rule)
	}
	for _, c := range np.Credentials {
		cred, err := egress.ParseCredential(c.Host+"="+c.Header+":"+c.From, c.Source)
		if err != nil {
			return egress.Policy{}, err
		}
		cred.Placeholder = c.Placeholder
		p.Credentials = append(p.Credentials, cred)
	}
	for _, r := range np.Resolve {
		// One recorded name, its addresses together: ParseResolve gives
		// them back as one.
		items := make([]string, len(r.Addresses))
		for i, a := range r.Addresses {
			items[i] = r.Name + "=" + a
		}
		rs, err := egress.ParseResolve(strings.Join(items, ","), r.Source)
		if err != nil {
			return egress.Policy{}, err
		}
		p.Resolve = append(p.Resolve, rs...)
	}
	return p, nil
}

// NetworkChange is a change of a live sandbox's egress policy.
type NetworkChange struct {
	// Mode switches the mode (none, allow, open); "" keeps it.
	Mode string
	// Allow and Deny are rules to add, Credentials credentials
	// (host=header:VARIABLE), all named by Source.
	Allow, Deny, Credentials []string
	// Remove names rules to take out, allow or deny, as written (from any
	// source); RemoveSource takes out every rule and credential of that
	// source (a plan step's, when the step has ended).
	Remove       []string
	RemoveSource string
	// Source is how the new rules are named in the policy and in every
	// decision they make: sandbox network, network_policy, plan step NAME.
	Source string
	// MayWiden lets the change make the sandbox reach more than it could
	// (an allow rule, a credential, a name resolved, a deny rule removed, a
	// wider mode); without it such a change is refused (an MCP client's,
	// unless the server was started with --allow-network-changes).
	MayWiden bool
	// WidenFix is what the refusal of a widening change tells the caller.
	WidenFix string
	// Name is the step's name; "" is "network".
	Name string
}

// NetworkChanged is what a change did: the step that recorded it (nil
// when the policy already was what was asked) and the policy now.
type NetworkChanged struct {
	Step   *evidence.Result
	Policy *store.NetworkPolicy
}

// errNotProxied is the refusal of a policy change on a session whose
// network no proxy decides.
func errNotProxied(sess *store.Session) error {
	net := sess.Network
	if net == "" {
		net = "the " + sess.Engine + " engine's"
	}
	return fail.Refusedf("session %s has no egress policy to change (its network is %s, which no proxy decides): create the sandbox with %s allow on an engine that enforces one (%s)", sess.ID, net, fail.Network, engine.EgressEngines)
}

// ChangeNetwork changes a live sandbox's egress policy, as a step of its
// own: the engine's proxy serves the new policy to every connection that
// starts after it returns, and the session records it. A rule that does
// not parse is a usage error and records nothing; so is a change that
// changes nothing (its result has no step).
func (s *Service) ChangeNetwork(ctx context.Context, sess *store.Session, c NetworkChange) (*NetworkChanged, error) {
	if err := store.CheckOpen(sess, s.Now()); err != nil {
		return nil, err
	}
	prev := sess.NetworkPolicy
	if prev == nil {
		return nil, errNotProxied(sess)
	}
	next, err := applyChange(prev, c)
	if err != nil {
		return nil, err
	}
	pol, err := PolicyOf(sess.ID, next)
	if err != nil {
		return nil, fail.As(fail.Usage, err)
	}
	if samePolicy(prev, next) {
		return &NetworkChanged{Policy: prev}, nil
	}
	if wider := widening(prev, next); len(wider) > 0 && !c.MayWiden {
		return nil, fail.Refusedf("this change would let sandbox %s reach more (%s), which this caller may not do: %s", sess.ID, strings.Join(wider, "; "), c.WidenFix)
	}
	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	for _, cr := range pol.Credentials {
		// The proxy reads every credential's secret again when it serves
		// the new policy: without it the change could not be served.
		if _, err := cr.Secret(getenv); err != nil {
			return nil, fail.Usagef("%v: the proxy needs it again to serve the changed policy; set it where xmode runs", err)
		}
	}
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return nil, err
	}
	defer engine.Close(provider)
	enf, ok := engine.Egress(provider)
	if !ok {
		return nil, errNotProxied(sess)
	}
	name := c.Name
	if name == "" {
		name = "network"
	}
	req := &evidence.NetworkRequest{Mode: c.Mode, Allow: c.Allow, Deny: c.Deny, Credentials: c.Credentials, Remove: c.Remove, RemoveSource: c.RemoveSource, Source: c.Source}
	step, err := evidence.Begin(ctx, s.Store, s.Guard, evidence.Request{
		Session: sess, Name: name, Argv: networkArgv(c), Env: []string{}, MaxLogBytes: s.Cfg.EvidenceMaxBytes, Network: req, Now: s.Clock,
	})
	if err != nil {
		return nil, err
	}
	opErr := enf.SetEgress(ctx, sess.Sandbox(), pol, getenv)
	if opErr == nil {
		if opErr = s.Store.SetNetworkPolicy(context.WithoutCancel(ctx), sess.ID, prev, next); opErr != nil {
			// Serve what the session records again: the two never differ
			// for long.
			if old, err := PolicyOf(sess.ID, prev); err == nil {
				_ = enf.SetEgress(context.WithoutCancel(ctx), sess.Sandbox(), old, getenv)
			}
		}
	}
	status := engine.Status{}
	now := next
	if opErr != nil {
		now = prev
		fmt.Fprintf(step.Stderr, "xmode: %v\n", opErr)
		status.ExitCode = 1
	} else {
		sess.NetworkPolicy = next
		fmt.Fprintln(step.Stdout, describeChange(c, next))
	}
	step.SetNetwork(&evidence.NetworkOutcome{Policy: now})
	res, err := step.Finish(context.WithoutCancel(ctx), status)
	if opErr != nil {
		return &NetworkChanged{Step: res, Policy: prev}, opErr
	}
	return &NetworkChanged{Step: res, Policy: next}, err
}

// networkArgv is a network step's argv: the change as the CLI words it.
func networkArgv(c NetworkChange) []string {
	argv := []string{"network"}
	if c.Mode != "" {
		argv = append(argv, "--mode", c.Mode)
	}
	for _, r := range c.Allow {
		argv = append(argv, "--allow", r)
	}
	for _, r := range c.Deny {
		argv = append(argv, "--deny", r)
	}
	for _, r := range c.Credentials {
		argv = append(argv, "--credential", r)
	}
	for _, r := range c.Remove {
		argv = append(argv, "--remove", r)
	}
	if c.RemoveSource != "" {
		argv = append(argv, "--remove-source", c.RemoveSource)
	}
	return argv
}

// describeChange is the line a network step leaves in its stdout.log.
func describeChange(c NetworkChange, p *store.NetworkPolicy) string {
	var did []string
	if c.Mode != "" {
		did = append(did, "mode "+c.Mode)
	}
	add := func(verb string, rules []string) {
		if len(rules) > 0 {
			did = append(did, verb+" "+strings.Join(rules, ", "))
		}
	}
	add("allowed", c.Allow)
	add("denied", c.Deny)
	add("credential for", c.Credentials)
	add("removed", c.Remove)
	if c.RemoveSource != "" {
		did = append(did, "removed the rules of "+c.RemoveSource)
	}
	src := ""
	if c.Source != "" {
		src = " (" + c.Source + ")"
	}
	return fmt.Sprintf("network policy changed%s: %s; now mode %s, %d allow rule(s), %d deny rule(s), %d credential(s)",
		src, strings.Join(did, "; "), p.Mode, len(p.Allow), len(p.Deny), len(p.Credentials))
}

// applyChange is prev with c applied, each new rule checked.
func applyChange(prev *store.NetworkPolicy, c NetworkChange) (*store.NetworkPolicy, error) {
	next := &store.NetworkPolicy{Mode: prev.Mode, Allow: slices.Clone(prev.Allow), Deny: slices.Clone(prev.Deny),
		Credentials: slices.Clone(prev.Credentials), Resolve: slices.Clone(prev.Resolve)}
	if next.Allow == nil {
		next.Allow = []store.NetworkRule{}
	}
	if next.Deny == nil {
		next.Deny = []store.NetworkRule{}
	}
	if next.Credentials == nil {
		next.Credentials = []store.NetworkCredential{}
	}
	if next.Resolve == nil {
		next.Resolve = []store.NetworkResolve{}
	}
	if c.Mode != "" {
		m, err := egress.ParseMode(c.Mode)
		if err != nil {
			return nil, fail.Usagef("%s: %v", fail.Mode, err)
		}
		next.Mode = string(m)
	}
	for _, text := range c.Remove {
		want := strings.ToLower(strings.TrimSpace(text))
		n := len(next.Allow) + len(next.Deny)
		drop := func(r store.NetworkRule) bool { return strings.ToLower(r.Rule) == want }
		next.Allow = slices.DeleteFunc(next.Allow, drop)
		next.Deny = slices.DeleteFunc(next.Deny, drop)
		if len(next.Allow)+len(next.Deny) == n {
			return nil, fail.Usagef("%s %q: the policy has no such rule (%s)", fail.Remove, text, ruleList(prev))
		}
	}
	if src := c.RemoveSource; src != "" {
		of := func(s string) bool { return s == src || s == src+" (credential)" }
		next.Allow = slices.DeleteFunc(next.Allow, func(r store.NetworkRule) bool { return of(r.Source) })
		next.Deny = slices.DeleteFunc(next.Deny, func(r store.NetworkRule) bool { return of(r.Source) })
		next.Credentials = slices.DeleteFunc(next.Credentials, func(r store.NetworkCredential) bool { return of(r.Source) })
	}
	for _, text := range c.Allow {
		r, err := egress.ParseRule(text, c.Source, false)
		if err != nil {
			return nil, fail.As(fail.Usage, err)
		}
		next.Allow = append(next.Allow, store.NetworkRule{Rule: r.Text, Source: c.Source})
	}
	for _, text := range c.Deny {
		r, err := egress.ParseRule(text, c.Source, true)
		if err != nil {
			return nil, fail.As(fail.Usage, err)
		}
		next.Deny = append(next.Deny, store.NetworkRule{Rule: r.Text, Source: c.Source})
	}
	for _, text := range c.Credentials {
		cr, err := egress.ParseCredential(text, c.Source)
		if err != nil {
			return nil, fail.As(fail.Usage, err)
		}
		for _, have := range next.Credentials {
			if have.Host == cr.Host && strings.EqualFold(have.Header, cr.Header) {
				return nil, fail.Usagef("credential %q (from %s): %s already gets header %s from %s; give one credential per host and header", text, c.Source, cr.Host, cr.Header, have.Source)
			}
		}
		next.Credentials = append(next.Credentials, store.NetworkCredential{Host: cr.Host, Header: cr.Header, From: cr.From(), Placeholder: egress.NewPlaceholder(), Source: c.Source})
		next.Allow = append(next.Allow, store.NetworkRule{Rule: cr.Host + ":443", Source: c.Source + " (credential)"})
	}
	return next, nil
}

// ruleList names a policy's rules, for a message.
func ruleList(p *store.NetworkPolicy) string {
	var rs []string
	for _, r := range p.Allow {
		rs = append(rs, "allow "+r.Rule)
	}
	for _, r := range p.Deny {
		rs = append(rs, "deny "+r.Rule)
	}
	if len(rs) == 0 {
		return "it has none"
	}
	return "its rules: " + strings.Join(rs, ", ")
}

func samePolicy(a, b *store.NetworkPolicy) bool {
	return a.Mode == b.Mode && slices.Equal(a.Allow, b.Allow) && slices.Equal(a.Deny, b.Deny) &&
		slices.Equal(a.Credentials, b.Credentials) && slices.EqualFunc(a.Resolve, b.Resolve, func(x, y store.NetworkResolve) bool {
		return x.Name == y.Name && x.Source == y.Source && slices.Equal(x.Addresses, y.Addresses)
	})
}

// modeRank orders the modes by what they let through.
func modeRank(m string) int {
	switch egress.Mode(m) {
	case egress.ModeAllow:
		return 1
	case egress.ModeOpen:
		return 2
	}
	return 0
}

// widening lists what next lets a sandbox reach that prev did not: a
// wider mode, an allow rule, a credential or a resolved name more, a deny
// rule less.
func widening(prev, next *store.NetworkPolicy) []string {
	var out []string
	if modeRank(next.Mode) > modeRank(prev.Mode) {
		out = append(out, "mode "+prev.Mode+" to "+next.Mode)
	}
	had := func(rs []store.NetworkRule, text string) bool {
		return slices.ContainsFunc(rs, func(r store.NetworkRule) bool { return strings.EqualFold(r.Rule, text) })
	}
	for _, r := range next.Allow {
		if !had(prev.Allow, r.Rule) {
			out = append(out, "allow "+r.Rule)
		}
	}
	for _, r := range prev.Deny {
		if !had(next.Deny, r.Rule) {
			out = append(out, "no longer deny "+r.Rule)
		}
	}
	for _, c := range next.Credentials {
		if !slices.ContainsFunc(prev.Credentials, func(p store.NetworkCredential) bool {
			return p.Host == c.Host && p.Header == c.Header && p.From == c.From
		}) {
			out = append(out, "a credential for "+c.Host)
		}
	}
	for _, r := range next.Resolve {
		if !slices.ContainsFunc(prev.Resolve, func(p store.NetworkResolve) bool { return p.Name == r.Name && slices.Equal(p.Addresses, r.Addresses) }) {
			out = append(out, "resolve "+r.Name)
		}
	}
	return out
}

// NetworkWanted is what a source needs of a sandbox's policy (an agent's
// hosts, a plan's rules): EnsureNetwork adds what is missing.
type NetworkWanted struct {
	Source             string
	Allow, Deny        []string
	Credentials        []string
	MayWiden           bool
	WidenFix, StepName string
}

// Missing is the part of w the session's policy lacks (a rule is there
// when the policy has it from any source; a credential when its host gets
// that header).
func (w NetworkWanted) Missing(p *store.NetworkPolicy) NetworkChange {
	c := NetworkChange{Source: w.Source, MayWiden: w.MayWiden, WidenFix: w.WidenFix, Name: w.StepName}
	has := func(rs []store.NetworkRule, text string) bool {
		return slices.ContainsFunc(rs, func(r store.NetworkRule) bool { return strings.EqualFold(r.Rule, text) })
	}
	for _, r := range w.Allow {
		if !has(p.Allow, r) {
			c.Allow = append(c.Allow, r)
		}
	}
	for _, r := range w.Deny {
		if !has(p.Deny, r) {
			c.Deny = append(c.Deny, r)
		}
	}
	for _, spec := range w.Credentials {
		cr, err := egress.ParseCredential(spec, w.Source)
		if err != nil || !slices.ContainsFunc(p.Credentials, func(h store.NetworkCredential) bool {
			return h.Host == cr.Host && strings.EqualFold(h.Header, cr.Header)
		}) {
			c.Credentials = append(c.Credentials, spec)
		}
	}
	return c
}

// Empty reports whether the change asks nothing.
func (c NetworkChange) Empty() bool {
	return c.Mode == "" && len(c.Allow)+len(c.Deny)+len(c.Credentials)+len(c.Remove) == 0 && c.RemoveSource == ""
}

// EnsureNetwork adds to a proxied session's policy what w needs and it
// lacks, as a network step; nothing when the session's network is not
// proxied or already has it all.
func (s *Service) EnsureNetwork(ctx context.Context, sess *store.Session, w NetworkWanted) (*NetworkChanged, error) {
	if sess.NetworkPolicy == nil {
		return nil, nil
	}
	c := w.Missing(sess.NetworkPolicy)
	if c.Empty() {
		return nil, nil
	}
	return s.ChangeNetwork(ctx, sess, c)
}

// CredentialFor is the placeholder a session's policy gives the sandbox in
// variable name (a credential's variable), and whether it has one.
func CredentialFor(sess *store.Session, name string) (string, bool) {
	if sess.NetworkPolicy == nil {
		return "", false
	}
	for _, c := range sess.NetworkPolicy.Credentials {
		if c.From == name {
			return c.Placeholder, true
		}
	}
	return "", false
}

// NetworkLog is where a session's network log can be read on this host
// (evidence.NetworkLog); "" when it has none.
func (s *Service) NetworkLog(ctx context.Context, sess *store.Session) (string, error) {
	return evidence.NetworkLog(ctx, s.Cfg, s.Guard, sess)
}

// NetworkQuery says which decisions to read.
type NetworkQuery struct {
	// Step, when not 0, keeps the decisions of the connections that began
	// while that step ran.
	Step int
	// Denied keeps the refused ones only.
	Denied bool
	// Limit is how many of the last to return (0: all).
	Limit int
}

// NetworkRecord is one decision of the proxy (docs/reference.md,
// "Network decision"), with the steps of the session that ran when its
// connection began (by time: the proxy knows the sandbox a connection came
// from, not its process).
type NetworkRecord struct {
	Time       time.Time `json:"time"`
	Steps      []int     `json:"steps"`
	Kind       string    `json:"kind"`
	Host       string    `json:"host"`
	Port       int       `json:"port,omitempty"`
	SNI        string    `json:"sni,omitempty"`
	HostHeader string    `json:"host_header,omitempty"`
	Method     string    `json:"method,omitempty"`
	Address    string    `json:"address,omitempty"`
	Verdict    string    `json:"verdict"`
	Rule       string    `json:"rule,omitempty"`
	Source     string    `json:"source,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Credential string    `json:"credential,omitempty"`
	Status     int       `json:"status,omitempty"`
	QType      string    `json:"qtype,omitempty"`
	Answers    []string  `json:"answers,omitempty"`
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS int64     `json:"duration_ms"`
}

// recordOf is a log line as a decision of the session's steps.
func recordOf(r egress.Record, steps []int) NetworkRecord {
	return NetworkRecord{Time: r.Time, Steps: steps, Kind: r.Kind, Host: r.Host, Port: r.Port, SNI: r.SNI, HostHeader: r.HostHeader,
		Method: r.Method, Address: r.Address, Verdict: r.Verdict, Rule: r.Rule, Source: r.Source, Reason: r.Reason,
		Credential: r.Credential, Status: r.Status, QType: r.QType, Answers: r.Answers, BytesUp: r.BytesUp, BytesDown: r.BytesDown, DurationMS: int64(math.Round(r.DurationMS))}
}

// NetworkView is a session's network: its policy and the proxy's
// decisions.
type NetworkView struct {
	SessionID string               `json:"session_id"`
	Network   string               `json:"network"`
	Policy    *store.NetworkPolicy `json:"policy"`
	// Log is the network log's path on this host ("" when there is none).
	Log string `json:"log"`
	// Summary is the whole log's ("N connections to [hosts], M denied"),
	// or the step's when one was asked for.
	Summary     egress.Summary `json:"summary"`
	SummaryLine string         `json:"summary_line"`
	// Records are the decisions asked for (the last Limit of Matched).
	Records []NetworkRecord `json:"records"`
	Matched int             `json:"matched"`
}

// Network reads a session's policy and its proxy's decisions.
func (s *Service) Network(ctx context.Context, sess *store.Session, q NetworkQuery) (*NetworkView, error) {
	v := &NetworkView{SessionID: sess.ID, Network: sess.Network, Policy: sess.NetworkPolicy, Records: []NetworkRecord{}}
	rows, err := s.Store.Steps(ctx, sess.RunID)
	if err != nil {
		return nil, err
	}
	var steps []store.StepRow
	for _, r := range rows {
		if r.SessionID == sess.ID {
			steps = append(steps, r)
		}
	}
	var from, to time.Time
	if q.Step != 0 {
		i := slices.IndexFunc(steps, func(r store.StepRow) bool { return r.Seq == q.Step })
		if i < 0 {
			return nil, fail.NotFoundf("session %s has no step %d", sess.ID, q.Step)
		}
		from, to = evidence.StepWindow(steps[i])
	}
	if v.Log, err = s.NetworkLog(ctx, sess); err != nil || v.Log == "" {
		v.SummaryLine = v.Summary.String()
		return v, err
	}
	if v.Summary, err = egress.SummarizeFile(v.Log, from, to); err != nil {
		return nil, err
	}
	v.SummaryLine = v.Summary.String()
	var keep func(*egress.Record) bool
	if q.Denied {
		keep = func(r *egress.Record) bool { return r.Verdict == egress.Denied }
	}
	recs, n, err := egress.RecordsFile(v.Log, from, to, keep, q.Limit)
	if err != nil {
		return nil, err
	}
	v.Matched = n
	for _, r := range recs {
		v.Records = append(v.Records, recordOf(r, evidence.StepsAt(steps, r.Time)))
	}
	return v, nil
}
