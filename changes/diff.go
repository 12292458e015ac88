package changes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/xmode/xmode/gitcli"
)

// Want says which diffs a snapshot will be asked for, so that Snapshot can
// start git for them before it walks the worktree: git's start-up then
// overlaps with the walk.
type Want int

// What a snapshot's caller will ask for.
const (
	WantStat    Want = 1 << iota // Stat
	WantPatch                    // Patch(…, false): what a person reads
	WantPackage                  // the package's stat and binary patch
)

// diffArgs are what every diff xmode asks git for: the tree pair on stdin
// (diff-tree --stdin, so git can start before the trees exist), recursive,
// renames found, no external diff or textconv program, no colour.
var diffArgs = []string{"diff-tree", "--stdin", "-r", "-M", "--no-color", "--no-ext-diff", "--no-textconv"}

// diff is one git diff-tree on the object store, started before its trees
// are known; finish gives it the trees and where its output goes.
type diff struct {
	kind Want
	in   *io.PipeWriter
	out  *echoSkipper
	done chan error
}

func startDiff(ctx context.Context, st *objectStore, kind Want, renames bool) *diff {
	args := append([]string(nil), diffArgs...)
	switch kind {
	case WantStat:
		args = append(args, "--raw", "--numstat", "-z", "--no-abbrev")
	case WantPackage:
		args = append(args, "--raw", "--numstat", "-z", "--no-abbrev", "-p", "--binary", "--full-index")
	default:
		args = append(args, "-p")
	}
	if !renames {
		args = append(args, "--no-renames")
	}
	pr, pw := io.Pipe()
	d := &diff{kind: kind, in: pw, out: &echoSkipper{}, done: make(chan error, 1)}
	// Started here, not in the goroutine: a goroutine may not run before
	// the walk that keeps every P busy is over.
	wait, err := gitcli.StartOwned(ctx, gitcli.Owned{GitDir: st.dir, Stdin: pr, Stdout: d.out}, args...)
	if err != nil {
		pr.Close()
		d.done <- err
		return d
	}
	go func() {
		_, err := wait()
		pr.Close()
		d.done <- err
	}()
	return d
}

// finish diffs from against to into w and waits for git.
func (d *diff) finish(from, to Hash, w io.Writer) error {
	d.out.set(w, from.String()+" "+to.String()+"\n")
	if _, err := fmt.Fprintf(d.in, "%s %s\n", from, to); err != nil {
		d.in.Close()
		<-d.done
		return fmt.Errorf("diff the snapshot: %w", err)
	}
	d.in.Close()
	if err := <-d.done; err != nil {
		return fmt.Errorf("diff the snapshot: %w", err)
	}
	return nil
}

// abort ends a diff that will not be needed.
func (d *diff) abort() {
	d.in.CloseWithError(errors.New("not needed"))
	<-d.done
}

// echoSkipper drops the tree pair diff-tree --stdin echoes before its
// output, and passes the rest to w once set.
type echoSkipper struct {
	mu   sync.Mutex
	w    io.Writer
	echo string
	seen int
}

func (e *echoSkipper) set(w io.Writer, echo string) {
	e.mu.Lock()
	e.w, e.echo = w, echo
	e.mu.Unlock()
}

func (e *echoSkipper) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(p)
	if e.seen < len(e.echo) {
		k := min(len(e.echo)-e.seen, len(p))
		if string(p[:k]) != e.echo[e.seen:e.seen+k] {
			return 0, errors.New("diff-tree: unexpected output")
		}
		e.seen += k
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if _, err := e.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}

// run uses the diff started for kind, or starts one now.
func (sn *Snapshot) run(ctx context.Context, kind Want, renames bool, w io.Writer) error {
	d := sn.pending[kind]
	delete(sn.pending, kind)
	if d == nil || !renames {
		if d != nil {
			d.abort()
		}
		d = startDiff(ctx, sn.store, kind, renames)
	}
	return d.finish(sn.BaseTree, sn.Tree, w)
}

// Patch writes the snapshot's diff against its base. binary: the full
// package form (`git apply` reproduces binary files from it, without a
// Stat); otherwise what `git diff` shows a person.
func (sn *Snapshot) Patch(ctx context.Context, w io.Writer, binary bool) error {
	if !binary {
		return sn.run(ctx, WantPatch, true, w)
	}
	_, err := sn.statAndPatch(ctx, w, true)
	return err
}

// statAndPatch writes the package's patch to w and returns its stat, from
// one git run.
func (sn *Snapshot) statAndPatch(ctx context.Context, w io.Writer, renames bool) (*Stat, error) {
	sp := &statSplitter{patch: w}
	if err := sn.run(ctx, WantPackage, renames, sp); err != nil {
		return nil, err
	}
	if sp.stat == nil {
		if sp.err != nil {
			return nil, sp.err
		}
		return nil, errors.New("diff the snapshot: git printed no stat")
	}
	sn.addSizes(sp.stat)
	return sp.stat, nil
}

// Stat is a diffstat: per file and in total.
type Stat struct {
	Files      int        `json:"files"`
	Insertions int        `json:"insertions"`
	Deletions  int        `json:"deletions"`
	PerFile    []FileStat `json:"per_file"`
}

// FileStat is one file of a Stat. Status is git's: A added, M modified,
// D deleted, R renamed, T type changed (file, symlink, submodule).
type FileStat struct {
	Path       string `json:"path"`
	OldPath    string `json:"old_path,omitempty"`
	Status     string `json:"status"`
	Similarity int    `json:"similarity,omitempty"` // renames: percent
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary"`
	OldMode    string `json:"old_mode,omitempty"`
	NewMode    string `json:"new_mode,omitempty"`
	OldBlob    string `json:"old_blob,omitempty"`
	NewBlob    string `json:"new_blob,omitempty"`
	OldSize    int64  `json:"old_size"`
	NewSize    int64  `json:"new_size"`
}

// Stat asks git for the snapshot's diffstat (--raw --numstat).
func (sn *Snapshot) Stat(ctx context.Context) (*Stat, error) {
	var out bytes.Buffer
	if err := sn.run(ctx, WantStat, true, &out); err != nil {
		return nil, err
	}
	s, n, err := parseRawNumstat(out.Bytes(), false)
	if err != nil {
		return nil, err
	}
	if n != out.Len() {
		return nil, fmt.Errorf("diffstat: %d bytes left over", out.Len()-n)
	}
	sn.addSizes(s)
	return s, nil
}

func (sn *Snapshot) addSizes(s *Stat) {
	sizes := make(map[string][2]int64, len(sn.Changes))
	for _, c := range sn.Changes {
		sizes[c.Path] = [2]int64{c.OldSize, c.NewSize}
	}
	for i := range s.PerFile {
		f := &s.PerFile[i]
		old := f.Path
		if f.OldPath != "" {
			old = f.OldPath
		}
		f.OldSize = sizes[old][0]
		f.NewSize = sizes[f.Path][1]
	}
}

// statSplitter takes `--raw --numstat -z -p` output: the stat records, a
// NUL, then the patch, which it passes on as it comes.
type statSplitter struct {
	head  []byte
	stat  *Stat
	err   error
	patch io.Writer
}

func (s *statSplitter) Write(p []byte) (int, error) {
	if s.stat != nil {
		return s.patch.Write(p)
	}
	s.head = append(s.head, p...)
	st, n, err := parseRawNumstat(s.head, true)
	if errors.Is(err, errShort) {
		return len(p), nil
	}
	if err != nil {
		s.err = err
		return 0, err
	}
	s.stat = st
	rest := s.head[n:]
	s.head = nil
	if len(rest) > 0 {
		if _, err := s.patch.Write(rest); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

var errShort = errors.New("diffstat: output ends early")

// parseRawNumstat reads `--raw --numstat -z` output: every raw record,
// then every numstat record, in the same order; with a patch following,
// a NUL separates them. It returns the stat and how many bytes it used,
// errShort when b ends before the stat does.
func parseRawNumstat(b []byte, withPatch bool) (*Stat, int, error) {
	s := &Stat{PerFile: []FileStat{}}
	pos := 0
	next := func() (string, error) {
		i := bytes.IndexByte(b[pos:], 0)
		if i < 0 {
			return "", errShort
		}
		t := string(b[pos : pos+i])
		pos += i + 1
		return t, nil
	}
	for pos < len(b) && b[pos] == ':' {
		tok, err := next()
		if err != nil {
			return nil, 0, err
		}
		f := strings.Fields(tok[1:])
		if len(f) != 5 || f[4] == "" {
			return nil, 0, fmt.Errorf("diffstat: bad record %q", tok)
		}
		fs := FileStat{Status: f[4][:1], OldMode: f[0], NewMode: f[1], OldBlob: f[2], NewBlob: f[3]}
		if fs.Status == "R" || fs.Status == "C" {
			fs.Similarity, _ = strconv.Atoi(f[4][1:])
			if fs.OldPath, err = next(); err != nil {
				return nil, 0, err
			}
		}
		if fs.Path, err = next(); err != nil {
			return nil, 0, err
		}
		for _, m := range []*string{&fs.OldMode, &fs.NewMode} {
			if *m == "000000" {
				*m = ""
			}
		}
		for _, h := range []*string{&fs.OldBlob, &fs.NewBlob} {
			if strings.Trim(*h, "0") == "" {
				*h = ""
			}
		}
		s.PerFile = append(s.PerFile, fs)
	}
	if len(s.PerFile) == 0 && pos == len(b) && !withPatch {
		return s, pos, nil
	}
	for n := range s.PerFile {
		t, err := next()
		if err != nil {
			return nil, 0, err
		}
		f := strings.SplitN(t, "\t", 3)
		if len(f) != 3 {
			return nil, 0, fmt.Errorf("diffstat: bad numstat %q", t)
		}
		if f[2] == "" { // a rename: the two names follow
			for range 2 {
				if _, err := next(); err != nil {
					return nil, 0, err
				}
			}
		}
		fs := &s.PerFile[n]
		if f[0] == "-" {
			fs.Binary = true
		} else {
			fs.Insertions, _ = strconv.Atoi(f[0])
			fs.Deletions, _ = strconv.Atoi(f[1])
		}
		s.Files++
		s.Insertions += fs.Insertions
		s.Deletions += fs.Deletions
	}
	if withPatch {
		if pos >= len(b) {
			return nil, 0, errShort
		}
		if b[pos] != 0 {
			return nil, 0, errors.New("diffstat: no separator before the patch")
		}
		pos++
	}
	return s, pos, nil
}
