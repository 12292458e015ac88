// Package udiff reads the parts of a unified diff as git writes it that
// more than one reader needs — a hunk's header, the paths of a "diff --git"
// line, git's quoting of a path — so that the UI's diff pages and the
// comments on a change request's lines read a patch alike.
package udiff

import (
	"errors"
	"strconv"
	"strings"
)

// HunkHeader reads "@@ -a[,b] +c[,d] @@ section".
func HunkHeader(s string) (a, b, c, d int, section string, ok bool) {
	rest, found := strings.CutPrefix(s, "@@ -")
	if !found {
		return
	}
	i := strings.Index(rest, " @@")
	if i < 0 {
		return
	}
	ranges, section := rest[:i], rest[i+3:]
	oldR, newR, found := strings.Cut(ranges, " +")
	if !found {
		return
	}
	var err1, err2 error
	a, b, err1 = hunkRange(oldR)
	c, d, err2 = hunkRange(newR)
	if err1 != nil || err2 != nil || b > 1<<30 || d > 1<<30 {
		return
	}
	return a, b, c, d, section, true
}

func hunkRange(s string) (start, n int, err error) {
	first, count, has := strings.Cut(s, ",")
	if start, err = strconv.Atoi(first); err != nil || start < 0 {
		return 0, 0, errors.New("bad range")
	}
	n = 1
	if has {
		if n, err = strconv.Atoi(count); err != nil || n < 0 {
			return 0, 0, errors.New("bad range")
		}
	}
	return start, n, nil
}

// HeaderPaths reads the paths of "diff --git a/X b/Y" where it can: both
// quoted, or the same unquoted path on both sides (a mode change, a binary
// file); "" where it cannot tell (spaces, a rename: its own lines say).
func HeaderPaths(line string) (string, string) {
	rest := strings.TrimPrefix(line, "diff --git ")
	if strings.HasPrefix(rest, `"`) {
		a, tail, ok := cutQuoted(rest)
		if !ok {
			return "", ""
		}
		b := strings.TrimPrefix(tail, " ")
		return StripPrefix(a, "a/"), StripPrefix(Unquote(b), "b/")
	}
	if n := len(rest); n%2 == 1 && strings.HasPrefix(rest, "a/") {
		half := (n - 1) / 2
		a, b := rest[:half], rest[half+1:]
		if rest[half] == ' ' && strings.HasPrefix(b, "b/") && a[2:] == b[2:] {
			return a[2:], b[2:]
		}
	}
	return "", ""
}

// StripPrefix is a ---/+++ path without its a/ or b/ prefix; "" for
// /dev/null.
func StripPrefix(p, prefix string) string {
	if p == "/dev/null" {
		return ""
	}
	return strings.TrimPrefix(p, prefix)
}

// Unquote undoes git's quoting of a path ("a\tb", octal bytes).
func Unquote(s string) string {
	if !strings.HasPrefix(s, `"`) {
		return s
	}
	q, _, ok := cutQuoted(s)
	if !ok {
		return s
	}
	return q
}

// cutQuoted reads the C-quoted string s starts with and returns it
// unquoted, with what follows it.
func cutQuoted(s string) (string, string, bool) {
	var b []byte
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return string(b), s[i+1:], true
		case c != '\\':
			b = append(b, c)
		case i+1 >= len(s):
			return "", "", false
		default:
			i++
			switch e := s[i]; e {
			case 'a':
				b = append(b, '\a')
			case 'b':
				b = append(b, '\b')
			case 't':
				b = append(b, '\t')
			case 'n':
				b = append(b, '\n')
			case 'v':
				b = append(b, '\v')
			case 'f':
				b = append(b, '\f')
			case 'r':
				b = append(b, '\r')
			case '0', '1', '2', '3':
				if i+2 >= len(s) {
					return "", "", false
				}
				v, err := strconv.ParseUint(s[i:i+3], 8, 8)
				if err != nil {
					return "", "", false
				}
				b = append(b, byte(v))
				i += 2
			default:
				b = append(b, e)
			}
		}
	}
	return "", "", false
}
