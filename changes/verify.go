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
	"sort"
	"strconv"
	"strings"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitcli"
	"github.com/xmode/xmode/gitread"
)

// Report is what `cr verify` found.
type Report struct {
	ID       string    `json:"id"`
	Intact   bool      `json:"intact"`
	Checked  []string  `json:"checked"`
	Problems []Problem `json:"problems"`
}

// Problem is one thing that differs from what the change request recorded.
type Problem struct {
	File    string `json:"file"`
	Problem string `json:"problem"`
}

func (r *Report) add(file, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{File: file, Problem: fmt.Sprintf(format, args...)})
}

// Verify recomputes every hash of the package — manifest.json against the
// store, change.patch and evidence.json against the manifest, the logs of
// finished steps against evidence.json — and the tree: change.patch
// applied to base_commit in the run's object store must give the
// manifest's tree.
func (s *Service) Verify(ctx context.Context, p *Package) (*Report, error) {
	r := &Report{ID: p.ID, Checked: []string{}, Problems: []Problem{}}
	defer func() { r.Intact = len(r.Problems) == 0 }()
	root, err := s.packagesRoot(p.Change)
	if err != nil {
		r.add(PackagesDir, "%v", err)
		return r, nil
	}
	defer root.Close()
	dir := strconv.Itoa(p.Number)
	read := func(name string, max int64) ([]byte, bool) {
		b, err := fsguard.ReadRegular(root, dir+"/"+name, max)
		if err != nil {
			r.add(name, "cannot be read: %v", err)
			return nil, false
		}
		r.Checked = append(r.Checked, name)
		return b, true
	}
	mb, ok := read(ManifestFile, maxManifest)
	if !ok {
		return r, nil
	}
	if got := sha256Hex(mb); got != p.ManifestSHA256 {
		r.add(ManifestFile, "sha256 is %s, the change request recorded %s", got, p.ManifestSHA256)
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		r.add(ManifestFile, "does not parse: %v", err)
		return r, nil
	}
	for field, pair := range map[string][2]string{"id": {m.ID, p.ID}, "tree": {m.Tree, p.Tree}, "base_commit": {m.BaseCommit, p.BaseCommit}} {
		if pair[0] != pair[1] {
			r.add(ManifestFile, "%s is %q, the change request recorded %q", field, pair[0], pair[1])
		}
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
		s.verifyTree(ctx, p, &m, patch, r)
	}
	if evb, ok := files[EvidenceFile]; ok {
		s.verifyLogs(ctx, p, evb, r)
	}
	return r, nil
}

// verifyTree applies the patch to base_commit in a scratch index of the
// run's object store and compares the resulting tree.
func (s *Service) verifyTree(ctx context.Context, p *Package, m *Manifest, patch []byte, r *Report) {
	st, err := openStore(s.Guard, p.RunID)
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
	r.Checked = append(r.Checked, "tree")
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
func (s *Service) verifyLogs(ctx context.Context, p *Package, evb []byte, r *Report) {
	var ev Evidence
	if err := json.Unmarshal(evb, &ev); err != nil {
		r.add(EvidenceFile, "does not parse: %v", err)
		return
	}
	runDir, err := s.Guard.RunDir(p.RunID)
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
				r.Checked = append(r.Checked, name)
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
	if r.Intact {
		return fmt.Sprintf("%s: intact (%s)", r.ID, strings.Join(r.Checked, ", "))
	}
	return fmt.Sprintf("%s: TAMPERED: %d problem(s)", r.ID, len(r.Problems))
}
