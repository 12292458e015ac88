package cmd

import (
	"context"
	"io"
	"testing"
)

// Every command line builds the command tree before it runs, so what that
// costs, every command pays: `xmode --version` and a command's help stay
// within a budget of allocations. Registering the completion functions on
// every flag (only cobra's completion request needs them) took 2,090, and
// building every command for every line 641.
func TestStartupAllocationBudget(t *testing.T) {
	const budget = 500
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
