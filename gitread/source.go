package gitread

import (
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/xmode/xmode/fsguard"
)

// ErrNotFound is an object no source holds.
var ErrNotFound = errors.New("object not found")

// ErrTooLarge is an object larger than Limits.Object; the error names the
// limit (Limits.ObjectName) and the object's size.
var ErrTooLarge = errors.New("object larger than the limit")

// ErrTooMuchWork is a read that would inflate more than Limits.Read or
// Limits.All allow.
var ErrTooMuchWork = errors.New("reading it would inflate more than")

// ErrTampered is an object whose content does not hash to its ID.
var ErrTampered = errors.New("tampered or corrupt")

// sizeLimit is the largest object read, and its name for errors.
type sizeLimit struct {
	max  int64
	name string
}

// check refuses an object of size bytes over the limit.
func (l sizeLimit) check(size int64) error {
	if size > l.max {
		return &tooLargeError{l.name, size}
	}
	return nil
}

type tooLargeError struct {
	limit string
	size  int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("object larger than %s (%d bytes)", e.limit, e.size)
}

func (e *tooLargeError) Is(target error) bool { return target == ErrTooLarge }

// MaxDeltaDepth is the longest delta chain read: git's pack-objects
// writes none deeper (it caps --depth at 4095).
const MaxDeltaDepth = 4095

// Limits bound what reading a Source may cost, whatever its objects claim
// (docs/change-requests.md, "Hostile packs"); a zero bound allows nothing.
// A chain is resolved from its base up, one link at a time, so its depth
// costs a small record per link, never an object per link.
type Limits struct {
	// Object is the largest object read, checked against its header (a
	// delta's result against the delta's header) before it is inflated.
	Object int64
	// ObjectName is how errors name Object ("": "the limit").
	ObjectName string
	// Read bounds the bytes one Read may inflate, rebuild from deltas and
	// hash; All bounds the same for all the Reads of the Source together.
	Read, All int64
	// AllName says in errors what All covers ("": "all the objects read").
	AllName string
	// Cache bounds the bytes of resolved pack entries kept as bases for
	// the chains that follow (least recently used out first).
	Cache int64
}

// Options configure a Source.
type Options struct {
	Name    string          // how errors name the directory
	Limits  Limits          // what reading may cost
	Context context.Context // cancels a long read; nil: never
	// Alt is searched for what this Source lacks; only where an object
	// is comes from it: the object is read with this Source's Limits and
	// Context.
	Alt *Source
}

// Source reads the objects of a git directory a sandbox may have written,
// as data: loose objects and packs under objects/, opened through an
// os.Root so no symlink leads outside the directory, with no
// objects/info/alternates followed, every declared size bounded, delta
// chains bounded in depth (MaxDeltaDepth) and work (Limits), and every
// object checked to hash to the ID it was asked for. A tampered or
// corrupt object is an error, never an answer. A Source is not safe for
// concurrent use.
type Source struct {
	root      *os.Root
	name      string
	lim       Limits
	max       sizeLimit // lim.Object
	ctx       context.Context
	alt       *Source
	packs     []*packFile
	packsOpen bool
	cache     *baseCache    // resolved pack entries, for the chains that follow
	spent     int64         // bytes all reads so far inflated, rebuilt and hashed
	zr        io.ReadCloser // reused: a zlib reader costs ~40 KB to make
}

// NewSource reads the objects of the git directory root. Its packs are
// opened on the first object not found loose; a pack whose index does
// not parse is skipped: its objects are then simply not found. The
// caller keeps root (and Alt), and closes them after the Source.
func NewSource(root *os.Root, o Options) *Source {
	if o.Limits.ObjectName == "" {
		o.Limits.ObjectName = "the limit"
	}
	if o.Limits.AllName == "" {
		o.Limits.AllName = "all the objects read"
	}
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return &Source{root: root, name: o.Name, lim: o.Limits, max: sizeLimit{o.Limits.Object, o.Limits.ObjectName}, ctx: ctx, alt: o.Alt, cache: newBaseCache(o.Limits.Cache)}
}

// Close releases the packs (not the root, not Alt).
func (s *Source) Close() error {
	for _, p := range s.packs {
		p.close()
	}
	s.packs = nil
	return nil
}

// InPack reports whether one of the directory's packs (not Alt's) lists
// h, reading nothing of the object itself.
func (s *Source) InPack(h Hash) bool {
	s.openPacks()
	for _, p := range s.packs {
		if _, err := p.idx.FindOffset(plumbing.Hash(h)); err == nil {
			return true
		}
	}
	return false
}

// Refresh closes the packs opened so far: the next lookup lists
// objects/pack again, so packs written since are found.
func (s *Source) Refresh() {
	s.Close()
	s.packsOpen = false
}

func (s *Source) openPacks() {
	if s.packsOpen {
		return
	}
	s.packsOpen = true
	entries, err := fsguard.ReadDir(s.root, "objects/pack")
	if err != nil {
		return
	}
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".idx")
		if !ok || !strings.HasPrefix(base, "pack-") {
			continue
		}
		if p, err := openPack(s.root, base); err == nil {
			s.packs = append(s.packs, p)
		}
	}
}

// work is what one read may still inflate, rebuild and hash.
type work struct {
	left, used int64
	bound      string // for the error: which bound, and how much
}

func (w *work) take(n int64) error {
	if w == nil {
		return nil
	}
	if n > w.left {
		return fmt.Errorf("%w %s", ErrTooMuchWork, w.bound)
	}
	w.left -= n
	w.used += n
	return nil
}

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

// Read returns the type and content of object h, verified: loose, then
// in the packs, then in Alt.
func (s *Source) Read(h Hash) (string, []byte, error) {
	if err := s.ctx.Err(); err != nil {
		return "", nil, err
	}
	w := &work{left: s.lim.Read, bound: humanBytes(s.lim.Read) + ", the bound for one object"}
	if rest := s.lim.All - s.spent; rest < w.left {
		w.left, w.bound = max(rest, 0), humanBytes(s.lim.All)+", the bound for "+s.lim.AllName
	}
	typ, data, err := s.find(h, w)
	if err == nil {
		err = w.take(int64(len(data))) // the hash below
	}
	s.spent += w.used
	if err != nil {
		return "", nil, fmt.Errorf("object %s in %s: %w", h, s.name, err)
	}
	got, err := HashObject(typ, data)
	if err != nil {
		return "", nil, fmt.Errorf("object %s in %s: %w", h, s.name, err)
	}
	if got != h {
		return "", nil, fmt.Errorf("object %s in %s hashes to %s: %w", h, s.name, got, ErrTampered)
	}
	return typ, data, nil
}

// location is where an object is: a loose object's open file, or a pack
// entry.
type location struct {
	file *os.File // loose; the caller closes it
	name string
	pos  packPos
}

// locate finds h: loose, then in the packs, then in Alt.
func (s *Source) locate(h Hash) (location, error) {
	x := h.String()
	name := "objects/" + x[:2] + "/" + x[2:]
	f, _, err := fsguard.OpenRegularSized(s.root, name)
	if err == nil {
		return location{file: f, name: name}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return location{}, err
	}
	s.openPacks()
	for _, p := range s.packs {
		if off, err := p.idx.FindOffset(plumbing.Hash(h)); err == nil {
			return location{pos: packPos{p, off}}, nil
		}
	}
	if s.alt != nil {
		return s.alt.locate(h)
	}
	return location{}, ErrNotFound
}

func (s *Source) find(h Hash, w *work) (string, []byte, error) {
	loc, err := s.locate(h)
	if err != nil {
		return "", nil, err
	}
	if loc.file != nil {
		defer loc.file.Close()
		return s.looseFile(loc.file, loc.name, w)
	}
	o, err := s.unpack(loc.pos, w)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", loc.pos.p.name, err)
	}
	return o.typ, o.data, nil
}

// looseFile reads a zlib-compressed "<type> <size>\0<content>" object
// file, its declared size bounded before any content is inflated.
func (s *Source) looseFile(f io.Reader, name string, w *work) (string, []byte, error) {
	zr, typ, size, err := s.looseHeader(f, name)
	if err != nil {
		return "", nil, err
	}
	if err := s.max.check(size); err != nil {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := w.take(size); err != nil {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	data, err := fsguard.ReadExactly(zr, size)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	return typ, data, nil
}

// looseHeader reads the "<type> <size>\0" header of a loose object file
// and returns the reader positioned at its content.
func (s *Source) looseHeader(f io.Reader, name string) (io.Reader, string, int64, error) {
	zr, err := s.zlib(ctxReader{s.ctx, f})
	if err != nil {
		return nil, "", 0, fmt.Errorf("%s: %w", name, err)
	}
	var hdr []byte
	var one [1]byte
	for {
		if _, err := io.ReadFull(zr, one[:]); err != nil {
			return nil, "", 0, fmt.Errorf("%s: bad header: %w", name, err)
		}
		if one[0] == 0 {
			break
		}
		if hdr = append(hdr, one[0]); len(hdr) > 32 {
			return nil, "", 0, fmt.Errorf("%s: bad header", name)
		}
	}
	typ, sizeStr, ok := strings.Cut(string(hdr), " ")
	size, err := strconv.ParseInt(sizeStr, 10, 64)
	if !ok || err != nil || size < 0 || !validType(typ) {
		return nil, "", 0, fmt.Errorf("%s: bad header %q", name, hdr)
	}
	return zr, typ, size, nil
}

// Size returns the size of object h as its header says — a loose
// object's header, a pack entry's, or for a delta the result size its
// delta data begins with — inflating a few bytes, never the object. It
// is not checked against h (nothing is, until the whole object is read):
// take it as the directory's word.
func (s *Source) Size(h Hash) (int64, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	loc, err := s.locate(h)
	if err != nil {
		return 0, fmt.Errorf("object %s in %s: %w", h, s.name, err)
	}
	if loc.file != nil {
		defer loc.file.Close()
		_, _, size, err := s.looseHeader(loc.file, loc.name)
		if err != nil {
			return 0, fmt.Errorf("object %s in %s: %w", h, s.name, err)
		}
		return size, nil
	}
	size, err := s.entrySize(loc.pos)
	if err != nil {
		return 0, fmt.Errorf("object %s in %s: %w", h, s.name, err)
	}
	return size, nil
}

// zlib returns the source's zlib reader reset to r.
func (s *Source) zlib(r io.Reader) (io.Reader, error) {
	if s.zr == nil {
		zr, err := zlib.NewReader(r)
		if err != nil {
			return nil, err
		}
		s.zr = zr
		return zr, nil
	}
	return s.zr, s.zr.(zlib.Resetter).Reset(r, nil)
}
