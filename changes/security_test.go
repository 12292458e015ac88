package changes_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/gitread"
	"github.com/xmode/xmode/gitread/gitreadtest"
	"github.com/xmode/xmode/sandbox"
)

// hostSide is what lives outside the storage root: a secret, a directory
// for markers, files an attacker would like read.
type hostSide struct {
	dir, secret, markers string
}

func newHostSide(t *testing.T) *hostSide {
	h := &hostSide{dir: t.TempDir(), secret: "TOP-SECRET-" + strings.ToUpper(filepath.Base(t.TempDir()))}
	h.markers = filepath.Join(h.dir, "markers")
	os.Mkdir(h.markers, 0o755)
	write(t, filepath.Join(h.dir, "secret.txt"), h.secret+"\n")
	write(t, filepath.Join(h.dir, "ignore-all"), "*\n")
	write(t, filepath.Join(h.dir, "otherwt", "file.txt"), h.secret+"\n")
	// a repository holding the secret, where a redirect could point
	repo := filepath.Join(h.dir, "hostrepo")
	git(t, h.dir, "init", "-q", "-b", "main", repo)
	write(t, filepath.Join(repo, "secret.txt"), h.secret+"\n")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-qm", "secret")
	return h
}

func (h *hostSide) markersLeft(t *testing.T) []string {
	t.Helper()
	es, err := os.ReadDir(h.markers)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// noSecret fails when any file under dir holds the secret, loose git
// objects decompressed.
func (h *hostSide) noSecret(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if zr, err := zlib.NewReader(bytes.NewReader(b)); err == nil {
			if plain, err := io.ReadAll(zr); err == nil {
				b = append(b, plain...)
			}
		}
		if bytes.Contains(b, []byte(h.secret)) {
			t.Errorf("%s holds the secret", p)
		}
		return nil
	})
}

// plantScript turns a clone's .git and worktree hostile: filter, textconv
// and external diff drivers, fsmonitor, hooks and core.hooksPath, all of
// which touch a marker when run; core.worktree pointing outside;
// info/exclude and a .gitignore that are symlinks to a file outside that
// ignores everything; a symlink to the secret; a FIFO.
func plantScript(h *hostSide) string {
	m := h.markers
	lines := []string{
		`set -e`,
		`mkdir -p .git/evil .git/evilhooks`,
		`for n in filter smudge textconv extdiff fsmonitor; do printf '#!/bin/sh\ntouch ` + m + `/%s\ncat\n' $n > .git/evil/$n; chmod +x .git/evil/$n; done`,
		`for n in pre-commit post-commit post-checkout post-index-change reference-transaction pre-auto-gc; do ` +
			`printf '#!/bin/sh\ntouch ` + m + `/hook-%s\n' $n > .git/hooks/$n; chmod +x .git/hooks/$n; ` +
			`printf '#!/bin/sh\ntouch ` + m + `/hookspath-%s\n' $n > .git/evilhooks/$n; chmod +x .git/evilhooks/$n; done`,
		`printf '[filter "evil"]\n\tclean = %s/.git/evil/filter\n\tsmudge = %s/.git/evil/smudge\n\trequired\n' "$PWD" "$PWD" >> .git/config`,
		`printf '[diff "evil"]\n\ttextconv = %s/.git/evil/textconv\n\tcommand = %s/.git/evil/extdiff\n' "$PWD" "$PWD" >> .git/config`,
		`printf '[diff]\n\texternal = %s/.git/evil/extdiff\n' "$PWD" >> .git/config`,
		`printf '[core]\n\tfsmonitor = %s/.git/evil/fsmonitor\n\thooksPath = %s/.git/evilhooks\n\tworktree = ` + h.dir + `/otherwt\n' "$PWD" "$PWD" >> .git/config`,
		`printf '* filter=evil diff=evil\n' > .gitattributes`,
		`ln -s ` + h.dir + `/secret.txt leak`,
		`mkdir sub && ln -s ` + h.dir + `/ignore-all sub/.gitignore && printf 'visible\n' > sub/visible.txt`,
		`rm -f .git/info/exclude && ln -s ` + h.dir + `/ignore-all .git/info/exclude`,
		`mkfifo pipe`,
	}
	return strings.Join(lines, "\n")
}

// TestUntrustedWorktree: a sandbox step plants every way git could be made
// to run a program or read outside the worktree; `sandbox diff` (snapshot,
// patch, stat) and `cr create` then run none of them and no package file
// holds the secret. The same plants do fire when the git binary works in
// that worktree (the control), so they are live.
func TestUntrustedWorktree(t *testing.T) {
	ctx := context.Background()
	h := newHostSide(t)
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n", "src/a.go": "package a\n"})

	// The secret as an object only alternates reach, and a commit that
	// needs it.
	alt := filepath.Join(h.dir, "hostrepo", ".git", "objects")
	secretBlob := git(t, filepath.Join(h.dir, "hostrepo"), "rev-parse", "HEAD:secret.txt")

	s := e.create(sandbox.CreateOptions{})
	e.sh(s, `git checkout -q -b agent && printf '%s\n' `+alt+` > .git/objects/info/alternates && `+
		`git update-index --add --cacheinfo 100644,`+secretBlob+`,stolen.txt && git -c core.hooksPath=/dev/null commit -q --no-verify -m steal`)
	e.sh(s, `printf 'change\n' >> README && printf 'new\n' > new.txt`)
	e.sh(s, plantScript(h))

	sn, err := e.cr.Snapshot(ctx, s, changes.WantPatch|changes.WantStat)
	if err != nil {
		t.Fatal(err)
	}
	var patch bytes.Buffer
	if err := sn.Patch(ctx, &patch, false); err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Stat(ctx); err != nil {
		t.Fatal(err)
	}
	sn.Close()
	p, err := e.cr.Create(ctx, s, changes.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m := h.markersLeft(t); len(m) > 0 {
		t.Fatalf("building the diff and the change request ran what the sandbox planted: %v", m)
	}
	h.noSecret(t, p.Dir)
	h.noSecret(t, filepath.Join(e.root, "runs", s.RunID, changes.StoreDirName))
	if bytes.Contains(patch.Bytes(), []byte(h.secret)) {
		t.Fatalf("sandbox diff shows the secret:\n%s", patch.String())
	}

	// What was packaged: the files as they are, the link as a link, the
	// ignore rules behind symlinks not followed, the FIFO left out, the
	// commit that needs an object outside not recorded.
	m := p.Manifest
	files := map[string]changes.FileStat{}
	for _, f := range m.Stat.PerFile {
		files[f.Path] = f
	}
	for _, want := range []string{"README", "new.txt", "leak", "sub/visible.txt", "sub/.gitignore", ".gitattributes"} {
		if _, ok := files[want]; !ok {
			t.Errorf("%s is not in the change request: %+v", want, m.Stat.PerFile)
		}
	}
	if f := files["leak"]; f.NewMode != "120000" {
		t.Errorf("leak: mode %s, want a symlink (120000)", f.NewMode)
	}
	if _, ok := files["pipe"]; ok {
		t.Errorf("the FIFO was packaged")
	}
	if len(m.Skipped) != 1 || m.Skipped[0].Path != "pipe" {
		t.Errorf("skipped %+v, want the FIFO", m.Skipped)
	}
	if len(m.Commits) != 0 || !strings.Contains(strings.Join(m.Warnings, "\n"), "not recorded") {
		t.Errorf("commits %+v, warnings %q: the commit that needs an object only alternates reach must be left out, with a warning", m.Commits, m.Warnings)
	}
	if rep, err := e.cr.Verify(ctx, p); err != nil || !rep.Intact {
		t.Fatalf("verify: %v %+v", err, rep)
	}

	// The control: git itself, working in that worktree (GIT_WORK_TREE
	// overriding core.worktree, so it looks at the files), runs every kind
	// of plant.
	wt := e.worktree(s)
	os.Remove(filepath.Join(wt, ".git", "info", "exclude")) // else everything is ignored
	os.Remove(filepath.Join(wt, "pipe"))
	for _, args := range [][]string{{"status"}, {"diff", "HEAD"}, {"add", "-A"}, {"commit", "-qm", "control"}} {
		gitTry(wt, []string{"GIT_WORK_TREE=" + wt, "GIT_AUTHOR_NAME=c", "GIT_AUTHOR_EMAIL=c@x", "GIT_COMMITTER_NAME=c", "GIT_COMMITTER_EMAIL=c@x"}, args...)
	}
	fired := strings.Join(h.markersLeft(t), " ")
	for _, want := range []string{"filter", "fsmonitor", "extdiff", "hookspath-pre-commit"} {
		if !strings.Contains(fired, want) {
			t.Fatalf("the planted %s did not run under git either (%s): the test proves nothing for it", want, fired)
		}
	}
}

// TestRedirectedGitDir: a clone's .git replaced by a file pointing at a
// repository outside, and a project-machine worktree's .git file rewritten
// the same way; neither is followed.
func TestRedirectedGitDir(t *testing.T) {
	ctx := context.Background()
	h := newHostSide(t)
	e := newEnv(t, map[string]string{"XMODE_PROJECT_MACHINES": "1"})
	e.makeRepo(map[string]string{"README": "hello\n"})
	redirect := `printf 'gitdir: ` + h.dir + `/hostrepo/.git\n' > .git && printf 'change\n' >> README`

	for _, o := range []sandbox.CreateOptions{{}, {Project: "redir", Repo: e.repo}} {
		s := e.create(o)
		e.sh(s, `rm -rf .git && `+redirect)
		p, err := e.cr.Create(ctx, s, changes.CreateOptions{})
		if err != nil {
			t.Fatalf("project %q: %v", o.Project, err)
		}
		h.noSecret(t, p.Dir)
		h.noSecret(t, filepath.Join(e.root, "runs", s.RunID, changes.StoreDirName))
		if p.Manifest.Stat.Files != 1 || p.Manifest.Stat.PerFile[0].Path != "README" {
			t.Fatalf("project %q: %+v, want README changed only", o.Project, p.Manifest.Stat.PerFile)
		}
	}
}

// TestTamperedObjects: the sandbox forges the base version of README (a
// loose object under README's ID holding other content) and replaces its
// index with a FIFO. The forgery is detected and the base is fetched from
// the session's repository; nothing blocks on the FIFO.
func TestTamperedObjects(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n", "other": "x\n"})
	s := e.create(sandbox.CreateOptions{})
	real := git(t, e.repo, "rev-parse", "HEAD:README")
	e.sh(s, `f=$(printf 'FORGED\n' | git hash-object -w --stdin) && `+
		`mkdir -p .git/objects/`+real[:2]+` && cp .git/objects/$(echo $f | cut -c1-2)/$(echo $f | cut -c3-) .git/objects/`+real[:2]+`/`+real[2:]+` && `+
		`rm -f .git/index && mkfifo .git/index && printf 'change\n' >> README`)
	p, err := e.cr.Create(ctx, s, changes.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch, err := e.cr.ReadFile(p, changes.PatchFile)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(patch, []byte("FORGED")) || !bytes.Contains(patch, []byte(" hello\n+change\n")) {
		t.Fatalf("the patch is not against the real base:\n%s", patch)
	}
	if w := strings.Join(p.Manifest.Warnings, "\n"); !strings.Contains(w, "tampered or corrupt") || !strings.Contains(w, "fetched") {
		t.Fatalf("warnings %q: want the forgery named and the base fetched", w)
	}
	if rep, err := e.cr.Verify(ctx, p); err != nil || !rep.Intact {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

// TestPathsGitRefuses: paths git refuses to track (.git in any case, its
// NTFS and HFS+ aliases, a symlink named .gitmodules) do not block a
// change request: each is left out and listed in skipped with the reason,
// near misses are kept, the package verifies, and its patch applies with
// `git apply --index` to a fresh clone (git's defaults refuse those paths).
func TestPathsGitRefuses(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n"})
	s := e.create(sandbox.CreateOptions{})
	e.sh(s, `set -e
mkdir -p git~1 GIT~1 .git. '.git ' .GIT/hooks sub/.Git .github "$(printf '.g\342\200\214it')"
echo x > git~1/HEAD; echo y > GIT~1/x; echo z > .git./x; echo w > '.git /x'
printf '#!/bin/sh\n' > .GIT/hooks/pre-commit; echo c > sub/.Git/config; echo k > sub/keep
echo h > "$(printf '.g\342\200\214it')/config"
ln -s README .gitmodules
echo '# kept' > .gitignore; echo g > .github/x; echo n > git~2x; echo more >> README`)

	sn, err := e.cr.Snapshot(ctx, s, changes.WantStat)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sn.Stat(ctx)
	sn.Close()
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.cr.Create(ctx, s, changes.CreateOptions{})
	if err != nil {
		t.Fatalf("cr create: %v", err)
	}
	for name, got := range map[string][]changes.Skipped{"sandbox diff": sn.Skipped, "manifest": p.Manifest.Skipped} {
		reasons := map[string]string{}
		for _, sk := range got {
			reasons[sk.Path] = sk.Reason
		}
		for path, want := range map[string]string{
			"git~1/": "NTFS", "GIT~1/": "NTFS", ".git./": "NTFS", ".git /": "NTFS", ".GIT/": ".git (in any case)",
			"sub/.Git/": ".git (in any case)", ".g\u200cit/": "HFS+", ".gitmodules": "symlink named .gitmodules",
		} {
			if !strings.Contains(reasons[path], "git refuses this path") || !strings.Contains(reasons[path], want) {
				t.Errorf("%s: skipped %q: %q, want git's reason (%s)", name, path, reasons[path], want)
			}
		}
		if len(got) != 8 {
			t.Errorf("%s: skipped %+v, want the 8 paths git refuses", name, got)
		}
	}
	files := map[string]bool{}
	for _, f := range st.PerFile {
		files[f.Path] = true
	}
	for _, want := range []string{".gitignore", ".github/x", "git~2x", "sub/keep", "README"} {
		if !files[want] {
			t.Errorf("%s was left out: %+v", want, st.PerFile)
		}
	}
	if rep, err := e.cr.Verify(ctx, p); err != nil || !rep.Intact {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	git(t, e.dir, "clone", "-q", e.repo, clone)
	git(t, clone, "checkout", "-q", p.BaseCommit)
	git(t, clone, "apply", "--index", filepath.Join(p.Dir, changes.PatchFile))
	if tree := git(t, clone, "write-tree"); tree != p.Tree {
		t.Fatalf("the patch applied to a fresh clone gives tree %s, the manifest says %s", tree, p.Tree)
	}
}

// TestHostilePackInSandbox: the sandbox replaces the base version of a
// file it changed with the top of a 5,000-deep ref-delta chain. The chain
// is refused from its headers, with a one-line warning, the base is
// fetched from the session's repository, and the package is right.
func TestHostilePackInSandbox(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n", "other": "x\n"})
	s := e.create(sandbox.CreateOptions{})
	real := git(t, e.repo, "rev-parse", "HEAD:README")
	// the clone's objects loose, but for README's base version
	e.sh(s, `set -e; p=$(ls .git/objects/pack/*.pack); mv "$p" .git/p.pack; rm -f .git/objects/pack/*; git unpack-objects -q < .git/p.pack; rm .git/p.pack
rm .git/objects/`+real[:2]+`/`+real[2:]+`; ! git cat-file -e `+real+` 2>/dev/null; printf 'change\n' >> README`)
	realID, err := gitread.ParseHash(real)
	if err != nil {
		t.Fatal(err)
	}
	gitreadtest.PlantDeepChain(t, filepath.Join(e.worktree(s), ".git"), realID, 5000)

	p, err := e.cr.Create(ctx, s, changes.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(p.Manifest.Warnings, "\n")
	if !strings.Contains(w, "delta chain deeper than 4095") || !strings.Contains(w, "fetched") || len(w) > 1000 {
		t.Fatalf("warnings (%d bytes): %.1000s", len(w), w)
	}
	patch, err := e.cr.ReadFile(p, changes.PatchFile)
	if err != nil || !bytes.Contains(patch, []byte(" hello\n+change\n")) {
		t.Fatalf("the patch is not against the real base (%v):\n%s", err, patch)
	}
	if rep, err := e.cr.Verify(ctx, p); err != nil || !rep.Intact {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}
