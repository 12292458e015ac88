package egress

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// A Rule allows (or, with Deny, refuses) one kind of destination:
//
//	host            that name exactly, any port
//	host:port       that name on that port
//	*.host[:port]   every name below host, not host itself (the apex)
//	CIDR[:port]     addresses in the prefix, v4 or v6 ([v6/len]:port with
//	                a port); a single address is a one-address prefix
//
// Names match names and prefixes match addresses: a CONNECT to an IP
// literal is decided by prefix rules alone, and a name's resolved
// addresses only meet deny prefixes and the block list.
type Rule struct {
	Text   string // as written, the way a decision names it
	Source string // where it came from: --allow, XMODE_SANDBOX_ALLOW, plan build, agent claude
	Deny   bool

	kind   ruleKind
	name   string // host and suffix rules: lower case, no trailing dot
	port   int    // 0: any port
	prefix netip.Prefix
}

type ruleKind uint8

const (
	ruleHost   ruleKind = iota + 1 // a name exactly
	ruleSuffix                     // *.name: names below it
	rulePrefix                     // a CIDR
)

// RuleError is a rule that does not parse: which rule, from where, what is
// wrong with it and what to write instead. Front ends word the source
// (a flag, a plan's field, a tool's parameter).
type RuleError struct {
	Rule, Source string
	Problem      string
	Example      string
}

func (e *RuleError) Error() string {
	where := ""
	if e.Source != "" {
		where = " (from " + e.Source + ")"
	}
	msg := fmt.Sprintf("rule %q%s: %s", e.Rule, where, e.Problem)
	if e.Example != "" {
		msg += "; write e.g. " + e.Example
	}
	return msg
}

const ruleExamples = "api.example.com, *.example.com, example.com:443, 10.0.0.0/8, [2001:db8::/32]:443"

// ParseRule reads one allow (deny false) or deny rule written in source.
func ParseRule(text, source string, deny bool) (Rule, error) {
	r := Rule{Text: strings.TrimSpace(text), Source: source, Deny: deny}
	bad := func(problem, example string) (Rule, error) {
		return Rule{}, &RuleError{Rule: text, Source: source, Problem: problem, Example: example}
	}
	s := r.Text
	switch {
	case s == "":
		return bad("empty rule", ruleExamples)
	case len(s) > 300:
		return bad("longer than a host name and port can be", ruleExamples)
	case s == "*" || s == "*.*" || s == "0.0.0.0/0" || s == "::/0":
		return bad("a rule that matches everything is not an allow-list", "--network open to allow every host (deny rules and the block list still apply)")
	}
	for _, c := range s {
		if c <= ' ' || c > '~' {
			return bad("only ASCII letters, digits and . - _ * : / [ ] are allowed (no spaces)", "the punycode form of an international name, xn--…")
		}
	}

	// Addresses and prefixes: bare, or in brackets with a port.
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return bad("an opening [ without its ]", "[2001:db8::1]:443")
		}
		p, ok := parsePrefix(s[1:end])
		if !ok {
			return bad("not an IP address or CIDR between [ ]", "[2001:db8::/32]:443")
		}
		rest := s[end+1:]
		if rest == "" {
			r.kind, r.prefix = rulePrefix, p
			return r, nil
		}
		port, err := parsePort(strings.TrimPrefix(rest, ":"), rest)
		if err != "" {
			return bad(err, "[2001:db8::1]:443")
		}
		r.kind, r.prefix, r.port = rulePrefix, p, port
		return r, nil
	}
	if p, ok := parsePrefix(s); ok {
		r.kind, r.prefix = rulePrefix, p
		return r, nil
	}
	host, portText, hasPort := s, "", false
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, portText, hasPort = s[:i], s[i+1:], true
	}
	if strings.Contains(host, ":") {
		return bad("an IPv6 address with a port needs brackets", "[2001:db8::1]:443")
	}
	if hasPort {
		port, err := parsePort(portText, ":"+portText)
		if err != "" {
			return bad(err, "example.com:443")
		}
		r.port = port
	}
	if p, ok := parsePrefix(host); ok {
		r.kind, r.prefix = rulePrefix, p
		return r, nil
	}
	if strings.Contains(host, "/") {
		return bad("not a CIDR: an address, a slash and a prefix length", "10.0.0.0/8 or 2001:db8::/32")
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	r.kind = ruleHost
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.kind, host = ruleSuffix, rest
		if !strings.Contains(host, ".") {
			return bad("*."+host+" would allow a whole top-level domain", "*.example.com (or --network open)")
		}
	}
	if strings.Contains(host, "*") {
		return bad("a * may only stand alone as the first label, as in *.example.com (which matches names below example.com, not example.com itself)", "*.example.com")
	}
	if problem := checkName(host); problem != "" {
		return bad(problem, "api.example.com")
	}
	if looksNumeric(host) {
		return bad("looks like an IPv4 address but is not one", "192.0.2.10 or 192.0.2.0/24")
	}
	r.name = host
	return r, nil
}

// parsePrefix reads a CIDR or a single address (a one-address prefix),
// masked, with an IPv4-mapped IPv6 address read as its IPv4 address.
func parsePrefix(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		if p.Addr().Zone() != "" {
			return netip.Prefix{}, false
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), true
}

func parsePort(s, shown string) (int, string) {
	if s == "" {
		return 0, "a : with no port after it"
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s[0] == '0' || s[0] == '+' {
		return 0, fmt.Sprintf("port %q is not a number from 1 to 65535", strings.TrimPrefix(shown, ":"))
	}
	return n, ""
}

// checkName says what is wrong with a host name, or "" when nothing is:
// labels of letters, digits, - and _, 1 to 63 long, 253 in all.
func checkName(name string) string {
	if name == "" {
		return "no host name"
	}
	if len(name) > 253 {
		return "a host name is at most 253 characters"
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return "an empty label (two dots, or a leading dot)"
		}
		if len(label) > 63 {
			return "a label (between dots) is at most 63 characters"
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "a label may not begin or end with -"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("%q is not allowed in a host name (letters, digits, - and _)", string(c))
			}
		}
	}
	return ""
}

// looksNumeric: dotted digits that are not an address (1.2.3, 999.1.1.1),
// which resolvers read in surprising ways.
func looksNumeric(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= '0' && c <= '9' || c == '.') {
			return false
		}
	}
	return true
}

// matchName: the rule matches the name (already canonical: lower case, no
// trailing dot) on the port.
func (r *Rule) matchName(name string, port int) bool {
	if r.port != 0 && r.port != port {
		return false
	}
	switch r.kind {
	case ruleHost:
		return name == r.name
	case ruleSuffix:
		return len(name) > len(r.name)+1 && strings.HasSuffix(name, r.name) && name[len(name)-len(r.name)-1] == '.'
	}
	return false
}

// matchAddr: the rule is a prefix holding a on the port (0: any port).
func (r *Rule) matchAddr(a netip.Addr, port int) bool {
	if r.kind != rulePrefix || (r.port != 0 && port != 0 && r.port != port) {
		return false
	}
	return r.prefix.Contains(a)
}

// IsPrefix reports whether the rule names addresses rather than names.
func (r *Rule) IsPrefix() bool { return r.kind == rulePrefix }

// String is the rule as written.
func (r Rule) String() string { return r.Text }

// ruleJSON is a rule in a policy file: its text and its source, parsed
// again when the file is read, so a file cannot carry a rule the parser
// would refuse.
type ruleJSON struct {
	Rule   string `json:"rule"`
	Source string `json:"source,omitempty"`
}

func (r Rule) MarshalJSON() ([]byte, error) {
	return json.Marshal(ruleJSON{Rule: r.Text, Source: r.Source})
}

// ParseRules reads a comma-separated list (XMODE_SANDBOX_ALLOW's form)
// of allow or deny rules from one source; empty items are skipped.
func ParseRules(list, source string, deny bool) ([]Rule, error) {
	var out []Rule
	for item := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		r, err := ParseRule(item, source, deny)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// canonicalName lower-cases a name and drops one trailing dot; ok is false
// when it is not a valid host name.
func canonicalName(host string) (string, bool) {
	n := strings.ToLower(strings.TrimSuffix(host, "."))
	if checkName(n) != "" || looksNumeric(n) {
		return "", false
	}
	return n, true
}
