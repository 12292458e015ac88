package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// readmeBlock is one ```sh block of a doc.
type readmeBlock struct {
	line   int    // where it starts
	skip   string // why it is not run (a `<!-- readme-test: skip (why) -->` line before it)
	docker bool   // it needs a docker daemon (`<!-- readme-test: docker -->`)
	text   string
}

var readmeMarker = regexp.MustCompile(`^<!-- readme-test: (skip \((.+)\)|docker) -->$`)

// shellBlocks reads the ```sh blocks of a markdown file, with the marker
// line that may come right before each.
func shellBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []readmeBlock
	var cur *readmeBlock
	marker, markerLine := "", 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case line == "```sh":
			cur = &readmeBlock{line: n}
			if markerLine == n-1 {
				m := readmeMarker.FindStringSubmatch(marker)
				cur.skip, cur.docker = m[2], m[1] == "docker"
			}
		case strings.HasPrefix(line, "<!-- readme-test"):
			if !readmeMarker.MatchString(line) {
				t.Fatalf("%s:%d: %q: a marker is <!-- readme-test: skip (why) --> or <!-- readme-test: docker -->", path, n, line)
			}
			marker, markerLine = line, n
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: a ```sh block that never ends", path, cur.line)
	}
	return blocks
}

// The README runs as written: xmode installed with `make install
// PREFIX=<tmp>`, then every ```sh block of README.md, in order, in one
// shell, against a fresh git repository at path/to/your/repo — nothing
// substituted but the environment: PATH with the installed binary first,
// an empty HOME (the default storage root is under it), a docker image the
// daemon has in XMODE_SANDBOX_IMAGE. Blocks that need what a test cannot
// give (a terminal, the suite itself) are marked skip, with why. The
// examples are found wherever PREFIX was (`xmode examples`), and no doc
// names an install path instead.
func TestReadmeRunsAsWritten(t *testing.T) {
	t.Parallel()
	src, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		testenv.Skip(t, "make is not installed")
	}
	blocks := shellBlocks(t, filepath.Join(src, "README.md"))
	var script strings.Builder
	script.WriteString("set -ex\n")
	ran, docker := 0, false
	for _, b := range blocks {
		if b.skip != "" {
			continue
		}
		docker = docker || b.docker
		script.WriteString(b.text)
		ran++
	}
	if ran < 5 {
		t.Fatalf("only %d of the README's %d shell blocks would run", ran, len(blocks))
	}
	for _, doc := range append([]string{"README.md"}, globDocs(t, src)...) {
		b, err := os.ReadFile(filepath.Join(src, doc))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("/usr/local/share/xmode")) {
			t.Errorf("%s names the install path /usr/local/share/xmode: use $(xmode examples), which is right wherever PREFIX was", doc)
		}
	}

	dir := t.TempDir()
	prefix := filepath.Join(dir, "prefix")
	install := exec.Command("make", "install", "PREFIX="+prefix)
	install.Dir = src
	install.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("make install PREFIX=%s: %v\n%s", prefix, err, out)
	}
	bin := filepath.Join(prefix, "bin", "xmode")
	examples := filepath.Join(prefix, "share", "xmode", "examples")
	// `xmode examples` finds them beside the binary, through a symlink too.
	link := filepath.Join(dir, "elsewhere", "xmode")
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{bin, link} {
		if out, err := exec.Command(b, "examples").Output(); err != nil || string(out) != examples+"\n" {
			t.Fatalf("%s examples: %q %v, want %s", b, out, err, examples)
		}
	}

	home := filepath.Join(dir, "home")
	work := filepath.Join(dir, "work")
	repo := filepath.Join(work, "path", "to", "your", "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	// A repository whose `make test` passes, says something on stderr and
	// leaves a coverage report, as the README's commands expect of one.
	mk := "test:\n\t@echo 'ok: 3 tests passed'\n\t@echo 'coverage: 100.0% of statements' > coverage.out\n\t@echo 'warning: one slow test' >&2\n"
	if err := os.WriteFile(filepath.Join(repo, "Makefile"), []byte(mk), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, a := range [][]string{{"add", "Makefile"}, {"commit", "-qm", "make test"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, a...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", a, err, out)
		}
	}
	env := []string{"PATH=" + filepath.Join(prefix, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + home, "NO_COLOR=1"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "XMODE_") || strings.HasPrefix(k, "CODEX_") || strings.HasPrefix(k, "XDG_") ||
			k == "PATH" || k == "HOME" || k == "DOCKER_HOST" || k == "GIT_DIR" {
			continue
		}
		env = append(env, kv)
	}
	if docker {
		cli := dockertest.Require(t)
		env = append(env, "XMODE_SANDBOX_IMAGE="+dockertest.Image(t), "XMODE_SANDBOX_DOCKER_HOST="+dockertest.Host())
		dkRemoveSandboxes(t, cli, "", home)
	}
	sh := exec.Command("sh", "-c", script.String())
	sh.Dir, sh.Env = work, env
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	if err := sh.Run(); err != nil {
		t.Fatalf("the README's shell blocks, as written: %v\nstdout:\n%s\nstderr (set -x):\n%s", err, stdout.String(), stderr.String())
	}

	// What each part of it is for happened.
	for _, want := range []string{
		`(?m)^status: +review$`, // the loop with the stand-in agent
		`(?m)^Objective: +Write down what this repository is for$`, // run show of the newest run
		`(?m)^warning: one slow test$`,                             // logs "$id" test --stderr: the step make-test
		`(?m)^1 +make-test +0 `,                                    // logs "$id": the step named after its command
		`"name": "unit"`,                                           // --name unit, in sandbox show --json
		`coverage\.out`,                                            // diff --stat, cr show --patch
		`(?m)^\+coverage: 100\.0% of statements$`,                  // the patch
	} {
		if !regexp.MustCompile(want).MatchString(stdout.String()) {
			t.Errorf("the README's run printed no %s\nstdout:\n%s\nstderr:\n%s", want, stdout.String(), stderr.String())
		}
	}
	if b, err := os.ReadFile(filepath.Join(repo, "coverage.out")); err != nil || !strings.HasPrefix(string(b), "coverage: 100.0%") {
		t.Errorf("sandbox cp \"$id\":coverage.out . copied %q %v", b, err)
	}
	if docker && !regexp.MustCompile(`(?m)^Makefile$`).MatchString(stdout.String()) {
		t.Errorf("the docker block's ls did not list the worktree\n%s", stdout.String())
	}
}

// globDocs lists the user docs (docs/*.md and docs/cli/*.md), relative to
// the source root.
func globDocs(t *testing.T, src string) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"docs/*.md", "docs/cli/*.md"} {
		m, err := filepath.Glob(filepath.Join(src, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(src, p)
			out = append(out, rel)
		}
	}
	return out
}
