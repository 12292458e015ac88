package digest

import (
	"os"
	"testing"
)

// TestMain checks, before any test uses them, that importing the package
// compiled none of its expressions (xmode's patch).
func TestMain(m *testing.M) {
	rs := map[string]*Regexp{"DigestRegexp": DigestRegexp, "DigestRegexpAnchored": DigestRegexpAnchored}
	for alg, r := range anchoredEncodedRegexps {
		rs[string(alg)] = r
	}
	for name, r := range rs {
		if r.re != nil {
			println(name, "was compiled when the package was initialised")
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
