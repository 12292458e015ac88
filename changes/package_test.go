package changes_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha(b)
}

// agentWork is a session where the agent made two commits and left more
// uncommitted, and its change request.
func agentWork(t *testing.T, e *env) (*store.Session, *changes.Package) {
	t.Helper()
	e.makeRepo(map[string]string{"README": "hello\n", "src/a.go": "package a\n"})
	s := e.create(sandbox.CreateOptions{})
	e.sh(s, `printf 'one\n' >> README && git commit -qam 'first: README' && printf 'package b\n' > src/b.go && git add -A && git commit -qm 'second: b.go

with a body'`)
	e.sh(s, `printf 'uncommitted\n' > notes.txt && exit 0`)
	p, err := e.cr.Create(context.Background(), s, changes.CreateOptions{Title: "Agent work", Message: "two commits and a note"})
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// TestExport: the branch holds the agent's commits as it made them (same
// IDs, messages), then one commit with the rest, and its tree is the
// manifest's; the user's checked-out branch, index and working tree are
// untouched, and an existing branch is refused.
func TestExport(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	s, p := agentWork(t, e)

	// the user's repository, mid-work: a change staged, another not
	user := e.repo
	git(t, user, "config", "user.name", "Ann Example")
	git(t, user, "config", "user.email", "ann@example.com")
	write(t, filepath.Join(user, "README"), "the user's own edit\n")
	write(t, filepath.Join(user, "staged.txt"), "staged\n")
	git(t, user, "add", "staged.txt")
	before := map[string]string{
		"head":   git(t, user, "rev-parse", "HEAD"),
		"branch": git(t, user, "symbolic-ref", "HEAD"),
		"status": git(t, user, "status", "--porcelain"),
		"index":  fileSHA(t, filepath.Join(user, ".git", "index")),
		"readme": fileSHA(t, filepath.Join(user, "README")),
	}
	out, err := e.cr.Export(ctx, p, user, "")
	if err != nil {
		t.Fatal(err)
	}
	if out.Branch != "xmode/"+p.ID || out.Commits != 3 || out.Tree != p.Tree {
		t.Fatalf("export: %+v", out)
	}
	after := map[string]string{
		"head":   git(t, user, "rev-parse", "HEAD"),
		"branch": git(t, user, "symbolic-ref", "HEAD"),
		"status": git(t, user, "status", "--porcelain"),
		"index":  fileSHA(t, filepath.Join(user, ".git", "index")),
		"readme": fileSHA(t, filepath.Join(user, "README")),
	}
	for k := range before {
		if before[k] != after[k] {
			t.Errorf("export changed the user's %s: %q → %q", k, before[k], after[k])
		}
	}
	if got := git(t, user, "rev-parse", out.Branch+"^{tree}"); got != p.Tree {
		t.Fatalf("branch tree %s, manifest %s", got, p.Tree)
	}
	log := strings.Split(git(t, user, "log", "--format=%H %s", p.BaseCommit+".."+out.Branch), "\n")
	agent := strings.Split(gitOutEnv(t, e.worktree(s), nil, "log", "--format=%H %s", p.BaseCommit+"..HEAD"), "\n")
	if len(log) != 3 || log[1] != agent[0] || log[2] != agent[1] {
		t.Fatalf("exported commits\n%s\nwant on top of the agent's own\n%s", strings.Join(log, "\n"), strings.Join(agent, "\n"))
	}
	if !strings.HasSuffix(log[0], " Agent work") {
		t.Fatalf("top commit %q, want the change request's title", log[0])
	}
	if body := git(t, user, "log", "-1", "--format=%B", out.Branch); !strings.Contains(body, "two commits and a note") || !strings.Contains(body, p.ID) {
		t.Fatalf("top commit message %q", body)
	}
	// The commit of what the agent left is the user's, as git commit would
	// make it; the agent's keep their author.
	if who := git(t, user, "log", "-3", "--format=%an <%ae> %at|%cn <%ce>", out.Branch); who != fmt.Sprintf("Ann Example <ann@example.com> %d|Ann Example <ann@example.com>\nagent <agent@example.com> %s|agent <agent@example.com>\nagent <agent@example.com> %s|agent <agent@example.com>",
		p.Manifest.CreatedAt.Unix(), git(t, user, "log", "-1", "--format=%at", out.Branch+"~1"), git(t, user, "log", "-1", "--format=%at", out.Branch+"~2")) {
		t.Fatalf("authors and committers:\n%s", who)
	}
	if out.Status != store.ChangeOpen || len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "is not reviewed yet") {
		t.Fatalf("an unreviewed export: status %q, warnings %q", out.Status, out.Warnings)
	}

	_, err = e.cr.Export(ctx, p, user, "")
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second export: %v, want refused (exit 4)", err)
	}
	refsBefore := git(t, user, "for-each-ref")
	for _, bad := range []string{"bad..name", "HEAD", "refs/heads/x", "@"} {
		if _, err := e.cr.Export(ctx, p, user, bad); fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "--branch") {
			t.Fatalf("branch %q: %v, want a usage error naming --branch", bad, err)
		}
	}
	if refs := git(t, user, "for-each-ref"); refs != refsBefore {
		t.Fatalf("refused exports changed the refs:\n%s\nwas\n%s", refs, refsBefore)
	}
	if _, err := e.cr.Export(ctx, p, t.TempDir(), ""); fail.KindOf(err) != fail.Usage {
		t.Fatalf("not a repository: %v, want a usage error", err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := e.cr.Export(ctx, p, missing, ""); fail.KindOf(err) != fail.Usage || err.Error() != "--repo "+missing+": no such directory: give the path of your repository" {
		t.Fatalf("a missing repository: %v", err)
	}
	if _, err := e.cr.Review(ctx, p, store.ChangeApproved, changes.ReviewOptions{Note: ""}); err != nil {
		t.Fatal(err)
	}
	p, err = e.cr.Open(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := e.cr.Export(ctx, p, user, "approved"); err != nil || out.Status != store.ChangeApproved || len(out.Warnings) != 0 {
		t.Fatalf("an approved export: %v %+v", err, out)
	}
	other := filepath.Join(t.TempDir(), "other")
	git(t, e.dir, "init", "-q", other)
	if _, err := e.cr.Export(ctx, p, other, ""); err == nil || !strings.Contains(err.Error(), "fetch it first") {
		t.Fatalf("repository without the base: %v", err)
	}
}

// TestExportWithoutIdentity: when git knows no one to make the commit of
// what the agent left as (user.useConfigOnly, no user.email anywhere),
// export fails as git commit would, saying what to set, and creates no
// branch.
func TestExportWithoutIdentity(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	_, p := agentWork(t, e)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	for _, k := range []string{"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	git(t, e.repo, "config", "user.useConfigOnly", "true")
	refs := git(t, e.repo, "for-each-ref")
	_, err := e.cr.Export(ctx, p, e.repo, "")
	if fail.KindOf(err) != fail.Failed || !strings.Contains(err.Error(), "git does not know who you are in "+e.repo+": set user.name and user.email") {
		t.Fatalf("export without an identity: %v", err)
	}
	if got := git(t, e.repo, "for-each-ref"); got != refs {
		t.Fatalf("a failed export changed the refs:\n%s", got)
	}
	// GIT_AUTHOR_* name the author as for git commit.
	t.Setenv("GIT_AUTHOR_NAME", "Env Author")
	t.Setenv("GIT_AUTHOR_EMAIL", "env@example.com")
	t.Setenv("GIT_COMMITTER_NAME", "Env Committer")
	t.Setenv("GIT_COMMITTER_EMAIL", "committer@example.com")
	out, err := e.cr.Export(ctx, p, e.repo, "")
	if err != nil {
		t.Fatal(err)
	}
	if who := git(t, e.repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", out.Branch); who != "Env Author <env@example.com>|Env Committer <committer@example.com>" {
		t.Fatalf("author|committer %q", who)
	}
}

// TestVerify: every hash and the tree are recomputed; each kind of
// tampering is named.
func TestVerify(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	_, p := agentWork(t, e)
	intact := func() *changes.Report {
		t.Helper()
		r, err := e.cr.Verify(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := intact(); !r.Intact {
		t.Fatalf("a fresh package: %+v", r)
	}
	file := func(name string) string { return filepath.Join(p.Dir, name) }
	restore := func(name string) func() {
		b, _ := os.ReadFile(file(name))
		return func() { os.WriteFile(file(name), b, 0o600) }
	}
	named := func(what, want string) {
		t.Helper()
		r := intact()
		for _, pr := range r.Problems {
			if pr.File == want {
				return
			}
		}
		t.Fatalf("%s: problems %+v, want one naming %s", what, r.Problems, want)
	}

	undo := restore(changes.PatchFile)
	os.WriteFile(file(changes.PatchFile), []byte("not a patch\n"), 0o600)
	named("patch replaced", changes.PatchFile)
	undo()

	undo = restore(changes.EvidenceFile)
	b, _ := os.ReadFile(file(changes.EvidenceFile))
	os.WriteFile(file(changes.EvidenceFile), []byte(strings.Replace(string(b), `"failed"`, `"passed"`, 1)+" "), 0o600)
	named("evidence edited", changes.EvidenceFile)
	undo()

	undo = restore(changes.ManifestFile)
	b, _ = os.ReadFile(file(changes.ManifestFile))
	os.WriteFile(file(changes.ManifestFile), []byte(strings.Replace(string(b), "Agent work", "Harmless", 1)), 0o600)
	named("manifest edited", changes.ManifestFile)
	undo()

	os.WriteFile(file("extra.sh"), []byte("#!/bin/sh\n"), 0o600)
	named("file added", "extra.sh")
	os.Remove(file("extra.sh"))

	// the first step, named after its script's words
	steps, _ := filepath.Glob(filepath.Join(e.root, "runs", p.RunID, "steps", "0001-sh-c-*"))
	if len(steps) != 1 {
		t.Fatalf("step 1: %q", steps)
	}
	log := filepath.Join(steps[0], "stdout.log")
	lb, _ := os.ReadFile(log)
	os.WriteFile(log, append(lb, "rewritten\n"...), 0o644)
	named("log edited", "steps/"+filepath.Base(steps[0])+"/stdout.log")
	os.WriteFile(log, lb, 0o644)

	// A consistent forgery: a new patch, its hash in the manifest and the
	// manifest's hash in the store. Only the tree recomputation finds it.
	undoP, undoM := restore(changes.PatchFile), restore(changes.ManifestFile)
	pb, _ := os.ReadFile(file(changes.PatchFile))
	forged := strings.Replace(string(pb), "+package b", "+package evil", 1)
	os.WriteFile(file(changes.PatchFile), []byte(forged), 0o600)
	var m map[string]any
	mb, _ := os.ReadFile(file(changes.ManifestFile))
	json.Unmarshal(mb, &m)
	m["files"].(map[string]any)[changes.PatchFile] = map[string]any{"sha256": sha([]byte(forged)), "size": len(forged)}
	mb, _ = json.MarshalIndent(m, "", "  ")
	os.WriteFile(file(changes.ManifestFile), mb, 0o600)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.root, store.FileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := p.ManifestSHA256
	if _, err := db.Exec(`UPDATE change_requests SET manifest_sha256 = ? WHERE id = ?`, sha(mb), p.ID); err != nil {
		t.Fatal(err)
	}
	p.ManifestSHA256 = sha(mb)
	r := intact()
	if r.Intact || len(r.Problems) != 1 || !strings.Contains(r.Problems[0].Problem, "gives tree") {
		t.Fatalf("a consistent forgery: %+v, want the tree named", r)
	}
	undoP()
	undoM()
	p.ManifestSHA256 = old
	db.Exec(`UPDATE change_requests SET manifest_sha256 = ? WHERE id = ?`, old, p.ID)
	if r := intact(); !r.Intact {
		t.Fatalf("restored: %+v", r)
	}
}

// TestReview: every decision is kept in order; the status is the latest;
// an approval of a tampered package is refused.
func TestReview(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	_, p := agentWork(t, e)
	if _, err := e.cr.Review(ctx, p, store.ChangeRejected, changes.ReviewOptions{Note: "needs tests"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cr.Review(ctx, p, store.ChangeApproved, changes.ReviewOptions{Note: "tests added"}); err != nil {
		t.Fatal(err)
	}
	c, err := e.st.GetChange(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != store.ChangeApproved || len(c.Reviews) != 2 || c.Reviews[0].Decision != store.ChangeRejected ||
		c.Reviews[0].Note != "needs tests" || c.Reviews[1].Reviewer != "tester" || c.Reviews[1].DecidedAt.IsZero() {
		t.Fatalf("after reject then approve: %+v", c)
	}
	os.WriteFile(filepath.Join(p.Dir, changes.PatchFile), []byte("x"), 0o600)
	if _, err := e.cr.Review(ctx, p, store.ChangeApproved, changes.ReviewOptions{Note: ""}); err == nil || !strings.Contains(err.Error(), "fails verification") {
		t.Fatalf("approving a tampered package: %v", err)
	}
}

// TestCreateRefusals: an empty change and one over XMODE_CR_MAX_BYTES are
// refused (exit 4), the latter naming its largest files; nothing is left
// behind.
func TestCreateRefusals(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n"})
	s := e.create(sandbox.CreateOptions{})
	e.sh(s, `printf 'x\n' > .git/info/exclude && printf 'ignored' > x`)
	_, err := e.cr.Create(ctx, s, changes.CreateOptions{})
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "nothing to package") {
		t.Fatalf("empty change: %v", err)
	}
	e.sh(s, `head -c 3000 /dev/zero > big.bin && head -c 1000 /dev/zero > mid.bin && printf 'small\n' > small.txt`)
	e.cr.MaxBytes = 2048
	_, err = e.cr.Create(ctx, s, changes.CreateOptions{})
	if fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "XMODE_CR_MAX_BYTES") ||
		!strings.Contains(err.Error(), "big.bin (2.9 KiB)") || !strings.Contains(err.Error(), "mid.bin") {
		t.Fatalf("too large: %v", err)
	}
	if es, _ := os.ReadDir(filepath.Join(e.root, "runs", s.RunID, changes.PackagesDir)); len(es) != 0 {
		t.Fatalf("a refused change request left %v", es)
	}
	if list, _ := e.st.ListChanges(ctx, store.ChangeFilter{}); len(list) != 0 {
		t.Fatalf("a refused change request was recorded: %+v", list)
	}
}

// TestEvidence: evidence.json holds every step with its outcome, its log
// hashes, and the agent summary a step's result.json carries.
func TestEvidence(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n"})
	s := e.create(sandbox.CreateOptions{})
	e.sh(s, `printf 'x\n' >> README && echo built`)
	res, err := e.svc.Exec(ctx, s, sandbox.ExecOptions{Argv: []string{"sh", "-c", "echo broke >&2; exit 3"}, Name: "test"})
	if err != nil || res.ExitCode != 3 {
		t.Fatal(err, res)
	}
	// an agent step's result.json carries an "agent" object
	// (docs/reference.md, "Step result")
	rj := filepath.Join(res.Dir, "result.json")
	b, _ := os.ReadFile(rj)
	os.WriteFile(rj, []byte(strings.Replace(string(b), "{", `{"agent":{"kind":"codex","final_message":"done"},`, 1)), 0o644)
	p, err := e.cr.Create(ctx, s, changes.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := e.cr.Evidence(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Steps) != 2 {
		t.Fatalf("steps %+v", ev.Steps)
	}
	built, broke := ev.Steps[0], ev.Steps[1]
	if built.Status != "passed" || broke.Status != "failed" || *broke.ExitCode != 3 || broke.Name != "test" ||
		broke.Stderr == nil || broke.Stderr.Size != 6 || !strings.HasSuffix(broke.StderrPath, "/steps/0002-test/stderr.log") {
		t.Fatalf("steps %+v %+v", built, broke)
	}
	var agent map[string]string
	if json.Unmarshal(broke.Agent, &agent) != nil || agent["kind"] != "codex" || agent["final_message"] != "done" {
		t.Fatalf("agent summary %s", broke.Agent)
	}
}

// TestCreateFromPatch: a patch made elsewhere (a cloud task's diff),
// applied to the session's base, packaged like any change: the package's
// tree is the patch's, and it verifies.
func TestCreateFromPatch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n", "gone.txt": "bye\n"})
	s := e.create(sandbox.CreateOptions{})
	// the change, made in another clone
	other := filepath.Join(t.TempDir(), "other")
	git(t, e.dir, "clone", "-q", e.repo, other)
	write(t, filepath.Join(other, "README"), "hello\ncloud\n")
	write(t, filepath.Join(other, "bin.dat"), "\x00\x01\x02binary")
	os.Remove(filepath.Join(other, "gone.txt"))
	git(t, other, "add", "-A")
	want := git(t, other, "write-tree")
	patch := gitOutEnv(t, other, nil, "diff", "--cached", "--binary") + "\n"

	p, err := e.cr.CreateFromPatch(ctx, s, []byte(patch), changes.CreateOptions{Title: "cloud task"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tree != want || p.Manifest.Worktree != changes.KindPatch || p.Manifest.Stat.Files != 3 {
		t.Fatalf("from a patch: tree %s (want %s), %+v", p.Tree, want, p.Manifest.Stat)
	}
	if r, err := e.cr.Verify(ctx, p); err != nil || !r.Intact {
		t.Fatalf("verify: %v %+v", err, r)
	}
	if _, err := e.cr.CreateFromPatch(ctx, s, []byte("diff --git a/nope b/nope\n--- a/nope\n+++ b/nope\n@@ -1 +1 @@\n-x\n+y\n"), changes.CreateOptions{}); fail.KindOf(err) != fail.Usage {
		t.Fatalf("a patch that does not apply: %v", err)
	}
}

// plantRefusedCommit makes the sandbox commit, with git mktree and git
// commit-tree, a tree holding .GIT/hooks/post-checkout and git~1/config
// (paths git refuses to check out) between two ordinary commits, and
// leaves a file uncommitted; the worktree never holds those paths.
func plantRefusedCommit(e *env, s *store.Session) {
	e.t.Helper()
	e.sh(s, `set -e
printf 'one\n' >> README && git commit -qam 'first: README'
blob=$(printf '#!/bin/sh\necho owned\n' | git hash-object -w --stdin)
hooks=$(printf '100755 blob %s\tpost-checkout\n' "$blob" | git mktree)
dotgit=$(printf '040000 tree %s\thooks\n' "$hooks" | git mktree)
cfg=$(printf '100644 blob %s\tconfig\n' "$blob" | git mktree)
tree=$( (git ls-tree HEAD; printf '040000 tree %s\t.GIT\n040000 tree %s\tgit~1\n' "$dotgit" "$cfg") | git mktree)
git reset -q --soft "$(git commit-tree "$tree" -p HEAD -m 'second: planted')"
printf 'two\n' >> README && git commit -qam 'third: README again'
printf 'uncommitted\n' > notes.txt`)
}

// TestExportCommitWithRefusedPaths: an agent commit whose tree holds paths
// git refuses does not stop `cr create` (it warns), and `cr export` does
// not re-create it: the branch is one commit of the change on top of the
// base, saying why; every commit on it passes git fsck --strict, holds no
// such path, and checks out with the real git.
func TestExportCommitWithRefusedPaths(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n"})
	s := e.create(sandbox.CreateOptions{})
	plantRefusedCommit(e, s)
	p, err := e.cr.Create(ctx, s, changes.CreateOptions{Title: "Agent work", Message: "three commits"})
	if err != nil {
		t.Fatalf("cr create: %v", err)
	}
	if w := strings.Join(p.Manifest.Warnings, "\n"); len(p.Manifest.Commits) != 3 || !strings.Contains(w, "holds .GIT/ (git refuses this path: .git (in any case)") ||
		!strings.Contains(w, "cr export makes one commit of the whole change") {
		t.Fatalf("%d commits recorded, warnings %q", len(p.Manifest.Commits), w)
	}
	if rep, err := e.cr.Verify(ctx, p); err != nil || !rep.Intact {
		t.Fatalf("verify: %v %+v", err, rep)
	}

	user := e.repo
	git(t, user, "config", "user.name", "Ann Example")
	git(t, user, "config", "user.email", "ann@example.com")
	out, err := e.cr.Export(ctx, p, user, "")
	if err != nil {
		t.Fatal(err)
	}
	if out.Commits != 1 || out.Tree != p.Tree || out.Squashed == nil || out.Squashed.Commit != p.Manifest.Commits[1].ID.String() ||
		out.Squashed.Path != ".GIT/" || !strings.Contains(out.Squashed.Reason, "git refuses this path") {
		t.Fatalf("export: %+v %+v", out, out.Squashed)
	}
	commits := strings.Fields(git(t, user, "rev-list", p.BaseCommit+".."+out.Branch))
	if len(commits) != 1 || git(t, user, "rev-parse", out.Branch+"^") != p.BaseCommit {
		t.Fatalf("the branch: %v, want one commit on the base", commits)
	}
	body := git(t, user, "log", "-1", "--format=%an%n%B", out.Branch)
	for _, want := range []string{"Ann Example\nAgent work\n", "three commits", "holds .GIT/", "first: README", "second: planted", "third: README again", "Change request: " + p.ID} {
		if !strings.Contains(body, want) {
			t.Fatalf("the commit's message lacks %q:\n%s", want, body)
		}
	}
	if out, err := gitTry(user, nil, "fsck", "--strict", "--no-dangling"); err != nil || out != "" {
		t.Fatalf("git fsck --strict: %v\n%s", err, out)
	}
	for i, c := range commits {
		for _, f := range strings.Split(git(t, user, "ls-tree", "-r", "--name-only", "--full-tree", c), "\n") {
			if strings.Contains(strings.ToLower(f), ".git/") || strings.HasPrefix(f, "git~1/") {
				t.Fatalf("commit %s holds %s", c, f)
			}
		}
		if out, err := gitTry(user, nil, "worktree", "add", "-q", "--detach", filepath.Join(t.TempDir(), fmt.Sprint(i)), c); err != nil {
			t.Fatalf("git cannot check out %s: %v\n%s", c, err, out)
		}
	}
}
