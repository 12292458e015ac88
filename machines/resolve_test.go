package machines

import (
	"context"
	"strings"
	"testing"
)

// resolve's candidates and their order: origin's branch, then a tag
// (peeled to its commit), then a commit; exact names only.
func TestResolveCandidates(t *testing.T) {
	ctx := context.Background()
	m, src := manager(t), origin(t)
	if _, _, err := m.Warm(ctx, "p", src, ""); err != nil {
		t.Fatal(err)
	}
	repoDir, _ := m.RepoDir("p")
	head, first := git(t, repoDir, "rev-parse", "origin/main"), git(t, repoDir, "rev-parse", "v1^{commit}")
	// Refs made in the machine itself, as a fetch would bring them.
	git(t, repoDir, "update-ref", "refs/remotes/origin/both", first)
	git(t, repoDir, "tag", "both", head)
	git(t, repoDir, "tag", "lw", first)
	git(t, repoDir, "tag", "-a", "-m", "nested", "nested", "v1")
	git(t, repoDir, "tag", "treetag", "origin/main^{tree}")
	git(t, repoDir, "tag", "refs/remotes/origin/ghost", head) // refs/tags/refs/remotes/origin/ghost
	git(t, repoDir, "tag", "pre/sub", head)
	tagObject := git(t, repoDir, "rev-parse", "v1")

	for _, tc := range []struct {
		ref   string
		want  string // "" for not found
		error string // part of the error, "" for none
	}{
		{"main", head, ""},
		{"refs/heads/main", head, ""},
		{"refs/remotes/origin/main", head, ""},
		{"both", first, ""}, // the branch before the tag
		{"refs/tags/both", head, ""},
		{"v1", first, ""}, // annotated, peeled
		{"lw", first, ""}, // lightweight
		{"nested", first, ""},
		{"treetag", "", "not a commit"},
		{first, first, ""},
		{first[:7], first, ""},
		{tagObject, "", ""}, // a full hash names its object: a tag is not a commit
		{strings.Repeat("0", 40), "", ""},
		{"ghost", "", ""}, // not fooled by a tag named like origin's branch
		{"pre", "", ""},   // refs/tags/pre/sub is not refs/tags/pre
		{"nope", "", ""},
	} {
		got, found, err := resolve(ctx, repoDir, tc.ref)
		switch {
		case tc.error != "":
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Errorf("resolve(%q) = %q %v %v, want an error with %q", tc.ref, got, found, err, tc.error)
			}
		case err != nil:
			t.Errorf("resolve(%q): %v", tc.ref, err)
		case found != (tc.want != "") || got != tc.want:
			t.Errorf("resolve(%q) = %q found=%v, want %q", tc.ref, got, found, tc.want)
		}
	}
	if _, _, err := resolve(ctx, t.TempDir(), "main"); err == nil {
		t.Error("resolve in a directory that is no repository: no error")
	}
}
