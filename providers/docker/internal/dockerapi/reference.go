package dockerapi

import (
	"errors"
	"fmt"
	"strings"
)

// Reference is an image reference taken apart, as docker normalises it:
// "busybox" is docker.io/library/busybox.
type Reference struct {
	Name   string // domain/path, normalised: docker.io/library/busybox
	Tag    string // "" when none was given
	Digest string // algorithm:hex, "" when none was given
}

const (
	defaultDomain = "docker.io"
	legacyDomain  = "index.docker.io"
	officialRepo  = "library/"
	maxNameLength = 255
)

var errRefFormat = errors.New("invalid reference format")

// ParseReference checks an image reference against the grammar docker
// uses ([domain[:port]/]path[:tag][@digest], path components lowercase)
// and normalises its name. It is written out by hand rather than with
// regular expressions so that nothing is compiled at start-up.
func ParseReference(s string) (Reference, error) {
	var r Reference
	if s == "" {
		return r, errRefFormat
	}
	if len(s) == 64 && isHex(s, false) {
		return r, fmt.Errorf("invalid repository name (%s), cannot specify 64-byte hexadecimal strings", s)
	}
	name, digest, hasDigest := strings.Cut(s, "@")
	if hasDigest {
		if err := checkDigest(digest); err != nil {
			return r, err
		}
		r.Digest = digest
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, r.Tag = name[:i], name[i+1:]
		if !validTag(r.Tag) {
			return r, errRefFormat
		}
	}
	domain, remainder := defaultDomain, name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		first := name[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first {
			domain, remainder = first, name[i+1:]
		}
	}
	if domain == legacyDomain {
		domain = defaultDomain
	}
	if domain == defaultDomain && !strings.Contains(remainder, "/") {
		remainder = officialRepo + remainder
	}
	if strings.ToLower(remainder) != remainder {
		return r, fmt.Errorf("invalid reference format: repository name (%s) must be lowercase", remainder)
	}
	r.Name = domain + "/" + remainder
	switch {
	case validDomain(domain) && validPath(remainder):
	case validPath(r.Name):
		// Not a domain after all ("a_b.c/img"): docker's grammar then reads
		// the whole name as a path.
	default:
		return r, errRefFormat
	}
	if len(r.Name) > maxNameLength {
		return r, fmt.Errorf("invalid reference format: repository name must not be more than %d characters", maxNameLength)
	}
	return r, nil
}

func isAlnumLower(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }

func isAlnum(b byte) bool { return isAlnumLower(b) || b >= 'A' && b <= 'Z' }

func isHex(s string, upperOK bool) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || upperOK && b >= 'A' && b <= 'F') {
			return false
		}
	}
	return s != ""
}

// validTag: [\w][\w.-]{0,127}.
func validTag(t string) bool {
	if t == "" || len(t) > 128 {
		return false
	}
	for i := 0; i < len(t); i++ {
		b := t[i]
		word := isAlnum(b) || b == '_'
		if !word && (i == 0 || b != '.' && b != '-') {
			return false
		}
	}
	return true
}

// validDomain: host[:port], host a DNS name of [a-zA-Z0-9-] labels not
// starting or ending with "-", or an IPv6 address in brackets.
func validDomain(d string) bool {
	host, port := d, ""
	if strings.HasPrefix(d, "[") {
		end := strings.IndexByte(d, ']')
		if end < 0 {
			return false
		}
		for _, b := range []byte(d[1:end]) {
			if !isHex(string(b), true) && b != ':' && b != '.' {
				return false
			}
		}
		host, port = "", d[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return false
		}
		port = strings.TrimPrefix(port, ":")
		if end == 1 {
			return false
		}
	} else if i := strings.IndexByte(d, ':'); i >= 0 {
		host, port = d[:i], d[i+1:]
		if port == "" {
			return false
		}
	}
	for _, b := range []byte(port) {
		if b < '0' || b > '9' {
			return false
		}
	}
	if host == "" {
		return strings.HasPrefix(d, "[")
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, b := range []byte(label) {
			if !isAlnum(b) && b != '-' {
				return false
			}
		}
	}
	return true
}

// validPath: components of [a-z0-9]+ joined by ".", "_", "__" or any
// number of "-", separated by "/".
func validPath(p string) bool {
	for _, comp := range strings.Split(p, "/") {
		if comp == "" || !isAlnumLower(comp[0]) || !isAlnumLower(comp[len(comp)-1]) {
			return false
		}
		for i := 0; i < len(comp); {
			if isAlnumLower(comp[i]) {
				i++
				continue
			}
			j := i
			for j < len(comp) && !isAlnumLower(comp[j]) {
				j++
			}
			sep := comp[i:j]
			if sep != "." && sep != "_" && sep != "__" && strings.Trim(sep, "-") != "" {
				return false
			}
			i = j
		}
	}
	return true
}

// checkDigest: algorithm:hex with a known algorithm and its length.
func checkDigest(d string) error {
	alg, hex, ok := strings.Cut(d, ":")
	want := map[string]int{"sha256": 64, "sha384": 96, "sha512": 128}[alg]
	switch {
	case !ok || alg == "" || hex == "":
		return errRefFormat
	case want == 0:
		return fmt.Errorf("invalid reference format: unsupported digest algorithm %q", alg)
	case len(hex) != want || !isHex(hex, false):
		return fmt.Errorf("invalid reference format: invalid %s digest %q", alg, hex)
	}
	return nil
}
