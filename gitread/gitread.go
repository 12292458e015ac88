// Package gitread reads git's formats as hostile data: loose objects and
// packs (deltas included) through a bounded reader that checks every
// object against its ID, trees, commits, the index (versions 2 to 4),
// ignore files with git's wildmatch, and git's rules for the paths it
// refuses to track. Nothing here runs git, follows a link out of the
// directory it was given, or trusts a size or count the data claims
// before checking it against what is there; what xmode does with what it
// reads (snapshots, change requests, its own object store) is in
// package changes (docs/change-requests.md, "Trust model").
package gitread

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"

	"github.com/pjbgf/sha1cd"
)

// Hash is a git object ID (SHA-1).
type Hash [20]byte

var zeroHash Hash

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports the all-zero ID (no object).
func (h Hash) IsZero() bool { return h == zeroHash }

// MarshalText writes the hex form (JSON); the zero ID is "".
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
	TypeCommit = "commit"
	TypeTree   = "tree"
	TypeBlob   = "blob"
	TypeTag    = "tag"
)

func validType(t string) bool {
	return t == TypeBlob || t == TypeTree || t == TypeCommit || t == TypeTag
}

// ErrCollision is a SHA-1 collision attack found while hashing.
var ErrCollision = errors.New("SHA-1 collision attack detected")

// Hasher hashes one object: "<type> <size>\0" then the content, with
// collision detection (what git itself uses), so a crafted colliding
// object is refused rather than taken for another.
type Hasher struct{ h hash.Hash }

// NewHasher starts the hash of an object of typ whose content is size
// bytes; write the content to it.
func NewHasher(typ string, size int64) Hasher {
	h := sha1cd.New()
	h.Write([]byte(typ + " " + strconv.FormatInt(size, 10) + "\x00"))
	return Hasher{h}
}

func (h Hasher) Write(p []byte) (int, error) { return h.h.Write(p) }

// Sum is the object's ID; ErrCollision when what was written is part of
// a collision attack.
func (h Hasher) Sum() (Hash, error) {
	var out Hash
	b, collided := h.h.(interface {
		CollisionResistantSum([]byte) ([]byte, bool)
	}).CollisionResistantSum(nil)
	copy(out[:], b)
	if collided {
		return out, ErrCollision
	}
	return out, nil
}

// HashObject returns the ID of an object with this type and content.
func HashObject(typ string, data []byte) (Hash, error) {
	h := NewHasher(typ, int64(len(data)))
	h.Write(data)
	return h.Sum()
}

// humanBytes is how errors here say a size.
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
