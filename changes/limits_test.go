package changes

import (
	"math"
	"testing"
)

// The bounds on reading a sandbox's objects are docs/change-requests.md's
// ("Hostile packs"): at the default XMODE_CR_MAX_BYTES (100 MiB), 1,056
// MiB one read, 4 times that all the reads of a snapshot, a cache of the
// limit plus 64 MiB; the cache never over 512 MiB, and no bound wraps.
func TestSourceLimitsAsDocumented(t *testing.T) {
	l := sourceLimits(100 << 20)
	if l.Object != 100<<20 || l.Read != 1056<<20 || l.All != 4*1056<<20 || l.Cache != 164<<20 || l.ObjectName != "XMODE_CR_MAX_BYTES" {
		t.Fatalf("at 100 MiB: %+v", l)
	}
	if l := sourceLimits(1 << 40); l.Cache != 512<<20 {
		t.Fatalf("at 1 TiB the cache is %d bytes", l.Cache)
	}
	if l := sourceLimits(math.MaxInt64 / 2); l.Read != math.MaxInt64 || l.All != math.MaxInt64 || l.Cache != 512<<20 {
		t.Fatalf("near the largest limit: %+v", l)
	}
}
