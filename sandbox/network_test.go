package sandbox

import (
	"slices"
	"strings"
	"testing"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/store"
)

// A policy survives the session's record: every rule with its source, a
// credential with its placeholder, a name with all its addresses; and a
// change keeps what it does not touch, names what it adds, and says what
// widens.
func TestPolicyRecordAndChange(t *testing.T) {
	pol, err := egress.Merge("sbx_test0001", egress.ModeAllow,
		egress.Source{Name: "--credential", Credentials: []string{"api.example.com=x-api-key:EXAMPLE_KEY"}},
		egress.Source{Name: "--allow", Allow: []string{"pypi.org", "*.pythonhosted.org"}},
		egress.Source{Name: "--deny", Deny: []string{"pastebin.example"}},
		egress.Source{Name: "XMODE_SANDBOX_RESOLVE", Resolve: []string{"mirror.test=10.1.2.3,mirror.test=10.1.2.4"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := RecordPolicy(&pol)
	back, err := PolicyOf("sbx_test0001", rec)
	if err != nil {
		t.Fatal(err)
	}
	if again := RecordPolicy(&back); !samePolicy(rec, again) {
		t.Fatalf("recorded %+v\nread back %+v", rec, again)
	}
	if len(back.Resolve) != 1 || len(back.Resolve[0].Addrs) != 2 || back.Credentials[0].Placeholder != pol.Credentials[0].Placeholder {
		t.Fatalf("read back: %+v", back)
	}

	next, err := applyChange(rec, NetworkChange{Allow: []string{"files.example.com:443"}, Remove: []string{"PASTEBIN.example"}, Source: "sandbox network"})
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Deny) != 0 || next.Allow[len(next.Allow)-1] != (store.NetworkRule{Rule: "files.example.com:443", Source: "sandbox network"}) || len(rec.Deny) != 1 {
		t.Fatalf("changed: %+v (the record before: %+v)", next, rec)
	}
	wider := widening(rec, next)
	if !slices.Contains(wider, "allow files.example.com:443") || !slices.Contains(wider, "no longer deny pastebin.example") {
		t.Errorf("widening: %q", wider)
	}
	narrower, _ := applyChange(rec, NetworkChange{Deny: []string{"pypi.org"}, Remove: []string{"*.pythonhosted.org"}, Mode: "none", Source: "network_policy"})
	if w := widening(rec, narrower); len(w) != 0 {
		t.Errorf("a narrowing change widens: %q", w)
	}
	if w := widening(rec, &store.NetworkPolicy{Mode: "open", Allow: rec.Allow, Deny: rec.Deny, Credentials: rec.Credentials, Resolve: rec.Resolve}); len(w) != 1 || w[0] != "mode allow to open" {
		t.Errorf("allow to open: %q", w)
	}
	for _, c := range []NetworkChange{
		{Allow: []string{"*.com"}, Source: "s"},
		{Remove: []string{"not.there"}, Source: "s"},
		{Mode: "wide", Source: "s"},
		{Credentials: []string{"api.example.com=x-api-key:OTHER"}, Source: "s"},
	} {
		if _, err := applyChange(rec, c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	// A step's rules go, and only they, when the step ends.
	withStep, _ := applyChange(rec, NetworkChange{Allow: []string{"proxy.golang.org"}, Source: "plan step build"})
	after, _ := applyChange(withStep, NetworkChange{RemoveSource: "plan step build", Source: "plan step build"})
	if !samePolicy(after, rec) {
		t.Errorf("after the step: %+v", after)
	}
	w := NetworkWanted{Source: "agent claude", Allow: []string{"PyPI.org", "api.anthropic.com"}, Credentials: []string{"api.example.com=X-API-KEY:OTHER"}}
	if m := w.Missing(rec); strings.Join(m.Allow, ",") != "api.anthropic.com" || len(m.Credentials) != 0 {
		t.Errorf("missing: %+v", m)
	}
}
