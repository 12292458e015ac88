package egress

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// Mode is a sandbox's network mode.
type Mode string

const (
	// ModeNone: no network at all; the proxy refuses everything.
	ModeNone Mode = "none"
	// ModeOpen: every host, except what deny rules and the block list refuse.
	ModeOpen Mode = "open"
	// ModeAllow: only what an allow rule names, and deny rules win.
	ModeAllow Mode = "allow"
)

// ParseMode reads none, open or allow.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.TrimSpace(s)); m {
	case ModeNone, ModeOpen, ModeAllow:
		return m, nil
	}
	return "", fmt.Errorf("network mode %q: use none, open or allow", s)
}

// Policy is one sandbox's egress policy: what its proxy and resolver
// allow, and where they listen. One proxy process serves many policies,
// and tells them apart by the listener a client reached, never by what
// the client says.
type Policy struct {
	Sandbox     string
	Mode        Mode
	Listen      string // the proxy's address for this sandbox, host:port (port 0: any)
	DNS         string // its resolver's address, host:port (UDP and TCP); "" for none
	Allow, Deny []Rule
	Resolve     []Resolve
	Credentials []Credential
	Block       []Block // addresses refused whatever the rules say, besides DefaultBlock
}

// Resolve makes the proxy resolve a name to these addresses (curl's
// --resolve, XMODE_SANDBOX_RESOLVE): an internal mirror, or a test host.
type Resolve struct {
	Name   string
	Addrs  []netip.Addr
	Source string
}

// Block is a range of addresses the proxy never connects to by name or by
// address. Liftable ones (loopback, say) are reached only through an allow
// rule that names them by CIDR; the others (link-local, where cloud
// metadata lives) never.
type Block struct {
	Prefix   netip.Prefix
	Reason   string
	Liftable bool
}

// DefaultBlock is refused in every policy. The engine adds its own
// (Policy.Block, Config.Block): the bridge gateway, the proxy's networks.
var DefaultBlock = []Block{
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata)", false},
	{netip.MustParsePrefix("fe80::/10"), "link-local", false},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata", false},
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata", false},
	{netip.MustParsePrefix("0.0.0.0/8"), "this host", false},
	{netip.MustParsePrefix("::/128"), "unspecified", false},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast", false},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast", false},
	{netip.MustParsePrefix("ff00::/8"), "multicast", false},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback", true},
	{netip.MustParsePrefix("::1/128"), "loopback", true},
}

// Decision is the proxy's answer for one destination, naming the rule
// that decided and where that rule came from.
type Decision struct {
	Allowed bool
	Rule    string // a rule's text, or "mode open", "mode none", "block list", "no rule"
	Source  string // the rule's source
	Reason  string // for a person, when refused
}

func allow(r *Rule) Decision { return Decision{Allowed: true, Rule: r.Text, Source: r.Source} }

func deny(rule, source, reason string) Decision {
	return Decision{Rule: rule, Source: source, Reason: reason}
}

// CheckTarget decides a destination as the client named it: a host name
// or an IP literal, and a port. For a name it says only whether the name
// may be reached; the addresses it resolves to meet CheckAddr before any
// connection.
func (p *Policy) CheckTarget(host string, port int, extra []Block) Decision {
	if p.Mode != ModeOpen && p.Mode != ModeAllow {
		return deny("mode none", "", "the sandbox has no network (mode none)")
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if a.Zone() != "" {
			return deny("no rule", "", "an address with a zone is never reached")
		}
		return p.CheckAddr(a.Unmap(), port, extra, true)
	}
	name, ok := canonicalName(host)
	if !ok {
		return deny("no rule", "", fmt.Sprintf("%q is not a host name", clip(host)))
	}
	for i := range p.Deny {
		if p.Deny[i].matchName(name, port) {
			r := &p.Deny[i]
			return deny(r.Text, r.Source, fmt.Sprintf("%s:%d is denied by %q", name, port, r.Text))
		}
	}
	if p.Mode == ModeOpen {
		return Decision{Allowed: true, Rule: "mode open"}
	}
	for i := range p.Allow {
		if p.Allow[i].matchName(name, port) {
			return allow(&p.Allow[i])
		}
	}
	return deny("no rule", "", fmt.Sprintf("no allow rule names %s:%d", name, port))
}

// CheckAddr decides one address on a port: deny prefixes, then the block
// list (DefaultBlock, the policy's and extra), then — for an address the
// client named itself (literal) — allow prefixes or mode open. A name's
// resolved addresses (literal false) need only pass the first two.
func (p *Policy) CheckAddr(a netip.Addr, port int, extra []Block, literal bool) Decision {
	if p.Mode != ModeOpen && p.Mode != ModeAllow {
		return deny("mode none", "", "the sandbox has no network (mode none)")
	}
	a = a.Unmap()
	for i := range p.Deny {
		if p.Deny[i].matchAddr(a, port) {
			r := &p.Deny[i]
			return deny(r.Text, r.Source, fmt.Sprintf("%s is denied by %q", a, r.Text))
		}
	}
	var byPrefix *Rule
	for i := range p.Allow {
		if p.Allow[i].matchAddr(a, port) {
			byPrefix = &p.Allow[i]
			break
		}
	}
	for _, v := range embedded(a) {
		for _, list := range [][]Block{DefaultBlock, p.Block, extra} {
			for _, b := range list {
				if !b.Prefix.Contains(v) {
					continue
				}
				if b.Liftable && byPrefix != nil {
					continue
				}
				reason := fmt.Sprintf("%s is blocked: %s", a, b.Reason)
				if b.Liftable {
					reason += " (an allow rule naming it by CIDR lifts this)"
				}
				return deny("block list", "", reason)
			}
		}
	}
	if !literal {
		return Decision{Allowed: true}
	}
	if byPrefix != nil {
		return allow(byPrefix)
	}
	if p.Mode == ModeOpen {
		return Decision{Allowed: true, Rule: "mode open"}
	}
	return deny("no rule", "", fmt.Sprintf("no allow rule names %s (an address is allowed only by a CIDR rule)", netip.AddrPortFrom(a, uint16(port))))
}

// embedded is a and any IPv4 address an IPv6 one carries (NAT64 and 6to4
// prefixes, the deprecated IPv4-compatible form), so 64:ff9b::a9fe:a9fe
// is refused as 169.254.169.254 is.
func embedded(a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return []netip.Addr{a}
	}
	b := a.As16()
	out := []netip.Addr{a}
	switch {
	case netip.MustParsePrefix("64:ff9b::/96").Contains(a), netip.MustParsePrefix("64:ff9b:1::/48").Contains(a),
		netip.MustParsePrefix("::/96").Contains(a) && !a.IsUnspecified() && a != netip.IPv6Loopback():
		out = append(out, netip.AddrFrom4([4]byte(b[12:16])))
	case netip.MustParsePrefix("2002::/16").Contains(a):
		out = append(out, netip.AddrFrom4([4]byte(b[2:6])))
	}
	return out
}

// AllowsName reports whether some rule could let the name through on some
// port: the resolver answers for such names only.
func (p *Policy) AllowsName(host string) (Decision, bool) {
	name, ok := canonicalName(host)
	if !ok {
		return deny("no rule", "", fmt.Sprintf("%q is not a host name", clip(host))), false
	}
	switch p.Mode {
	case ModeOpen:
		for i := range p.Deny {
			if r := &p.Deny[i]; r.port == 0 && r.matchName(name, 0) {
				return deny(r.Text, r.Source, fmt.Sprintf("%s is denied by %q", name, r.Text)), false
			}
		}
		return Decision{Allowed: true, Rule: "mode open"}, true
	case ModeAllow:
		for i := range p.Deny {
			if r := &p.Deny[i]; r.port == 0 && r.matchName(name, 0) {
				return deny(r.Text, r.Source, fmt.Sprintf("%s is denied by %q", name, r.Text)), false
			}
		}
		for i := range p.Allow {
			r := &p.Allow[i]
			if r.kind != rulePrefix && r.matchName(name, r.port) {
				return allow(r), true
			}
		}
		return deny("no rule", "", "no allow rule names "+name), false
	}
	return deny("mode none", "", "the sandbox has no network (mode none)"), false
}

// resolveOverride is the addresses the policy resolves name to, if any.
func (p *Policy) resolveOverride(name string) ([]netip.Addr, bool) {
	for _, r := range p.Resolve {
		if r.Name == name {
			return r.Addrs, true
		}
	}
	return nil, false
}

// Source is one origin of rules, in the order Merge is given them:
// configuration (XMODE_SANDBOX_ALLOW, XMODE_SANDBOX_RESOLVE), an agent's
// definition, a plan's network: field, flags.
type Source struct {
	Name        string   // how a decision names it: --allow, XMODE_SANDBOX_ALLOW, agent claude, plan build
	Allow, Deny []string // rules, each as written
	Credentials []string // host=header:VARIABLE or host=header:/path/to/file
	Resolve     []string // name=address
}

// Merge builds a policy from its sources. Rules keep their source, so a
// decision can say which rule decided and where it came from; the first
// source's rule is named when several match. A credential also allows its
// host on port 443. The first rule that does not parse is the error.
func Merge(sandbox string, mode Mode, sources ...Source) (Policy, error) {
	if _, err := ParseMode(string(mode)); err != nil {
		return Policy{}, err
	}
	p := Policy{Sandbox: sandbox, Mode: mode}
	seenCred := map[string]string{}
	for _, s := range sources {
		for _, t := range s.Allow {
			r, err := ParseRule(t, s.Name, false)
			if err != nil {
				return Policy{}, err
			}
			p.Allow = append(p.Allow, r)
		}
		for _, t := range s.Deny {
			r, err := ParseRule(t, s.Name, true)
			if err != nil {
				return Policy{}, err
			}
			p.Deny = append(p.Deny, r)
		}
		for _, t := range s.Credentials {
			c, err := ParseCredential(t, s.Name)
			if err != nil {
				return Policy{}, err
			}
			key := c.Host + " " + strings.ToLower(c.Header)
			if prev, ok := seenCred[key]; ok {
				return Policy{}, fmt.Errorf("credential %q (from %s): %s already gets header %s from %s; give one credential per host and header", t, s.Name, c.Host, c.Header, prev)
			}
			seenCred[key] = s.Name
			c.Placeholder = NewPlaceholder()
			p.Credentials = append(p.Credentials, c)
			r, err := ParseRule(c.Host+":443", s.Name+" (credential)", false)
			if err != nil {
				return Policy{}, err
			}
			p.Allow = append(p.Allow, r)
		}
		for _, t := range s.Resolve {
			rs, err := ParseResolve(t, s.Name)
			if err != nil {
				return Policy{}, err
			}
			p.addResolve(rs...)
		}
	}
	return p, nil
}

func (p *Policy) addResolve(rs ...Resolve) {
	for _, r := range rs {
		merged := false
		for i := range p.Resolve {
			if p.Resolve[i].Name == r.Name && p.Resolve[i].Source == r.Source {
				p.Resolve[i].Addrs = append(p.Resolve[i].Addrs, r.Addrs...)
				merged = true
			}
		}
		if !merged {
			p.Resolve = append(p.Resolve, r)
		}
	}
}

// ParseResolve reads name=address items, comma-separated
// (XMODE_SANDBOX_RESOLVE=mirror.internal=10.1.2.3,allowed.test=127.0.0.1);
// a name given twice gets both addresses.
func ParseResolve(list, source string) ([]Resolve, error) {
	var out []Resolve
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "=")
		bad := func(problem string) error {
			return &RuleError{Rule: item, Source: source, Problem: problem, Example: "mirror.internal=10.1.2.3"}
		}
		if !ok {
			return nil, bad("a name=address pair needs its =")
		}
		n, ok := canonicalName(strings.TrimSpace(name))
		if !ok {
			return nil, bad(fmt.Sprintf("%q is not a host name", name))
		}
		a, err := netip.ParseAddr(strings.Trim(strings.TrimSpace(addr), "[]"))
		if err != nil || a.Zone() != "" {
			return nil, bad(fmt.Sprintf("%q is not an IP address", addr))
		}
		found := false
		for i := range out {
			if out[i].Name == n {
				out[i].Addrs = append(out[i].Addrs, a.Unmap())
				found = true
			}
		}
		if !found {
			out = append(out, Resolve{Name: n, Addrs: []netip.Addr{a.Unmap()}, Source: source})
		}
	}
	return out, nil
}

// clip bounds text a client sent before it goes into a message or a log.
func clip(s string) string {
	const max = 256
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// policyFile is a policy as its file holds it (docs/network.md, "The
// process and its directory"): rules as text, parsed again when read.
type policyFile struct {
	Version     int              `json:"version"`
	Sandbox     string           `json:"sandbox"`
	Mode        Mode             `json:"mode"`
	Listen      string           `json:"listen"`
	DNS         string           `json:"dns,omitempty"`
	Allow       []ruleJSON       `json:"allow,omitempty"`
	Deny        []ruleJSON       `json:"deny,omitempty"`
	Resolve     []resolveJSON    `json:"resolve,omitempty"`
	Credentials []credentialJSON `json:"credentials,omitempty"`
	Block       []blockJSON      `json:"block,omitempty"`
}

type resolveJSON struct {
	Name      string       `json:"name"`
	Addresses []netip.Addr `json:"addresses"`
	Source    string       `json:"source,omitempty"`
}

type blockJSON struct {
	CIDR     netip.Prefix `json:"cidr"`
	Reason   string       `json:"reason"`
	Liftable bool         `json:"liftable,omitempty"`
}

func (p Policy) MarshalJSON() ([]byte, error) {
	f := policyFile{Version: 1, Sandbox: p.Sandbox, Mode: p.Mode, Listen: p.Listen, DNS: p.DNS}
	for _, r := range p.Allow {
		f.Allow = append(f.Allow, ruleJSON{r.Text, r.Source})
	}
	for _, r := range p.Deny {
		f.Deny = append(f.Deny, ruleJSON{r.Text, r.Source})
	}
	for _, r := range p.Resolve {
		f.Resolve = append(f.Resolve, resolveJSON{r.Name, r.Addrs, r.Source})
	}
	for _, c := range p.Credentials {
		f.Credentials = append(f.Credentials, c.file())
	}
	for _, b := range p.Block {
		f.Block = append(f.Block, blockJSON{b.Prefix, b.Reason, b.Liftable})
	}
	return json.Marshal(f)
}

// UnmarshalJSON reads a policy file, checking every field as Merge would.
func (p *Policy) UnmarshalJSON(b []byte) error {
	var f policyFile
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	if f.Version != 1 {
		return fmt.Errorf("version %d: this xmode reads version 1", f.Version)
	}
	if err := checkSandboxID(f.Sandbox); err != nil {
		return err
	}
	mode, err := ParseMode(string(f.Mode))
	if err != nil {
		return err
	}
	out := Policy{Sandbox: f.Sandbox, Mode: mode, Listen: f.Listen, DNS: f.DNS}
	if _, err := netip.ParseAddrPort(f.Listen); err != nil {
		return fmt.Errorf("listen %q: want address:port, e.g. 10.89.0.2:3128", f.Listen)
	}
	if f.DNS != "" {
		if _, err := netip.ParseAddrPort(f.DNS); err != nil {
			return fmt.Errorf("dns %q: want address:port, e.g. 10.89.0.2:53", f.DNS)
		}
	}
	for _, r := range f.Allow {
		rule, err := ParseRule(r.Rule, r.Source, false)
		if err != nil {
			return err
		}
		out.Allow = append(out.Allow, rule)
	}
	for _, r := range f.Deny {
		rule, err := ParseRule(r.Rule, r.Source, true)
		if err != nil {
			return err
		}
		out.Deny = append(out.Deny, rule)
	}
	for _, r := range f.Resolve {
		n, ok := canonicalName(r.Name)
		if !ok || len(r.Addresses) == 0 {
			return fmt.Errorf("resolve %q: want a host name and at least one address", r.Name)
		}
		addrs := make([]netip.Addr, 0, len(r.Addresses))
		for _, a := range r.Addresses {
			if !a.IsValid() || a.Zone() != "" {
				return fmt.Errorf("resolve %q: an address without a zone is needed", r.Name)
			}
			addrs = append(addrs, a.Unmap())
		}
		out.Resolve = append(out.Resolve, Resolve{Name: n, Addrs: addrs, Source: r.Source})
	}
	for _, c := range f.Credentials {
		cred, err := c.credential()
		if err != nil {
			return err
		}
		out.Credentials = append(out.Credentials, cred)
	}
	for _, b := range f.Block {
		if !b.CIDR.IsValid() {
			return fmt.Errorf("block: a CIDR is needed")
		}
		out.Block = append(out.Block, Block{b.CIDR.Masked(), b.Reason, b.Liftable})
	}
	*p = out
	return nil
}

// checkSandboxID keeps a policy's sandbox ID usable as a file name.
func checkSandboxID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("sandbox %q: 1 to 64 letters, digits, _ and -", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("sandbox %q: 1 to 64 letters, digits, _ and -", id)
		}
	}
	return nil
}
