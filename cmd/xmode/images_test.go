package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/store"
)

// The blocks docs/images.md marks tested run as written: an image made
// from a static busybox with `docker import`, a Dockerfile from it built
// with no network, and a sandbox on the result running the toolchain the
// Dockerfile added. The image names and the repository are made this
// test's own; nothing else of the blocks changes.
func TestImagesGuide(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	if _, err := os.Stat(dockertest.BusyboxPath); err != nil {
		dockertest.Image(t) // skips, or fails in CI, saying to install busybox-static
	}
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Skip(t, "the guide runs the docker CLI: %v", err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "images.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)\n### [^\n]*\\(tested\\)\n.*?```sh\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	if len(blocks) != 3 {
		t.Fatalf("docs/images.md has %d tested blocks, want 3 (from a root filesystem, a Dockerfile, a sandbox on it)", len(blocks))
	}
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	id := strings.ToLower(strings.TrimPrefix(store.NewRunID(), "run_"))
	base, img := "xmode-test-images-base-"+id+":1", "xmode-test-images-"+id+":1"
	t.Cleanup(func() {
		for _, ref := range []string{img, base} {
			_, _ = cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
	root := filepath.Join(dir, "root")
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// xmode on the guide's PATH is this test binary, as main.
	wrapper := "#!/bin/sh\nXMODE_TEST_AS_MAIN=1 exec " + os.Args[0] + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "xmode"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A step that failed leaves its sandbox: stop what is left.
		c := exec.Command(filepath.Join(bin, "xmode"), "sandbox", "list", "-q")
		c.Env = append(os.Environ(), "XMODE_STORAGE_ROOT="+root)
		out, _ := c.Output()
		for _, s := range strings.Fields(string(out)) {
			c := exec.Command(filepath.Join(bin, "xmode"), "sandbox", "stop", s)
			c.Env = append(os.Environ(), "XMODE_STORAGE_ROOT="+root)
			_ = c.Run()
		}
	})
	script := "set -eu\n"
	for _, b := range blocks {
		script += b[1]
	}
	script = strings.NewReplacer("mybase:1", base, "myimage:1", img, "~/src/project", repo).Replace(script)
	c := exec.Command("bash", "-c", script)
	c.Dir = dir
	c.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "XMODE_STORAGE_ROOT="+root, "NO_COLOR=1",
		"XMODE_SANDBOX_MAX_OPEN=0", "DOCKER_BUILDKIT=0")
	if h := dockertest.Host(); h != client.DefaultDockerHost {
		c.Env = append(c.Env, "XMODE_SANDBOX_DOCKER_HOST="+h, "DOCKER_HOST="+h)
	}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("the guide's tested blocks: %v\n%s\n--- script ---\n%s", err, out, script)
	}
	if !strings.Contains(string(out), "toolchain ok: --version") {
		t.Fatalf("the sandbox did not run the image's toolchain:\n%s", out)
	}
}
