package gitread

import (
	"strings"
	"unicode/utf8"
)

// Git refuses to track some paths (its verify_path, applied by `git add`,
// `git apply --index`, checkout and read-tree): any component that is
// ".", ".." or, in any case, ".git" — and the names Windows (NTFS) and
// macOS (HFS+) would take for ".git". A path git refuses is left out of a
// snapshot and listed in its skipped paths, since no change request that
// holds it could be applied (docs/change-requests.md, "What is in the
// change"). The rules are those of git with core.protectNTFS (on by
// default everywhere) and core.protectHFS (on by default on macOS) both
// on, so a package applies wherever it is reviewed.

// Why git refuses a path: what Refuses returns.
const (
	refusedDot     = "git refuses this path: it has a component . or .."
	refusedDotGit  = "git refuses this path: .git (in any case) is git's own directory"
	refusedNTFS    = "git refuses this path: Windows (NTFS) reads it as .git (git~1, or .git with trailing dots or spaces or a :stream)"
	refusedHFS     = "git refuses this path: macOS (HFS+) reads it as .git (it ignores the invisible characters in its name)"
	refusedModules = "git refuses this path: a symlink named .gitmodules (or what Windows or macOS reads as .gitmodules)"
)

// hfsIgnored are the code points HFS+ leaves out of a name when it
// compares names, so ".g\u200cit" is ".git" there (git's list).
var hfsIgnored = map[rune]bool{
	0x200c: true, 0x200d: true, 0x200e: true, 0x200f: true, // zero width (non-)joiner, LTR and RTL marks
	0x202a: true, 0x202b: true, 0x202c: true, 0x202d: true, 0x202e: true, // directional embedding and override
	0x206a: true, 0x206b: true, 0x206c: true, 0x206d: true, 0x206e: true, 0x206f: true, // deprecated format characters
	0xfeff: true, // zero width no-break space
}

// ntfsDotGit are the names NTFS resolves to ".git": the name itself and
// its 8.3 short name ("git~1": git makes sure .git is the first entry of
// its directory, so it gets ~1). Either may be followed by dots and
// spaces (NTFS drops them) and ends at a separator or at a ':' (an
// alternate data stream of .git).
var ntfsDotGit = []string{".git", "git~1"}

// ntfsDotGitmodules is how NTFS may spell ".gitmodules": the name with
// trailing dots and spaces or a :stream, its short names "gitmod~1" to
// "gitmod~4", and the hashed short names NTFS falls back to, which begin
// with these six characters (or fewer, then "~" and digits).
const (
	dotGitmodules       = "gitmodules"
	gitmodulesShortHash = "gi7eba"
)

// Refuses says why git refuses to track path (a relative path, '/'
// between components; link: a symlink), or "" when it does not.
func Refuses(path string, link bool) string {
	for rest := path; ; {
		if why := refusedComponent(rest, link); why != "" {
			return why
		}
		comp, next, more := strings.Cut(rest, "/")
		// git on Linux takes '\' for a plain character, but NTFS takes it
		// for a separator: what follows one (past the first character)
		// must not name .git either.
		for i := 1; i < len(comp); i++ {
			if comp[i] != '\\' {
				continue
			}
			if isNTFSDotGit(rest[i+1:]) {
				return refusedNTFS
			}
			if link && isNTFSDotGitmodules(rest[i+1:]) {
				return refusedModules
			}
		}
		if !more {
			return ""
		}
		rest = next
	}
}

// refusedComponent checks the component rest begins with (rest runs to the
// end of the path).
func refusedComponent(rest string, link bool) string {
	if rest == "" || rest[0] == '/' {
		return refusedDot // an empty component
	}
	if rest[0] == '.' {
		r := rest[1:]
		switch {
		case r == "" || r[0] == '/' || (r[0] == '.' && (len(r) == 1 || r[1] == '/')):
			return refusedDot
		case len(r) >= 3 && asciiEqualFold(r[:3], "git"):
			if len(r) == 3 || r[3] == '/' {
				return refusedDotGit
			}
			if link {
				m := r[3:]
				if len(m) >= 7 && asciiEqualFold(m[:7], "modules") && (len(m) == 7 || m[7] == '/') {
					return refusedModules
				}
			}
		}
	}
	if isNTFSDotGit(rest) {
		return refusedNTFS
	}
	if link && isNTFSDotGitmodules(rest) {
		return refusedModules
	}
	if isHFSDot(rest, "git") {
		return refusedHFS
	}
	if link && isHFSDot(rest, dotGitmodules) {
		return refusedModules
	}
	return ""
}

// isNTFSDotGit reports a name NTFS resolves to .git at the start of s.
func isNTFSDotGit(s string) bool {
	for _, name := range ntfsDotGit {
		if len(s) >= len(name) && asciiEqualFold(s[:len(name)], name) {
			for _, c := range []byte(s[len(name):]) {
				switch c {
				case '/', '\\', ':':
					return true
				case '.', ' ':
					continue
				}
				return false
			}
			return true
		}
	}
	return false
}

// isNTFSDotGitmodules reports a name NTFS resolves to .gitmodules: s is
// the rest of the path, and the name must end it (or end at a ':').
func isNTFSDotGitmodules(s string) bool {
	name, short := dotGitmodules, gitmodulesShortHash
	if len(s) > len(name) && s[0] == '.' && asciiEqualFold(s[1:1+len(name)], name) {
		return onlyDotsAndSpaces(s[1+len(name):])
	}
	if len(s) >= 8 && asciiEqualFold(s[:6], name[:6]) && s[6] == '~' && s[7] >= '1' && s[7] <= '4' {
		return onlyDotsAndSpaces(s[8:])
	}
	// The fallback short name: up to six characters of the hash prefix,
	// '~', then digits, eight characters in all.
	i, tilde := 0, false
	for ; i < 8; i++ {
		if i >= len(s) {
			return false
		}
		c := s[i]
		switch {
		case tilde:
			if c < '0' || c > '9' {
				return false
			}
		case c == '~':
			i++
			if i >= len(s) || s[i] < '1' || s[i] > '9' {
				return false
			}
			tilde = true
		case i >= 6 || c >= 0x80 || lowerASCII(c) != short[i]:
			return false
		}
	}
	return onlyDotsAndSpaces(s[i:])
}

// onlyDotsAndSpaces reports s made of dots and spaces up to its end or a
// ':' (NTFS drops trailing dots and spaces; a ':' starts a stream name).
func onlyDotsAndSpaces(s string) bool {
	for _, c := range []byte(s) {
		if c == ':' {
			return true
		}
		if c != '.' && c != ' ' {
			return false
		}
	}
	return true
}

// isHFSDot reports "." + needle, in any case, with any of hfsIgnored
// anywhere in it, at the start of s and ending at its end or a '/'.
func isHFSDot(s, needle string) bool {
	if nextHFS(&s) != '.' {
		return false
	}
	for i := 0; i < len(needle); i++ {
		c := nextHFS(&s)
		if c > 127 || lowerASCII(byte(c)) != needle[i] {
			return false
		}
	}
	c := nextHFS(&s)
	return c == 0 || c == '/'
}

// nextHFS takes the next code point of *s that HFS+ does not ignore; 0 at
// the end of s, or at bytes that are not UTF-8 (which end s, as in git).
func nextHFS(s *string) rune {
	for {
		if *s == "" {
			return 0
		}
		r, n := utf8.DecodeRuneInString(*s)
		if (r == utf8.RuneError && n == 1) || r == 0xfffe || r == 0xffff {
			*s = ""
			return 0
		}
		*s = (*s)[n:]
		if !hfsIgnored[r] {
			return r
		}
	}
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// asciiEqualFold compares ASCII case-insensitively only (strings.EqualFold
// would take the Kelvin sign for a 'k', which git does not).
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}
