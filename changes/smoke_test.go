package changes_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/xmode/xmode/sandbox"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t, nil)
	e.makeRepo(map[string]string{"README": "hello\n", "src/a.go": "package a\n", "link": "-> README", ".gitignore": "*.log\n"})
	s := e.create(sandbox.CreateOptions{})
	e.sh(s, `echo more >> README && mkdir -p new/dir && printf 'x\000y' > new/dir/bin && echo x > y.log && chmod +x src/a.go && git add -A && git commit -qm agent1 && rm link && echo untracked > u.txt`)
	sn, err := e.cr.Snapshot(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	var b bytes.Buffer
	if err := sn.Patch(context.Background(), &b, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("commits %d warnings %v skipped %v\n%s", len(sn.Commits), sn.Warnings, sn.Skipped, b.String())
	st, err := sn.Stat(context.Background())
	t.Logf("%+v %v", st, err)
	// compare with git add -A in the worktree copy
	want := gitOutEnv(t, e.worktree(s), nil, "-c", "core.hooksPath=/dev/null", "add", "-A")
	_ = want
	tree := gitOutEnv(t, e.worktree(s), nil, "write-tree")
	if tree != sn.Tree.String() {
		t.Fatalf("tree %s, git says %s", sn.Tree, tree)
	}
}
