package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/xmode/xmode/gitcli/gittest"
	"github.com/xmode/xmode/store"
)

// changedSession is a session whose worktree the test changed through
// sandbox exec: a.txt grew, dir/old.txt moved to dir/new.txt, a long new
// file and a binary one appeared, b.txt went.
func changedSession(t *testing.T, c *testCLI) (id, worktree, repo string) {
	t.Helper()
	repo = testRepo(t)
	if err := os.MkdirAll(filepath.Join(repo, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"a.txt":       strings.Repeat("line\n", 10),
		"b.txt":       "gone soon\n",
		"dir/old.txt": strings.Repeat("moved but the same\n", 20),
	} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gittest.Git(t, repo, "add", "-A")
	gittest.Git(t, repo, "commit", "-q", "-m", "files")
	id = strings.TrimSpace(c.ok("sandbox", "create", "--repo", repo, "-q"))
	c.ok("sandbox", "exec", id, "--", "sh", "-c", `
		printf 'more\n%.0s' 1 2 3 >> a.txt
		mv dir/old.txt dir/new.txt
		rm b.txt
		mkdir -p src/a/rather/long/path/of/directories/for/the/stat/to/shorten
		seq 1 300 > src/a/rather/long/path/of/directories/for/the/stat/to/shorten/numbers.txt
		printf '\000\001\002' > blob.bin`)
	var s store.Session
	if err := json.Unmarshal([]byte(c.ok("sandbox", "show", id, "--json")), &s); err != nil {
		t.Fatal(err)
	}
	return id, s.WorktreePath, repo
}

// sandbox diff --stat lays a change out as git diff --stat does (not on a
// terminal: 80 columns), renames, binary files and long names included;
// checked against the real git on the same worktree.
func TestDiffStatIsGits(t *testing.T) {
	c := newTestCLI(t)
	id, wt, _ := changedSession(t, c)
	long := strings.Repeat("x", 90)
	other := strings.TrimSpace(c.ok("sandbox", "create", "--repo", testRepo(t), "-q"))
	c.ok("sandbox", "exec", other, "--", "sh", "-c", `
		mkdir -p dir/sub && echo 1 > `+long+`.txt && echo 2 > dir/sub/`+long+` && echo 3 > dir/short`)
	var s store.Session
	if err := json.Unmarshal([]byte(c.ok("sandbox", "show", other, "--json")), &s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, wt string }{{id, wt}, {other, s.WorktreePath}} {
		got := c.ok("sandbox", "diff", tc.id, "--stat")
		gittest.Git(t, tc.wt, "add", "-A")
		want := gittest.Git(t, tc.wt, "diff", "--cached", "--stat", "HEAD") // trimmed: the first line's leading blank too
		if got = strings.TrimSpace(got); got != want {
			t.Errorf("sandbox diff --stat:\n%s\ngit diff --stat:\n%s", got, want)
		}
	}
}

// sandbox diff --json: the snapshot's identity, its stat, and empty lists
// rather than null.
func TestDiffJSON(t *testing.T) {
	c := newTestCLI(t)
	id, _, _ := changedSession(t, c)
	var v map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.ok("sandbox", "diff", id, "--json")), &v); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"session_id", "run_id", "worktree", "base_commit", "head", "tree", "commits", "stat", "skipped", "warnings"} {
		if _, ok := v[k]; !ok {
			t.Errorf("diff --json has no %q", k)
		}
	}
	for _, k := range []string{"commits", "skipped", "warnings"} {
		if string(v[k]) != "[]" {
			t.Errorf("diff --json %q = %s, want []", k, v[k])
		}
	}
	var st struct{ Files, Insertions, Deletions int }
	if err := json.Unmarshal(v["stat"], &st); err != nil || st.Files != 5 || st.Insertions != 303 || st.Deletions != 1 {
		t.Errorf("diff --json stat: %+v (%v), want 5 files, 303 insertions, 1 deletion", st, err)
	}
}

// The change-request commands end to end in-process: create (an empty
// change refused), list with its filters, show, review, verify (and a
// tampered package), export.
func TestCRCommands(t *testing.T) {
	c := newTestCLI(t)
	empty := c.session()
	c.fails(4, "", "cr", "create", empty)

	id, _, repo := changedSession(t, c)
	c.ok("sandbox", "exec", id, "--name", "test", "--", "true")
	c.run("sandbox", "exec", id, "--name", "lint", "--", "false")
	cr := strings.TrimSpace(c.ok("cr", "create", id, "--title", "Grow a.txt", "-m", "why:\nbecause"))
	if !strings.HasPrefix(cr, "cr_") || !strings.Contains(c.stderr.String(), "5 files changed, 303 insertions(+), 1 deletion(-)") {
		t.Fatalf("cr create: stdout %q, stderr %q", cr, c.stderr.String())
	}

	c.fails(2, `--status "merged": use open, approved, rejected, changes_requested or superseded`, "cr", "list", "--status", "merged")
	out := c.ok("cr", "list")
	if !regexp.MustCompile(`^ID +STATUS +RUN +FILES +\+/- +CREATED +TITLE\n` + cr + ` +open +run_\w+ +5 +\+303 -1 +\d+s ago +Grow a.txt\n$`).MatchString(out) {
		t.Errorf("cr list:\n%s", out)
	}
	if out := c.ok("cr", "list", "--status", "approved", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("cr list --status approved --json before a review: %q, want []", out)
	}

	out = c.ok("cr", "show", cr)
	for _, want := range []string{cr + " open  Grow a.txt\n", "\n    why:\n    because\n", " 5 files changed, 303 insertions(+), 1 deletion(-)\n",
		"Evidence: 2 of 3 steps passed\n", "✗ failed (exit 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("cr show has no %q:\n%s", want, out)
		}
	}
	var shown struct {
		ID       string `json:"id"`
		Manifest struct {
			Title string `json:"title"`
		} `json:"manifest"`
		Patch *string `json:"patch"`
	}
	if err := json.Unmarshal([]byte(c.ok("cr", "show", cr, "--json", "--patch")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.ID != cr || shown.Manifest.Title != "Grow a.txt" || shown.Patch == nil || !strings.Contains(*shown.Patch, "diff --git a/a.txt b/a.txt") {
		t.Errorf("cr show --json --patch: %+v", shown)
	}

	c.fails(2, "give exactly one of --approve, --request-changes and --reject", "cr", "review", cr)
	c.fails(3, "", "cr", "review", "cr_zzzzzzzz", "--approve")
	if out := c.ok("cr", "review", cr, "--approve", "--note", "fine"); out != cr+"\n" || !strings.Contains(c.stderr.String(), cr+" approved by tester") {
		t.Errorf("cr review --approve: stdout %q, stderr %q", out, c.stderr.String())
	}
	if out := c.ok("cr", "list", "--status", "approved", "-q"); out != cr+"\n" {
		t.Errorf("cr list --status approved -q: %q", out)
	}

	if out := c.ok("cr", "verify", cr); !strings.HasPrefix(out, cr+": intact (") {
		t.Errorf("cr verify: %q", out)
	}
	c.fails(2, "--repo is required", "cr", "export", cr)
	if out := c.ok("cr", "export", cr, "--repo", repo); out != "xmode/"+cr+"\n" {
		t.Errorf("cr export: %q", out)
	}
	if got := gittest.Git(t, repo, "show", "xmode/"+cr+":a.txt"); got != strings.TrimSpace(strings.Repeat("line\n", 10)+"more\nmore\nmore") {
		t.Errorf("the exported branch's a.txt: %q", got)
	}

	var pkg struct {
		Dir string `json:"dir"`
	}
	if err := json.Unmarshal([]byte(c.ok("cr", "show", cr, "--json")), &pkg); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(pkg.Dir, "change.patch"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\n")
	f.Close()
	if code := c.run("cr", "verify", cr); code != 1 || !strings.Contains(c.stdout.String(), "tampered: change.patch") ||
		!strings.Contains(c.stdout.String(), "TAMPERED") || c.stderr.Len() != 0 {
		t.Errorf("cr verify of a tampered package: exit %d, stdout %q, stderr %q; want 1 and the problem named", code, c.stdout.String(), c.stderr.String())
	}
}
