package reference

import (
	"os"
	"testing"
)

// TestMain checks, before any test uses them, that importing the package
// compiled none of its expressions (xmode's patch).
func TestMain(m *testing.M) {
	for name, r := range map[string]*Regexp{
		"DigestRegexp": DigestRegexp, "DomainRegexp": DomainRegexp, "IdentifierRegexp": IdentifierRegexp,
		"NameRegexp": NameRegexp, "ReferenceRegexp": ReferenceRegexp, "TagRegexp": TagRegexp,
		"anchoredTagRegexp": anchoredTagRegexp, "anchoredDigestRegexp": anchoredDigestRegexp,
		"anchoredNameRegexp": anchoredNameRegexp, "anchoredIdentifierRegexp": anchoredIdentifierRegexp,
	} {
		if r.re != nil {
			println(name, "was compiled when the package was initialised")
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
