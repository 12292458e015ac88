package loop

import (
	"testing"
)

func TestTitle(t *testing.T) {
	if got := title("  Fix the flaky test\nin detail"); got != "Fix the flaky test" {
		t.Fatal(got)
	}
	long := "x"
	for len(long) < 100 {
		long += "y"
	}
	if r := []rune(title(long)); len(r) != 72 || r[71] != '…' {
		t.Fatalf("long title: %q", string(r))
	}
}
