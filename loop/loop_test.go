package loop

import (
	"context"
	"testing"

	"github.com/xmode/xmode/store"
)

// decisions answers as issue 12's review store will: the latest decision
// on each change request.
type decisions map[string]string

func (d decisions) Decision(_ context.Context, cr string) (string, error) { return d[cr], nil }

func TestAReviewMovesTheRunsStatus(t *testing.T) {
	rev := decisions{"cr_a": "approved", "cr_b": "rejected", "cr_c": "open"}
	for _, c := range []struct{ status, cr, want string }{
		{store.RunReview, "cr_a", store.RunApproved},
		{store.RunReview, "cr_b", store.RunRejected},
		{store.RunReview, "cr_c", store.RunReview},
		{store.RunReview, "", store.RunReview},
		{store.RunFailed, "cr_a", store.RunFailed}, // a failed loop stays failed
		{store.RunRunning, "cr_a", store.RunRunning},
	} {
		got, err := Status(context.Background(), &store.LoopRun{Status: c.status, CR: c.cr}, rev)
		if err != nil || got != c.want {
			t.Errorf("%s with %s: %q, %v; want %q", c.status, c.cr, got, err, c.want)
		}
	}
}

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
