package gitread

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// Tree entry modes.
const (
	ModeTree    uint32 = 0o040000
	ModeFile    uint32 = 0o100644
	ModeExec    uint32 = 0o100755
	ModeSymlink uint32 = 0o120000
	ModeGitlink uint32 = 0o160000
)

// TreeEntry is one entry of a git tree.
type TreeEntry struct {
	Name string
	Mode uint32
	Hash Hash
}

// IsTree reports a subtree.
func (e TreeEntry) IsTree() bool { return e.Mode == ModeTree }

// SortTree orders entries as git does: by name, a subtree compared as if
// its name ended in '/'.
func SortTree(es []TreeEntry) {
	key := func(e TreeEntry) string {
		if e.IsTree() {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(es, func(i, j int) bool { return key(es[i]) < key(es[j]) })
}

// EncodeTree is the content of a tree object; entries must be sorted
// (SortTree).
func EncodeTree(es []TreeEntry) []byte {
	var b bytes.Buffer
	for _, e := range es {
		b.WriteString(strconv.FormatUint(uint64(e.Mode), 8))
		b.WriteByte(' ')
		b.WriteString(e.Name)
		b.WriteByte(0)
		b.Write(e.Hash[:])
	}
	return b.Bytes()
}

// ParseTree decodes a tree object. Names that could address a path
// outside the tree ("", ".", "..", anything with '/') make the tree
// invalid, and so does a mode git does not write; the group-writable
// file modes old gits wrote read as ModeFile.
func ParseTree(data []byte) ([]TreeEntry, error) {
	var es []TreeEntry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp <= 0 || sp > 7 {
			return nil, errors.New("bad tree entry mode")
		}
		mode, err := strconv.ParseUint(string(data[:sp]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("bad tree entry mode %q", data[:sp])
		}
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul < 0 || len(data) < nul+21 {
			return nil, errors.New("truncated tree entry")
		}
		name := string(data[:nul])
		if name == "" || name == "." || name == ".." || bytes.IndexByte(data[:nul], '/') >= 0 {
			return nil, fmt.Errorf("bad tree entry name %q", name)
		}
		var h Hash
		copy(h[:], data[nul+1:nul+21])
		data = data[nul+21:]
		m := uint32(mode)
		switch m {
		case ModeTree, ModeFile, ModeExec, ModeSymlink, ModeGitlink:
		case 0o100664, 0o100640, 0o100600: // written by old gits; read as a plain file
			m = ModeFile
		default:
			return nil, fmt.Errorf("tree entry %q has mode %o", name, mode)
		}
		es = append(es, TreeEntry{Name: name, Mode: m, Hash: h})
	}
	return es, nil
}
