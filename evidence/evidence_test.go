package evidence

import "testing"

func TestStepName(t *testing.T) {
	cases := map[[2]string]string{
		{"", "/usr/bin/go"}: "go",
		{"Unit Tests", "x"}: "unit-tests",
		{"../../etc", "x"}:  "etc",
		{"", ""}:            "step",
		{"...", "x"}:        "step",
		{"a/b", "x"}:        "a-b",
		{"x123456789012345678901234567890123456789012345", "x"}: "x123456789012345678901234567890123456789",
	}
	for in, want := range cases {
		var argv []string
		if in[1] != "" {
			argv = []string{in[1]}
		}
		if got := StepName(in[0], argv); got != want {
			t.Errorf("StepName(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}
