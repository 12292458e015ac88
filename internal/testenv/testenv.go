// Package testenv is how tests say that this machine lacks something they
// need. Outside CI a test skips, loudly; under CI=true it fails, because CI
// must run every test and a skip there would hide a missing install step.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Skip skips t with the reason, or fails it under CI=true.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (CI=true: this test must run; install or configure what it needs)", msg)
	}
	t.Skip("SKIP: " + msg + " (with CI=true this fails)")
}
