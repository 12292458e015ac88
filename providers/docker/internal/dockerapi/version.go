package dockerapi

import (
	"strconv"
	"strings"
)

// compareVersions compares API versions ("1.41" < "1.45" < "1.100"):
// negative, zero or positive as a is older, the same or newer than b. A
// part that is not a number counts as 0.
func compareVersions(a, b string) int {
	as, bs := strings.Split(strings.TrimPrefix(a, "v"), "."), strings.Split(strings.TrimPrefix(b, "v"), ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// minVersion is the older of two API versions.
func minVersion(a, b string) string {
	if compareVersions(a, b) < 0 {
		return a
	}
	return b
}

// VersionAtLeast reports whether API version v is at least min, for
// callers keying behaviour on the negotiated version.
func VersionAtLeast(v, min string) bool { return compareVersions(v, min) >= 0 }
