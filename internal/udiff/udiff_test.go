package udiff

import "testing"

func TestUnquote(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:                 "plain",
		`"a\tb"`:                "a\tb",
		`"caf\303\251"`:         "café",
		`"q\"uote\\"`:           `q"uote\`,
		`"\342\200\256evil.go"`: "\u202eevil.go",
		`"cut\`:                 `"cut\`,
	} {
		if got := Unquote(in); got != want {
			t.Errorf("Unquote(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestHeaderPaths(t *testing.T) {
	for in, want := range map[string][2]string{
		"diff --git a/x.go b/x.go":             {"x.go", "x.go"},
		`diff --git "a/a\tb" "b/a\tb"`:         {"a\tb", "a\tb"},
		"diff --git a/with space b/with space": {"with space", "with space"},
		"diff --git a/old name b/new name":     {"", ""},
		"diff --git a/x b/y":                   {"", ""},
	} {
		if a, b := HeaderPaths(in); [2]string{a, b} != want {
			t.Errorf("HeaderPaths(%q) = %q %q, want %q", in, a, b, want)
		}
	}
}

func TestHunkHeader(t *testing.T) {
	a, b, c, d, section, ok := HunkHeader("@@ -3,4 +5 @@ func f() {")
	if !ok || a != 3 || b != 4 || c != 5 || d != 1 || section != " func f() {" {
		t.Fatalf("%d %d %d %d %q %v", a, b, c, d, section, ok)
	}
	for _, bad := range []string{"@@ -x +1 @@", "@@ -1 +1", "@@ -1,-2 +1 @@", "-1 +1 @@"} {
		if _, _, _, _, _, ok := HunkHeader(bad); ok {
			t.Errorf("%q read as a hunk header", bad)
		}
	}
}
