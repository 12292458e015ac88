package hostenv

import (
	"reflect"
	"strings"
	"testing"
)

var environ = []string{
	"HOME=/root", "PATH=/bin", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "TZ=UTC",
	"GOFLAGS=-mod=mod", "AWS_SECRET_ACCESS_KEY=s", "GITHUB_TOKEN=t", "DB_PASSWORD=p",
	"OPENAI_API_KEY=k", "my/token=slash", "MONKEY=banana", "EDITOR=vi",
}

func names(env []string) string {
	var out []string
	for _, kv := range env {
		n, _, _ := strings.Cut(kv, "=")
		out = append(out, n)
	}
	return strings.Join(out, " ")
}

// Each inheritance, the default excludes (a name with '/' included, case
// aside), include past them, exclude over include.
func TestFilter(t *testing.T) {
	for _, c := range []struct {
		policy Policy
		want   string
	}{
		{Policy{Inherit: All}, "HOME PATH LANG LC_ALL TERM TZ GOFLAGS EDITOR"},
		{Policy{Inherit: Core}, "HOME PATH LANG LC_ALL TERM TZ"},
		{Policy{Inherit: None}, ""},
		{Policy{Inherit: None, Include: []string{"goflags", "GITHUB_*"}}, "GOFLAGS GITHUB_TOKEN"},
		{Policy{Inherit: Core, Include: []string{"OPENAI_API_KEY"}, Exclude: []string{"TZ"}}, "HOME PATH LANG LC_ALL TERM OPENAI_API_KEY"},
		{Policy{Inherit: All, Include: []string{"GITHUB_TOKEN"}, Exclude: []string{"GITHUB_*", "LC_?LL"}}, "HOME PATH LANG TERM TZ GOFLAGS EDITOR"},
	} {
		if got := names(c.policy.Filter(environ)); got != c.want {
			t.Errorf("%s: %q, want %q", c.policy, got, c.want)
		}
	}
}

// String and Parse agree; what Parse refuses it says why.
func TestParse(t *testing.T) {
	for _, p := range []Policy{
		{Inherit: All},
		{Inherit: Core, Include: []string{"GOFLAGS", "MY_*"}},
		{Inherit: None, Include: []string{"A"}, Exclude: []string{"B?", "C*"}},
	} {
		got, err := Parse(p.String())
		if err != nil || !reflect.DeepEqual(got, p) {
			t.Errorf("Parse(%q) = %+v, %v", p.String(), got, err)
		}
	}
	for _, bad := range []string{"", "some", "core include=A-B", "core other=A", "all exclude=a/b"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		p, n string
		ok   bool
	}{
		{"*KEY*", "KEY", true}, {"*KEY*", "A_KEY_B", true}, {"*KEY*", "KE", false},
		{"LC_*", "LC_", true}, {"LC_*", "XLC_A", false}, {"A?C", "ABC", true}, {"A?C", "AC", false},
		{"*TOKEN*", "MY/TOKEN", true}, {"**", "", true}, {"*A*B", "XAYAB", true}, {"*A*B", "XAYBA", false},
	} {
		if got := match(c.p, c.n); got != c.ok {
			t.Errorf("match(%q, %q) = %v", c.p, c.n, got)
		}
	}
}

// A session's recorded policy: "" (made before policies) inherits all,
// keys included; a recorded one filters as it says; one that does not
// parse lets nothing through.
func TestRecorded(t *testing.T) {
	env := []string{"PATH=/bin", "OPENAI_API_KEY=k", "GOFLAGS=-x"}
	for _, c := range []struct {
		r       Recorded
		key     bool
		environ []string
	}{
		{"", true, env},
		{"all", false, []string{"PATH=/bin", "GOFLAGS=-x"}},
		{"core include=OPENAI_API_KEY", true, []string{"PATH=/bin", "OPENAI_API_KEY=k"}},
		{"none", false, []string{}},
	} {
		if got := c.r.Passes("OPENAI_API_KEY"); got != c.key {
			t.Errorf("Recorded(%q).Passes(OPENAI_API_KEY) = %v", c.r, got)
		}
		if got, err := c.r.Filter(env); err != nil || !reflect.DeepEqual(got, c.environ) {
			t.Errorf("Recorded(%q).Filter = %q, %v; want %q", c.r, got, err, c.environ)
		}
	}
	if Recorded("some").Passes("PATH") {
		t.Error("a policy that does not parse let PATH through")
	}
	if _, err := Recorded("some").Filter(env); err == nil {
		t.Error("a policy that does not parse filtered")
	}
}
