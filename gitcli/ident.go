package gitcli

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// Ident is a name and an email as git records them in a commit.
type Ident struct {
	Name, Email string
}

// Identity is who `git commit` in the repository dir would record as
// author and committer: GIT_AUTHOR_* and GIT_COMMITTER_*, else user.name
// and user.email from the repository's, the user's or the system's
// configuration. Unlike xmode's other runs of git it reads the user's own
// configuration, which is what it asks for; `git var` runs no hook,
// filter or pager. git's error says what to set when it knows no one.
func Identity(ctx context.Context, dir string) (author, committer Ident, err error) {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !relocating[k] {
			env = append(env, kv)
		}
	}
	env = append(env, "GIT_TERMINAL_PROMPT=0")
	ident := func(which string) (Ident, error) {
		args := []string{"var", which}
		out, err := run(ctx, nil, env, nil, nil, append(append(append([]string(nil), safety...), "-C", dir), args...), args)
		if err != nil {
			return Ident{}, err
		}
		// "Name <email> 1700000000 +0000"
		lt, gt := strings.IndexByte(out, '<'), strings.LastIndexByte(out, '>')
		if lt < 0 || gt < lt {
			return Ident{}, fmt.Errorf("git var %s: %q is not an identity", which, out)
		}
		return Ident{Name: strings.TrimSpace(out[:lt]), Email: out[lt+1 : gt]}, nil
	}
	if author, err = ident("GIT_AUTHOR_IDENT"); err != nil {
		return Ident{}, Ident{}, err
	}
	if committer, err = ident("GIT_COMMITTER_IDENT"); err != nil {
		return Ident{}, Ident{}, err
	}
	return author, committer, nil
}
