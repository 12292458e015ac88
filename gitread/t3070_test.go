package gitread

import (
	"testing"
	"time"
)

// t3070 are the cases of git's own wildmatch test, t/t3070-wildmatch.sh
// (git commit 1a3e64c6c4a6), as facts: text, pattern, and whether git's
// wildmatch matches them with WM_PATHNAME ("wildmatch"), with WM_PATHNAME
// and WM_CASEFOLD ("iwildmatch"), with no flags ("pathmatch") and with
// WM_CASEFOLD ("ipathmatch") — the results of its test-tool, not of `git
// ls-files` where the script has both. As git's test helper does, a
// leading "XXX/" in either stands for "/". TestWildmatchT3070 checks the
// case-sensitive variants, the two xmode uses (ignore rules on Linux,
// where core.ignoreCase is off and xmode reads no repository
// configuration); the case-insensitive columns are kept as facts.
var t3070 = []struct {
	text, pattern         string
	wildmatch, iwildmatch bool
	pathmatch, ipathmatch bool
}{
	// Basic wildmatch features
	{"foo", "foo", true, true, true, true},
	{"foo", "bar", false, false, false, false},
	{"", "", true, true, true, true},
	{"foo", "???", true, true, true, true},
	{"foo", "??", false, false, false, false},
	{"foo", "*", true, true, true, true},
	{"foo", "f*", true, true, true, true},
	{"foo", "*f", false, false, false, false},
	{"foo", "*foo*", true, true, true, true},
	{"foobar", "*ob*a*r*", true, true, true, true},
	{"aaaaaaabababab", "*ab", true, true, true, true},
	{"foo*", "foo\\*", true, true, true, true},
	{"foobar", "foo\\*bar", false, false, false, false},
	{"f\\oo", "f\\\\oo", true, true, true, true},
	{"foo\\", "foo\\", false, false, false, false},
	{"ball", "*[al]?", true, true, true, true},
	{"ten", "[ten]", false, false, false, false},
	{"ten", "**[!te]", true, true, true, true},
	{"ten", "**[!ten]", false, false, false, false},
	{"ten", "t[a-g]n", true, true, true, true},
	{"ten", "t[!a-g]n", false, false, false, false},
	{"ton", "t[!a-g]n", true, true, true, true},
	{"ton", "t[^a-g]n", true, true, true, true},
	{"a]b", "a[]]b", true, true, true, true},
	{"a-b", "a[]-]b", true, true, true, true},
	{"a]b", "a[]-]b", true, true, true, true},
	{"aab", "a[]-]b", false, false, false, false},
	{"aab", "a[]a-]b", true, true, true, true},
	{"]", "]", true, true, true, true},
	// Extended slash-matching features
	{"foo/baz/bar", "foo*bar", false, false, true, true},
	{"foo/baz/bar", "foo**bar", false, false, true, true},
	{"foobazbar", "foo**bar", true, true, true, true},
	{"foo/baz/bar", "foo/**/bar", true, true, true, true},
	{"foo/baz/bar", "foo/**/**/bar", true, true, false, false},
	{"foo/b/a/z/bar", "foo/**/bar", true, true, true, true},
	{"foo/b/a/z/bar", "foo/**/**/bar", true, true, true, true},
	{"foo/bar", "foo/**/bar", true, true, false, false},
	{"foo/bar", "foo/**/**/bar", true, true, false, false},
	{"foo/bar", "foo?bar", false, false, true, true},
	{"foo/bar", "foo[/]bar", false, false, true, true},
	{"foo/bar", "foo[^a-z]bar", false, false, true, true},
	{"foo/bar", "f[^eiu][^eiu][^eiu][^eiu][^eiu]r", false, false, true, true},
	{"foo-bar", "f[^eiu][^eiu][^eiu][^eiu][^eiu]r", true, true, true, true},
	{"foo", "**/foo", true, true, false, false},
	{"/foo", "**/foo", true, true, true, true},
	{"bar/baz/foo", "**/foo", true, true, true, true},
	{"bar/baz/foo", "*/foo", false, false, true, true},
	{"foo/bar/baz", "**/bar*", false, false, true, true},
	{"deep/foo/bar/baz", "**/bar/*", true, true, true, true},
	{"deep/foo/bar/baz/", "**/bar/*", false, false, true, true},
	{"deep/foo/bar/baz/", "**/bar/**", true, true, true, true},
	{"deep/foo/bar", "**/bar/*", false, false, false, false},
	{"deep/foo/bar/", "**/bar/**", true, true, true, true},
	{"foo/bar/baz", "**/bar**", false, false, true, true},
	{"foo/bar/baz/x", "*/bar/**", true, true, true, true},
	{"deep/foo/bar/baz/x", "*/bar/**", false, false, true, true},
	{"deep/foo/bar/baz/x", "**/bar/*/*", true, true, true, true},
	// Various additional tests
	{"acrt", "a[c-c]st", false, false, false, false},
	{"acrt", "a[c-c]rt", true, true, true, true},
	{"]", "[!]-]", false, false, false, false},
	{"a", "[!]-]", true, true, true, true},
	{"", "\\", false, false, false, false},
	{"\\", "\\", false, false, false, false},
	{"/\\", "*/\\", false, false, false, false},
	{"/\\", "*/\\\\", true, true, true, true},
	{"foo", "foo", true, true, true, true},
	{"@foo", "@foo", true, true, true, true},
	{"foo", "@foo", false, false, false, false},
	{"[ab]", "\\[ab]", true, true, true, true},
	{"[ab]", "[[]ab]", true, true, true, true},
	{"[ab]", "[[:]ab]", true, true, true, true},
	{"[ab]", "[[::]ab]", false, false, false, false},
	{"[ab]", "[[:digit]ab]", true, true, true, true},
	{"[ab]", "[\\[:]ab]", true, true, true, true},
	{"?a?b", "\\??\\?b", true, true, true, true},
	{"abc", "\\a\\b\\c", true, true, true, true},
	{"foo", "", false, false, false, false},
	{"foo/bar/baz/to", "**/t[o]", true, true, true, true},
	// Character class tests
	{"a1B", "[[:alpha:]][[:digit:]][[:upper:]]", true, true, true, true},
	{"a", "[[:digit:][:upper:][:space:]]", false, true, false, true},
	{"A", "[[:digit:][:upper:][:space:]]", true, true, true, true},
	{"1", "[[:digit:][:upper:][:space:]]", true, true, true, true},
	{"1", "[[:digit:][:upper:][:spaci:]]", false, false, false, false},
	{" ", "[[:digit:][:upper:][:space:]]", true, true, true, true},
	{".", "[[:digit:][:upper:][:space:]]", false, false, false, false},
	{".", "[[:digit:][:punct:][:space:]]", true, true, true, true},
	{"5", "[[:xdigit:]]", true, true, true, true},
	{"f", "[[:xdigit:]]", true, true, true, true},
	{"D", "[[:xdigit:]]", true, true, true, true},
	{"_", "[[:alnum:][:alpha:][:blank:][:cntrl:][:digit:][:graph:][:lower:][:print:][:punct:][:space:][:upper:][:xdigit:]]", true, true, true, true},
	{".", "[^[:alnum:][:alpha:][:blank:][:cntrl:][:digit:][:lower:][:space:][:upper:][:xdigit:]]", true, true, true, true},
	{"5", "[a-c[:digit:]x-z]", true, true, true, true},
	{"b", "[a-c[:digit:]x-z]", true, true, true, true},
	{"y", "[a-c[:digit:]x-z]", true, true, true, true},
	{"q", "[a-c[:digit:]x-z]", false, false, false, false},
	// Additional tests, including some malformed wildmatch patterns
	{"]", "[\\\\-^]", true, true, true, true},
	{"[", "[\\\\-^]", false, false, false, false},
	{"-", "[\\-_]", true, true, true, true},
	{"]", "[\\]]", true, true, true, true},
	{"\\]", "[\\]]", false, false, false, false},
	{"\\", "[\\]]", false, false, false, false},
	{"ab", "a[]b", false, false, false, false},
	{"a[]b", "a[]b", false, false, false, false},
	{"ab[", "ab[", false, false, false, false},
	{"ab", "[!", false, false, false, false},
	{"ab", "[-", false, false, false, false},
	{"-", "[-]", true, true, true, true},
	{"-", "[a-", false, false, false, false},
	{"-", "[!a-", false, false, false, false},
	{"-", "[--A]", true, true, true, true},
	{"5", "[--A]", true, true, true, true},
	{" ", "[ --]", true, true, true, true},
	{"$", "[ --]", true, true, true, true},
	{"-", "[ --]", true, true, true, true},
	{"0", "[ --]", false, false, false, false},
	{"-", "[---]", true, true, true, true},
	{"-", "[------]", true, true, true, true},
	{"j", "[a-e-n]", false, false, false, false},
	{"-", "[a-e-n]", true, true, true, true},
	{"a", "[!------]", true, true, true, true},
	{"[", "[]-a]", false, false, false, false},
	{"^", "[]-a]", true, true, true, true},
	{"^", "[!]-a]", false, false, false, false},
	{"[", "[!]-a]", true, true, true, true},
	{"^", "[a^bc]", true, true, true, true},
	{"-b]", "[a-]b]", true, true, true, true},
	{"\\", "[\\]", false, false, false, false},
	{"\\", "[\\\\]", true, true, true, true},
	{"\\", "[!\\\\]", false, false, false, false},
	{"G", "[A-\\\\]", true, true, true, true},
	{"aaabbb", "b*a", false, false, false, false},
	{"aabcaa", "*ba*", false, false, false, false},
	{",", "[,]", true, true, true, true},
	{",", "[\\\\,]", true, true, true, true},
	{"\\", "[\\\\,]", true, true, true, true},
	{"-", "[,-.]", true, true, true, true},
	{"+", "[,-.]", false, false, false, false},
	{"-.]", "[,-.]", false, false, false, false},
	{"2", "[\\1-\\3]", true, true, true, true},
	{"3", "[\\1-\\3]", true, true, true, true},
	{"4", "[\\1-\\3]", false, false, false, false},
	{"\\", "[[-\\]]", true, true, true, true},
	{"[", "[[-\\]]", true, true, true, true},
	{"]", "[[-\\]]", true, true, true, true},
	{"-", "[[-\\]]", false, false, false, false},
	// Test recursion
	{"-adobe-courier-bold-o-normal--12-120-75-75-m-70-iso8859-1", "-*-*-*-*-*-*-12-*-*-*-m-*-*-*", true, true, true, true},
	{"-adobe-courier-bold-o-normal--12-120-75-75-X-70-iso8859-1", "-*-*-*-*-*-*-12-*-*-*-m-*-*-*", false, false, false, false},
	{"-adobe-courier-bold-o-normal--12-120-75-75-/-70-iso8859-1", "-*-*-*-*-*-*-12-*-*-*-m-*-*-*", false, false, false, false},
	{"/adobe/courier/bold/o/normal//12/120/75/75/m/70/iso8859/1", "/*/*/*/*/*/*/12/*/*/*/m/*/*/*", true, true, true, true},
	{"/adobe/courier/bold/o/normal//12/120/75/75/X/70/iso8859/1", "/*/*/*/*/*/*/12/*/*/*/m/*/*/*", false, false, false, false},
	{"abcd/abcdefg/abcdefghijk/abcdefghijklmnop.txt", "**/*a*b*g*n*t", true, true, true, true},
	{"abcd/abcdefg/abcdefghijk/abcdefghijklmnop.txtz", "**/*a*b*g*n*t", false, false, false, false},
	{"foo", "*/*/*", false, false, false, false},
	{"foo/bar", "*/*/*", false, false, false, false},
	{"foo/bba/arr", "*/*/*", true, true, true, true},
	{"foo/bb/aa/rr", "*/*/*", false, false, true, true},
	{"foo/bb/aa/rr", "**/**/**", true, true, true, true},
	{"abcXdefXghi", "*X*i", true, true, true, true},
	{"ab/cXd/efXg/hi", "*X*i", false, false, true, true},
	{"ab/cXd/efXg/hi", "*/*X*/*/*i", true, true, true, true},
	{"ab/cXd/efXg/hi", "**/*X*/**/*i", true, true, true, true},
	// Extra pathmatch tests
	{"foo", "fo", false, false, false, false},
	{"foo/bar", "foo/bar", true, true, true, true},
	{"foo/bar", "foo/*", true, true, true, true},
	{"foo/bba/arr", "foo/*", false, false, true, true},
	{"foo/bba/arr", "foo/**", true, true, true, true},
	{"foo/bba/arr", "foo*", false, false, true, true},
	{"foo/bba/arr", "foo**", false, false, true, true},
	{"foo/bba/arr", "foo/*arr", false, false, true, true},
	{"foo/bba/arr", "foo/**arr", false, false, true, true},
	{"foo/bba/arr", "foo/*z", false, false, false, false},
	{"foo/bba/arr", "foo/**z", false, false, false, false},
	{"foo/bar", "foo?bar", false, false, true, true},
	{"foo/bar", "foo[/]bar", false, false, true, true},
	{"foo/bar", "foo[^a-z]bar", false, false, true, true},
	{"ab/cXd/efXg/hi", "*Xg*i", false, false, true, true},
	// Extra case-sensitivity tests
	{"a", "[A-Z]", false, true, false, true},
	{"A", "[A-Z]", true, true, true, true},
	{"A", "[a-z]", false, true, false, true},
	{"a", "[a-z]", true, true, true, true},
	{"a", "[[:upper:]]", false, true, false, true},
	{"A", "[[:upper:]]", true, true, true, true},
	{"A", "[[:lower:]]", false, true, false, true},
	{"a", "[[:lower:]]", true, true, true, true},
	{"A", "[B-Za]", false, true, false, true},
	{"a", "[B-Za]", true, true, true, true},
	{"A", "[B-a]", false, true, false, true},
	{"a", "[B-a]", true, true, true, true},
	{"z", "[Z-y]", false, true, false, true},
	{"Z", "[Z-y]", true, true, true, true},
}

// Every case of git's t3070: Wildmatch with pathname set agrees with
// git's wildmatch (WM_PATHNAME), without it with git's pathmatch (no
// flags).
func TestWildmatchT3070(t *testing.T) {
	if len(t3070) != 190 {
		t.Fatalf("the table holds %d cases, t3070 has 190", len(t3070))
	}
	for _, c := range t3070 {
		if got := Wildmatch(c.pattern, c.text, true); got != c.wildmatch {
			t.Errorf("wildmatch: Wildmatch(%q, %q, pathname) = %v, git says %v", c.pattern, c.text, got, c.wildmatch)
		}
		if got := Wildmatch(c.pattern, c.text, false); got != c.pathmatch {
			t.Errorf("pathmatch: Wildmatch(%q, %q) = %v, git says %v", c.pattern, c.text, got, c.pathmatch)
		}
	}
}

// t3070's last case: a pattern of many stars against a text that almost
// matches it takes time polynomial in their lengths, not exponential —
// with pathname set, and without it, as a .gitignore line without a '/'
// is matched against a file's name (both written by the sandbox).
func TestWildmatchNotExponential(t *testing.T) {
	for _, pathname := range []bool{true, false} {
		done := make(chan bool, 1)
		go func() {
			done <- Wildmatch("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", pathname)
		}()
		select {
		case m := <-done:
			if m {
				t.Fatalf("pathname %v: matched", pathname)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("pathname %v: still matching after 10 s: exponential", pathname)
		}
	}
}
