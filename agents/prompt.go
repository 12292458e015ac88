package agents

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// promptDir is where a command agent's prompt file lives for the length of
// its step: inside the worktree, so a docker sandbox sees it at the same
// place relative to {worktree} whatever the mount model, and under a
// directory named .git, which git (and go-git) skip at any depth — the
// file never shows in `git status`, is never added by `git add -A`, and
// never reaches a change request. It is removed when the step ends.
const promptDir = ".xmode-agent/.git"

type promptFile struct {
	root      *os.Root
	rel       string // relative to the worktree
	inSandbox string // {prompt_file}
}

// writePrompt writes the prompt into the session's worktree through an
// os.Root, so that nothing a sandboxed step planted there (a symlinked
// .xmode-agent) can make the host write outside the worktree; the file is
// new (O_EXCL), named at random.
func (r *Runner) writePrompt(sess *store.Session, dirInSandbox, prompt string) (*promptFile, error) {
	worktree, err := r.Svc.Guard.CheckWorktree(sess.RunID, sess.WorktreePath)
	if err != nil {
		return nil, err
	}
	root, err := fsguard.OpenRootPath(worktree)
	if err != nil {
		return nil, fmt.Errorf("open worktree %s: %w", worktree, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := &promptFile{root: root, rel: path.Join(promptDir, "prompt-"+hex.EncodeToString(b[:])+".txt")}
	p.inSandbox = path.Join(dirInSandbox, p.rel)
	fail := func(err error) (*promptFile, error) {
		root.Close()
		return nil, fmt.Errorf("write the prompt file into the worktree: %w", err)
	}
	// 0755/0644: a container may run steps as another user than xmode.
	if err := root.MkdirAll(promptDir, 0o755); err != nil {
		return fail(err)
	}
	f, err := root.OpenFile(p.rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fail(err)
	}
	_, err = f.WriteString(prompt)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = root.Remove(p.rel)
		return fail(err)
	}
	return p, nil
}

// remove deletes the prompt file and the directories made for it when
// they are empty (what the agent put there stays).
func (p *promptFile) remove() {
	_ = p.root.Remove(p.rel)
	_ = p.root.Remove(promptDir)
	_ = p.root.Remove(path.Dir(promptDir))
	p.root.Close()
}
