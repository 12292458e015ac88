package jsonschema

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails if initialising the package built what it builds on first
// use (xmode's patch: see schemaFields).
func TestMain(m *testing.M) {
	if schemaFieldsBuilt.Load() {
		fmt.Fprintln(os.Stderr, "initialising jsonschema built schemaFields: it is built on first use")
		os.Exit(1)
	}
	os.Exit(m.Run())
}
