package changes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitread"
	"github.com/xmode/xmode/store"
)

// Package file names (docs/reference.md, "Storage layout").
const (
	PatchFile    = "change.patch"
	ManifestFile = "manifest.json"
	EvidenceFile = "evidence.json"
	// PackagesDir is the run's directory of packages: runs/<run>/change_requests/<n>/.
	PackagesDir = "change_requests"
)

// FormatVersion is the manifest's "format".
const FormatVersion = 1

// Manifest is manifest.json: what the package holds and how to check it.
// files pins change.patch and evidence.json; the store pins manifest.json.
type Manifest struct {
	Format     int                 `json:"format"`
	ID         string              `json:"id"`
	RunID      string              `json:"run_id"`
	SessionID  string              `json:"session_id"`
	Repo       string              `json:"repo"`
	Ref        string              `json:"ref"`
	Project    string              `json:"project,omitempty"`
	Engine     string              `json:"engine"`
	MountMode  string              `json:"mount_mode,omitempty"`
	Worktree   string              `json:"worktree"` // clone or project_machine
	BaseCommit string              `json:"base_commit"`
	BaseTree   string              `json:"base_tree"`
	Tree       string              `json:"tree"`
	Head       string              `json:"head"`            // the sandbox's HEAD when packaged
	Snapshot   string              `json:"snapshot_commit"` // tree on top of the commits, in the run's object store
	Commits    []*Commit           `json:"commits"`
	Title      string              `json:"title"`
	Message    string              `json:"message"`
	Author     string              `json:"author"`
	CreatedAt  time.Time           `json:"created_at"`
	Stat       *Stat               `json:"stat"`
	Files      map[string]FileHash `json:"files"`
	Skipped    []Skipped           `json:"skipped"`
	Warnings   []string            `json:"warnings"`
	// Version is the change request's version this package is (1 for
	// the first; 0 in a manifest from before versions, which is 1), and
	// Previous pins the version before it: its manifest's sha256.
	Version  int              `json:"version"`
	Previous *PreviousVersion `json:"previous"`
}

// PreviousVersion is what a version's manifest records of the version
// before it, so that the versions of a change request form a chain a
// tampered package breaks.
type PreviousVersion struct {
	Version        int    `json:"version"`
	ManifestSHA256 string `json:"manifest_sha256"`
}

// Package is one version of a change request: the change request's row
// and that version's package on disk (at says which: the newest, unless
// opened as another).
type Package struct {
	*store.Change
	Dir      string    `json:"dir"`
	Manifest *Manifest `json:"-"`
	at       store.ChangeVersion
}

// At is the version the package is: its number, its run and number there,
// its tree and manifest's sha256.
func (p *Package) At() store.ChangeVersion { return p.at }

// newestVersion is the version a change request's row describes: its
// newest (the row keeps the newest version's tree, manifest and stat).
func newestVersion(c *store.Change, first store.ChangeVersion) store.ChangeVersion {
	v := first
	v.Version, v.Tree, v.ManifestSHA256 = c.Version, c.Tree, c.ManifestSHA256
	v.Files, v.Insertions, v.Deletions = c.Files, c.Insertions, c.Deletions
	return v
}

// ErrEmpty is in the error of Create for a worktree with nothing to
// package.
var ErrEmpty = errors.New("empty change")

// ErrUnchanged is in the error of NewVersion for a worktree that holds
// exactly the change request's newest version.
var ErrUnchanged = errors.New("unchanged since the last version")

// CreateOptions are `cr create`'s inputs.
type CreateOptions struct {
	Title   string
	Message string
}

// Create freezes the session's worktree into a new change request. An
// empty change is refused (exit 4), and so is one larger than MaxBytes,
// naming its largest files.
func (s *Service) Create(ctx context.Context, sess *store.Session, o CreateOptions) (*Package, error) {
	sn, err := s.Snapshot(ctx, sess, WantPackage)
	if err != nil {
		return nil, err
	}
	defer sn.Close()
	return s.pack(ctx, sess, sn, o, nil)
}

// pack writes a snapshot as a package: in a temporary directory beside the
// packages, moved to its number in the transaction that records it. With
// prev (the change request's newest version, opened) it is prev's next
// version, in the session's run.
func (s *Service) pack(ctx context.Context, sess *store.Session, sn *Snapshot, o CreateOptions, prev *Package) (*Package, error) {
	if sn.Empty() {
		return nil, fail.Refusedf("nothing to package: the worktree of %s holds exactly its base commit %s (no commits, and no changed, new or deleted files outside the ignore rules): %w", sess.ID, shortHash(sn.Base), ErrEmpty)
	}
	if err := s.checkSize(sn); err != nil {
		return nil, err
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	id := store.NewChangeID()
	version := 1
	if prev != nil {
		id, version = prev.ID, prev.at.Version+1
		if sn.Base.String() != prev.BaseCommit {
			return nil, fail.Failedf("the worktree of %s is at base %s, and change request %s at %s: a new version must have the base of the ones before it", sess.ID, shortHash(sn.Base), prev.ID, prev.BaseCommit)
		}
		if sn.Tree.String() == prev.at.Tree {
			return nil, fail.Refusedf("no new version: the worktree of %s holds exactly version %d of %s (tree %s): %w", sess.ID, prev.at.Version, prev.ID, shortHash(sn.Tree), ErrUnchanged)
		}
	}
	// The evidence (the store, the step files) is gathered while the patch
	// is written and proved.
	var ev *Evidence
	var evErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ev, evErr = s.evidence(ctx, sess.RunID, now) }()
	defer wg.Wait()

	runDir, err := s.Guard.RunDir(sess.RunID)
	if err != nil {
		return nil, err
	}
	run, err := os.OpenRoot(runDir)
	if err != nil {
		return nil, fmt.Errorf("open run directory: %w", err)
	}
	defer run.Close()
	if err := mkdirReal(run, PackagesDir); err != nil {
		return nil, err
	}
	pkgs, err := run.OpenRoot(PackagesDir)
	if err != nil {
		return nil, err
	}
	defer pkgs.Close()
	tmp := ".tmp-" + id + "-" + strconv.Itoa(version)
	if err := pkgs.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("create the package: %w", err)
	}
	placed := ""
	defer func() {
		if placed == "" {
			pkgs.RemoveAll(tmp)
		}
	}()
	stat, patchHash, err := s.writePatch(ctx, sn, pkgs, tmp, filepath.Join(runDir, PackagesDir, tmp, PatchFile))
	if err != nil {
		return nil, err
	}
	wg.Wait()
	if evErr != nil {
		return nil, evErr
	}

	m := &Manifest{
		Format: FormatVersion, ID: id, RunID: sess.RunID, SessionID: sess.ID, Repo: sess.Repo, Ref: sess.Ref,
		Project: sess.Project, Engine: sess.Engine, MountMode: sess.MountMode, Worktree: sn.Kind,
		BaseCommit: sn.Base.String(), BaseTree: sn.BaseTree.String(), Tree: sn.Tree.String(),
		Head: hashOrEmpty(sn.Head), Commits: nonNil(sn.Commits), Title: o.Title, Message: o.Message,
		Author: s.User, CreatedAt: now, Stat: stat, Files: map[string]FileHash{PatchFile: patchHash},
		Skipped: nonNil(sn.Skipped), Warnings: nonNil(sn.Warnings), Version: version,
	}
	if prev != nil {
		m.Title = prev.Title
		m.Previous = &PreviousVersion{Version: prev.at.Version, ManifestSHA256: prev.at.ManifestSHA256}
	}
	if m.Title == "" {
		m.Title = defaultTitle(sn, stat)
	}
	snap, err := s.snapshotCommit(sn, m)
	if err != nil {
		return nil, err
	}
	m.Snapshot = snap.String()
	var evHash FileHash
	if err := writeFile(pkgs, tmp+"/"+EvidenceFile, jsonWriter(ev), &evHash); err != nil {
		return nil, err
	}
	m.Files[EvidenceFile] = evHash
	var manHash FileHash
	if err := writeFile(pkgs, tmp+"/"+ManifestFile, jsonWriter(m), &manHash); err != nil {
		return nil, err
	}
	place := func(n int) error {
		name := strconv.Itoa(n)
		if err := pkgs.Rename(tmp, name); err != nil {
			return fmt.Errorf("place the package: %w", err)
		}
		placed = name
		return nil
	}
	v := store.ChangeVersion{Version: version, RunID: sess.RunID, SessionID: sess.ID, Tree: m.Tree, ManifestSHA256: manHash.SHA256,
		Files: stat.Files, Insertions: stat.Insertions, Deletions: stat.Deletions, CreatedAt: now}
	var c *store.Change
	if prev == nil {
		c = &store.Change{
			ID: id, RunID: sess.RunID, SessionID: sess.ID, Title: m.Title, Author: m.Author,
			BaseCommit: m.BaseCommit, Tree: m.Tree, ManifestSHA256: manHash.SHA256,
			Files: stat.Files, Insertions: stat.Insertions, Deletions: stat.Deletions, CreatedAt: now,
		}
		err = s.Store.CreateChange(ctx, c, place)
		v.Number = c.Number
	} else {
		err = s.Store.AddVersion(ctx, id, &v, place)
	}
	if err != nil {
		if placed != "" {
			pkgs.RemoveAll(placed)
			placed = ""
		}
		return nil, err
	}
	// the ref keeps the commit reachable in the store, for export
	ref := "refs/xmode/cr/" + id
	if version > 1 {
		ref += "/v" + strconv.Itoa(version)
	}
	_ = sn.store.setRef(ref, snap)
	if prev != nil {
		if c, err = s.Store.GetChange(ctx, id); err != nil {
			return nil, err
		}
	}
	return &Package{Change: c, Dir: filepath.Join(runDir, PackagesDir, placed), Manifest: m, at: v}, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// writePatch writes change.patch and proves it: applied to the base in a
// scratch index it must give the snapshot's tree. git apply cannot apply
// some rename patches git diff makes (a symlink renamed away whose path
// becomes a directory); such a change is written without rename detection,
// as deletions and additions.
func (s *Service) writePatch(ctx context.Context, sn *Snapshot, pkgs *os.Root, tmp, path string) (*Stat, FileHash, error) {
	var sum FileHash
	var why error
	for _, renames := range []bool{true, false} {
		pkgs.Remove(tmp + "/" + PatchFile)
		var stat *Stat
		err := writeFile(pkgs, tmp+"/"+PatchFile, func(w io.Writer) error {
			lw := &limitWriter{w: w, left: s.MaxBytes}
			var err error
			if stat, err = sn.statAndPatch(ctx, lw, renames); err != nil {
				if lw.over {
					return s.tooLarge(sn, fmt.Sprintf("its patch is over %s", humanBytes(s.MaxBytes)))
				}
				return err
			}
			return nil
		}, &sum)
		if err != nil {
			return nil, sum, err
		}
		got, err := applyPatch(ctx, sn.store, sn.base, []string{path}, nil, false)
		if err == nil && got == sn.Tree {
			return stat, sum, nil
		}
		why = err
		if err == nil {
			why = fmt.Errorf("it gives tree %s", got)
		}
	}
	return nil, sum, fmt.Errorf("the patch git made does not reproduce the snapshot's tree %s (%v): please report this", sn.Tree, why)
}

// checkSize refuses a change with a file, or files in total, larger than
// MaxBytes.
func (s *Service) checkSize(sn *Snapshot) error {
	var total int64
	for _, c := range sn.Changes {
		if c.New.Mode != 0 && c.New.Mode != gitread.ModeGitlink {
			total += c.NewSize
		}
		if c.New.Mode == 0 && c.Old.Mode != gitread.ModeGitlink {
			total += c.OldSize
		}
		if max(c.OldSize, c.NewSize) > s.MaxBytes {
			return s.tooLarge(sn, fmt.Sprintf("%s alone is %s", c.Path, humanBytes(max(c.OldSize, c.NewSize))))
		}
	}
	if total > s.MaxBytes {
		return s.tooLarge(sn, fmt.Sprintf("its files add up to %s", humanBytes(total)))
	}
	return nil
}

func (s *Service) tooLarge(sn *Snapshot, why string) error {
	var names []string
	for _, c := range sn.largest(5) {
		names = append(names, fmt.Sprintf("%s (%s)", c.Path, humanBytes(max(c.OldSize, c.NewSize))))
	}
	return tooLargeError(s.MaxBytes, why, names)
}

// tooLargeError refuses a change over XMODE_CR_MAX_BYTES (limit), saying
// why and naming its largest files ("path (size)").
func tooLargeError(limit int64, why string, largest []string) error {
	return fail.Refusedf("the change is larger than XMODE_CR_MAX_BYTES (%s): %s; its largest files: %s. Leave them out (ignore them, or delete them in the sandbox) or raise XMODE_CR_MAX_BYTES",
		humanBytes(limit), why, strings.Join(largest, ", "))
}

// errPatchTooLarge is a patch over XMODE_CR_MAX_BYTES.
var errPatchTooLarge = errors.New("patch larger than XMODE_CR_MAX_BYTES")

// limitWriter fails once more than left bytes were written.
type limitWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		l.over = true
		return 0, errPatchTooLarge
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}

// writeFile creates name (0600, it must not exist) under root, fills it
// with fill and records its sha256 and size.
func writeFile(root *os.Root, name string, fill func(io.Writer) error, sum *FileHash) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", filepath.Base(name), err)
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	err = fill(cw)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	*sum = FileHash{SHA256: hex.EncodeToString(h.Sum(nil)), Size: cw.n}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func jsonWriter(v any) func(io.Writer) error {
	return func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
}

// snapshotCommit is the commit whose tree is the snapshot: the agent's
// last commit when it holds everything, else a commit on top of it (or of
// the base) written into the run's object store.
func (s *Service) snapshotCommit(sn *Snapshot, m *Manifest) (Hash, error) {
	parent, tree := sn.Base, sn.BaseTree
	if n := len(sn.Commits); n > 0 {
		parent, tree = sn.Commits[n-1].ID, sn.Commits[n-1].Tree
	}
	if tree == sn.Tree {
		return parent, nil
	}
	return sn.store.write(gitread.TypeCommit, encodeCommit(sn.Tree, parent, s.User, m.CreatedAt, commitMessage(m)))
}

// commitMessage is the message of the commit that holds what the agent
// did not commit.
func commitMessage(m *Manifest) string { return commitMessageWith(m, "") }

// commitMessageWith is commitMessage with one more paragraph (if any)
// before the change request's line.
func commitMessageWith(m *Manifest, paragraph string) string {
	msg := m.Title + "\n"
	if m.Message != "" {
		msg += "\n" + strings.TrimRight(m.Message, "\n") + "\n"
	}
	if paragraph != "" {
		msg += "\n" + paragraph + "\n"
	}
	return msg + "\nChange request: " + m.ID + " (run " + m.RunID + ", session " + m.SessionID + ")\n"
}

func encodeCommit(tree, parent Hash, who string, when time.Time, msg string) []byte {
	sig := fmt.Sprintf("%s <> %d +0000", sanitizeName(who), when.Unix())
	return []byte("tree " + tree.String() + "\nparent " + parent.String() + "\nauthor " + sig + "\ncommitter " + sig + "\n\n" + msg)
}

// sanitizeName keeps a name valid in a commit header.
func sanitizeName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '<' || r == '>' || r == '\n' || r == 0 {
			return -1
		}
		return r
	}, s)
	if strings.TrimSpace(s) == "" {
		return "xmode"
	}
	return s
}

func defaultTitle(sn *Snapshot, stat *Stat) string {
	if n := len(sn.Commits); n > 0 {
		subject, _, _ := strings.Cut(strings.TrimSpace(sn.Commits[n-1].Message), "\n")
		if subject != "" {
			return subject
		}
	}
	files := "files"
	if stat.Files == 1 {
		files = "file"
	}
	return fmt.Sprintf("Changes of %s (%d %s)", sn.SessionID, stat.Files, files)
}

func hashOrEmpty(h Hash) string {
	if h.IsZero() {
		return ""
	}
	return h.String()
}

func shortHash(h Hash) string { return h.String()[:12] }

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// Open returns the newest version of the change request ref names (any
// unique prefix of its ID) with its manifest, read from its package
// without following a link.
func (s *Service) Open(ctx context.Context, ref string) (*Package, error) {
	return s.OpenVersion(ctx, ref, 0)
}

// OpenVersion is Open of version n of the change request (0: the newest).
func (s *Service) OpenVersion(ctx context.Context, ref string, n int) (*Package, error) {
	c, err := s.Store.ResolveChange(ctx, ref)
	if err != nil {
		return nil, err
	}
	return s.openVersion(ctx, c, n)
}

func (s *Service) openVersion(ctx context.Context, c *store.Change, n int) (*Package, error) {
	vs, err := s.Store.Versions(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		n = c.Version
	}
	if n < 1 || n > len(vs) {
		return nil, fail.NotFoundf("change request %s has no version %d: its versions are 1 to %d", c.ID, n, len(vs))
	}
	return s.open(c, vs[n-1])
}

// open reads version v of change request c.
func (s *Service) open(c *store.Change, v store.ChangeVersion) (*Package, error) {
	if v.Version == c.Version {
		// the row is the store's word on the newest version
		v = newestVersion(c, v)
	}
	dir, err := s.packageDir(v)
	if err != nil {
		return nil, err
	}
	p := &Package{Change: c, Dir: dir, at: v}
	b, err := s.ReadFile(p, ManifestFile)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fail.Failedf("change request %s: %s does not parse (%v): `xmode cr verify %s` says more", c.ID, ManifestFile, err, c.ID)
	}
	p.Manifest = &m
	return p, nil
}

func (s *Service) packageDir(v store.ChangeVersion) (string, error) {
	runDir, err := s.Guard.RunDir(v.RunID)
	if err != nil {
		return "", err
	}
	return filepath.Join(runDir, PackagesDir, strconv.Itoa(v.Number)), nil
}

// ReadFile reads one file of a package whole (OpenFile's checks): the
// manifest, at most maxManifest bytes, or a file the manifest records.
func (s *Service) ReadFile(p *Package, name string) ([]byte, error) {
	r, size, err := s.OpenFile(p, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if name == ManifestFile && size > maxManifest {
		return nil, fail.Failedf("change request %s: %s is %s, more than a manifest can be: `xmode cr verify %s` says more", p.ID, name, humanBytes(size), p.ID)
	}
	b, err := fsguard.ReadExactly(r, size)
	var tamper *fail.Error
	if errors.As(err, &tamper) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", name, p.ID, err)
	}
	return b, nil
}

// OpenFile opens one file of a package to stream it (through an os.Root
// of the run's packages: no link leads out), with its size. A file the
// manifest records (change.patch, evidence.json) must be the size it
// records: one of another size was tampered with and is refused unread,
// in cr verify's words; read to its end, it must have the recorded
// sha256 too, else the last read fails the same way.
func (s *Service) OpenFile(p *Package, name string) (io.ReadCloser, int64, error) {
	root, err := s.packagesRoot(p)
	if err != nil {
		return nil, 0, err
	}
	defer root.Close() // the open file stays usable
	f, size, err := fsguard.OpenRegularSized(root, strconv.Itoa(p.at.Number)+"/"+name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fail.Failedf("change request %s: %s is missing from %s: `xmode cr verify %s` says more", p.ID, name, p.Dir, p.ID)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read %s of %s: %w", name, p.ID, err)
	}
	var want *FileHash
	if p.Manifest != nil && name != ManifestFile {
		if h, ok := p.Manifest.Files[name]; ok {
			want = &h
		}
	}
	if want != nil && size != want.Size {
		f.Close()
		return nil, 0, tampered(p, name, sizeProblem(size, "the manifest", *want))
	}
	return &checkedFile{f: f, p: p, name: name, want: want, h: sha256.New()}, size, nil
}

// tampered is the error for a package file that is not what its package
// recorded, with the problem as cr verify words it.
func tampered(p *Package, name, problem string) error {
	return fail.Failedf("change request %s fails verification (%s: %s): `xmode cr verify %s` lists every problem", p.ID, name, problem, p.ID)
}

// checkedFile reads a package file, checking at its end that it is what
// the manifest recorded (want; nil: nothing recorded).
type checkedFile struct {
	f    *os.File
	p    *Package
	name string
	want *FileHash
	h    hash.Hash
	n    int64
}

func (c *checkedFile) Read(b []byte) (int, error) {
	n, err := c.f.Read(b)
	c.h.Write(b[:n])
	c.n += int64(n)
	if err == io.EOF && c.want != nil {
		got := FileHash{SHA256: hex.EncodeToString(c.h.Sum(nil)), Size: c.n}
		if got != *c.want {
			return n, tampered(c.p, c.name, hashProblem(got, "the manifest", *c.want))
		}
	}
	return n, err
}

func (c *checkedFile) Close() error { return c.f.Close() }

func (s *Service) packagesRoot(p *Package) (*os.Root, error) {
	runDir, err := s.Guard.RunDir(p.at.RunID)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(filepath.Join(runDir, PackagesDir))
	if err != nil {
		return nil, fail.Failedf("change request %s: its packages directory is missing (%v)", p.ID, err)
	}
	return root, nil
}

// ReviewOptions are what a review records beside its decision.
type ReviewOptions struct {
	Note string
	// Comments on lines of the version's diff (ParseComment); checked
	// against it (CheckComments) before anything is recorded.
	Comments []store.Comment
	// CloseOthers, with an approval of an attempt, closes the other
	// attempts of its run as superseded.
	CloseOthers bool
}

// Review records a decision by the service's user about p, which must be
// the change request's newest version, and returns the other attempts an
// approval with CloseOthers closed. An approval is refused for a change
// request that fails verification; asking for changes needs a note or a
// comment saying which.
func (s *Service) Review(ctx context.Context, p *Package, decision string, o ReviewOptions) ([]string, error) {
	now, err := s.Store.GetChange(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	if p.at.Version != now.Version {
		return nil, fail.Refusedf("%s is at version %d now, not %d: review the newest (`xmode cr show %s`)", p.ID, now.Version, p.at.Version, p.ID)
	}
	if decision == store.ChangeChangesRequested && strings.TrimSpace(o.Note) == "" && len(o.Comments) == 0 {
		return nil, fail.Usagef("requesting changes needs a note or comments saying which: %s TEXT, or %s \"PATH:LINE: TEXT\"", fail.Note, fail.Comment)
	}
	if o.CloseOthers {
		if decision != store.ChangeApproved {
			return nil, fail.Usagef("%s goes with an approval: it closes the other attempts as superseded by the approved one", fail.CloseOthers)
		}
		run, err := s.Store.ResolveRun(ctx, p.RunID)
		if err != nil {
			return nil, err
		}
		if run.Attempt == 0 {
			return nil, fail.Usagef("%s is not an attempt of a run of several attempts: %s has no others to close", p.ID, fail.CloseOthers)
		}
	}
	if err := s.CheckComments(ctx, p, o.Comments); err != nil {
		return nil, err
	}
	if decision == store.ChangeApproved {
		rep, err := s.Verify(ctx, p)
		if err != nil {
			return nil, err
		}
		if !rep.Intact {
			pr := rep.Problems[0]
			return nil, fail.Failedf("change request %s fails verification (version %d, %s: %s): not approving it; `xmode cr verify %s` lists every problem", p.ID, pr.Version, pr.File, pr.Problem, p.ID)
		}
	}
	r := store.Review{Decision: decision, Reviewer: s.User, Note: o.Note, DecidedAt: s.now().UTC(), Version: p.at.Version}
	return s.Store.ReviewChange(ctx, p.ID, r, store.ReviewOptions{Comments: o.Comments, CloseOthers: o.CloseOthers})
}

// AsksForChanges reports a review that asked for changes, and its note.
func AsksForChanges(r store.Review) (string, bool) {
	return r.Note, r.Decision == store.ChangeChangesRequested
}

// Evidence reads a package's evidence.json.
func (s *Service) Evidence(p *Package) (*Evidence, error) {
	b, err := s.ReadFile(p, EvidenceFile)
	if err != nil {
		return nil, err
	}
	var ev Evidence
	if err := json.Unmarshal(b, &ev); err != nil {
		return nil, fail.Failedf("change request %s: %s does not parse (%v)", p.ID, EvidenceFile, err)
	}
	return &ev, nil
}
