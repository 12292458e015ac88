package egress

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

func mustRule(t testing.TB, text string, deny bool) Rule {
	t.Helper()
	r, err := ParseRule(text, "test", deny)
	if err != nil {
		t.Fatalf("ParseRule(%q): %v", text, err)
	}
	return r
}

func TestParseRuleAccepts(t *testing.T) {
	for _, c := range []struct {
		in   string
		kind ruleKind
		name string
		port int
		cidr string
	}{
		{"api.example.com", ruleHost, "api.example.com", 0, ""},
		{"API.Example.COM.", ruleHost, "api.example.com", 0, ""},
		{"example.com:443", ruleHost, "example.com", 443, ""},
		{"*.example.com", ruleSuffix, "example.com", 0, ""},
		{"*.example.com:8443", ruleSuffix, "example.com", 8443, ""},
		{"mirror", ruleHost, "mirror", 0, ""},
		{"_srv.example.com", ruleHost, "_srv.example.com", 0, ""},
		{"10.0.0.0/8", rulePrefix, "", 0, "10.0.0.0/8"},
		{"10.1.2.3/8", rulePrefix, "", 0, "10.0.0.0/8"},
		{"192.0.2.10", rulePrefix, "", 0, "192.0.2.10/32"},
		{"192.0.2.0/24:443", rulePrefix, "", 443, "192.0.2.0/24"},
		{"2001:db8::/32", rulePrefix, "", 0, "2001:db8::/32"},
		{"2001:db8::1", rulePrefix, "", 0, "2001:db8::1/128"},
		{"[2001:db8::/32]:443", rulePrefix, "", 443, "2001:db8::/32"},
		{"[::1]:8080", rulePrefix, "", 8080, "::1/128"},
		{"::ffff:10.0.0.1", rulePrefix, "", 0, "10.0.0.1/32"},
		{"::ffff:10.0.0.0/104", rulePrefix, "", 0, "10.0.0.0/8"},
	} {
		r := mustRule(t, c.in, false)
		if r.kind != c.kind || r.name != c.name || r.port != c.port || (c.cidr != "" && r.prefix.String() != c.cidr) {
			t.Errorf("ParseRule(%q) = kind %d name %q port %d prefix %s; want %d %q %d %s", c.in, r.kind, r.name, r.port, r.prefix, c.kind, c.name, c.port, c.cidr)
		}
		if r.Source != "test" || r.Text != c.in {
			t.Errorf("ParseRule(%q) keeps text %q source %q", c.in, r.Text, r.Source)
		}
	}
}

func TestParseRuleRefusesWithAFix(t *testing.T) {
	for _, c := range []struct{ in, problem, example string }{
		{"", "empty rule", "api.example.com"},
		{"*", "matches everything", "--network open"},
		{"0.0.0.0/0", "matches everything", "--network open"},
		{"*.com", "whole top-level domain", "*.example.com"},
		{"api.*.com", "first label", "*.example.com"},
		{"**.example.com", "first label", "*.example.com"},
		{"example.com:0", "1 to 65535", "example.com:443"},
		{"example.com:99999", "1 to 65535", "example.com:443"},
		{"example.com:", "no port", "example.com:443"},
		{"example.com:https", "1 to 65535", "example.com:443"},
		{"2001:db8::1:443x", "brackets", "[2001:db8::1]:443"},
		{"[2001:db8::1", "without its ]", "[2001:db8::1]:443"},
		{"[example.com]:443", "between [ ]", "[2001:db8::/32]:443"},
		{"10.0.0.0/33", "not a CIDR", "10.0.0.0/8"},
		{"ex ample.com", "no spaces", "punycode"},
		{"exämple.com", "ASCII", "xn--"},
		{"-bad.example.com", "begin or end with -", "api.example.com"},
		{"a..b", "empty label", "api.example.com"},
		{"1.2.3", "IPv4 address", "192.0.2.0/24"},
		{"example.com/path", "not a CIDR", "10.0.0.0/8"},
		{"fe80::1%eth0", "", ""},
		{strings.Repeat("a", 64) + ".com", "63 characters", "api.example.com"},
	} {
		_, err := ParseRule(c.in, "--allow", false)
		if err == nil {
			t.Errorf("ParseRule(%q) accepted", c.in)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.problem) || !strings.Contains(msg, c.example) || !strings.Contains(msg, "(from --allow)") {
			t.Errorf("ParseRule(%q): %q does not say %q, name its source, and suggest %q", c.in, msg, c.problem, c.example)
		}
	}
}

func TestParseRulesList(t *testing.T) {
	rs, err := ParseRules("a.example.com, ,*.b.example.com,10.0.0.0/8", "XMODE_SANDBOX_ALLOW", false)
	if err != nil || len(rs) != 3 || rs[1].Text != "*.b.example.com" || rs[2].Source != "XMODE_SANDBOX_ALLOW" {
		t.Fatalf("ParseRules = %+v, %v", rs, err)
	}
	if _, err := ParseRules("ok.example.com,bad..example.com", "XMODE_SANDBOX_ALLOW", false); err == nil || !strings.Contains(err.Error(), `"bad..example.com"`) {
		t.Fatalf("a bad item is not named: %v", err)
	}
}

func policy(t testing.TB, mode Mode, allow, deny []string) *Policy {
	t.Helper()
	p, err := Merge("sbx_test", mode, Source{Name: "--allow", Allow: allow, Deny: deny})
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestCheckTargetMatchesNames(t *testing.T) {
	p := policy(t, ModeAllow, []string{"api.example.com", "*.cdn.example.com", "pypi.org:443", "192.0.2.0/24", "[2001:db8::/32]:443"}, nil)
	for _, c := range []struct {
		host string
		port int
		ok   bool
		rule string
	}{
		{"api.example.com", 443, true, "api.example.com"},
		{"API.EXAMPLE.COM.", 80, true, "api.example.com"},
		{"x.api.example.com", 443, false, "no rule"},
		{"a.cdn.example.com", 443, true, "*.cdn.example.com"},
		{"a.b.cdn.example.com", 443, true, "*.cdn.example.com"},
		{"cdn.example.com", 443, false, "no rule"}, // the apex is not a subdomain
		{"xcdn.example.com", 443, false, "no rule"},
		{"pypi.org", 443, true, "pypi.org:443"},
		{"pypi.org", 80, false, "no rule"},
		{"192.0.2.7", 443, true, "192.0.2.0/24"},
		{"192.0.3.7", 443, false, "no rule"},
		{"2001:db8::5", 443, true, "[2001:db8::/32]:443"},
		{"[2001:db8::5]", 443, true, "[2001:db8::/32]:443"},
		{"2001:db8::5", 80, false, "no rule"},
		{"::ffff:192.0.2.7", 443, true, "192.0.2.0/24"},
		{"bad name", 443, false, "no rule"},
	} {
		d := p.CheckTarget(c.host, c.port, nil)
		if d.Allowed != c.ok || d.Rule != c.rule {
			t.Errorf("CheckTarget(%q, %d) = %+v, want allowed %v by %q", c.host, c.port, d, c.ok, c.rule)
		}
		if d.Allowed && d.Source != "--allow" {
			t.Errorf("CheckTarget(%q) does not name the rule's source: %+v", c.host, d)
		}
	}
}

// A host rule never lets an address through, even one the name resolves
// to: a CONNECT to an IP literal is decided by prefix rules alone.
func TestAddressNeedsAPrefixRule(t *testing.T) {
	p := policy(t, ModeAllow, []string{"api.example.com"}, nil)
	p.Resolve = []Resolve{{Name: "api.example.com", Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}}
	if d := p.CheckTarget("192.0.2.1", 443, nil); d.Allowed || !strings.Contains(d.Reason, "only by a CIDR rule") {
		t.Fatalf("an IP literal passed by a host rule: %+v", d)
	}
}

func TestDenyWinsAndModes(t *testing.T) {
	p := policy(t, ModeAllow, []string{"*.example.com", "10.0.0.0/8"}, []string{"evil.example.com", "10.9.0.0/16"})
	if d := p.CheckTarget("evil.example.com", 443, nil); d.Allowed || d.Rule != "evil.example.com" || d.Source != "--allow" {
		t.Errorf("deny did not win: %+v", d)
	}
	if d := p.CheckTarget("good.example.com", 443, nil); !d.Allowed {
		t.Errorf("allow lost: %+v", d)
	}
	if d := p.CheckTarget("10.9.1.1", 443, nil); d.Allowed || d.Rule != "10.9.0.0/16" {
		t.Errorf("deny prefix did not win: %+v", d)
	}
	if d := p.CheckAddr(netip.MustParseAddr("10.9.1.1"), 443, nil, false); d.Allowed {
		t.Errorf("a resolved address escaped a deny prefix: %+v", d)
	}

	open := policy(t, ModeOpen, nil, []string{"evil.example.com"})
	if d := open.CheckTarget("anything.example.org", 443, nil); !d.Allowed || d.Rule != "mode open" {
		t.Errorf("open refused: %+v", d)
	}
	if d := open.CheckTarget("evil.example.com", 443, nil); d.Allowed {
		t.Errorf("open ignored a deny rule: %+v", d)
	}
	none := policy(t, ModeNone, []string{"api.example.com"}, nil)
	if d := none.CheckTarget("api.example.com", 443, nil); d.Allowed || d.Rule != "mode none" {
		t.Errorf("none allowed: %+v", d)
	}
	if _, ok := none.AllowsName("api.example.com"); ok {
		t.Error("none answers DNS")
	}
}

func TestBlockList(t *testing.T) {
	gw := []Block{{netip.MustParsePrefix("172.17.0.1/32"), "docker bridge gateway", false}}
	open := policy(t, ModeOpen, nil, nil)
	lifted := policy(t, ModeAllow, []string{"127.0.0.1/32", "169.254.0.0/16", "172.17.0.0/16"}, nil)
	for _, c := range []struct {
		p    *Policy
		addr string
		ok   bool
		says string
	}{
		{open, "169.254.169.254", false, "link-local"},
		{open, "::ffff:169.254.169.254", false, "link-local"},
		{open, "64:ff9b::a9fe:a9fe", false, "link-local"}, // NAT64 of 169.254.169.254
		{open, "2002:a9fe:a9fe::1", false, "link-local"},  // 6to4 of it
		{open, "fe80::1", false, "link-local"},
		{open, "fd00:ec2::254", false, "metadata"},
		{open, "127.0.0.1", false, "loopback"},
		{open, "::1", false, "loopback"},
		{open, "0.0.0.0", false, "this host"},
		{open, "172.17.0.1", false, "docker bridge gateway"},
		{open, "93.184.216.34", true, ""},
		{lifted, "127.0.0.1", true, ""},                  // named by CIDR: lifted
		{lifted, "127.0.0.2", false, "loopback"},         // not named
		{lifted, "169.254.169.254", false, "link-local"}, // never lifted
		{lifted, "172.17.0.1", false, "docker bridge gateway"},
	} {
		for _, literal := range []bool{true, false} {
			d := c.p.CheckAddr(netip.MustParseAddr(c.addr), 443, gw, literal)
			if d.Allowed != c.ok || (!c.ok && !strings.Contains(d.Reason, c.says)) {
				t.Errorf("mode %s CheckAddr(%s, literal %v) = %+v; want allowed %v saying %q", c.p.Mode, c.addr, literal, d, c.ok, c.says)
			}
		}
	}
}

func TestMergeKeepsSources(t *testing.T) {
	p, err := Merge("sbx_1", ModeAllow,
		Source{Name: "--allow", Allow: []string{"flag.example.com"}},
		Source{Name: "plan build", Allow: []string{"plan.example.com"}, Deny: []string{"bad.example.com"}},
		Source{Name: "agent claude", Credentials: []string{"api.anthropic.com=x-api-key:ANTHROPIC_API_KEY"}},
		Source{Name: "XMODE_SANDBOX_ALLOW", Allow: []string{"*.example.com"}, Resolve: []string{"mirror.internal=10.1.2.3,mirror.internal=10.1.2.4"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	for host, src := range map[string]string{
		"flag.example.com": "--allow", "plan.example.com": "plan build", "other.example.com": "XMODE_SANDBOX_ALLOW",
		"api.anthropic.com": "agent claude (credential)",
	} {
		if d := p.CheckTarget(host, 443, nil); !d.Allowed || d.Source != src {
			t.Errorf("%s: %+v, want allowed from %q", host, d, src)
		}
	}
	if d := p.CheckTarget("bad.example.com", 443, nil); d.Allowed || d.Source != "plan build" {
		t.Errorf("deny from the plan: %+v", d)
	}
	if d := p.CheckTarget("api.anthropic.com", 80, nil); d.Allowed {
		t.Errorf("a credential allows its host on 443 only: %+v", d)
	}
	if len(p.Credentials) != 1 || p.Credentials[0].Header != "X-Api-Key" || p.Credentials[0].Env != "ANTHROPIC_API_KEY" ||
		!strings.HasPrefix(p.Credentials[0].Placeholder, "xmode-placeholder-") {
		t.Errorf("credential: %+v", p.Credentials)
	}
	if addrs, ok := p.resolveOverride("mirror.internal"); !ok || len(addrs) != 2 {
		t.Errorf("resolve: %v %v", addrs, ok)
	}

	_, err = Merge("sbx_1", ModeAllow,
		Source{Name: "agent claude", Credentials: []string{"api.anthropic.com=x-api-key:A"}},
		Source{Name: "--credential", Credentials: []string{"api.anthropic.com=X-API-KEY:B"}})
	if err == nil || !strings.Contains(err.Error(), "agent claude") || !strings.Contains(err.Error(), "--credential") {
		t.Errorf("a credential given twice: %v", err)
	}
	if _, err := Merge("sbx_1", "closed"); err == nil || !strings.Contains(err.Error(), "none, open or allow") {
		t.Errorf("a bad mode: %v", err)
	}
	if _, err := Merge("sbx_1", ModeAllow, Source{Name: "plan build", Deny: []string{"*"}}); err == nil || !strings.Contains(err.Error(), "plan build") {
		t.Errorf("a bad rule's source: %v", err)
	}
}

func TestParseCredential(t *testing.T) {
	c, err := ParseCredential("API.example.com=authorization:/run/secrets/key", "--credential")
	if err != nil || c.Host != "api.example.com" || c.Header != "Authorization" || c.File != "/run/secrets/key" || c.Env != "" {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range []string{
		"api.example.com", "*.example.com=x-api-key:K", "api.example.com=x-api-key", "api.example.com=bad header:K",
		"api.example.com=host:K", "api.example.com=x-api-key:relative/path", "api.example.com=x-api-key:9KEY",
	} {
		if _, err := ParseCredential(bad, "--credential"); err == nil || !strings.Contains(err.Error(), "write e.g.") {
			t.Errorf("ParseCredential(%q): %v", bad, err)
		}
	}
	if a, b := NewPlaceholder(), NewPlaceholder(); a == b || len(a) < 40 {
		t.Errorf("placeholders %q %q", a, b)
	}
}

func TestParseResolve(t *testing.T) {
	rs, err := ParseResolve("Allowed.test=127.0.0.1, v6.test=[::1],allowed.test=127.0.0.3", "XMODE_SANDBOX_RESOLVE")
	if err != nil || len(rs) != 2 || rs[0].Name != "allowed.test" || len(rs[0].Addrs) != 2 || rs[1].Addrs[0].String() != "::1" {
		t.Fatalf("%+v %v", rs, err)
	}
	for _, bad := range []string{"allowed.test", "allowed.test=host", "=1.2.3.4", "bad..name=1.2.3.4"} {
		if _, err := ParseResolve(bad, "XMODE_SANDBOX_RESOLVE"); err == nil || !strings.Contains(err.Error(), "XMODE_SANDBOX_RESOLVE") {
			t.Errorf("ParseResolve(%q): %v", bad, err)
		}
	}
}

// A policy file round-trips, and one whose rule would not parse is refused
// when read.
func TestPolicyFile(t *testing.T) {
	p, err := Merge("sbx_1", ModeAllow,
		Source{Name: "--allow", Allow: []string{"a.example.com", "[2001:db8::/32]:443"}, Deny: []string{"b.example.com"},
			Credentials: []string{"c.example.com=x-token:TOKEN"}, Resolve: []string{"a.example.com=192.0.2.1"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Listen, p.DNS = "127.0.0.1:0", "127.0.0.1:0"
	p.Block = []Block{{netip.MustParsePrefix("172.17.0.1/32"), "gateway", false}}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var q Policy
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(q)
	if string(b) != string(b2) {
		t.Fatalf("round trip:\n%s\n%s", b, b2)
	}
	bad := strings.Replace(string(b), `"b.example.com"`, `"*"`, 1)
	if err := json.Unmarshal([]byte(bad), &q); err == nil || !strings.Contains(err.Error(), "everything") {
		t.Fatalf("a bad rule in a file: %v", err)
	}
	for _, mangle := range []func(string) string{
		func(s string) string { return strings.Replace(s, `"version":1`, `"version":2`, 1) },
		func(s string) string { return strings.Replace(s, `"sandbox":"sbx_1"`, `"sandbox":"../x"`, 1) },
		func(s string) string { return strings.Replace(s, `"listen":"127.0.0.1:0"`, `"listen":"localhost"`, 1) },
		func(s string) string { return strings.Replace(s, `"mode":"allow"`, `"mode":"all"`, 1) },
	} {
		if err := json.Unmarshal([]byte(mangle(string(b))), &q); err == nil {
			t.Errorf("accepted %s", mangle(string(b)))
		}
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"api.example.com", "*.example.com:443", "10.0.0.0/8", "[2001:db8::/32]:443", "::ffff:1.2.3.4",
		"[::1]", "a:b:c", "*", "1.2.3", "xn--bcher-kva.example", "[fe80::1%eth0]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s, "fuzz", false)
		if err != nil {
			var re *RuleError
			if !asRuleError(err, &re) || re.Rule != s || re.Problem == "" {
				t.Fatalf("ParseRule(%q): an error that does not say which rule and what: %v", s, err)
			}
			return
		}
		// What parsed parses again the same (policy files re-read rules).
		r2, err := ParseRule(r.Text, "fuzz", false)
		if err != nil || r2.kind != r.kind || r2.name != r.name || r2.port != r.port || r2.prefix != r.prefix {
			t.Fatalf("ParseRule(%q) again: %+v %v, was %+v", r.Text, r2, err, r)
		}
		switch r.kind {
		case ruleHost, ruleSuffix:
			if checkName(r.name) != "" || r.prefix.IsValid() {
				t.Fatalf("%q: a name rule with a bad name %q", s, r.name)
			}
			if r.kind == ruleSuffix && r.matchName(r.name, r.port) {
				t.Fatalf("%q matches its own apex", s)
			}
		case rulePrefix:
			if !r.prefix.IsValid() || r.prefix != r.prefix.Masked() || r.name != "" {
				t.Fatalf("%q: prefix %v", s, r.prefix)
			}
		default:
			t.Fatalf("%q: no kind", s)
		}
	})
}

func asRuleError(err error, re **RuleError) bool {
	e, ok := err.(*RuleError)
	*re = e
	return ok
}

// FuzzMatch decides random destinations against random rules: no panic,
// deny always wins over the same allow, and a name rule never passes an
// address nor a prefix rule a name.
func FuzzMatch(f *testing.F) {
	f.Add("*.example.com", "a.example.com", uint16(443))
	f.Add("10.0.0.0/8:443", "10.1.2.3", uint16(443))
	f.Add("example.com", "EXAMPLE.com.", uint16(80))
	f.Add("[::1]:80", "::1", uint16(80))
	f.Fuzz(func(t *testing.T, rule, host string, port uint16) {
		r, err := ParseRule(rule, "fuzz", false)
		if err != nil {
			return
		}
		p := Policy{Sandbox: "sbx_f", Mode: ModeAllow, Allow: []Rule{r}}
		d := p.CheckTarget(host, int(port), nil)
		_, isAddr := netip.ParseAddr(strings.Trim(host, "[]"))
		if d.Allowed {
			if isAddr == nil && !r.IsPrefix() {
				t.Fatalf("name rule %q allowed address %q", rule, host)
			}
			if isAddr != nil && r.IsPrefix() {
				t.Fatalf("prefix rule %q allowed name %q", rule, host)
			}
			if d.Rule != r.Text {
				t.Fatalf("allowed by %q, not the rule", d.Rule)
			}
		}
		dr, _ := ParseRule(rule, "fuzz", true)
		p.Deny = []Rule{dr}
		if d := p.CheckTarget(host, int(port), nil); d.Allowed {
			t.Fatalf("deny %q lost to allow %q for %q:%d", rule, rule, host, port)
		}
		p.AllowsName(host)
	})
}
