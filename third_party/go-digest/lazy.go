package digest

import (
	"regexp"
	"sync"
)

// Regexp is a regular expression compiled when it is first used rather
// than when the package is initialised: compiling this package's
// expressions cost every program that links it (the Docker SDK does) a
// fraction of a millisecond and ~90 KB at start-up, whether or not it ever
// parses a digest. It has the methods of regexp.Regexp that users of the
// exported expressions call; Regexp() gives the compiled one for the rest.
// (xmode's patch of go-digest v1.0.0.)
type Regexp struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

func lazy(expr string) *Regexp { return &Regexp{expr: expr} }

// Regexp returns the compiled expression, compiling it on the first call.
func (r *Regexp) Regexp() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
	return r.re
}

// String returns the source text of the expression.
func (r *Regexp) String() string { return r.expr }

// MatchString reports whether s contains a match of the expression.
func (r *Regexp) MatchString(s string) bool { return r.Regexp().MatchString(s) }

// FindString returns the text of the leftmost match in s.
func (r *Regexp) FindString(s string) string { return r.Regexp().FindString(s) }

// FindStringSubmatch returns the leftmost match in s and its submatches.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.Regexp().FindStringSubmatch(s) }
