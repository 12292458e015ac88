package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

// InstanceFile is <root>/xmode.instance: the storage root's instance ID
// (the xmode.instance label of its docker objects), kept beside the
// database so that a database lost, emptied or swapped for another
// install's is noticed instead of silently replaced by a new, empty store —
// whose next reap would take every live worktree for an orphan.
const InstanceFile = "xmode.instance"

// ErrLost marks the refusal to open a storage root whose store is lost.
var ErrLost = errors.New("store lost")

// identity is what the storage root says about its store before the
// database is opened.
type identity struct {
	root     string
	instance string   // content of xmode.instance; "" when absent
	markers  []string // runs/, project_machines/ or xmode.instance: the root has been used
}

func readIdentity(root string) (identity, error) {
	id := identity{root: root}
	for _, d := range []string{"runs", fsguard.MachinesDirName} {
		if _, err := os.Lstat(filepath.Join(root, d)); err == nil {
			id.markers = append(id.markers, d+"/")
		}
	}
	b, err := os.ReadFile(filepath.Join(root, InstanceFile))
	switch {
	case err == nil:
		id.instance = strings.TrimSpace(string(b))
		id.markers = append(id.markers, InstanceFile)
	case !errors.Is(err, fs.ErrNotExist):
		return id, fmt.Errorf("read %s: %w", filepath.Join(root, InstanceFile), err)
	}
	return id, nil
}

// used reports whether the root holds anything a store must know about.
func (id identity) used() bool { return len(id.markers) > 0 }

// lost is the refusal: what is wrong, and the two ways out.
func (id identity) lost(what string) error {
	db := filepath.Join(id.root, FileName)
	keep := ""
	if id.instance != "" {
		keep = " (keeping instance " + id.instance + ", so its docker objects stay this install's)"
	}
	return &fail.Error{Kind: fail.Failed, Err: fmt.Errorf("%w: %s %s, but %s holds %s: refusing to start a new store over them, whose first reap would take every worktree for an orphan. Restore %s (with its -wal file) from a backup, or adopt the root deliberately with `xmode doctor --adopt`%s; adopting keeps every run directory and reaps none of them unless asked (`xmode reap --reclaim-unknown`)",
		ErrLost, db, what, id.root, strings.Join(id.markers, ", "), FileName, keep)}
}

// checkBeforeOpen refuses a used root whose database file is missing or
// empty.
func (id identity) checkBeforeOpen() error {
	if !id.used() {
		return nil
	}
	st, err := os.Stat(filepath.Join(id.root, FileName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return id.lost("is missing")
	case err != nil:
		return fmt.Errorf("stat %s: %w", filepath.Join(id.root, FileName), err)
	case st.Size() == 0:
		return id.lost("is empty")
	}
	return nil
}

// checkAfterOpen compares the database's instance with the root's, and
// records the instance beside the database when the root has none yet (a
// new root, or one made by an xmode before xmode.instance existed).
func (s *Store) checkAfterOpen(ctx context.Context, id identity) error {
	inst, err := s.InstanceID(ctx)
	if err != nil {
		return err
	}
	switch {
	case id.instance == "":
		return writeInstance(id.root, inst)
	case id.instance != inst:
		return id.lost(fmt.Sprintf("belongs to another install (instance %s, this root's is %s)", inst, id.instance))
	}
	return nil
}

func writeInstance(root, instance string) error {
	path := filepath.Join(root, InstanceFile)
	tmp := path + ".tmp-" + newID("")
	if err := os.WriteFile(tmp, []byte(instance+"\n"), 0o644); err != nil {
		return fsguard.WriteError(root, fmt.Errorf("record the storage root's instance: %w", err))
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record the storage root's instance: %w", err)
	}
	return nil
}

// Adopted says what Adopt did.
type Adopted struct {
	Instance string   `json:"instance"`
	Adopted  bool     `json:"adopted"`            // false: the store was fine, nothing changed
	MovedTo  []string `json:"moved_to,omitempty"` // the broken database files, kept aside
	Reason   string   `json:"reason,omitempty"`   // what was wrong
}

// Adopt makes a lost store usable again, deliberately: `xmode doctor
// --adopt`. A missing or empty database is replaced by a new store that
// keeps the root's instance ID (so the docker objects of the old sessions
// stay this install's and are reaped as orphans), after moving what is left
// of the old one aside; a database of another install is kept and the root
// takes its instance. The run directories the new store does not know stay
// where they are: the reaper leaves them alone unless asked.
func Adopt(ctx context.Context, root string) (*Store, Adopted, error) {
	id, err := readIdentity(root)
	if err != nil {
		return nil, Adopted{}, err
	}
	var out Adopted
	if err := id.checkBeforeOpen(); err != nil {
		out.Adopted, out.Reason = true, strings.SplitN(err.Error(), ": refusing", 2)[0]
		stamp := time.Now().UTC().Format("20060102T150405Z")
		for _, suffix := range []string{"", "-wal", "-shm"} {
			from := filepath.Join(root, FileName+suffix)
			if _, err := os.Lstat(from); err != nil {
				continue
			}
			to := filepath.Join(root, FileName+".lost-"+stamp+suffix)
			if err := os.Rename(from, to); err != nil {
				return nil, out, fmt.Errorf("move %s aside: %w", from, err)
			}
			out.MovedTo = append(out.MovedTo, to)
		}
	}
	s, err := openDB(ctx, root, identity{root: root}, id.instance)
	if err != nil {
		return nil, out, err
	}
	if out.Instance, err = s.InstanceID(ctx); err != nil {
		s.Close()
		return nil, out, err
	}
	if out.Instance != id.instance {
		if id.instance != "" && !out.Adopted {
			out.Adopted, out.Reason = true, fmt.Sprintf("%s belonged to instance %s, the root to %s", FileName, out.Instance, id.instance)
		}
		if err := writeInstance(root, out.Instance); err != nil {
			s.Close()
			return nil, out, err
		}
	}
	return s, out, nil
}

// KnownRuns returns the IDs of every run the store has a row for.
func (s *Store) KnownRuns(ctx context.Context) (map[string]bool, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM runs`)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}
