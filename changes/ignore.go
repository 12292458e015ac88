package changes

import (
	"bytes"
	"strings"
)

// ignoreRules are the repository's ignore rules as `git status` applies
// them (git's dir.c): $GIT_DIR/info/exclude first, then each .gitignore
// from the root down; a deeper file and a later line win. The walker never
// asks about a path under an ignored directory (git does not look inside
// one), so a negation cannot re-include it. The user's core.excludesFile
// is not read: a package must not depend on who built it.
type ignoreRules struct {
	patterns []ignorePattern
}

type ignorePattern struct {
	pattern   string
	base      string // directory of the file it came from: "" or "a/b/"
	negative  bool
	mustBeDir bool // trailing '/'
	noDir     bool // no '/' inside: matches the name at any depth
}

// parseIgnore reads one ignore file whose patterns apply below base ("" or
// "dir/").
func parseIgnore(data []byte, base string) []ignorePattern {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var ps []ignorePattern
	for _, line := range bytes.Split(data, []byte("\n")) {
		l := strings.TrimSuffix(string(line), "\r")
		if l == "" || l[0] == '#' {
			continue
		}
		l = trimTrailingSpaces(l)
		p := ignorePattern{base: base}
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
func (p *ignorePattern) match(path, name string, isDir bool) bool {
	if p.mustBeDir && !isDir {
		return false
	}
	if p.noDir {
		return wildmatch(p.pattern, name, false)
	}
	rel, ok := strings.CutPrefix(path, p.base)
	if !ok {
		return false
	}
	return wildmatch(p.pattern, rel, true)
}

func (r *ignoreRules) push(ps []ignorePattern) int {
	n := len(r.patterns)
	r.patterns = append(r.patterns, ps...)
	return n
}

func (r *ignoreRules) pop(n int) { r.patterns = r.patterns[:n] }

// ignored reports whether path, whose last component is name, is ignored:
// the last pattern that matches decides.
func (r *ignoreRules) ignored(path, name string, isDir bool) bool {
	for i := len(r.patterns) - 1; i >= 0; i-- {
		if r.patterns[i].match(path, name, isDir) {
			return !r.patterns[i].negative
		}
	}
	return false
}
