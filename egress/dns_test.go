package egress

import (
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func ask(t *testing.T, addr, name string, qtype uint16, network string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s over %s: %v", name, dns.TypeToString[qtype], network, err)
	}
	return r
}

func TestResolverAnswersAllowedNamesOnly(t *testing.T) {
	f := newFixture(t, nil)
	for _, network := range []string{"udp", "tcp"} {
		r := ask(t, f.l.DNS, "Allowed.Test", dns.TypeA, network)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "127.0.0.1" || r.Answer[0].Header().Ttl != dnsTTL {
			t.Fatalf("A allowed.test over %s: %v", network, r)
		}
	}
	if r := ask(t, f.l.DNS, "allowed.test", dns.TypeAAAA, "udp"); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("AAAA allowed.test (it has no IPv6 address): %v", r)
	}
	for _, c := range []struct {
		name  string
		qtype uint16
		rcode int
		says  string
	}{
		{"denied.test", dns.TypeA, dns.RcodeNameError, "no allow rule names denied.test"},
		{"x.allowed.test", dns.TypeA, dns.RcodeNameError, "no allow rule"},
		{"meta.test", dns.TypeA, dns.RcodeNameError, "169.254.169.254 is blocked"},
		{"lo2.test", dns.TypeA, dns.RcodeNameError, "loopback"},
		// No tunnelling: other types of an allowed name get nothing.
		{"allowed.test", dns.TypeTXT, dns.RcodeSuccess, "only A and AAAA"},
		{"allowed.test", dns.TypeMX, dns.RcodeSuccess, "only A and AAAA"},
		{strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + ".allowed.test", dns.TypeTXT, dns.RcodeNameError, "no allow rule"},
	} {
		r := ask(t, f.l.DNS, c.name, c.qtype, "udp")
		if r.Rcode != c.rcode || len(r.Answer) != 0 {
			t.Errorf("%s %s: %v", c.name, dns.TypeToString[c.qtype], r)
		}
		waitRecord(t, f.log, c.name+" "+dns.TypeToString[c.qtype], func(rec Record) bool {
			return rec.Kind == "dns" && rec.Host == c.name && rec.QType == dns.TypeToString[c.qtype] && rec.Verdict == Denied && strings.Contains(rec.Reason, c.says)
		})
	}
	rec := waitRecord(t, f.log, "allowed.test A", func(r Record) bool { return r.Kind == "dns" && r.Host == "allowed.test" && r.QType == "A" })
	if rec.Verdict != Allowed || len(rec.Answers) != 1 || rec.Answers[0] != "127.0.0.1" || rec.Rule != "allowed.test" {
		t.Fatalf("record: %+v", rec)
	}
}

func TestResolverRate(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.Close()
	srv, err := NewServer(Options{Dir: t.TempDir(), Config: Config{ResolveOnly: true, DNSRate: 0.001, DNSBurst: 3}, Getenv: func(k string) string { return f.env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	l, err := srv.Apply(f.p)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for range 10 {
		if r := ask(t, l.DNS, "allowed.test", dns.TypeA, "udp"); r.Rcode == dns.RcodeRefused {
			refused++
		}
	}
	if refused != 7 {
		t.Fatalf("%d of 10 questions refused at a burst of 3", refused)
	}
	srv.Close()
	var answered, limited int64
	for _, r := range records(t, LogPath(srv.opts.Dir, f.p.Sandbox)) {
		switch {
		case r.Kind == "dns" && r.Verdict == Allowed:
			answered++
		case r.Kind == "dns" && r.Rule == "rate":
			limited += r.Count
		}
	}
	if answered != 3 || limited != 7 {
		t.Fatalf("%d answers and %d refusals logged, want 3 and a count of 7", answered, limited)
	}
}
