package gitread

import "bytes"

// Wildmatch matches text against pattern as git's wildmatch does for
// ignore rules and pathspecs: '?', '*', '**' (with pathname: across
// directories only as a whole path component), "[...]" sets with ranges,
// "!"/"^" negation and "[:class:]", and backslash escapes. With pathname
// set (git's WM_PATHNAME), '*', '?' and sets never match '/'. Matching is
// case-sensitive (git's WM_CASEFOLD, used with core.ignoreCase, is not
// supported), and takes time polynomial in its inputs.
func Wildmatch(pattern, text string, pathname bool) bool {
	return dowild([]byte(pattern), []byte(text), pathname) == wmMatch
}

const (
	wmMatch           = 0
	wmNoMatch         = 1
	wmAbortAll        = -1
	wmAbortToStarStar = -2
)

func isGlobSpecial(c byte) bool { return c == '*' || c == '?' || c == '[' || c == '\\' }

func dowild(p, text []byte, pathname bool) int {
	pi, ti := 0, 0
	at := func(b []byte, i int) byte {
		if i < len(b) {
			return b[i]
		}
		return 0
	}
	for ; pi < len(p); pi, ti = pi+1, ti+1 {
		pc := p[pi]
		tc := at(text, ti)
		if tc == 0 && ti >= len(text) && pc != '*' {
			return wmAbortAll
		}
		switch pc {
		case '\\':
			pi++
			pc = at(p, pi)
			if ti >= len(text) || tc != pc || pi >= len(p) {
				return wmNoMatch
			}
			continue
		default:
			if tc != pc {
				return wmNoMatch
			}
			continue
		case '?':
			if pathname && tc == '/' {
				return wmNoMatch
			}
			continue
		case '*':
			pi++
			matchSlash := !pathname
			if at(p, pi) == '*' {
				prev := pi - 2
				for pi++; at(p, pi) == '*'; pi++ {
				}
				// Only with pathname is "**" more than '*': as a whole
				// component ("**/", "/**/", "/**") it matches across
				// directories, none included.
				if pathname && (prev < 0 || p[prev] == '/') &&
					(pi >= len(p) || p[pi] == '/' || (p[pi] == '\\' && at(p, pi+1) == '/')) {
					if pi < len(p) && p[pi] == '/' && dowild(p[pi+1:], text[ti:], pathname) == wmMatch {
						return wmMatch
					}
					matchSlash = true
				}
			}
			if pi >= len(p) {
				if !matchSlash && bytes.IndexByte(text[ti:], '/') >= 0 {
					return wmNoMatch
				}
				return wmMatch
			}
			if !matchSlash && p[pi] == '/' {
				slash := bytes.IndexByte(text[ti:], '/')
				if slash < 0 {
					return wmNoMatch
				}
				ti += slash
				// the slash is consumed by the loop
				break
			}
			for {
				if ti >= len(text) {
					break
				}
				if !isGlobSpecial(p[pi]) {
					want := p[pi]
					for ti < len(text) && (matchSlash || text[ti] != '/') {
						if text[ti] == want {
							break
						}
						ti++
					}
					if ti >= len(text) {
						// The literal is nowhere in the rest of the text,
						// so no later start of this star, or of one
						// before it, can match either: trying them all
						// would take exponential time.
						return wmAbortAll
					}
					if text[ti] != want {
						return wmNoMatch // at a '/' this star cannot cross
					}
				}
				m := dowild(p[pi:], text[ti:], pathname)
				if m != wmNoMatch {
					if !matchSlash || m != wmAbortToStarStar {
						return m
					}
				} else if !matchSlash && text[ti] == '/' {
					return wmAbortToStarStar
				}
				ti++
			}
			return wmAbortAll
		case '[':
			pi++
			pc = at(p, pi)
			if pc == '^' {
				pc = '!'
			}
			negated := pc == '!'
			if negated {
				pi++
				pc = at(p, pi)
			}
			var prev byte
			matched := false
			for {
				if pi >= len(p) {
					return wmAbortAll
				}
				switch {
				case pc == '\\':
					pi++
					if pi >= len(p) {
						return wmAbortAll
					}
					pc = p[pi]
					if tc == pc {
						matched = true
					}
				case pc == '-' && prev != 0 && pi+1 < len(p) && p[pi+1] != ']':
					pi++
					pc = p[pi]
					if pc == '\\' {
						pi++
						if pi >= len(p) {
							return wmAbortAll
						}
						pc = p[pi]
					}
					if tc <= pc && tc >= prev {
						matched = true
					}
					pc = 0 // prev becomes 0
				case pc == '[' && at(p, pi+1) == ':':
					s := pi + 2
					pi = s
					for pi < len(p) && p[pi] != ']' {
						pi++
					}
					if pi >= len(p) {
						return wmAbortAll
					}
					n := pi - s - 1
					if n < 0 || p[pi-1] != ':' {
						// no ":]": a plain '[' in the set
						pi = s - 2
						pc = '['
						if tc == pc {
							matched = true
						}
						break
					}
					ok, known := charClass(string(p[s:s+n]), tc)
					if !known {
						return wmAbortAll
					}
					if ok {
						matched = true
					}
					pc = 0
				default:
					if tc == pc {
						matched = true
					}
				}
				prev = pc
				pi++
				if pi >= len(p) {
					return wmAbortAll
				}
				pc = p[pi]
				if pc == ']' {
					break
				}
			}
			if matched == negated || (pathname && tc == '/') {
				return wmNoMatch
			}
			continue
		}
		// reached by the "*/" break above
	}
	if ti < len(text) {
		return wmNoMatch
	}
	return wmMatch
}

func charClass(name string, c byte) (match, known bool) {
	switch name {
	case "alnum":
		return isAlpha(c) || isDigit(c), true
	case "alpha":
		return isAlpha(c), true
	case "blank":
		return c == ' ' || c == '\t', true
	case "cntrl":
		return c < 0x20 || c == 0x7f, true
	case "digit":
		return isDigit(c), true
	case "graph":
		return c > 0x20 && c < 0x7f, true
	case "lower":
		return c >= 'a' && c <= 'z', true
	case "print":
		return c >= 0x20 && c < 0x7f, true
	case "punct":
		return c > 0x20 && c < 0x7f && !isAlpha(c) && !isDigit(c), true
	case "space":
		return c == ' ' || (c >= '\t' && c <= '\r'), true
	case "upper":
		return c >= 'A' && c <= 'Z', true
	case "xdigit":
		return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'), true
	}
	return false, false
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
