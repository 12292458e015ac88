package evidence

import (
	"strings"
	"testing"

	"github.com/xmode/xmode/fail"
)

// A step without --name is named after its command's words, as CI systems
// name a step after its command line; the name is always a safe directory
// name and never a number.
func TestStepNameFromTheCommand(t *testing.T) {
	cases := []struct {
		argv []string
		want string
	}{
		{[]string{"make", "test"}, "make-test"},
		{[]string{"/usr/bin/go", "test", "./...", "-run", "TestX", "-count=1"}, "go-test-run-TestX-count-1"},
		{[]string{"sh", "-c", "echo hi; exit 3"}, "sh-c-echo-hi-exit-3"},
		{[]string{"true"}, "true"},
		{[]string{"../../etc/passwd"}, "passwd"},
		{[]string{"echo", "***"}, "echo"},
		{[]string{"python3", "-m", "pytest", "tests/unit/test_very_long_module_name.py", "-x"}, "python3-m-pytest-tests-unit"},
		{[]string{"x123456789012345678901234567890123456789012345"}, "x123456789012345678901234567890123456789"},
		{[]string{"./.hidden."}, "hidden"},
		{[]string{"123", "45"}, "123-45"},
		{[]string{"/bin/42"}, "step-42"},
		{[]string{"***"}, "step"},
		{nil, "step"},
	}
	for _, c := range cases {
		got, err := StepName("", c.argv)
		if err != nil || got != c.want {
			t.Errorf("StepName(%q) = %q, %v; want %q", c.argv, got, err, c.want)
		}
		if !dirName(got) || CheckName(got) != nil {
			t.Errorf("StepName(%q) = %q is not a valid name", c.argv, got)
		}
	}
}

// A name given is kept as given, case included; one that is not a name is
// a usage error saying what a name is.
func TestStepNameGiven(t *testing.T) {
	for _, ok := range []string{"Upper", "unit_tests", "v1.2", "a", "Build-2", strings.Repeat("x", MaxNameLen)} {
		if got, err := StepName(ok, []string{"make"}); err != nil || got != ok {
			t.Errorf("StepName(%q) = %q, %v; want it as given", ok, got, err)
		}
	}
	for _, bad := range []string{"Unit Tests", "../../etc", "a/b", "-x", ".x", "_x", "3", "007", "é", strings.Repeat("x", MaxNameLen+1)} {
		_, err := StepName(bad, []string{"make"})
		if err == nil || fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "is not a step name") {
			t.Errorf("StepName(%q): %v, want a usage error", bad, err)
		}
	}
}
