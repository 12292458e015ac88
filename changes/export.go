package changes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/gitread"
	"github.com/xmode/xmode/store"
)

// Exported is what `cr export` made.
type Exported struct {
	ID string `json:"id"`
	// Version is the version exported: the approved one.
	Version int    `json:"version"`
	Repo    string `json:"repo"`
	Branch  string `json:"branch"`
	Commit  string `json:"commit"`
	Commits int    `json:"commits"`
	Tree    string `json:"tree"`
	// Status is the change request's when it was exported: open (not
	// reviewed), approved or rejected.
	Status string `json:"status"`
	// Warnings say what the reviewer should know: a change request not
	// approved.
	Warnings []string `json:"warnings"`
	// Squashed is set when the agent's commits were not re-created, the
	// branch holding one commit of the whole change instead: it names the
	// commit that holds a path git refuses.
	Squashed *RefusedCommit `json:"squashed"`
}

// RefusedCommit is an agent's commit whose tree holds a path git refuses
// to check out (gitread.Refuses): a directory ends in '/'.
type RefusedCommit struct {
	Commit string `json:"commit"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Export creates branch (default xmode/<cr_id>) in the repository repo
// with the change on top of base_commit: the agent's commits as it made
// them (messages, authors, dates), then one commit with what it left
// uncommitted, by whom `git commit` in repo would name (gitcli.Identity).
// When one of those commits holds a path git refuses (a
// .GIT/hooks/… the snapshot left out), none of them is re-created — git
// could not check it out, fsck flags it, and it would reach a clone — and
// the branch holds one commit of the whole change instead (Squashed says
// why). It writes objects and one new branch, nothing else: the
// checked-out branch, the index and the working tree are not touched. A
// branch that exists is refused (exit 4), and so is a package that fails
// verification; one not approved is exported with a warning, as a pull
// request's branch is there before its review.
func (s *Service) Export(ctx context.Context, p *Package, repo, branch string) (*Exported, error) {
	if branch == "" {
		branch = "xmode/" + p.ID
	}
	if err := CheckBranch(branch); err != nil {
		return nil, err
	}
	ref := "refs/heads/" + branch
	if strings.HasPrefix(repo, "-") {
		return nil, fail.Usagef("%s %q: a path cannot start with '-'", fail.Repo, repo)
	}
	if _, err := os.Stat(repo); errors.Is(err, fs.ErrNotExist) {
		return nil, fail.Usagef("%s %s: no such directory: give the path of your repository", fail.Repo, repo)
	}
	user := gitcli.Owned{Dir: repo}
	if _, err := gitcli.RunOwned(ctx, user, "rev-parse", "--git-dir"); err != nil {
		return nil, fail.Usagef("%s %s is not a git repository", fail.Repo, repo)
	}
	if _, err := gitcli.RunOwned(ctx, user, "rev-parse", "--verify", "--quiet", ref); err == nil {
		return nil, fail.Refusedf("branch %s already exists in %s: choose another with %s", branch, repo, fail.Branch)
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
	st, err := openStore(s.Guard, p.at.RunID)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	obj := &objects{store: st}
	chain, err := exportChain(obj, m)
	if err != nil {
		return nil, fail.Failedf("change request %s: its commits cannot be read from the run's object store (%v)", p.ID, err)
	}
	baseTree, err := gitread.ParseHash(m.BaseTree)
	if err != nil {
		return nil, fail.Failedf("change request %s: base_tree %q: %v", p.ID, m.BaseTree, err)
	}
	squashed, err := refusedCommit(obj, baseTree, chain)
	if err != nil {
		return nil, fail.Failedf("change request %s: its commits cannot be read from the run's object store (%v)", p.ID, err)
	}
	// The commits xmode makes (of what the agent left uncommitted, or the
	// one of the whole change) are the user's, as `git commit` would make
	// them; the agent's keep their authors.
	if squashed != nil || madeByXmode(m, chain) {
		author, committer, err := gitcli.Identity(ctx, repo)
		if err != nil {
			return nil, fail.Failedf("the commit of the change is yours, and git does not know who you are in %s: set user.name and user.email (`git -C %s config user.email you@example.com`, or `git config --global …`) (%w)", repo, repo, err)
		}
		now := time.Now()
		if squashed != nil {
			chain = []*Commit{squashCommit(m, squashed)}
		}
		last := *chain[len(chain)-1]
		last.Author = signature(author, m.CreatedAt)
		last.Committer = signature(committer, now)
		chain[len(chain)-1] = &last
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
	out := &Exported{ID: p.ID, Version: p.at.Version, Repo: repo, Branch: branch, Commit: commit, Commits: len(chain), Tree: tree, Status: p.Status, Squashed: squashed, Warnings: []string{}}
	switch p.Status {
	case store.ChangeOpen:
		out.Warnings = append(out.Warnings, fmt.Sprintf("%s is not reviewed yet: review it before you merge %s (`xmode cr review %s --approve`)", p.ID, branch, p.ID))
	case store.ChangeRejected:
		out.Warnings = append(out.Warnings, fmt.Sprintf("%s was rejected: %s holds a change its reviewer turned down", p.ID, branch))
	}
	return out, nil
}

// madeByXmode says whether the last commit of chain is the one xmode made
// of what the agent left uncommitted, not one of the agent's.
func madeByXmode(m *Manifest, chain []*Commit) bool {
	if len(chain) == 0 {
		return false
	}
	last := chain[len(chain)-1].ID
	for _, c := range m.Commits {
		if c.ID == last {
			return false
		}
	}
	return true
}

// signature is who at when, in UTC, as a commit records it.
func signature(who gitcli.Ident, when time.Time) Signature {
	email := strings.NewReplacer("<", "", ">", "", "\n", "", "\x00", "").Replace(who.Email)
	return Signature{Name: who.Name, Email: email, Raw: fmt.Sprintf("<%s> %d +0000", email, when.Unix())}
}

// refusedCommit finds the first commit of chain (on top of the tree
// base) whose tree holds a path git refuses; nil when none does.
func refusedCommit(obj *objects, base Hash, chain []*Commit) (*RefusedCommit, error) {
	prev := base
	for _, c := range chain {
		p, why, err := refusedEntry(obj, prev, c.Tree, "")
		if err != nil {
			return nil, err
		}
		if why != "" {
			return &RefusedCommit{Commit: c.ID.String(), Path: p, Reason: why}, nil
		}
		prev = c.Tree
	}
	return nil, nil
}

// refusedEntry returns the first path of tree b that git refuses, and
// why, looking only at what tree a (zero: none) does not hold the same:
// the base holds no such path. A directory's path ends in '/'.
func refusedEntry(obj *objects, a, b Hash, prefix string) (string, string, error) {
	if a == b {
		return "", "", nil
	}
	old := map[string]TreeEntry{}
	if !a.IsZero() {
		es, err := obj.tree(a)
		if err != nil {
			return "", "", err
		}
		for _, e := range es {
			old[e.Name] = e
		}
	}
	es, err := obj.tree(b)
	if err != nil {
		return "", "", err
	}
	for _, e := range es {
		o, had := old[e.Name]
		if had && o == e {
			continue
		}
		p := join(prefix, e.Name)
		// as the walk checks them: a symlink's rules look at its whole path
		why := gitread.Refuses(e.Name, false)
		if e.Mode == gitread.ModeSymlink {
			why = gitread.Refuses(p, true)
		}
		if why != "" {
			return skippedPath(p, e.IsTree()), why, nil
		}
		if e.IsTree() {
			from := Hash{}
			if had && o.IsTree() {
				from = o.Hash
			}
			if p, why, err := refusedEntry(obj, from, e.Hash, p); err != nil || why != "" {
				return p, why, err
			}
		}
	}
	return "", "", nil
}

// squashCommit is the one commit of the whole change that export makes
// instead of the agent's commits (Export signs it): with the change
// request's message, saying why and listing the commits it stands for.
func squashCommit(m *Manifest, r *RefusedCommit) *Commit {
	var why strings.Builder
	fmt.Fprintf(&why, "The agent's commits are not re-created: %s holds %s (%s). This commit holds the whole change", r.Commit[:12], r.Path, r.Reason)
	if len(m.Commits) > 0 {
		why.WriteString(", made of:\n")
		const list = 50
		for i, c := range m.Commits {
			if i == list {
				fmt.Fprintf(&why, "\n... and %d more", len(m.Commits)-list)
				break
			}
			subject, _, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
			fmt.Fprintf(&why, "\n* %s %s", c.ID.String()[:12], subject)
		}
	} else {
		why.WriteString(".")
	}
	tree, _ := gitread.ParseHash(m.Tree)
	return &Commit{Tree: tree, Message: commitMessageWith(m, why.String())}
}

// exportChain is the commits from base_commit (exclusive) to the snapshot
// commit, oldest first, read from the run's object store.
func exportChain(obj *objects, m *Manifest) ([]*Commit, error) {
	base, err := gitread.ParseHash(m.BaseCommit)
	if err != nil {
		return nil, err
	}
	h, err := gitread.ParseHash(m.Snapshot)
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
	prev, err := gitread.ParseHash(m.BaseTree)
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
			if op.entry.Mode == gitread.ModeGitlink {
				fmt.Fprintf(&b, "M 160000 %s %s\n", op.entry.Hash, fastImportPath(op.path))
				continue
			}
			data, err := obj.load(op.entry.Hash, gitread.TypeBlob)
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
		if n, ok := cur[name]; !ok || o.IsTree() != n.IsTree() {
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
		if n.IsTree() {
			from := Hash{}
			if had && o.IsTree() {
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
