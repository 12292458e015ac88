package cmd

import (
	"context"
	"io"
	"testing"
)

// Every command line builds the command tree before it runs, so what that
// costs, every command pays: `xmode --version` stays within a budget of
// allocations. Registering the completion functions on every flag took
// three times the budget; only cobra's completion request needs them.
func TestStartupAllocationBudget(t *testing.T) {
	const budget = 1000
	for _, args := range [][]string{{"--version"}, {"sandbox", "exec", "--help"}} {
		n := testing.AllocsPerRun(10, func() {
			a := &App{Out: io.Discard, Err: io.Discard, Env: func(string) string { return "" }}
			if code := a.Run(context.Background(), args); code != 0 {
				t.Fatalf("xmode %v: exit %d", args, code)
			}
		})
		t.Logf("xmode %v: %.0f allocations", args, n)
		if n > budget {
			t.Errorf("xmode %v allocated %.0f times before doing anything, over the budget of %d", args, n, budget)
		}
	}
}
