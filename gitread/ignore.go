package gitread

import (
	"bytes"
	"strings"
)

// IgnoreRules are a repository's ignore rules as `git status` applies
// them (git's dir.c): pushed in the order git reads them —
// $GIT_DIR/info/exclude first, then each .gitignore from the root down —
// so that a deeper file and a later line win. A caller walking a tree
// never asks about a path under an ignored directory (git does not look
// inside one), so a negation cannot re-include it. Which files are pushed
// is the caller's choice (xmode reads no core.excludesFile: a package must
// not depend on who built it).
type IgnoreRules struct {
	patterns []IgnorePattern
}

// IgnorePattern is one line of an ignore file.
type IgnorePattern struct {
	pattern   string
	base      string // directory of the file it came from: "" or "a/b/"
	negative  bool
	mustBeDir bool // trailing '/'
	noDir     bool // no '/' inside: matches the name at any depth
}

// ParseIgnore reads one ignore file whose patterns apply below base ("" or
// "dir/").
func ParseIgnore(data []byte, base string) []IgnorePattern {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var ps []IgnorePattern
	for _, line := range bytes.Split(data, []byte("\n")) {
		l := strings.TrimSuffix(string(line), "\r")
		if l == "" || l[0] == '#' {
			continue
		}
		l = trimTrailingSpaces(l)
		p := IgnorePattern{base: base}
		if strings.HasPrefix(l, "!") {
			p.negative = true
			l = l[1:]
		}
		if strings.HasSuffix(l, "/") {
			p.mustBeDir = true
			l = l[:len(l)-1]
		}
		p.noDir = !strings.Contains(l, "/")
		if !p.noDir {
			l = strings.TrimPrefix(l, "/")
		}
		if l == "" {
			continue
		}
		p.pattern = l
		ps = append(ps, p)
	}
	return ps
}

// trimTrailingSpaces drops trailing spaces not escaped with a backslash.
func trimTrailingSpaces(l string) string {
	last := -1
	for i := 0; i < len(l); i++ {
		switch l[i] {
		case ' ':
			if last < 0 {
				last = i
			}
		case '\\':
			i++
			if i >= len(l) {
				return l
			}
			last = -1
		default:
			last = -1
		}
	}
	if last >= 0 {
		return l[:last]
	}
	return l
}

// match reports whether the pattern matches path (relative to the
// repository root, '/'-separated).
func (p *IgnorePattern) match(path, name string, isDir bool) bool {
	if p.mustBeDir && !isDir {
		return false
	}
	if p.noDir {
		return Wildmatch(p.pattern, name, false)
	}
	rel, ok := strings.CutPrefix(path, p.base)
	if !ok {
		return false
	}
	return Wildmatch(p.pattern, rel, true)
}

// Push adds the patterns of one file, which then win over those before;
// it returns what Pop takes to drop them again.
func (r *IgnoreRules) Push(ps []IgnorePattern) int {
	n := len(r.patterns)
	r.patterns = append(r.patterns, ps...)
	return n
}

// Pop drops the patterns pushed since Push returned n.
func (r *IgnoreRules) Pop(n int) { r.patterns = r.patterns[:n] }

// Clone is a copy that pushes and pops on its own.
func (r *IgnoreRules) Clone() IgnoreRules {
	return IgnoreRules{patterns: append([]IgnorePattern(nil), r.patterns...)}
}

// Ignored reports whether path (relative to the repository root,
// '/'-separated), whose last component is name, is ignored: the last
// pattern that matches decides.
func (r *IgnoreRules) Ignored(path, name string, isDir bool) bool {
	for i := len(r.patterns) - 1; i >= 0; i-- {
		if r.patterns[i].match(path, name, isDir) {
			return !r.patterns[i].negative
		}
	}
	return false
}
