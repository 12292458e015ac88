package changes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/store"
)

// NewVersion freezes the session's worktree into the next version of
// prev's change request (prev: its newest version): a package of its own
// in the session's run, whose manifest names prev's (docs/change-
// requests.md, "Versions"). The worktree must have prev's base; one that
// holds exactly prev's tree is refused (exit 4, ErrUnchanged), as is an
// empty change.
func (s *Service) NewVersion(ctx context.Context, sess *store.Session, prev *Package, o CreateOptions) (*Package, error) {
	if prev.at.Version != prev.Version {
		return nil, fail.Refusedf("%s is at version %d now, not %d", prev.ID, prev.Version, prev.at.Version)
	}
	sn, err := s.Snapshot(ctx, sess, WantPackage)
	if err != nil {
		return nil, err
	}
	defer sn.Close()
	return s.pack(ctx, sess, sn, o, prev)
}

// Versions opens every version of c, oldest first.
func (s *Service) Versions(ctx context.Context, c *store.Change) ([]*Package, error) {
	vs, err := s.Store.Versions(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	out := make([]*Package, 0, len(vs))
	for _, v := range vs {
		p, err := s.open(c, v)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ExportVersion opens the version of the change request ref names that
// `cr export` exports: the one its latest review approved, when that is
// its status; else its newest (exported with a warning).
func (s *Service) ExportVersion(ctx context.Context, ref string) (*Package, error) {
	c, err := s.Store.ResolveChange(ctx, ref)
	if err != nil {
		return nil, err
	}
	n := 0
	if k := len(c.Reviews); c.Status == store.ChangeApproved && k > 0 {
		n = c.Reviews[k-1].Version
	}
	return s.openVersion(ctx, c, n)
}

// objectsOf is the objects directory of a run's store (for git's
// alternates).
func (s *Service) objectsOf(runID string) (string, error) {
	runDir, err := s.Guard.RunDir(runID)
	if err != nil {
		return "", err
	}
	return filepath.Join(runDir, StoreDirName, "objects"), nil
}

// treesGit is a git run in the store of a's run that also reads the
// objects of b's run: two versions, or two attempts, may keep their trees
// in two runs' stores, both xmode's own.
func (s *Service) treesGit(a, b store.ChangeVersion) (gitcli.Owned, func(), error) {
	st, err := openStore(s.Guard, a.RunID)
	if err != nil {
		return gitcli.Owned{}, nil, err
	}
	o := gitcli.Owned{GitDir: st.dir}
	if b.RunID != a.RunID {
		other, err := openStore(s.Guard, b.RunID) // made if it is not there yet: no link planted in its place is followed
		if err != nil {
			st.Close()
			return o, nil, err
		}
		other.Close()
		dir, err := s.objectsOf(b.RunID)
		if err != nil {
			st.Close()
			return o, nil, err
		}
		o.Alternates = []string{dir}
	}
	return o, func() { st.Close() }, nil
}

// diffTreeArgs is every tree-to-tree diff xmode shows: recursive, renames
// found, no external diff, textconv or colour.
var diffTreeArgs = []string{"diff-tree", "-r", "-M", "--no-color", "--no-ext-diff", "--no-textconv"}

// InterdiffOptions say how `cr diff` shows the difference between two
// versions.
type InterdiffOptions struct {
	From, To int // versions; From 0 is the base
	// Stat: a diffstat instead of the patch.
	Stat bool
	// Unified is the lines of context (git's -U); 0 is git's 3.
	Unified int
}

// Interdiff is what `cr diff --json` prints: the difference between two
// versions' trees, without the patch.
type Interdiff struct {
	ID       string `json:"id"`
	From     int    `json:"from"`
	To       int    `json:"to"`
	FromTree string `json:"from_tree"`
	ToTree   string `json:"to_tree"`
	Stat     *Stat  `json:"stat"`
}

// resolveRange checks From and To against c's versions (To 0: the
// newest; From -1: the version before To) and returns both versions, the
// base standing in for version 0.
func (s *Service) resolveRange(ctx context.Context, c *store.Change, o *InterdiffOptions) (from, to store.ChangeVersion, err error) {
	vs, err := s.Store.Versions(ctx, c.ID)
	if err != nil {
		return from, to, err
	}
	if len(vs) > 0 && vs[len(vs)-1].Version == c.Version {
		vs[len(vs)-1] = newestVersion(c, vs[len(vs)-1])
	}
	if o.To == 0 {
		o.To = len(vs)
	}
	if o.From < 0 {
		o.From = o.To - 1
	}
	for _, n := range []int{o.From, o.To} {
		if n < 0 || n > len(vs) {
			return from, to, fail.Usagef("%s has versions 1 to %d (0 is its base): there is no version %d", c.ID, len(vs), n)
		}
	}
	if o.To == 0 {
		return from, to, fail.Usagef("%s 0 is the base: give a version from 1 to %d", fail.To, len(vs))
	}
	if o.From == o.To {
		return from, to, fail.Usagef("%s and %s are both %d: give two versions", fail.From, fail.To, o.From)
	}
	to = vs[o.To-1]
	if o.From == 0 {
		from = store.ChangeVersion{Version: 0, RunID: to.RunID, Tree: c.BaseCommit + "^{tree}"}
	} else {
		from = vs[o.From-1]
	}
	return from, to, nil
}

// WriteInterdiff writes the difference between two versions of c — what
// changed from one to the other, not against the base: version From's
// tree against version To's, as Gerrit diffs two patch sets — as git diff
// shows it, or its stat.
func (s *Service) WriteInterdiff(ctx context.Context, c *store.Change, o InterdiffOptions, w io.Writer) (*Interdiff, error) {
	from, to, err := s.resolveRange(ctx, c, &o)
	if err != nil {
		return nil, err
	}
	g, done, err := s.treesGit(to, from)
	if err != nil {
		return nil, err
	}
	defer done()
	out := &Interdiff{ID: c.ID, From: o.From, To: o.To, FromTree: strings.TrimSuffix(from.Tree, "^{tree}"), ToTree: to.Tree}
	if from.Version == 0 {
		if out.FromTree, err = gitcli.RunOwned(ctx, g, "rev-parse", "--verify", from.Tree); err != nil {
			return nil, fmt.Errorf("the base of %s: %w", c.ID, err)
		}
	}
	if o.Stat {
		var b bytes.Buffer
		g.Stdout = &b
		if _, err := gitcli.RunOwned(ctx, g, append(diffTreeArgs, "--raw", "--numstat", "-z", "--no-abbrev", out.FromTree, out.ToTree)...); err != nil {
			return nil, fmt.Errorf("diff versions %d and %d of %s: %w", o.From, o.To, c.ID, err)
		}
		st, n, err := parseRawNumstat(b.Bytes(), false)
		if err != nil {
			return nil, err
		}
		if n != b.Len() {
			return nil, fmt.Errorf("diffstat: %d bytes left over", b.Len()-n)
		}
		g.Stdout = nil
		if err := fillSizes(ctx, g, st); err != nil {
			return nil, err
		}
		out.Stat = st
		return out, nil
	}
	args := append(diffTreeArgs, "-p")
	if o.Unified > 0 {
		args = append(args, "-U"+strconv.Itoa(o.Unified))
	}
	g.Stdout = w
	if _, err := gitcli.RunOwned(ctx, g, append(args, out.FromTree, out.ToTree)...); err != nil {
		return nil, fmt.Errorf("diff versions %d and %d of %s: %w", o.From, o.To, c.ID, err)
	}
	return out, nil
}

// interdiffFiles is the interdiff of two versions with no context, parsed:
// the lines one changed of the other.
func (s *Service) interdiffFiles(ctx context.Context, c *store.Change, from, to store.ChangeVersion) ([]*fileDiff, error) {
	g, done, err := s.treesGit(to, from)
	if err != nil {
		return nil, err
	}
	defer done()
	var b bytes.Buffer
	g.Stdout = &b
	if _, err := gitcli.RunOwned(ctx, g, append(diffTreeArgs, "-p", "-U0", from.Tree, to.Tree)...); err != nil {
		return nil, fmt.Errorf("diff versions %d and %d of %s: %w", from.Version, to.Version, c.ID, err)
	}
	return parseDiff(&b)
}

// fillSizes sets the sizes of a stat's blobs, read from git's store.
func fillSizes(ctx context.Context, g gitcli.Owned, st *Stat) error {
	var ids []string
	for _, f := range st.PerFile {
		for _, b := range []string{f.OldBlob, f.NewBlob} {
			if b != "" {
				ids = append(ids, b)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	g.Stdin = strings.NewReader(strings.Join(ids, "\n") + "\n")
	var out bytes.Buffer
	g.Stdout = &out
	if _, err := gitcli.RunOwned(ctx, g, "cat-file", "--batch-check=%(objectname) %(objectsize)"); err != nil {
		return fmt.Errorf("sizes of the diff's files: %w", err)
	}
	sizes := map[string]int64{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		id, size, ok := strings.Cut(sc.Text(), " ")
		if n, err := strconv.ParseInt(size, 10, 64); ok && err == nil {
			sizes[id] = n
		}
	}
	for i := range st.PerFile {
		f := &st.PerFile[i]
		f.OldSize, f.NewSize = sizes[f.OldBlob], sizes[f.NewBlob]
	}
	return nil
}

// Comparison is what `cr compare` prints: where two change requests on
// one base (two attempts) differ.
type Comparison struct {
	A          string        `json:"a"`
	B          string        `json:"b"`
	BaseCommit string        `json:"base_commit"`
	Files      []CompareFile `json:"files"`
	// Stat is the diffstat of B's tree against A's.
	Stat *Stat `json:"stat"`
}

// CompareFile is a path either change request changes: its status in
// each ("" where that one leaves it as the base has it) and whether both
// end with the same file.
type CompareFile struct {
	Path string `json:"path"`
	A    string `json:"a"`
	B    string `json:"b"`
	Same bool   `json:"same"`
}

// Compare says where the newest versions of a and b differ — the files
// each changes, and the diff from a's tree to b's, written to w (patch)
// unless w is nil — for two change requests on the same base commit.
func (s *Service) Compare(ctx context.Context, a, b *Package, w io.Writer) (*Comparison, error) {
	if a.ID == b.ID {
		return nil, fail.Usagef("%s twice: compare two change requests (`xmode cr diff %s` shows how its versions differ)", a.ID, a.ID)
	}
	if a.BaseCommit != b.BaseCommit {
		return nil, fail.Usagef("%s and %s have different bases (%s, %s): compare shows how two attempts at one base differ",
			a.ID, b.ID, shortString(a.BaseCommit), shortString(b.BaseCommit))
	}
	g, done, err := s.treesGit(a.at, b.at)
	if err != nil {
		return nil, err
	}
	defer done()
	base := a.BaseCommit + "^{tree}"
	changed := func(tree string) (map[string]FileStat, error) {
		var out bytes.Buffer
		gg := g
		gg.Stdout = &out
		if _, err := gitcli.RunOwned(ctx, gg, append(diffTreeArgs, "--raw", "--numstat", "-z", "--no-abbrev", base, tree)...); err != nil {
			return nil, fmt.Errorf("compare %s and %s: %w", a.ID, b.ID, err)
		}
		st, _, err := parseRawNumstat(out.Bytes(), false)
		if err != nil {
			return nil, err
		}
		m := map[string]FileStat{}
		for _, f := range st.PerFile {
			m[f.Path] = f
			if f.OldPath != "" {
				if _, ok := m[f.OldPath]; !ok {
					m[f.OldPath] = FileStat{Path: f.OldPath, Status: "D"}
				}
			}
		}
		return m, nil
	}
	fa, err := changed(a.at.Tree)
	if err != nil {
		return nil, err
	}
	fb, err := changed(b.at.Tree)
	if err != nil {
		return nil, err
	}
	cmp := &Comparison{A: a.ID, B: b.ID, BaseCommit: a.BaseCommit, Files: []CompareFile{}}
	paths := map[string]bool{}
	for p := range fa {
		paths[p] = true
	}
	for p := range fb {
		paths[p] = true
	}
	for p := range paths {
		x, inA := fa[p]
		y, inB := fb[p]
		cf := CompareFile{Path: p, A: x.Status, B: y.Status}
		cf.Same = inA && inB && x.NewBlob == y.NewBlob && x.NewMode == y.NewMode
		cmp.Files = append(cmp.Files, cf)
	}
	sort.Slice(cmp.Files, func(i, j int) bool { return cmp.Files[i].Path < cmp.Files[j].Path })
	var out bytes.Buffer
	gg := g
	gg.Stdout = &out
	if _, err := gitcli.RunOwned(ctx, gg, append(diffTreeArgs, "--raw", "--numstat", "-z", "--no-abbrev", a.at.Tree, b.at.Tree)...); err != nil {
		return nil, fmt.Errorf("compare %s and %s: %w", a.ID, b.ID, err)
	}
	if cmp.Stat, _, err = parseRawNumstat(out.Bytes(), false); err != nil {
		return nil, err
	}
	if err := fillSizes(ctx, g, cmp.Stat); err != nil {
		return nil, err
	}
	if w != nil {
		gg := g
		gg.Stdout = w
		if _, err := gitcli.RunOwned(ctx, gg, append(diffTreeArgs, "-p", a.at.Tree, b.at.Tree)...); err != nil {
			return nil, fmt.Errorf("compare %s and %s: %w", a.ID, b.ID, err)
		}
	}
	return cmp, nil
}

func shortString(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Source is where a version's tree is kept, for a sandbox made from it
// (`run continue` when the version's sandbox has ended): the object store
// of the run that made it, the ref xmode set there to its snapshot commit,
// that commit and its tree, the agent's last commit (HEAD of the new
// worktree; the base when the agent made none) and the base.
type Source struct {
	Store, Ref               string
	Commit, Tree, Head, Base string
}

// VersionSource is p's Source. p must have been verified (Verify): the
// manifest names the commits; the tree is checked against the store's.
func (s *Service) VersionSource(p *Package) (*Source, error) {
	m := p.Manifest
	if m == nil || m.Tree != p.at.Tree || m.Snapshot == "" {
		return nil, fail.Failedf("version %d of %s: its manifest does not name the tree the change request recorded: `xmode cr verify %s` says more", p.at.Version, p.ID, p.ID)
	}
	runDir, err := s.Guard.RunDir(p.at.RunID)
	if err != nil {
		return nil, err
	}
	ref := "refs/xmode/cr/" + p.ID
	if p.at.Version > 1 {
		ref += "/v" + strconv.Itoa(p.at.Version)
	}
	src := &Source{Store: filepath.Join(runDir, StoreDirName), Ref: ref, Commit: m.Snapshot, Tree: m.Tree, Head: m.BaseCommit, Base: m.BaseCommit}
	if n := len(m.Commits); n > 0 {
		src.Head = m.Commits[n-1].ID.String()
	}
	return src, nil
}
