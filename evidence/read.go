package evidence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// Files of a step's evidence directory.
const (
	CommandFile = "command.json"
	StdoutFile  = "stdout.log"
	StderrFile  = "stderr.log"
	ResultFile  = "result.json"
)

// StepDir is <root>/runs/<run>/steps/<seq>-<name>, derived from the run,
// the number and the name (never from what a row claims).
func StepDir(g fsguard.Guard, runID string, seq int, name string) (string, error) {
	rel, err := stepRel(runID, seq, name)
	if err != nil {
		return "", err
	}
	return filepath.Join(g.RunsDir(), rel), nil
}

func stepRel(runID string, seq int, name string) (string, error) {
	if !fsguard.ValidID("run_", runID) {
		return "", fail.Refusedf("run id %q is malformed; refusing to derive a path from it", runID)
	}
	if seq < 1 || !dirName(name) {
		return "", fail.Refusedf("step %d %q is not a step's number and name; refusing to derive a path from it", seq, name)
	}
	return filepath.Join(runID, "steps", fmt.Sprintf("%04d-%s", seq, name)), nil
}

// Open opens one of a step's files for reading. The evidence directory is
// written by xmode alone, but a host step runs with xmode's rights and
// could have replaced part of it: the path is opened through an os.Root on
// <root>/runs, no component of it may be a symlink, and only a regular file
// is opened (without blocking on a FIFO put in its place).
func Open(g fsguard.Guard, runID string, seq int, name, file string) (*os.File, error) {
	switch file {
	case CommandFile, StdoutFile, StderrFile, ResultFile:
	default:
		return nil, fmt.Errorf("%q is not a step's evidence file", file)
	}
	rel, err := stepRel(runID, seq, name)
	if err != nil {
		return nil, err
	}
	runs, err := os.OpenRoot(g.RunsDir())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", g.RunsDir(), err)
	}
	defer runs.Close()
	for dir := rel; dir != "."; dir = filepath.Dir(dir) {
		st, err := runs.Lstat(dir)
		if err != nil {
			return nil, missing(rel, err)
		}
		if !st.IsDir() {
			return nil, fail.Refusedf("evidence directory %s is not a directory (a step replaced it?): refusing to read through it", filepath.Join(g.RunsDir(), dir))
		}
	}
	path := filepath.Join(rel, file)
	f, err := fsguard.OpenRegular(runs, path)
	if err != nil {
		// A link: refused by O_NOFOLLOW, or by os.Root when one on the way
		// was swapped in after the check and leads out.
		var nr *fsguard.NotRegularError
		switch {
		case errors.As(err, &nr) && nr.Symlink(), strings.Contains(err.Error(), "path escapes"):
			return nil, fail.Refusedf("%s is a symlink (a step replaced it?): refusing to follow it", filepath.Join(g.RunsDir(), path))
		case errors.As(err, &nr):
			return nil, fail.Refusedf("%s is not a regular file (a step replaced it?): refusing to read it", filepath.Join(g.RunsDir(), path))
		}
		return nil, missing(path, err)
	}
	return f, nil
}

func missing(rel string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fail.NotFoundf("no evidence at runs/%s (removed, or the step could not write it)", rel)
	}
	return err
}
