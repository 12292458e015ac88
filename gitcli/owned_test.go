package gitcli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RunOwned reads none of the configuration a user (or anything that set
// the environment) could have: not the global config, not GIT_* variables
// (config through the environment, an external diff, another repository),
// not the user's attributes file. Each of them would run a program that
// leaves a marker.
func TestRunOwnedIgnoresEveryOutsideConfiguration(t *testing.T) {
	dir := repo(t)
	os.WriteFile(filepath.Join(dir, "README"), []byte("two\n"), 0o644)
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "two")
	home := t.TempDir()
	marker := filepath.Join(home, "marker")
	tool := filepath.Join(home, "tool.sh")
	os.WriteFile(tool, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755)
	os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[diff]\n\texternal = "+tool+"\n[diff \"x\"]\n\ttextconv = "+tool+"\n"), 0o644)
	os.MkdirAll(filepath.Join(home, ".config", "git"), 0o755)
	os.WriteFile(filepath.Join(home, ".config", "git", "attributes"), []byte("* diff=x\n"), 0o644)
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv("GIT_CONFIG_NOSYSTEM", "")
	t.Setenv("GIT_EXTERNAL_DIFF", tool)
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "core.pager")
	t.Setenv("GIT_CONFIG_VALUE_0", tool)
	t.Setenv("GIT_DIR", t.TempDir()) // another repository

	// the control: the same diff through Run picks the global config up
	if _, err := Run(context.Background(), nil, dir, "diff", "HEAD~1", "HEAD"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the control did not run the external diff: the test proves nothing (%v)", err)
	}
	os.Remove(marker)

	var out bytes.Buffer
	wait, err := StartOwned(context.Background(), Owned{Dir: dir, Stdout: &out}, "diff", "--no-ext-diff", "HEAD~1", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "+two") {
		t.Fatalf("owned diff: %q", out.String())
	}
	got, err := RunOwned(context.Background(), Owned{GitDir: filepath.Join(dir, ".git")}, "diff", "HEAD~1", "HEAD")
	if err != nil || !strings.Contains(got, "-one") {
		t.Fatalf("owned diff by GIT_DIR: %q %v", got, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("RunOwned ran a program the user's configuration or environment named")
	}
}
