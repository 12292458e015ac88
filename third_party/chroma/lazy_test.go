package chroma

import (
	"os"
	"testing"
)

// TestMain checks, before any test uses them, that initialising the
// package built none of its maps (xmode's patch).
func TestMain(m *testing.M) {
	if lazyMaps.tokenTypeMap != nil || lazyMaps.emitterTemplates != nil {
		println("chroma's maps were built when the package was initialised")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestLazyMaps: what reads the maps still works once they are built on
// demand.
func TestLazyMaps(t *testing.T) {
	if KeywordType.String() != "KeywordType" || !KeywordType.IsATokenType() || TokenType(12345).IsATokenType() {
		t.Error("token type names are wrong")
	}
	if tt, err := TokenTypeString("keywordtype"); err != nil || tt != KeywordType {
		t.Errorf("TokenTypeString: %v, %v", tt, err)
	}
	if len(emitterTemplates()) != 5 || len(mutatorTemplates()) != 5 {
		t.Errorf("%d emitter and %d mutator templates", len(emitterTemplates()), len(mutatorTemplates()))
	}
}
