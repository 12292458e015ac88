package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/gitread"
	"github.com/xmode/xmode/store"
)

// File steps: reading, listing, writing, editing and deleting files of a
// session's worktree, as the MCP server's file tools do (docs/mcp.md), each
// recorded as a step (file-read, file-write…) whose command.json says what
// was asked and whose result.json holds the path's hashes before and after,
// so a change request's evidence shows every edit.
//
// The worktree is hostile, as for `sandbox cp`, and stricter: a path is
// walked from the worktree's directory one component at a time
// (fsguard.OpenDirAt: O_NOFOLLOW|O_DIRECTORY), so no link is followed —
// not even one that stays inside, which could lead into .git — and a FIFO
// or a device in a directory's place fails at once; only regular files are
// read or replaced, a write goes to a new file renamed over the old one
// (never through it, nor through a hard link), and .git is never named. In
// sync mode the sandbox's copy is brought back first (SyncBack) and what
// changed is pushed to it after (engine.PushPath), as `sandbox cp` does.

// Bounds of the file steps.
const (
	// MaxFileBytes is the most a write or an edit may hold, and the largest
	// file an edit reads.
	MaxFileBytes = 8 << 20
	// MaxReadBytes is the most one read returns; a longer range stops at a
	// line and says where to go on.
	MaxReadBytes = 1 << 20
	// MaxReadScan is the most of a file one read reads (read): what a read
	// costs is bounded whatever the file's size (a sparse file of 100 GB
	// reads as zeros, as fast as memory, for a minute).
	MaxReadScan = 32 << 20
	// MaxListEntries is the most one list returns.
	MaxListEntries = 2000
	// maxListVisit bounds the entries a list walks to find them.
	maxListVisit = 200_000
	// maxHashBytes: a file larger than this is recorded by its size alone.
	maxHashBytes = 256 << 20
)

// FileStep is what a file step did: the step that recorded it and the
// path before and after it (nil where there was no file).
type FileStep struct {
	Step          *evidence.Result   `json:"-"`
	Path          string             `json:"path"`
	Before, After *evidence.FileHash `json:"-"`
	// Created: a write made the file (and MadeDirs the directories on its
	// way); Replacements: how many places an edit changed; Removed: how many
	// entries a delete removed.
	Created      bool     `json:"-"`
	MadeDirs     []string `json:"-"`
	Replacements int      `json:"-"`
	Removed      int      `json:"-"`
}

// FileRead is what a read returned.
type FileRead struct {
	FileStep
	// Content holds lines StartLine to EndLine (1-based, inclusive) of a
	// file of TotalLines lines (-1: more than a read scans, MaxReadScan);
	// "" for a binary file (a NUL byte, or not UTF-8). NextLine is the
	// first line a further read would start at, 0 when the range was read
	// whole.
	Content                        string
	StartLine, EndLine, TotalLines int
	NextLine                       int
	Binary                         bool
}

// FileEntry is one entry a list found.
type FileEntry struct {
	Path string `json:"path"` // relative to the worktree
	Type string `json:"type"` // file, dir, symlink or other (a FIFO, a device, a socket)
	Size int64  `json:"size"` // a file's size; 0 otherwise
}

// FileList is what a list found.
type FileList struct {
	FileStep
	Entries   []FileEntry
	Truncated bool // there were more than MaxListEntries (or too many to walk)
}

// ReadOptions are a read's: a path and a line range (0: from the first
// line, to the last).
type ReadOptions struct {
	Path               string
	StartLine, EndLine int
}

// ReadFile returns lines of a file of the worktree, at most MaxReadBytes
// of them, as a recorded step.
func (s *Service) ReadFile(ctx context.Context, sess *store.Session, o ReadOptions) (*FileRead, error) {
	rel, err := CheckFilePath(o.Path, false)
	if err != nil {
		return nil, err
	}
	if o.StartLine < 0 || o.EndLine < 0 || (o.EndLine > 0 && o.EndLine < max(o.StartLine, 1)) {
		return nil, fail.Usagef("lines %d to %d: give 1-based line numbers, the end at or after the start (0: to the end)", o.StartLine, o.EndLine)
	}
	out := &FileRead{}
	req := evidence.FileRequest{Op: "read", Path: rel, StartLine: o.StartLine, EndLine: o.EndLine}
	res, err := s.fileStep(ctx, sess, req, false, func(wt *os.File) (*evidence.FileOutcome, error) {
		dir, base, err := walkTo(wt, rel, nil)
		if err != nil {
			return nil, err
		}
		defer dir.Close()
		f, err := fsguard.OpenRegularAt(dir, base)
		if err != nil {
			return nil, inWorktreeFile(rel, err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", rel, err)
		}
		if err := out.read(ctx, f, st.Size(), rel, o); err != nil {
			if fail.KindOf(err) != fail.Failed {
				return nil, err
			}
			return nil, fmt.Errorf("read %s: %w", rel, err)
		}
		return &evidence.FileOutcome{Op: "read", Path: rel, Before: out.Before, After: out.Before}, nil
	})
	out.Step, out.Path, out.After = res, rel, out.Before
	return out, err
}

// read reads the lines o asks for of f, a file of size bytes, scanning at
// most MaxReadScan bytes of it: the lines before the range, the range, and
// after it the rest of the file to count its lines and hash it. A file
// larger than that is not hashed (its size alone is recorded) and its
// lines past the scan are not counted (TotalLines -1); a range that begins
// past the scan is refused. It stops when ctx ends.
func (r *FileRead) read(ctx context.Context, f io.Reader, size int64, rel string, o ReadOptions) error {
	start := max(o.StartLine, 1)
	h := sha256.New()
	scan := &io.LimitedReader{R: f, N: MaxReadScan}
	var src io.Reader = scan
	if size <= MaxReadScan {
		src = io.TeeReader(scan, h)
	}
	br := bufio.NewReaderSize(src, 64<<10)
	var content bytes.Buffer
	// line: the lines begun; open: the last one read has not ended yet;
	// lineAt: where it begins in content.
	line, open, lineAt, full := 0, false, 0, false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := br.ReadSlice('\n')
		if len(b) > 0 {
			if !open {
				line++
				lineAt = content.Len()
			}
			open = b[len(b)-1] != '\n'
			switch {
			case line < start || full || (o.EndLine > 0 && line > o.EndLine):
			case content.Len()+len(b) > MaxReadBytes && lineAt > 0:
				// This line goes whole into the next read.
				content.Truncate(lineAt)
				full, r.EndLine, r.NextLine = true, line-1, line
			case content.Len()+len(b) > MaxReadBytes:
				// One line longer than a whole read: its start, and the
				// next read begins at the line after it.
				content.Write(b[:MaxReadBytes-content.Len()])
				full, r.StartLine, r.EndLine, r.NextLine = true, line, line, line+1
			default:
				if r.StartLine == 0 {
					r.StartLine = line
				}
				r.EndLine = line
				content.Write(b)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	// The scan reached the end of the file, or stopped at MaxReadScan
	// (a file of exactly that size ends there: one more byte says so).
	counted := scan.N > 0
	if !counted {
		var one [1]byte
		n, _ := f.Read(one[:])
		counted = n == 0
	}
	r.Before = &evidence.FileHash{Size: size}
	if size <= MaxReadScan && counted {
		r.Before.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	if counted {
		r.TotalLines = line
		if r.NextLine > r.TotalLines {
			r.NextLine = 0
		}
	} else {
		r.TotalLines = -1
		inRange := r.StartLine > 0 && !full
		if inRange && open && lineAt > 0 {
			// The scan stopped inside a line of the range: it goes whole
			// into the next read.
			content.Truncate(lineAt)
			r.EndLine, r.NextLine = line-1, line
		} else if inRange && (o.EndLine == 0 || r.EndLine < o.EndLine) {
			r.NextLine = r.EndLine + 1
		}
		if r.StartLine == 0 || r.EndLine < r.StartLine {
			return fail.Refusedf("line %d of %s is past the first %d MiB of it, the most a read scans (the file is %d bytes): read that part with a command in the sandbox (e.g. tail -c, or sed -n '%d,%dp')",
				start, rel, MaxReadScan>>20, size, start, start+99)
		}
	}
	if c := content.Bytes(); bytes.IndexByte(c, 0) >= 0 || !utf8.Valid(c) {
		r.Binary = true
		return nil
	}
	r.Content = content.String()
	return nil
}

// ListOptions are a list's: a directory and a glob.
type ListOptions struct {
	Path    string // a directory of the worktree ("" or "." for its top)
	Pattern string // git's wildmatch against paths relative to Path, "**" across directories; "" lists Path's own entries
}

// ListFiles lists a directory of the worktree, or what in it matches a
// glob, never .git and never through a link, as a recorded step.
func (s *Service) ListFiles(ctx context.Context, sess *store.Session, o ListOptions) (*FileList, error) {
	p := o.Path
	if p == "" {
		p = "."
	}
	rel, err := CheckFilePath(p, true)
	if err != nil {
		return nil, err
	}
	if strings.ContainsRune(o.Pattern, 0) {
		return nil, fail.Usagef("the pattern holds a NUL byte")
	}
	out := &FileList{}
	req := evidence.FileRequest{Op: "list", Path: rel, Pattern: o.Pattern}
	res, err := s.fileStep(ctx, sess, req, false, func(wt *os.File) (*evidence.FileOutcome, error) {
		dir := wt
		if rel != "." {
			parent, base, err := walkTo(wt, rel, nil)
			if err != nil {
				return nil, err
			}
			dir, err = fsguard.OpenDirAt(parent, base)
			parent.Close()
			if err != nil {
				return nil, inWorktreeFile(rel, err)
			}
			defer dir.Close()
		}
		visited := 0
		if err := out.walk(dir, rel, "", o.Pattern, &visited); err != nil {
			return nil, err
		}
		sort.Slice(out.Entries, func(i, j int) bool { return out.Entries[i].Path < out.Entries[j].Path })
		return &evidence.FileOutcome{Op: "list", Path: rel, Entries: len(out.Entries)}, nil
	})
	out.Step, out.Path = res, rel
	return out, err
}

// walk lists dir (the worktree's path top, under the list's directory as
// sub), descending into directories when there is a pattern.
func (l *FileList) walk(dir *os.File, top, sub, pattern string, visited *int) error {
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("list %s: %w", path.Join(top, sub), err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		if isGitName(e.Name()) {
			continue
		}
		if *visited++; *visited > maxListVisit || len(l.Entries) >= MaxListEntries {
			l.Truncated = true
			return nil
		}
		name := path.Join(sub, e.Name())
		entry := FileEntry{Path: path.Join(top, name), Type: "other"}
		switch t := e.Type(); {
		case t.IsRegular():
			entry.Type = "file"
			if info, err := e.Info(); err == nil {
				entry.Size = info.Size()
			}
		case t.IsDir():
			entry.Type = "dir"
		case t&fs.ModeSymlink != 0:
			entry.Type = "symlink"
		}
		if pattern == "" || gitread.Wildmatch(pattern, name, true) {
			l.Entries = append(l.Entries, entry)
		}
		if pattern != "" && entry.Type == "dir" {
			sd, err := fsguard.OpenDirAt(dir, e.Name())
			if err != nil {
				continue // replaced meanwhile by something that is not a directory
			}
			err = l.walk(sd, top, name, pattern, visited)
			sd.Close()
			if err != nil || l.Truncated {
				return err
			}
		}
	}
	return nil
}

// WriteFile makes path hold content, creating it (and the directories on
// its way) when it is not there, as a recorded step. Only a regular file
// is replaced: a link, a directory, a FIFO at path is refused.
func (s *Service) WriteFile(ctx context.Context, sess *store.Session, rel string, content []byte) (*FileStep, error) {
	rel, err := CheckFilePath(rel, false)
	if err != nil {
		return nil, err
	}
	if len(content) > MaxFileBytes {
		return nil, fail.Usagef("the content is %d bytes; a write holds at most %d (%d MiB): write a large or generated file from a command in the sandbox instead (sandbox_exec), or copy it in with `xmode sandbox cp`", len(content), MaxFileBytes, MaxFileBytes>>20)
	}
	n := int64(len(content))
	out := &FileStep{Path: rel}
	req := evidence.FileRequest{Op: "write", Path: rel, ContentBytes: &n}
	res, err := s.fileStep(ctx, sess, req, true, func(wt *os.File) (*evidence.FileOutcome, error) {
		owner := worktreeOwner(wt)
		dir, base, err := walkTo(wt, rel, &mkdirs{owner: owner, made: &out.MadeDirs, rel: rel})
		if err != nil {
			return nil, err
		}
		defer dir.Close()
		before, mode, err := existing(dir, base, rel, "file_write replaces only a regular file: delete it first (file_delete), or write another path")
		if err != nil {
			return nil, err
		}
		if err := replace(dir, base, content, mode, owner); err != nil {
			return nil, fmt.Errorf("write %s: %w", rel, err)
		}
		out.Before, out.After, out.Created = before, hashOf(content), before == nil
		return &evidence.FileOutcome{Op: "write", Path: rel, Before: out.Before, After: out.After}, nil
	})
	out.Step = res
	return out, err
}

// EditOptions are an edit's: the exact text to replace and what replaces
// it, once (it must occur exactly once) or everywhere.
type EditOptions struct {
	Path       string
	Old, New   string
	ReplaceAll bool
}

// EditFile replaces Old with New in a file of the worktree, as a recorded
// step. A missing Old, or one that occurs more than once without
// ReplaceAll, changes nothing and says so.
func (s *Service) EditFile(ctx context.Context, sess *store.Session, o EditOptions) (*FileStep, error) {
	rel, err := CheckFilePath(o.Path, false)
	if err != nil {
		return nil, err
	}
	switch {
	case o.Old == "":
		return nil, fail.Usagef("old_string is empty: give the exact text to replace (to write a whole file, use file_write)")
	case o.Old == o.New:
		return nil, fail.Usagef("old_string and new_string are the same: nothing would change")
	case len(o.New) > MaxFileBytes:
		return nil, fail.Usagef("new_string is %d bytes; an edit holds at most %d", len(o.New), MaxFileBytes)
	}
	out := &FileStep{Path: rel}
	req := evidence.FileRequest{Op: "edit", Path: rel, ReplaceAll: o.ReplaceAll}
	res, err := s.fileStep(ctx, sess, req, true, func(wt *os.File) (*evidence.FileOutcome, error) {
		dir, base, err := walkTo(wt, rel, nil)
		if err != nil {
			return nil, err
		}
		defer dir.Close()
		f, err := fsguard.OpenRegularAt(dir, base)
		if err != nil {
			return nil, inWorktreeFile(rel, err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		if st.Size() > MaxFileBytes {
			f.Close()
			return nil, fail.Refusedf("%s is %d bytes; file_edit edits files of at most %d: change it with a command in the sandbox (sandbox_exec)", rel, st.Size(), MaxFileBytes)
		}
		old, err := fsguard.ReadBounded(f, rel, MaxFileBytes)
		f.Close()
		if err != nil {
			return nil, err
		}
		text := string(old)
		n := strings.Count(text, o.Old)
		switch {
		case n == 0:
			return nil, fail.Usagef("old_string was not found in %s: read the file (file_read) and copy the text exactly, whitespace and line breaks included", rel)
		case n > 1 && !o.ReplaceAll:
			return nil, fail.Usagef("old_string occurs %d times in %s (lines %s): add the lines around it to make it unique, or set replace_all to change every one", n, rel, linesOf(text, o.Old, 10))
		}
		edited := strings.ReplaceAll(text, o.Old, o.New)
		if len(edited) > MaxFileBytes {
			return nil, fail.Refusedf("the edit would make %s %d bytes, more than %d: change it with a command in the sandbox (sandbox_exec)", rel, len(edited), MaxFileBytes)
		}
		if err := replace(dir, base, []byte(edited), uint32(st.Mode().Perm()), worktreeOwner(wt)); err != nil {
			return nil, fmt.Errorf("write %s: %w", rel, err)
		}
		out.Before, out.After, out.Replacements = hashOf(old), hashOf([]byte(edited)), n
		return &evidence.FileOutcome{Op: "edit", Path: rel, Before: out.Before, After: out.After, Replacements: n}, nil
	})
	out.Step = res
	return out, err
}

// DeleteFile removes a path of the worktree — a file, a link (not what it
// points to), a FIFO; a directory only with recursive — as a recorded
// step.
func (s *Service) DeleteFile(ctx context.Context, sess *store.Session, rel string, recursive bool) (*FileStep, error) {
	rel, err := CheckFilePath(rel, false)
	if err != nil {
		return nil, err
	}
	out := &FileStep{Path: rel}
	req := evidence.FileRequest{Op: "delete", Path: rel, Recursive: recursive}
	res, err := s.fileStep(ctx, sess, req, true, func(wt *os.File) (*evidence.FileOutcome, error) {
		dir, base, err := walkTo(wt, rel, nil)
		if err != nil {
			return nil, err
		}
		defer dir.Close()
		var st unix.Stat_t
		if err := unix.Fstatat(int(dir.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, inWorktreeFile(rel, &fs.PathError{Op: "stat", Path: rel, Err: err})
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if !recursive {
				return nil, fail.Usagef("%s is a directory: set recursive to delete it and everything in it", rel)
			}
			root, err := fsguard.RootOf(dir)
			if err != nil {
				return nil, err
			}
			defer root.Close()
			n, err := countTree(root, base)
			if err != nil {
				return nil, fmt.Errorf("delete %s: %w", rel, err)
			}
			// os.Root's RemoveAll follows no link, inside or out.
			if err := root.RemoveAll(base); err != nil {
				return nil, fmt.Errorf("delete %s: %w", rel, err)
			}
			out.Removed = n
		case unix.S_IFREG:
			if f, err := fsguard.OpenRegularAt(dir, base); err == nil {
				out.Before = hashFile(f, int64(st.Size))
				f.Close()
			}
			fallthrough
		default:
			if err := unix.Unlinkat(int(dir.Fd()), base, 0); err != nil {
				return nil, fmt.Errorf("delete %s: %w", rel, err)
			}
			out.Removed = 1
		}
		return &evidence.FileOutcome{Op: "delete", Path: rel, Before: out.Before, Removed: out.Removed}, nil
	})
	out.Step = res
	return out, err
}

// fileStep runs do as a recorded step of sess, named file-<op>, with argv
// [file-<op>, path] and no process: do's error fails the step (exit 1, the
// message in stderr.log) and is returned with its Result. change: it
// changes the worktree, which a sync-mode sandbox is then given.
func (s *Service) fileStep(ctx context.Context, sess *store.Session, req evidence.FileRequest, change bool, do func(wt *os.File) (*evidence.FileOutcome, error)) (*evidence.Result, error) {
	if err := store.CheckOpen(sess, s.Now()); err != nil {
		return nil, err
	}
	wt, err := s.Guard.CheckWorktree(sess.RunID, sess.WorktreePath)
	if err != nil {
		return nil, err
	}
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return nil, err
	}
	defer engine.Close(provider)
	name := "file-" + req.Op
	step, err := evidence.Begin(ctx, s.Store, s.Guard, evidence.Request{
		Session: sess, Name: name, Argv: []string{name, req.Path}, Env: []string{}, MaxLogBytes: s.Cfg.EvidenceMaxBytes, File: &req, Now: s.Clock,
	})
	if err != nil {
		return nil, err
	}
	sb := s.sandboxOf(sess, wt)
	outcome, opErr := func() (*evidence.FileOutcome, error) {
		if err := engine.SyncBack(ctx, provider, sb); err != nil {
			return nil, err
		}
		root, err := fsguard.OpenRootPath(wt)
		if err != nil {
			return nil, fmt.Errorf("open the worktree: %w", err)
		}
		defer root.Close()
		dir, err := root.OpenFile(".", os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			return nil, fmt.Errorf("open the worktree: %w", err)
		}
		defer dir.Close()
		outcome, err := do(dir)
		if err == nil && change {
			err = engine.PushPath(ctx, provider, sb, req.Path)
		}
		return outcome, err
	}()
	status := engine.Status{}
	if outcome != nil {
		step.SetFile(outcome)
	}
	if opErr != nil {
		fmt.Fprintf(step.Stderr, "xmode: %v\n", opErr)
		status.ExitCode = 1
	} else {
		fmt.Fprintln(step.Stdout, describeFileOutcome(outcome))
	}
	res, err := step.Finish(context.WithoutCancel(ctx), status)
	if opErr != nil {
		return res, opErr
	}
	return res, err
}

// describeFileOutcome is the line a file step leaves in its stdout.log.
func describeFileOutcome(o *evidence.FileOutcome) string {
	h := func(f *evidence.FileHash) string {
		if f == nil {
			return "none"
		}
		return fmt.Sprintf("%d bytes, sha256 %s", f.Size, f.SHA256)
	}
	switch o.Op {
	case "list":
		return fmt.Sprintf("listed %s: %d entries", o.Path, o.Entries)
	case "read":
		return fmt.Sprintf("read %s (%s)", o.Path, h(o.Before))
	case "edit":
		return fmt.Sprintf("edited %s: %d replacement(s); before %s; after %s", o.Path, o.Replacements, h(o.Before), h(o.After))
	case "delete":
		return fmt.Sprintf("deleted %s (%d entries; before %s)", o.Path, o.Removed, h(o.Before))
	}
	return fmt.Sprintf("wrote %s: before %s; after %s", o.Path, h(o.Before), h(o.After))
}

// CheckFilePath checks a path a file step is given: relative to the
// worktree, without "..", NUL bytes or a .git component. dir: the
// worktree itself (".") may be named. It returns the path cleaned.
func CheckFilePath(p string, dir bool) (string, error) {
	switch {
	case p == "":
		return "", fail.Usagef("give a path relative to the worktree (e.g. src/main.go)")
	case strings.ContainsRune(p, 0):
		return "", fail.Usagef("the path holds a NUL byte: no file has such a name")
	case len(p) > 4096:
		return "", fail.Usagef("the path is %d bytes long; paths have at most 4096", len(p))
	case path.IsAbs(p):
		return "", fail.Usagef("%q is absolute: paths are relative to the sandbox's worktree (drop the leading /)", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fail.Usagef("%q: \"..\" would leave the worktree: paths stay inside it", p)
		}
		if isGitName(part) {
			return "", fail.Refusedf("%q is in .git: the file tools never read or write the repository's own data; use git in the sandbox (sandbox_exec: git log, git show, git add)", p)
		}
	}
	clean := path.Clean(p)
	if clean == "." && !dir {
		return "", fail.Usagef("%q names the worktree itself: give a file's path in it", p)
	}
	return clean, nil
}

// isGitName reports a name git keeps its data under (.git, in any case:
// git refuses .GIT on a case-insensitive filesystem too).
func isGitName(name string) bool { return strings.EqualFold(name, ".git") }

// mkdirs makes the directories a write needs, given to the worktree's
// owner, and notes each one made.
type mkdirs struct {
	owner *[2]int
	made  *[]string
	rel   string
}

// walkTo opens the directory that holds rel's last component, one
// component at a time from the worktree's directory, following no link and
// refusing anything in a directory's place; with mk, a missing directory
// is made. It returns that directory (close it) and the last component.
func walkTo(wt *os.File, rel string, mk *mkdirs) (*os.File, string, error) {
	parts := strings.Split(rel, "/")
	dir := wt
	own := false // dir is ours to close
	for i, part := range parts[:len(parts)-1] {
		next, err := fsguard.OpenDirAt(dir, part)
		if errors.Is(err, fs.ErrNotExist) && mk != nil {
			if err = unix.Mkdirat(int(dir.Fd()), part, 0o755); err == nil || err == unix.EEXIST {
				if err == nil {
					*mk.made = append(*mk.made, strings.Join(parts[:i+1], "/"))
					if mk.owner != nil {
						_ = unix.Fchownat(int(dir.Fd()), part, mk.owner[0], mk.owner[1], unix.AT_SYMLINK_NOFOLLOW)
					}
				}
				next, err = fsguard.OpenDirAt(dir, part)
			}
		}
		if own {
			dir.Close()
		}
		if err != nil {
			return nil, "", inWorktreeFile(strings.Join(parts[:i+1], "/"), err)
		}
		dir, own = next, true
	}
	if !own {
		// The worktree itself: a descriptor of its own, for the caller to close.
		fd, err := unix.FcntlInt(wt.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, "", fmt.Errorf("open the worktree: %w", err)
		}
		dir = os.NewFile(uintptr(fd), wt.Name())
	}
	return dir, parts[len(parts)-1], nil
}

// existing is what a write replaces at base in dir: nothing (nil), or a
// regular file, with its hash and mode (without setuid, setgid and sticky
// bits). Anything else is refused with why.
func existing(dir *os.File, base, rel, why string) (*evidence.FileHash, uint32, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == unix.ENOENT:
		return nil, 0o644, nil
	case err != nil:
		return nil, 0, fmt.Errorf("%s: %w", rel, err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, 0, fail.Refusedf("%s is %s: %s", rel, fileKind(st.Mode), why)
	}
	f, err := fsguard.OpenRegularAt(dir, base)
	if err != nil {
		return nil, 0, inWorktreeFile(rel, err)
	}
	defer f.Close()
	return hashFile(f, st.Size), st.Mode & 0o777, nil
}

// replace writes content to a new file beside base and renames it over
// base: a link put at base meanwhile is replaced, never written through,
// and so is a file hard-linked elsewhere.
func replace(dir *os.File, base string, content []byte, mode uint32, owner *[2]int) error {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".xmode-write-" + hex.EncodeToString(rnd[:]) + ".tmp"
	dfd := int(dir.Fd())
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(content)
	if err == nil {
		err = f.Chmod(fs.FileMode(mode & 0o777))
	}
	if err == nil && owner != nil {
		err = f.Chown(owner[0], owner[1])
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, base)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
	}
	return err
}

// worktreeOwner is who what a file step creates belongs to: the owner of
// the worktree (the sandbox's user), when xmode runs as root; nil
// otherwise (it is xmode's user, who owns the worktree).
func worktreeOwner(wt *os.File) *[2]int {
	if os.Geteuid() != 0 {
		return nil
	}
	st, err := wt.Stat()
	if err != nil {
		return nil
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return &[2]int{int(sys.Uid), int(sys.Gid)}
}

func hashOf(b []byte) *evidence.FileHash {
	sum := sha256.Sum256(b)
	return &evidence.FileHash{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b))}
}

// hashFile hashes an open file of size bytes (by its size alone past
// maxHashBytes).
func hashFile(f *os.File, size int64) *evidence.FileHash {
	if size > maxHashBytes {
		return &evidence.FileHash{Size: size}
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return &evidence.FileHash{Size: size}
	}
	return &evidence.FileHash{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}
}

// countTree counts name and what it holds, following no link.
func countTree(root *os.Root, name string) (int, error) {
	n := 1
	info, err := root.Lstat(name)
	if err != nil || !info.IsDir() {
		return n, err
	}
	entries, err := fsguard.ReadDir(root, name)
	if err != nil {
		return n, err
	}
	for _, e := range entries {
		c, err := countTree(root, path.Join(name, e.Name()))
		n += c
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// linesOf lists the line numbers where s occurs in text, at most max.
func linesOf(text, s string, most int) string {
	var lines []string
	off := 0
	for len(lines) < most {
		i := strings.Index(text[off:], s)
		if i < 0 {
			break
		}
		lines = append(lines, fmt.Sprint(strings.Count(text[:off+i], "\n")+1))
		off += i + len(s)
	}
	if strings.Count(text[off:], s) > 0 {
		lines = append(lines, "…")
	}
	return strings.Join(lines, ", ")
}

// fileKind names what a mode is, for a message.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFSOCK:
		return "a socket"
	}
	return "not a regular file"
}

// inWorktreeFile says what went wrong with a path of the worktree: missing
// (not found), a link or something else where a file or directory was
// expected (refused), or else.
func inWorktreeFile(rel string, err error) error {
	var nr *fsguard.NotRegularError
	var fe *fail.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return fail.NotFoundf("%s: no such file or directory in the worktree", rel)
	case errors.As(err, &nr) && strings.HasPrefix(nr.Kind, "a symlink"):
		return fail.Refusedf("%s is a symbolic link: the file tools follow no link, even one inside the worktree; use the path it leads to (sandbox_exec: readlink %s)", rel, rel)
	case errors.As(err, &nr) && nr.Kind == "a directory":
		return fail.Usagef("%s is a directory: list it with file_list", rel)
	case errors.As(err, &nr):
		return fail.Refusedf("%s is %s: the file tools read and write regular files and directories only", rel, nr.Kind)
	}
	return fmt.Errorf("%s: %w", rel, err)
}
