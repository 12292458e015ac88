package changes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/xmode/xmode/gitcli"
)

// diffArgs are what every diff xmode asks git for shares: no external diff
// or textconv program, no colour, renames found.
var diffArgs = []string{"diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M"}

// Patch writes the snapshot's diff against its base. binary: the full
// package form (`git apply` reproduces binary files from it); otherwise
// what `git diff` shows a person.
func (sn *Snapshot) Patch(ctx context.Context, w io.Writer, binary bool) error {
	return writeDiff(ctx, sn.store, w, binary, true, sn.BaseTree, sn.Tree)
}

func writeDiff(ctx context.Context, st *objectStore, w io.Writer, binary, renames bool, from, to Hash) error {
	args := append([]string(nil), diffArgs...)
	if binary {
		args = append(args, "--binary", "--full-index")
	}
	if !renames {
		args = append(args, "--no-renames")
	}
	args = append(args, from.String(), to.String(), "--")
	if _, err := gitcli.RunOwned(ctx, gitcli.Owned{GitDir: st.dir, Stdout: w}, args...); err != nil {
		return fmt.Errorf("diff the snapshot: %w", err)
	}
	return nil
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

// Stat asks git for the snapshot's diffstat (one run: --raw --numstat).
func (sn *Snapshot) Stat(ctx context.Context) (*Stat, error) {
	return statOf(ctx, sn.store, sn.BaseTree, sn.Tree, sn.sizes())
}

func (sn *Snapshot) sizes() map[string][2]int64 {
	m := make(map[string][2]int64, len(sn.Changes))
	for _, c := range sn.Changes {
		m[c.Path] = [2]int64{c.OldSize, c.NewSize}
	}
	return m
}

func statOf(ctx context.Context, st *objectStore, from, to Hash, sizes map[string][2]int64) (*Stat, error) {
	var out bytes.Buffer
	args := append(append([]string(nil), diffArgs...), "--raw", "--numstat", "-z", "--no-abbrev", from.String(), to.String(), "--")
	if _, err := gitcli.RunOwned(ctx, gitcli.Owned{GitDir: st.dir, Stdout: &out}, args...); err != nil {
		return nil, fmt.Errorf("diffstat of the snapshot: %w", err)
	}
	s, err := parseRawNumstat(out.Bytes())
	if err != nil {
		return nil, err
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
	return s, nil
}

// parseRawNumstat reads `git diff --raw --numstat -z`: every raw record,
// then every numstat record, in the same order.
func parseRawNumstat(b []byte) (*Stat, error) {
	toks := strings.Split(string(b), "\x00")
	s := &Stat{PerFile: []FileStat{}}
	i := 0
	next := func() (string, error) {
		if i >= len(toks) {
			return "", fmt.Errorf("diffstat: output ends early")
		}
		i++
		return toks[i-1], nil
	}
	for i < len(toks) && strings.HasPrefix(toks[i], ":") {
		f := strings.Fields(toks[i][1:])
		i++
		if len(f) != 5 {
			return nil, fmt.Errorf("diffstat: bad record %q", toks[i-1])
		}
		fs := FileStat{Status: f[4][:1], OldMode: f[0], NewMode: f[1], OldBlob: f[2], NewBlob: f[3]}
		if fs.Status == "R" || fs.Status == "C" {
			fs.Similarity, _ = strconv.Atoi(f[4][1:])
			var err error
			if fs.OldPath, err = next(); err != nil {
				return nil, err
			}
		}
		p, err := next()
		if err != nil {
			return nil, err
		}
		fs.Path = p
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
	for n := range s.PerFile {
		t, err := next()
		if err != nil {
			return nil, err
		}
		f := strings.SplitN(t, "\t", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("diffstat: bad numstat %q", t)
		}
		if f[2] == "" { // a rename: the two names follow
			if _, err := next(); err != nil {
				return nil, err
			}
			if _, err := next(); err != nil {
				return nil, err
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
	return s, nil
}
