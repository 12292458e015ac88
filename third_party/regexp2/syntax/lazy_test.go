package syntax

import (
	"os"
	"testing"
)

// TestMain checks, before any test uses them, that initialising the
// package built none of its Unicode tables (xmode's patch).
func TestMain(m *testing.M) {
	if unicodeTables.categories != nil || unicodeTables.supportedPropertyAliases != nil {
		println("the Unicode tables were built when the package was initialised")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestUnicodeTablesOnFirstUse: a pattern naming a category, a script, a
// property and an alias still parses and matches once the tables are built
// on demand.
func TestUnicodeTablesOnFirstUse(t *testing.T) {
	for _, p := range []string{`\p{L}`, `\p{Greek}`, `\p{Emoji}`, `\p{Lu}`, `\P{Nd}`, `\p{Word_Break=Hebrew_Letter}`, `\p{wsegspace}`} {
		if _, err := Parse(p, ParseOptions{}); err != nil {
			t.Errorf("Parse(%q): %v", p, err)
		}
	}
	if _, err := Parse(`\p{NoSuchCategory}`, ParseOptions{}); err == nil {
		t.Error(`Parse(\p{NoSuchCategory}) succeeded`)
	}
	if unicodeTables.categories == nil {
		t.Fatal("the tables were not built by a pattern naming a category")
	}
}
