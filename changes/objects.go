package changes

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/pjbgf/sha1cd"
)

// Hash is a git object ID (SHA-1).
type Hash [20]byte

var zeroHash Hash

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports the all-zero ID (no object).
func (h Hash) IsZero() bool { return h == zeroHash }

// MarshalText writes the hex form (JSON).
func (h Hash) MarshalText() ([]byte, error) {
	if h.IsZero() {
		return []byte{}, nil
	}
	return []byte(h.String()), nil
}

// UnmarshalText reads the hex form; empty is the zero ID.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*h = zeroHash
		return nil
	}
	p, err := ParseHash(string(b))
	*h = p
	return err
}

// ParseHash parses a full 40-digit lowercase hex object ID.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 40 {
		return h, fmt.Errorf("%q is not a full object ID", s)
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return h, fmt.Errorf("%q is not a full object ID", s)
		}
	}
	_, err := hex.Decode(h[:], []byte(s))
	return h, err
}

// Object types, as git names them in object headers.
const (
	typeCommit = "commit"
	typeTree   = "tree"
	typeBlob   = "blob"
	typeTag    = "tag"
)

// Tree entry modes.
const (
	modeTree    uint32 = 0o040000
	modeFile    uint32 = 0o100644
	modeExec    uint32 = 0o100755
	modeSymlink uint32 = 0o120000
	modeGitlink uint32 = 0o160000
)

// errCollision is a SHA-1 collision attack found while hashing.
var errCollision = errors.New("SHA-1 collision attack detected")

// hasher hashes one object: "<type> <size>\0" then the content, with
// collision detection (what git itself uses), so a crafted colliding object
// is refused rather than taken for another.
type hasher struct{ h hash.Hash }

func newHasher(typ string, size int64) hasher {
	h := sha1cd.New()
	h.Write([]byte(typ + " " + strconv.FormatInt(size, 10) + "\x00"))
	return hasher{h}
}

func (h hasher) Write(p []byte) (int, error) { return h.h.Write(p) }

func (h hasher) sum() (Hash, error) {
	var out Hash
	b, collided := h.h.(interface {
		CollisionResistantSum([]byte) ([]byte, bool)
	}).CollisionResistantSum(nil)
	copy(out[:], b)
	if collided {
		return out, errCollision
	}
	return out, nil
}

// hashObject returns the ID of an object with this type and content.
func hashObject(typ string, data []byte) (Hash, error) {
	h := newHasher(typ, int64(len(data)))
	h.Write(data)
	return h.sum()
}

// hashReader hashes size bytes of r as an object of typ; it fails when r
// holds more or fewer bytes.
func hashReader(typ string, size int64, r io.Reader) (Hash, error) {
	h := newHasher(typ, size)
	n, err := io.Copy(h, io.LimitReader(r, size+1))
	if err != nil {
		return Hash{}, err
	}
	if n != size {
		return Hash{}, errChanged
	}
	return h.sum()
}

// errChanged is a file that changed size while it was read.
var errChanged = errors.New("changed while it was read")

// TreeEntry is one entry of a git tree.
type TreeEntry struct {
	Name string
	Mode uint32
	Hash Hash
}

func (e TreeEntry) isTree() bool { return e.Mode == modeTree }

// sortTree orders entries as git does: by name, a subtree compared as if
// its name ended in '/'.
func sortTree(es []TreeEntry) {
	key := func(e TreeEntry) string {
		if e.isTree() {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(es, func(i, j int) bool { return key(es[i]) < key(es[j]) })
}

// encodeTree is the content of a tree object; entries must be sorted.
func encodeTree(es []TreeEntry) []byte {
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

// parseTree decodes a tree object. Names that could address a path outside
// the tree ("", ".", "..", anything with '/') make the tree invalid.
func parseTree(data []byte) ([]TreeEntry, error) {
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
		case modeTree, modeFile, modeExec, modeSymlink, modeGitlink:
		case 0o100664, 0o100640, 0o100600: // written by old gits; read as a plain file
			m = modeFile
		default:
			return nil, fmt.Errorf("tree entry %q has mode %o", name, mode)
		}
		es = append(es, TreeEntry{Name: name, Mode: m, Hash: h})
	}
	return es, nil
}

// Signature is a commit's author or committer line.
type Signature struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	// Raw is the line as git stored it after the name: "<email> <unix> <tz>",
	// kept so a commit re-created elsewhere gets the same bytes.
	Raw  string `json:"-"`
	When string `json:"when"` // RFC 3339
}

// Commit is the part of a commit object xmode uses.
type Commit struct {
	ID        Hash      `json:"id"`
	Tree      Hash      `json:"tree"`
	Parents   []Hash    `json:"parents"`
	Author    Signature `json:"author"`
	Committer Signature `json:"committer"`
	Message   string    `json:"message"`
	// Extra is true when the commit carries headers xmode does not re-create
	// (a signature, an encoding): an exported copy gets another ID.
	Extra bool `json:"-"`
}

// parseCommit decodes a commit object's headers and message.
func parseCommit(id Hash, data []byte) (*Commit, error) {
	c := &Commit{ID: id}
	headers, msg, ok := bytes.Cut(data, []byte("\n\n"))
	if !ok {
		headers, msg = bytes.TrimSuffix(data, []byte("\n")), nil
	}
	c.Message = string(msg)
	seenTree := false
	for _, line := range bytes.Split(headers, []byte("\n")) {
		key, val, _ := bytes.Cut(line, []byte(" "))
		switch string(key) {
		case "tree":
			h, err := ParseHash(string(val))
			if err != nil || seenTree {
				return nil, fmt.Errorf("commit %s: bad tree header", id)
			}
			c.Tree, seenTree = h, true
		case "parent":
			h, err := ParseHash(string(val))
			if err != nil {
				return nil, fmt.Errorf("commit %s: bad parent header", id)
			}
			c.Parents = append(c.Parents, h)
		case "author":
			c.Author = parseSignature(string(val))
		case "committer":
			c.Committer = parseSignature(string(val))
		default:
			c.Extra = true
		}
	}
	if !seenTree {
		return nil, fmt.Errorf("commit %s has no tree", id)
	}
	return c, nil
}

// parseSignature splits "Name <email> 1700000000 +0100".
func parseSignature(s string) Signature {
	var sig Signature
	lt := bytes.IndexByte([]byte(s), '<')
	gt := bytes.LastIndexByte([]byte(s), '>')
	if lt < 0 || gt < lt {
		sig.Name = s
		return sig
	}
	sig.Name = string(bytes.TrimSpace([]byte(s[:lt])))
	sig.Email = s[lt+1 : gt]
	sig.Raw = s[lt:]
	sig.When = parseGitTime(s[gt+1:])
	return sig
}

// parseGitTime turns " 1700000000 +0100" into RFC 3339 in that zone; ""
// when it does not parse.
func parseGitTime(s string) string {
	f := bytes.Fields([]byte(s))
	if len(f) != 2 || len(f[1]) != 5 {
		return ""
	}
	sec, err1 := strconv.ParseInt(string(f[0]), 10, 64)
	hh, err2 := strconv.Atoi(string(f[1][1:3]))
	mm, err3 := strconv.Atoi(string(f[1][3:5]))
	if err1 != nil || err2 != nil || err3 != nil {
		return ""
	}
	off := hh*3600 + mm*60
	if f[1][0] == '-' {
		off = -off
	}
	return time.Unix(sec, 0).In(time.FixedZone("", off)).Format(time.RFC3339)
}
