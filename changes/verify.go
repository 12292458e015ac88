package changes

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/gitread"
	"github.com/xmode/xmode/store"
)

// Report is what `cr verify` found.
type Report struct {
	ID string `json:"id"`
	// Versions is how many versions were checked: every one, as a chain.
	Versions int       `json:"versions"`
	Intact   bool      `json:"intact"`
	Checked  []string  `json:"checked"`
	Problems []Problem `json:"problems"`
}

// Problem is one thing that differs from what the change request recorded.
type Problem struct {
	// Version is the version whose package differs.
	Version int    `json:"version"`
	File    string `json:"file"`
	Problem string `json:"problem"`
}

// versionReport is what the check of one version adds to a report.
type versionReport struct {
	*Report
	version int
}

func (r versionReport) add(file, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Version: r.version, File: file, Problem: fmt.Sprintf(format, args...)})
}

// checked names a file checked: as it is for the first version, after
// "v<n>/" for a later one.
func (r versionReport) checked(name string) {
	if r.version > 1 {
		name = "v" + strconv.Itoa(r.version) + "/" + name
	}
	r.Checked = append(r.Checked, name)
}

// Verify checks every version of p's change request, as a chain: each
// version's package (verifyVersion), and that each version's manifest
// names the version before it by the sha256 the store recorded of that
// version's manifest — so a package replaced whole, with a manifest the
// store was then told of, still breaks the link the next version holds.
func (s *Service) Verify(ctx context.Context, p *Package) (*Report, error) {
	r := &Report{ID: p.ID, Checked: []string{}, Problems: []Problem{}}
	defer func() { r.Intact = len(r.Problems) == 0 }()
	// what the store records now, whatever p was opened as
	c, err := s.Store.GetChange(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	vs, err := s.Store.Versions(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	r.Versions = len(vs)
	var prev *store.ChangeVersion
	for i := range vs {
		v := vs[i]
		if v.Version != i+1 {
			(versionReport{r, v.Version}).add("versions", "the store records version %d in place %d: a version is missing", v.Version, i+1)
		}
		if v.Version == c.Version {
			v = newestVersion(c, v)
		}
		s.verifyVersion(ctx, c, v, prev, versionReport{r, v.Version})
		prev = &v
	}
	if len(vs) != c.Version {
		(versionReport{r, c.Version}).add("versions", "the store records %d version(s) of the change request, which says its newest is %d", len(vs), c.Version)
	}
	return r, nil
}

// verifyVersion recomputes every hash of one version's package —
// manifest.json against the store, change.patch and evidence.json against
// the manifest, the logs of finished steps against evidence.json — and the
// tree: change.patch applied to base_commit in its run's object store
// must give the manifest's tree; and its link to prev, the version before.
func (s *Service) verifyVersion(ctx context.Context, c *store.Change, v store.ChangeVersion, prev *store.ChangeVersion, r versionReport) {
	p := &Package{Change: c, at: v}
	root, err := s.packagesRoot(p)
	if err != nil {
		r.add(PackagesDir, "%v", err)
		return
	}
	defer root.Close()
	dir := strconv.Itoa(v.Number)
	read := func(name string, max int64) ([]byte, bool) {
		b, err := fsguard.ReadRegular(root, dir+"/"+name, max)
		if err != nil {
			r.add(name, "cannot be read: %v", err)
			return nil, false
		}
		r.checked(name)
		return b, true
	}
	mb, ok := read(ManifestFile, maxManifest)
	if !ok {
		return
	}
	if got := sha256Hex(mb); got != v.ManifestSHA256 {
		r.add(ManifestFile, "sha256 is %s, the change request recorded %s", got, v.ManifestSHA256)
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		r.add(ManifestFile, "does not parse: %v", err)
		return
	}
	for field, pair := range map[string][2]string{"id": {m.ID, c.ID}, "tree": {m.Tree, v.Tree}, "base_commit": {m.BaseCommit, c.BaseCommit}} {
		if pair[0] != pair[1] {
			r.add(ManifestFile, "%s is %q, the change request recorded %q", field, pair[0], pair[1])
		}
	}
	if got := max(m.Version, 1); got != v.Version {
		r.add(ManifestFile, "version is %d, the change request recorded %d", got, v.Version)
	}
	switch {
	case prev == nil && m.Previous != nil:
		r.add(ManifestFile, "names a version %d before it, and it is the first", m.Previous.Version)
	case prev != nil && m.Previous == nil:
		r.add(ManifestFile, "names no version before it: the chain to version %d is broken", prev.Version)
	case prev != nil && *m.Previous != (PreviousVersion{Version: prev.Version, ManifestSHA256: prev.ManifestSHA256}):
		r.add(ManifestFile, "names version %d's manifest as sha256 %s, the change request recorded %s: the chain is broken",
			m.Previous.Version, m.Previous.ManifestSHA256, prev.ManifestSHA256)
	}
	files := map[string][]byte{}
	for _, name := range sortedKeys(m.Files) {
		want := m.Files[name]
		// the size first: a file that is not the size recorded is not read
		if st, err := root.Lstat(dir + "/" + name); err == nil && st.Mode().IsRegular() && st.Size() != want.Size {
			r.add(name, "%s", sizeProblem(st.Size(), "the manifest", want))
			continue
		}
		b, ok := read(name, max(want.Size, 0))
		if !ok {
			continue
		}
		files[name] = b
		if got := (FileHash{SHA256: sha256Hex(b), Size: int64(len(b))}); got != want {
			r.add(name, "%s", hashProblem(got, "the manifest", want))
		}
	}
	if names, err := readDirNames(root, dir); err == nil {
		for _, n := range names {
			if _, known := m.Files[n]; !known && n != ManifestFile {
				r.add(n, "is not part of the package")
			}
		}
	}
	if patch, ok := files[PatchFile]; ok {
		s.verifyTree(ctx, v, &m, patch, r)
	}
	if evb, ok := files[EvidenceFile]; ok {
		s.verifyLogs(ctx, v, evb, r)
	}
}

// verifyTree applies the patch to base_commit in a scratch index of the
// version's run's object store and compares the resulting tree.
func (s *Service) verifyTree(ctx context.Context, v store.ChangeVersion, m *Manifest, patch []byte, r versionReport) {
	st, err := openStore(s.Guard, v.RunID)
	if err != nil {
		r.add("tree", "the run's object store cannot be opened: %v", err)
		return
	}
	defer st.Close()
	base, err := baseFiles(st, m.BaseCommit)
	if err != nil {
		r.add("tree", "the base commit cannot be read from the run's object store: %v", err)
		return
	}
	h, err := applyPatch(ctx, st, base, []string{"-"}, patch, false)
	if err != nil {
		r.add(PatchFile, "does not apply to base_commit %s: %v", m.BaseCommit, err)
		return
	}
	r.checked("tree")
	if got := h.String(); got != m.Tree {
		r.add(PatchFile, "applied to base_commit gives tree %s, the manifest says %s", got, m.Tree)
	}
}

// applyPatch is `git apply --cached ARGS` on a scratch index holding the
// base tree (written by xmode, read back by xmode: the only git run is the
// apply) and returns the tree the result describes. The object store must
// hold the base's trees and the blobs the patch changes. ARGS names the
// patch file, or "-" for stdin; writeTrees stores the resulting trees.
func applyPatch(ctx context.Context, st *objectStore, base map[string]TreeEntry, args []string, stdin []byte, writeTrees bool) (Hash, error) {
	var rnd [6]byte
	rand.Read(rnd[:])
	index := filepath.Join(st.dir, "index-"+hex.EncodeToString(rnd[:]))
	defer os.Remove(index)
	es := make([]gitread.IndexEntry, 0, len(base))
	for p, e := range base {
		es = append(es, gitread.IndexEntry{Path: p, Mode: e.Mode, Hash: e.Hash})
	}
	if err := os.WriteFile(index, gitread.EncodeIndex(es), 0o600); err != nil {
		return Hash{}, err
	}
	o := gitcli.Owned{GitDir: st.dir, IndexFile: index}
	if stdin != nil {
		o.Stdin = bytes.NewReader(stdin)
	}
	if _, err := gitcli.RunOwned(ctx, o, append([]string{"apply", "--cached", "--binary", "--whitespace=nowarn"}, args...)...); err != nil {
		return Hash{}, err
	}
	b, err := os.ReadFile(index)
	if err != nil {
		return Hash{}, err
	}
	after, err := gitread.ParseIndex(b)
	if err != nil {
		return Hash{}, err
	}
	if writeTrees {
		return gitread.TreeOfIndex(after, st.writeKnown)
	}
	return gitread.TreeOfIndex(after, nil)
}

// baseFiles flattens a commit's tree from the store.
func baseFiles(st *objectStore, commit string) (map[string]TreeEntry, error) {
	h, err := gitread.ParseHash(commit)
	if err != nil {
		return nil, err
	}
	obj := &objects{store: st}
	c, err := obj.commit(h)
	if err != nil {
		return nil, err
	}
	files := map[string]TreeEntry{}
	return files, obj.flatten(c.Tree, "", files)
}

// verifyLogs checks the logs of finished steps against evidence.json.
func (s *Service) verifyLogs(ctx context.Context, v store.ChangeVersion, evb []byte, r versionReport) {
	var ev Evidence
	if err := json.Unmarshal(evb, &ev); err != nil {
		r.add(EvidenceFile, "does not parse: %v", err)
		return
	}
	runDir, err := s.Guard.RunDir(v.RunID)
	if err != nil {
		return
	}
	root, err := os.OpenRoot(runDir)
	if err != nil {
		r.add("steps", "the run directory cannot be opened: %v", err)
		return
	}
	defer root.Close()
	for _, step := range ev.Steps {
		rel := fmt.Sprintf("steps/%04d-%s", step.Seq, step.Name)
		for _, log := range []struct {
			name string
			want *FileHash
		}{{"stdout.log", step.Stdout}, {"stderr.log", step.Stderr}} {
			if log.want == nil {
				continue
			}
			got, err := hashFileIn(ctx, root, rel+"/"+log.name, log.want.Size)
			name := rel + "/" + log.name
			switch {
			case err != nil:
				r.add(name, "cannot be read: %v", err)
			case got.SHA256 == "":
				r.add(name, "%s", sizeProblem(got.Size, EvidenceFile, *log.want))
			case *got != *log.want:
				r.add(name, "%s", hashProblem(*got, EvidenceFile, *log.want))
			default:
				r.checked(name)
			}
		}
	}
}

// sizeProblem is how verify words a file of another size than the one
// recorded by what (not read: its sha256 is not computed).
func sizeProblem(size int64, what string, want FileHash) string {
	return fmt.Sprintf("sha256 not computed (%d bytes), %s says %s (%d bytes)", size, what, want.SHA256, want.Size)
}

// hashProblem is how verify words a file whose sha256 is not the one
// recorded by what.
func hashProblem(got FileHash, what string, want FileHash) string {
	return fmt.Sprintf("sha256 %s (%d bytes), %s says %s (%d bytes)", got.SHA256, got.Size, what, want.SHA256, want.Size)
}

// maxManifest bounds the manifest.json verify reads (the store records
// only its hash).
const maxManifest = 256 << 20

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Summary says in one line what a report found.
func (r *Report) Summary() string {
	versions := ""
	if r.Versions > 1 {
		versions = fmt.Sprintf(", %d versions as a chain", r.Versions)
	}
	if r.Intact {
		return fmt.Sprintf("%s: intact (%s%s)", r.ID, strings.Join(r.Checked, ", "), versions)
	}
	var tampered []string
	for _, pr := range r.Problems {
		if v := fmt.Sprintf("version %d", pr.Version); !slices.Contains(tampered, v) {
			tampered = append(tampered, v)
		}
	}
	return fmt.Sprintf("%s: TAMPERED: %d problem(s), in %s", r.ID, len(r.Problems), strings.Join(tampered, ", "))
}
