package config

import (
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"time"
)

// ParseDuration parses a positive Go duration ("90s", "15m", "2h").
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		if strings.Contains(err.Error(), "invalid duration") && tooLong(strings.TrimSpace(s)) {
			return 0, fmt.Errorf("%q is too long: durations go up to about 2562047h", s)
		}
		return 0, fmt.Errorf("%q is not a duration: use Go syntax such as 90s, 15m or 2h", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q must be longer than zero", s)
	}
	return d, nil
}

// tooLong reports a well-formed duration too large for time.Duration
// (time.ParseDuration calls both "invalid").
func tooLong(s string) bool {
	s = strings.TrimPrefix(s, "+")
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r == '.' || strings.ContainsRune("nsuµmh", r)) {
			return false
		}
	}
	_, err := time.ParseDuration("1" + strings.TrimLeft(s, "0123456789."))
	return err == nil && s[0] >= '0' && s[0] <= '9'
}

var sizeUnits = map[string]int64{
	"":  1,
	"b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// ParseSize parses a size in docker's units: a number with an optional
// binary unit, case-insensitive ("512m", "4g", "1.5GiB", "1048576").
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], t[i:]
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("%q is not a size: use a number with an optional unit b, k, m, g or t (docker's units), e.g. 512m or 4g", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("%q is not a size: use a number with an optional unit b, k, m, g or t (docker's units), e.g. 512m or 4g", s)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v), nil
}

// ParseBool accepts the usual spellings of on and off.
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off", "":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean: use 1 or 0", s)
}

// ParseRepoPatterns reads a comma-separated list of repository patterns:
// each an absolute path or a URL (scheme://host/path, or git's
// user@host:path), with path.Match's wildcards (* and ? within a
// component, [...]). What a pattern matches is mcpserver's.
func ParseRepoPatterns(v string) ([]string, error) {
	var pats []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("%q is not a pattern: %v (wildcards are path.Match's: *, ?, [...])", p, err)
		}
		if !strings.HasPrefix(p, "/") && !strings.Contains(p, ":") {
			return nil, fmt.Errorf("%q is neither an absolute path nor a URL: give /path/to/repos or https://host/org/*, comma-separated", p)
		}
		pats = append(pats, p)
	}
	return pats, nil
}

// ParseEnvPatterns reads a comma-separated list of variable names and
// patterns of names (path.Match's wildcards: GITHUB_*, *_TOKEN).
func ParseEnvPatterns(v string) ([]string, error) {
	var pats []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		_, err := path.Match(p, "")
		if err != nil || strings.Trim(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_*?[]^-") != "" {
			return nil, fmt.Errorf("%q is not a variable name or pattern: use letters, digits, _ and the wildcards * ? [...], comma-separated", p)
		}
		pats = append(pats, p)
	}
	return pats, nil
}
