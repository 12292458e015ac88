package changes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/gitcli"
)

// Exported is what `cr export` made.
type Exported struct {
	ID      string `json:"id"`
	Repo    string `json:"repo"`
	Branch  string `json:"branch"`
	Commit  string `json:"commit"`
	Commits int    `json:"commits"`
	Tree    string `json:"tree"`
}

// Export creates branch (default xmode/<cr_id>) in the repository repo
// with the change on top of base_commit: the agent's commits as it made
// them (messages, authors, dates), then one commit with what it left
// uncommitted. It writes objects and one new branch, nothing else: the
// checked-out branch, the index and the working tree are not touched. A
// branch that exists is refused (exit 4), and so is a package that fails
// verification.
func (s *Service) Export(ctx context.Context, p *Package, repo, branch string) (*Exported, error) {
	if branch == "" {
		branch = "xmode/" + p.ID
	}
	if strings.HasPrefix(branch, "-") {
		return nil, fail.Usagef("--branch %q: a branch cannot start with '-'", branch)
	}
	ref := "refs/heads/" + branch
	if _, err := gitcli.RunOwned(ctx, gitcli.Owned{Dir: repo}, "check-ref-format", ref); err != nil {
		return nil, fail.Usagef("--branch %q is not a valid branch name", branch)
	}
	if strings.HasPrefix(repo, "-") {
		return nil, fail.Usagef("--repo %q: a path cannot start with '-'", repo)
	}
	user := gitcli.Owned{Dir: repo}
	if _, err := gitcli.RunOwned(ctx, user, "rev-parse", "--git-dir"); err != nil {
		return nil, fail.Usagef("--repo %s is not a git repository", repo)
	}
	if _, err := gitcli.RunOwned(ctx, user, "rev-parse", "--verify", "--quiet", ref); err == nil {
		return nil, fail.Refusedf("branch %s already exists in %s: choose another with --branch", branch, repo)
	}
	rep, err := s.Verify(ctx, p)
	if err != nil {
		return nil, err
	}
	if !rep.Intact {
		pr := rep.Problems[0]
		return nil, fail.Failedf("change request %s fails verification (%s: %s): not exporting it; `xmode cr verify %s` lists every problem", p.ID, pr.File, pr.Problem, p.ID)
	}
	m := p.Manifest
	if _, err := gitcli.RunOwned(ctx, user, "cat-file", "-e", m.BaseCommit+"^{commit}"); err != nil {
		return nil, fail.Failedf("the base commit %s is not in %s: fetch it first (git -C %s fetch %s)", m.BaseCommit, repo, repo, m.Repo)
	}
	st, err := openStore(s.Guard, p.RunID)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	obj := &objects{store: st}
	chain, err := exportChain(obj, m)
	if err != nil {
		return nil, fail.Failedf("change request %s: its commits cannot be read from the run's object store (%v)", p.ID, err)
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := "refs/xmode-export/" + p.ID + "-" + hex.EncodeToString(rnd[:])
	stream, err := fastImport(obj, chain, tmp, m)
	if err != nil {
		return nil, err
	}
	defer gitcli.RunOwned(context.WithoutCancel(ctx), user, "update-ref", "-d", tmp) //nolint:errcheck // a leftover ref is harmless
	imp := user
	imp.Stdin = bytes.NewReader(stream)
	if _, err := gitcli.RunOwned(ctx, imp, "fast-import", "--quiet", "--done", "--date-format=raw"); err != nil {
		return nil, fmt.Errorf("write the commits into %s: %w", repo, err)
	}
	commit, err := gitcli.RunOwned(ctx, user, "rev-parse", "--verify", tmp+"^{commit}")
	if err != nil {
		return nil, err
	}
	tree, err := gitcli.RunOwned(ctx, user, "rev-parse", "--verify", tmp+"^{tree}")
	if err != nil {
		return nil, err
	}
	if tree != m.Tree {
		return nil, fail.Failedf("the exported commit's tree is %s, the change request's is %s: not creating %s", tree, m.Tree, branch)
	}
	if _, err := gitcli.RunOwned(ctx, user, "update-ref", ref, commit, strings.Repeat("0", 40)); err != nil {
		return nil, fail.Refusedf("branch %s could not be created in %s (did it appear meanwhile?): %v", branch, repo, err)
	}
	return &Exported{ID: p.ID, Repo: repo, Branch: branch, Commit: commit, Commits: len(chain), Tree: tree}, nil
}

// exportChain is the commits from base_commit (exclusive) to the snapshot
// commit, oldest first, read from the run's object store.
func exportChain(obj *objects, m *Manifest) ([]*Commit, error) {
	base, err := ParseHash(m.BaseCommit)
	if err != nil {
		return nil, err
	}
	h, err := ParseHash(m.Snapshot)
	if err != nil {
		return nil, err
	}
	var chain []*Commit
	for h != base {
		if len(chain) > maxCommits+1 {
			return nil, errors.New("too many commits")
		}
		c, err := obj.commit(h)
		if err != nil {
			return nil, err
		}
		if len(c.Parents) == 0 {
			return nil, errors.New("the snapshot does not descend from the base")
		}
		chain = append(chain, c)
		h = c.Parents[0]
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}

// fastImport writes the git fast-import stream that re-creates chain on
// top of base_commit under ref: each commit as the difference of its tree
// from the previous one.
func fastImport(obj *objects, chain []*Commit, ref string, m *Manifest) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("feature done\n")
	prev, err := ParseHash(m.BaseTree)
	if err != nil {
		return nil, err
	}
	for i, c := range chain {
		fmt.Fprintf(&b, "commit %s\nmark :%d\n", ref, i+1)
		fmt.Fprintf(&b, "author %s\ncommitter %s\n", signatureLine(c.Author), signatureLine(c.Committer))
		fmt.Fprintf(&b, "data %d\n%s\n", len(c.Message), c.Message)
		if i == 0 {
			fmt.Fprintf(&b, "from %s\n", m.BaseCommit)
		} else {
			fmt.Fprintf(&b, "from :%d\n", i)
		}
		var dels, mods []treeOp
		if err := treeDiff(obj, prev, c.Tree, "", &dels, &mods); err != nil {
			return nil, err
		}
		for _, op := range dels {
			fmt.Fprintf(&b, "D %s\n", fastImportPath(op.path))
		}
		for _, op := range mods {
			if op.entry.Mode == modeGitlink {
				fmt.Fprintf(&b, "M 160000 %s %s\n", op.entry.Hash, fastImportPath(op.path))
				continue
			}
			data, err := obj.load(op.entry.Hash, typeBlob)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "M %o inline %s\ndata %d\n", op.entry.Mode, fastImportPath(op.path), len(data))
			b.Write(data)
			b.WriteByte('\n')
		}
		prev = c.Tree
	}
	b.WriteString("done\n")
	return b.Bytes(), nil
}

type treeOp struct {
	path  string
	entry TreeEntry
}

// treeDiff lists the paths deleted from a and the files added or changed
// in b (a zero hash is the empty tree).
func treeDiff(obj *objects, a, b Hash, prefix string, dels, mods *[]treeOp) error {
	if a == b {
		return nil
	}
	entries := func(h Hash) (map[string]TreeEntry, error) {
		out := map[string]TreeEntry{}
		if h.IsZero() {
			return out, nil
		}
		es, err := obj.tree(h)
		for _, e := range es {
			out[e.Name] = e
		}
		return out, err
	}
	old, err := entries(a)
	if err != nil {
		return err
	}
	cur, err := entries(b)
	if err != nil {
		return err
	}
	for _, name := range sortedKeys(old) {
		o := old[name]
		if n, ok := cur[name]; !ok || o.isTree() != n.isTree() {
			*dels = append(*dels, treeOp{path: join(prefix, name), entry: o})
		}
	}
	for _, name := range sortedKeys(cur) {
		n := cur[name]
		o, had := old[name]
		if had && o == n {
			continue
		}
		p := join(prefix, name)
		if n.isTree() {
			from := Hash{}
			if had && o.isTree() {
				from = o.Hash
			}
			if err := treeDiff(obj, from, n.Hash, p, dels, mods); err != nil {
				return err
			}
			continue
		}
		*mods = append(*mods, treeOp{path: p, entry: n})
	}
	return nil
}

// signatureLine is "Name <email> <unix> <tz>" for fast-import, as the
// commit had it.
func signatureLine(s Signature) string {
	raw := s.Raw
	if raw == "" {
		raw = "<> 0 +0000"
	}
	return sanitizeName(s.Name) + " " + raw
}

// fastImportPath quotes a path fast-import would misread (a leading quote,
// a newline) in C style.
func fastImportPath(p string) string {
	if !strings.HasPrefix(p, `"`) && !strings.ContainsAny(p, "\n") {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			b.WriteString("\\" + strconv.FormatInt(int64(c)+0o1000, 8)[1:])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
