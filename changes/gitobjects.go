package changes

import (
	"context"
	"errors"
	"io"
	"math"
	"os"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitread"
)

// The git objects a snapshot and a package carry are gitread's.
type (
	Hash      = gitread.Hash
	TreeEntry = gitread.TreeEntry
	Commit    = gitread.Commit
	Signature = gitread.Signature
)

// sourceLimits are the bounds on reading a sandbox's objects
// (docs/change-requests.md, "Hostile packs"), from XMODE_CR_MAX_BYTES:
// no object over it; one read may inflate, rebuild from deltas and hash 8
// times it plus 256 MiB, so a 50-deep chain (git's default depth) of
// objects up to about a seventh of the limit reads; all the reads of one
// snapshot 4 times that; and the cache of delta bases holds one object of
// the limit and 64 MiB of others, at most 512 MiB.
func sourceLimits(maxBytes int64) gitread.Limits {
	read := satAdd(satMul(maxBytes, 8), 256<<20)
	return gitread.Limits{
		Object:     maxBytes,
		ObjectName: "XMODE_CR_MAX_BYTES",
		Read:       read,
		All:        satMul(read, 4),
		AllName:    "all the objects of one snapshot",
		Cache:      min(satAdd(maxBytes, 64<<20), 512<<20),
	}
}

func satMul(a, k int64) int64 {
	if a > math.MaxInt64/k {
		return math.MaxInt64
	}
	return a * k
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// hashReader hashes size bytes of r as an object of typ; it fails when r
// holds more or fewer bytes.
func hashReader(typ string, size int64, r io.Reader) (Hash, error) {
	h := gitread.NewHasher(typ, size)
	n, err := io.Copy(h, io.LimitReader(r, size+1))
	if err != nil {
		return Hash{}, err
	}
	if n != size {
		return Hash{}, errChanged
	}
	return h.Sum()
}

// errChanged is a file that changed size while it was read.
var errChanged = errors.New("changed while it was read")

// ctxReader stops a long read once ctx is cancelled (Ctrl-C, SIGTERM).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// readDirNames lists dir under root (fsguard.ReadDir: a FIFO in its place
// does not block, a link is not followed).
func readDirNames(root *os.Root, dir string) ([]string, error) {
	entries, err := fsguard.ReadDir(root, dir)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, err
}
