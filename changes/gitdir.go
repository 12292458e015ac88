package changes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitread"
	"github.com/xmode/xmode/store"
)

// Worktree kinds.
const (
	KindClone   = "clone"           // a clone per run: worktree/.git is its repository
	KindMachine = "project_machine" // a linked worktree of a project machine
)

// gitDirs are the git directories of a session's worktree, located from
// IDs (never from the worktree's .git file, a record's commondir or gitdir,
// core.worktree or alternates) and opened as os.Roots.
type gitDirs struct {
	kind   string
	common *os.Root // objects, refs, packed-refs, info/exclude; nil when missing
	record *os.Root // HEAD and index: the common dir for a clone; nil when missing
	// note says why a directory is missing.
	note string
}

func (d *gitDirs) Close() {
	if d.record != nil && d.record != d.common {
		d.record.Close()
	}
	if d.common != nil {
		d.common.Close()
	}
}

// locateGitDirs finds the git directories of the run's worktree (wt, an
// open O_NOFOLLOW handle on it): for a clone, worktree/.git, which must be a
// directory (a .git file is a redirect and is not followed); for a project
// machine, the machine's .git and its record of this worktree.
func locateGitDirs(ctx context.Context, st *store.Store, g fsguard.Guard, runID string, wt *os.File) (*gitDirs, error) {
	project, record, err := st.RunMachine(ctx, runID)
	if err != nil {
		return nil, err
	}
	if project == "" {
		d := &gitDirs{kind: KindClone}
		root, err := openSubdirRoot(wt, ".git")
		if err != nil {
			d.note = fmt.Sprintf("the worktree's .git is not a directory (%v): its commits, index and info/exclude are not read", err)
			return d, nil
		}
		d.common, d.record = root, root
		return d, nil
	}
	d := &gitDirs{kind: KindMachine}
	dir, err := g.MachineDir(project)
	if err != nil {
		return nil, err
	}
	common, err := fsguard.OpenRootPath(filepath.Join(dir, "repo", ".git"))
	if err != nil {
		d.note = fmt.Sprintf("project machine %s has no repository (%v)", project, err)
		return d, nil
	}
	d.common = common
	name, err := worktreeRecord(common, record, runID)
	if err != nil {
		d.note = fmt.Sprintf("project machine %s has no record of this worktree (%v): its commits and index are not read", project, err)
		return d, nil
	}
	if d.record, err = fsguard.OpenRoot(common, "worktrees/"+name); err != nil {
		d.note = fmt.Sprintf("open the worktree record %s: %v", name, err)
	}
	return d, nil
}

// worktreeRecord names the machine's record (.git/worktrees/<name>) of the
// run's worktree: the name stored at create (machines.AddWorktree). Only a
// run without a stored name (its create died before recording it, so no
// step ever ran in it) is looked up by what its gitdir file names, as
// machines.ReleaseWorktree does.
func worktreeRecord(common *os.Root, stored, runID string) (string, error) {
	if stored != "" {
		if strings.ContainsAny(stored, "/\x00") || stored == "." || stored == ".." {
			return "", fmt.Errorf("stored record name %q is not a name", stored)
		}
		return stored, nil
	}
	names, err := readDirNames(common, "worktrees")
	if err != nil {
		return "", err
	}
	suffix := "/runs/" + runID + "/worktree/.git"
	for _, n := range names {
		b, err := fsguard.ReadRegular(common, "worktrees/"+n+"/gitdir", 4096)
		if err == nil && strings.HasSuffix(strings.TrimSpace(string(b)), suffix) {
			return n, nil
		}
	}
	return "", fs.ErrNotExist
}

// head resolves the record's HEAD to a commit: a detached ID, or a branch
// looked up in the common dir (loose ref, then packed-refs). Zero when it
// cannot be read.
func (d *gitDirs) head() (Hash, error) {
	if d.record == nil {
		return Hash{}, errors.New("no repository")
	}
	b, err := fsguard.ReadRegular(d.record, "HEAD", 4096)
	if err != nil {
		return Hash{}, err
	}
	v := strings.TrimSpace(string(b))
	for range 5 {
		ref, sym := strings.CutPrefix(v, "ref: ")
		if !sym {
			return gitread.ParseHash(v)
		}
		if !strings.HasPrefix(ref, "refs/") || strings.Contains(ref, "..") {
			return Hash{}, fmt.Errorf("HEAD names %q", ref)
		}
		if ov := d.overlay(); ov != nil {
			b, err := fsguard.ReadRegular(ov, ref, 4096)
			ov.Close()
			if err == nil {
				v = strings.TrimSpace(string(b))
				continue
			}
		}
		if b, err := fsguard.ReadRegular(d.common, ref, 4096); err == nil {
			v = strings.TrimSpace(string(b))
			continue
		}
		h, err := d.packedRef(ref)
		if err != nil {
			return Hash{}, fmt.Errorf("resolve %s: %w", ref, err)
		}
		return h, nil
	}
	return Hash{}, errors.New("HEAD: too many symbolic refs")
}

// overlay opens a project machine worktree's overlay (fsguard.RecordOverlay:
// what git wrote from inside a docker sandbox), nil when it has none. The
// caller closes it.
func (d *gitDirs) overlay() *os.Root {
	if d.kind != KindMachine || d.record == nil {
		return nil
	}
	ov, err := fsguard.OpenRoot(d.record, fsguard.RecordOverlay)
	if err != nil {
		return nil
	}
	return ov
}

func (d *gitDirs) packedRef(ref string) (Hash, error) {
	b, err := fsguard.ReadRegular(d.common, "packed-refs", 64<<20)
	if err != nil {
		return Hash{}, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		id, name, ok := bytes.Cut(line, []byte(" "))
		if ok && string(name) == ref {
			return gitread.ParseHash(string(id))
		}
	}
	return Hash{}, fs.ErrNotExist
}

// index reads the record's index: the paths git add -A keeps even when
// ignored, and the submodule pointers. It is returned raw: callers parse
// what they need (gitread.ParseIndexOf).
func (d *gitDirs) index() ([]byte, error) {
	if d.record == nil {
		return nil, errors.New("no repository")
	}
	return fsguard.ReadRegular(d.record, "index", 256<<20)
}

// exclude reads info/exclude of the common dir.
func (d *gitDirs) exclude() []byte {
	if d.common == nil {
		return nil
	}
	b, err := fsguard.ReadRegular(d.common, "info/exclude", 1<<20)
	if err != nil {
		return nil
	}
	return b
}
