package gitread

import "testing"

// Cases from git's t3070-wildmatch (pathname matching, as ignore rules
// with a '/' use it) and basename matching.
func TestWildmatch(t *testing.T) {
	cases := []struct {
		pattern, text  string
		pathname, want bool
	}{
		{"foo", "foo", true, true},
		{"bar", "foo", true, false},
		{"???", "foo", true, true},
		{"*f", "foo", true, false},
		{"*", "foo", true, true},
		{"f*", "foo", true, true},
		{"*foo*", "foo", true, true},
		{"*ob*a*r*", "foobar", true, true},
		{"\\*", "*", true, true},
		{"\\*", "x", true, false},
		{"[ab]", "a", true, true},
		{"[!ab]", "c", true, true},
		{"[^ab]", "a", true, false},
		{"[a-c]", "b", true, true},
		{"[a-c]", "d", true, false},
		{"[]]", "]", true, true},
		{"[!]]", "a", true, true},
		{"[[:digit:]]", "7", true, true},
		{"[[:alpha:][:digit:]]", "x", true, true},
		{"[[:digit:][:upper:][:space:]]", "a", true, false},
		{"[[:xyz:]]", "a", true, false},
		{"foo/*", "foo/bar", true, true},
		{"foo/*", "foo/bar/baz", true, false},
		{"foo/**", "foo/bar/baz", true, true},
		{"**/foo", "foo", true, true},
		{"**/foo", "x/y/foo", true, true},
		{"a/**/b", "a/b", true, true},
		{"a/**/b", "a/x/y/b", true, true},
		{"a/**/b", "ax/b", true, false},
		{"foo**bar", "foo/baz/bar", true, false},
		{"foo**bar", "fooxbar", true, true},
		{"*/foo", "bar/foo", true, true},
		{"*/foo", "a/bar/foo", true, false},
		{"?", "/", true, false},
		{"*", "a/b", false, true},
		{"*.c", "a/b.c", false, true},
		{"*.c", "a/b.c", true, false},
		{"[a/]", "/", true, false},
		{"\\", "\\", true, false},
		{"-*-*-*-*-*-*-12-*-*-*-m-*-*-*", "-adobe-courier-bold-o-normal--12-120-75-75-m-70-iso8859-1", true, true},
		{"**/*a*b*g*n*t", "abcd/abcdefg/abcdefghijk/abcdefghijklmnop.txtz", true, false},
		{"[\\-_]", "-", true, true},
		{"[a-]", "-", true, true},
		{"XXX/*/*/*/*/*/*/12/*/*/*/m/*/*/*", "XXX/adobe/courier/bold/o/normal//12/120/75/75/m/70/iso8859/1", true, true},
	}
	for _, c := range cases {
		if got := Wildmatch(c.pattern, c.text, c.pathname); got != c.want {
			t.Errorf("Wildmatch(%q, %q, pathname=%v) = %v, want %v", c.pattern, c.text, c.pathname, got, c.want)
		}
	}
}
