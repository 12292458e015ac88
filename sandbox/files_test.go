package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/store"
)

// fileSession is a host session of a fresh repository, and a way to plant
// things in its worktree as a step of the session would.
func fileSession(t *testing.T) (*Service, *store.Session) {
	t.Helper()
	f := newFixture(t)
	svc := newService(t, nil)
	sess, err := svc.Create(context.Background(), CreateOptions{Repo: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	return svc, sess
}

// plant runs a shell command as a step of the session (what a sandboxed
// command could have done to the worktree).
func plant(t *testing.T, svc *Service, sess *store.Session, script string) {
	t.Helper()
	res, err := svc.Exec(context.Background(), sess, ExecOptions{Argv: []string{"sh", "-c", script}, Name: "plant"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("plant %q: %v %+v", script, err, res)
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// readJSON reads one of a step's evidence files.
func readJSON(t *testing.T, svc *Service, res *evidence.Result, file string, v any) {
	t.Helper()
	f, err := evidence.Open(svc.Guard, filepath.Base(filepath.Dir(filepath.Dir(res.Dir))), res.Seq, res.Name, file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := json.NewDecoder(f).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// Each file step is a step of the session: named file-<op>, its
// command.json saying what was asked, its result.json the path's hashes
// before and after.
func TestFileStepsAreRecorded(t *testing.T) {
	ctx := context.Background()
	svc, sess := fileSession(t)
	w, err := svc.WriteFile(ctx, sess, "new/dir/a.txt", []byte("one\ntwo\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !w.Created || w.Before != nil || w.After.SHA256 != sha("one\ntwo\n") || strings.Join(w.MadeDirs, ",") != "new,new/dir" {
		t.Fatalf("write: %+v", w)
	}
	got, _ := os.ReadFile(filepath.Join(sess.WorktreePath, "new/dir/a.txt"))
	if string(got) != "one\ntwo\n" {
		t.Fatalf("the worktree has %q", got)
	}
	e, err := svc.EditFile(ctx, sess, EditOptions{Path: "new/dir/a.txt", Old: "two", New: "three"})
	if err != nil || e.Replacements != 1 || e.Before.SHA256 != sha("one\ntwo\n") || e.After.SHA256 != sha("one\nthree\n") {
		t.Fatalf("edit: %+v %v", e, err)
	}
	r, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "new/dir/a.txt", StartLine: 2})
	if err != nil || r.Content != "three\n" || r.StartLine != 2 || r.EndLine != 2 || r.TotalLines != 2 || r.Before.SHA256 != sha("one\nthree\n") {
		t.Fatalf("read: %+v %v", r, err)
	}
	l, err := svc.ListFiles(ctx, sess, ListOptions{Pattern: "**/*.txt"})
	if err != nil || len(l.Entries) != 1 || l.Entries[0] != (FileEntry{Path: "new/dir/a.txt", Type: "file", Size: 10}) {
		t.Fatalf("list: %+v %v", l, err)
	}
	d, err := svc.DeleteFile(ctx, sess, "new/dir/a.txt", false)
	if err != nil || d.Before.SHA256 != sha("one\nthree\n") || d.Removed != 1 {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, err := os.Lstat(filepath.Join(sess.WorktreePath, "new/dir/a.txt")); !os.IsNotExist(err) {
		t.Fatalf("deleted file still there: %v", err)
	}

	steps, err := svc.Store.Steps(ctx, sess.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range steps {
		names = append(names, s.Name+":"+strings.Join(s.Argv, " "))
		if s.State != "finished" || s.ExitCode == nil || *s.ExitCode != 0 {
			t.Errorf("step %d %s: %s, exit %v", s.Seq, s.Name, s.State, s.ExitCode)
		}
	}
	want := "file-write:file-write new/dir/a.txt file-edit:file-edit new/dir/a.txt file-read:file-read new/dir/a.txt file-list:file-list . file-delete:file-delete new/dir/a.txt"
	if strings.Join(names, " ") != want {
		t.Fatalf("steps %q, want %q", strings.Join(names, " "), want)
	}
	var cmd struct {
		File evidence.FileRequest `json:"file"`
	}
	readJSON(t, svc, e.Step, evidence.CommandFile, &cmd)
	if cmd.File.Op != "edit" || cmd.File.Path != "new/dir/a.txt" {
		t.Fatalf("command.json file: %+v", cmd.File)
	}
	var res evidence.Result
	readJSON(t, svc, e.Step, evidence.ResultFile, &res)
	if res.File == nil || res.File.Before.SHA256 != sha("one\ntwo\n") || res.File.After.SHA256 != sha("one\nthree\n") || res.File.Replacements != 1 {
		t.Fatalf("result.json file: %+v", res.File)
	}
}

// An edit changes nothing unless old_string occurs exactly once (or
// replace_all says every one), and says where it occurs.
func TestEditRefusesMissingOrAmbiguous(t *testing.T) {
	ctx := context.Background()
	svc, sess := fileSession(t)
	if _, err := svc.WriteFile(ctx, sess, "f.txt", []byte("x = 1\ny = 1\nx = 1\n")); err != nil {
		t.Fatal(err)
	}
	_, err := svc.EditFile(ctx, sess, EditOptions{Path: "f.txt", Old: "x = 1", New: "x = 2"})
	if fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "occurs 2 times") || !strings.Contains(err.Error(), "lines 1, 3") {
		t.Fatalf("ambiguous edit: %v", err)
	}
	_, err = svc.EditFile(ctx, sess, EditOptions{Path: "f.txt", Old: "z = 1", New: "z = 2"})
	if fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing old_string: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(sess.WorktreePath, "f.txt")); string(got) != "x = 1\ny = 1\nx = 1\n" {
		t.Fatalf("a refused edit changed the file: %q", got)
	}
	e, err := svc.EditFile(ctx, sess, EditOptions{Path: "f.txt", Old: "x = 1", New: "x = 2", ReplaceAll: true})
	if err != nil || e.Replacements != 2 {
		t.Fatalf("replace_all: %+v %v", e, err)
	}
	if got, _ := os.ReadFile(filepath.Join(sess.WorktreePath, "f.txt")); string(got) != "x = 2\ny = 1\nx = 2\n" {
		t.Fatalf("after replace_all: %q", got)
	}
	// A refused edit is a failed step, its message in stderr.log.
	steps, _ := svc.Store.Steps(ctx, sess.RunID)
	if s := steps[1]; s.Name != "file-edit" || s.ExitCode == nil || *s.ExitCode != 1 {
		t.Fatalf("the ambiguous edit's step: %+v", s)
	}
}

// Paths are checked before anything is recorded: relative, no "..", no
// NUL byte, never .git; content larger than MaxFileBytes is refused.
func TestFilePathsRefused(t *testing.T) {
	ctx := context.Background()
	svc, sess := fileSession(t)
	for _, p := range []string{"", "/etc/passwd", "../x", "a/../../x", "a\x00b", ".git/config", ".GIT/HEAD", "sub/.git/hooks/pre-commit", "."} {
		_, err := svc.WriteFile(ctx, sess, p, []byte("x"))
		if k := fail.KindOf(err); k != fail.Usage && k != fail.Refused {
			t.Errorf("write %q: %v; want refused", p, err)
		}
		if _, err := svc.ReadFile(ctx, sess, ReadOptions{Path: p}); err == nil {
			t.Errorf("read %q: no error", p)
		}
		if _, err := svc.DeleteFile(ctx, sess, p, true); err == nil {
			t.Errorf("delete %q: no error", p)
		}
	}
	if _, err := svc.WriteFile(ctx, sess, "big", make([]byte, MaxFileBytes+1)); fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("a write past MaxFileBytes: %v", err)
	}
	if steps, _ := svc.Store.Steps(ctx, sess.RunID); len(steps) != 0 {
		t.Fatalf("refused paths recorded steps: %+v", steps)
	}
	if _, err := os.Stat(filepath.Join(sess.WorktreePath, ".git", "config")); err != nil {
		t.Fatal(err)
	}
	// NUL bytes in content are content.
	if _, err := svc.WriteFile(ctx, sess, "nul.bin", []byte("a\x00b")); err != nil {
		t.Fatal(err)
	}
}

// What a step planted — links out, links into .git, a FIFO, a hard link
// to a file outside — is never followed, read through or written through.
func TestFileStepsFollowNothingPlanted(t *testing.T) {
	ctx := context.Background()
	svc, sess := fileSession(t)
	outside := filepath.Join(t.TempDir(), "outside.txt")
	if err := os.WriteFile(outside, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Dir(outside)
	plant(t, svc, sess, `set -e
ln -s `+outside+` out.txt
ln -s `+outDir+` outdir
ln -s .git gitlink
mkdir -p real && ln -s real inlink
ln `+outside+` hard.txt 2>/dev/null || cp `+outside+` hard.txt
mkfifo fifo`)
	check := func(what string, err error, kind fail.Kind) {
		t.Helper()
		if fail.KindOf(err) != kind {
			t.Errorf("%s: %v; want %v", what, err, kind)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "fifo"})
		check("read a FIFO", err, fail.Refused)
		_, err = svc.EditFile(ctx, sess, EditOptions{Path: "fifo", Old: "a", New: "b"})
		check("edit a FIFO", err, fail.Refused)
		_, err = svc.WriteFile(ctx, sess, "fifo", []byte("x"))
		check("write over a FIFO", err, fail.Refused)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a file step blocked on a FIFO")
	}
	_, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "out.txt"})
	check("read a link out", err, fail.Refused)
	_, err = svc.ReadFile(ctx, sess, ReadOptions{Path: "outdir/outside.txt"})
	check("read through a directory link out", err, fail.Refused)
	_, err = svc.WriteFile(ctx, sess, "out.txt", []byte("pwned\n"))
	check("write over a link out", err, fail.Refused)
	_, err = svc.WriteFile(ctx, sess, "outdir/outside.txt", []byte("pwned\n"))
	check("write through a directory link out", err, fail.Refused)
	_, err = svc.EditFile(ctx, sess, EditOptions{Path: "out.txt", Old: "secret", New: "pwned"})
	check("edit through a link out", err, fail.Refused)
	_, err = svc.WriteFile(ctx, sess, "gitlink/hooks/post-checkout", []byte("#!/bin/sh\n"))
	check("write through a link into .git", err, fail.Refused)
	_, err = svc.ReadFile(ctx, sess, ReadOptions{Path: "gitlink/config"})
	check("read through a link into .git", err, fail.Refused)
	_, err = svc.WriteFile(ctx, sess, "inlink/x", []byte("x"))
	check("write through a link inside", err, fail.Refused)
	// A hard link is replaced, not written through.
	if _, err := svc.WriteFile(ctx, sess, "hard.txt", []byte("replaced\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.EditFile(ctx, sess, EditOptions{Path: "hard.txt", Old: "replaced", New: "edited"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Fatalf("the file outside the worktree became %q", b)
	}
	// Deleting a link removes the link, never what it points to.
	if _, err := svc.DeleteFile(ctx, sess, "outdir", true); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.DeleteFile(ctx, sess, "out.txt", false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Fatalf("deleting links reached the file outside: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(sess.WorktreePath, ".git", "config")); err != nil {
		t.Fatalf(".git/config: %v", err)
	}
	// A list shows links as links, never goes into them nor into .git.
	l, err := svc.ListFiles(ctx, sess, ListOptions{Pattern: "**"})
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, e := range l.Entries {
		types[e.Path] = e.Type
		if strings.HasPrefix(e.Path, ".git") || strings.HasPrefix(e.Path, "gitlink/") || strings.HasPrefix(e.Path, "inlink/") {
			t.Errorf("list went where it must not: %s", e.Path)
		}
	}
	if types["gitlink"] != "symlink" || types["fifo"] != "other" || types["real"] != "dir" || types["README"] != "file" {
		t.Fatalf("list: %v", types)
	}
	// A directory is deleted only with recursive.
	if _, err := svc.DeleteFile(ctx, sess, "real", false); fail.KindOf(err) != fail.Usage {
		t.Fatalf("delete a directory without recursive: %v", err)
	}
}

// A read returns at most MaxReadBytes, stopping at a line and saying where
// to go on; a binary file is recognised, not returned.
func TestReadBounds(t *testing.T) {
	ctx := context.Background()
	svc, sess := fileSession(t)
	line := strings.Repeat("x", 1023) + "\n"
	big := strings.Repeat(line, 2048) // 2 MiB
	if err := os.WriteFile(filepath.Join(sess.WorktreePath, "big.txt"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "big.txt"})
	if err != nil || len(r.Content) != MaxReadBytes || r.NextLine != 1025 || r.TotalLines != 2048 || r.Before.SHA256 != sha(big) {
		t.Fatalf("big read: %d bytes, next %d, total %d, %v", len(r.Content), r.NextLine, r.TotalLines, err)
	}
	r, err = svc.ReadFile(ctx, sess, ReadOptions{Path: "big.txt", StartLine: r.NextLine})
	if err != nil || len(r.Content) != MaxReadBytes || r.NextLine != 0 || r.StartLine != 1025 || r.EndLine != 2048 {
		t.Fatalf("the rest: %d bytes, lines %d-%d, next %d, %v", len(r.Content), r.StartLine, r.EndLine, r.NextLine, err)
	}
	if err := os.WriteFile(filepath.Join(sess.WorktreePath, "bin"), []byte{0xff, 0xfe, 0, 1}, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = svc.ReadFile(ctx, sess, ReadOptions{Path: "bin"})
	if err != nil || !r.Binary || r.Content != "" || r.Before.Size != 4 {
		t.Fatalf("binary read: %+v %v", r, err)
	}
	if _, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "big.txt", StartLine: 5, EndLine: 2}); fail.KindOf(err) != fail.Usage {
		t.Fatalf("a backwards range: %v", err)
	}
	if _, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "nope"}); fail.KindOf(err) != fail.NotFound {
		t.Fatalf("a missing file: %v", err)
	}
}

// A read of a huge file costs what it returns plus a bounded scan: a
// sparse file of 100 GB (on the real filesystem) is read for at most
// MaxReadScan bytes, recorded by its size alone, its lines not counted;
// its NULs make it binary. A text file past the scan reads on by
// next_line until the scan's end, and a range past it is refused.
func TestReadHugeFile(t *testing.T) {
	ctx := context.Background()
	svc, sess := fileSession(t)
	huge := filepath.Join(sess.WorktreePath, "huge")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 100<<30); err != nil {
		t.Fatal(err)
	}
	r, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "huge"})
	if err != nil || !r.Binary || r.Content != "" || r.TotalLines != -1 || r.Before.Size != 100<<30 || r.Before.SHA256 != "" {
		t.Fatalf("a 100 GB sparse file: binary %v, %d bytes, total %d, %+v, %v", r.Binary, len(r.Content), r.TotalLines, r.Before, err)
	}
	// What it reads of the file, counted at the file.
	f, err := os.Open(huge)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cr := &countingReader{r: f}
	if err := new(FileRead).read(ctx, cr, 100<<30, "huge", ReadOptions{}); err != nil || cr.n > MaxReadScan+1 {
		t.Fatalf("read %d bytes of a 100 GB file (at most %d): %v", cr.n, MaxReadScan+1, err)
	}
	if _, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "huge", StartLine: 2}); fail.KindOf(err) != fail.Refused || !strings.Contains(err.Error(), "past the first 32 MiB") {
		t.Fatalf("a range past the scan: %v", err)
	}

	// Text with a NUL byte is binary, not text.
	if err := os.WriteFile(filepath.Join(sess.WorktreePath, "nul.txt"), []byte("one\ntw\x00o\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "nul.txt"}); err != nil || !r.Binary || r.Content != "" || r.TotalLines != 2 {
		t.Fatalf("text with a NUL: %+v %v", r, err)
	}
	if r, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "nul.txt", EndLine: 1}); err != nil || r.Binary || r.Content != "one\n" {
		t.Fatalf("the line before the NUL: %+v %v", r, err)
	}

	// 40 MiB of text: read on to the scan's end, its lines uncounted.
	line := strings.Repeat("y", 1023) + "\n"
	if err := os.WriteFile(filepath.Join(sess.WorktreePath, "long.txt"), []byte(strings.Repeat(line, 40<<10)), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = svc.ReadFile(ctx, sess, ReadOptions{Path: "long.txt"})
	if err != nil || r.NextLine != 1025 || r.TotalLines != -1 || r.Before.SHA256 != "" || r.Before.Size != 40<<20 {
		t.Fatalf("40 MiB of text: next %d, total %d, %+v, %v", r.NextLine, r.TotalLines, r.Before, err)
	}
	r, err = svc.ReadFile(ctx, sess, ReadOptions{Path: "long.txt", StartLine: 32<<10 - 10})
	if err != nil || r.StartLine != 32<<10-10 || r.EndLine != 32<<10 || r.NextLine != 32<<10+1 || len(r.Content) != 11<<10 {
		t.Fatalf("the last lines of the scan: lines %d-%d, next %d, %d bytes, %v", r.StartLine, r.EndLine, r.NextLine, len(r.Content), err)
	}
	if _, err := svc.ReadFile(ctx, sess, ReadOptions{Path: "long.txt", StartLine: r.NextLine}); fail.KindOf(err) != fail.Refused {
		t.Fatalf("the first line past the scan: %v", err)
	}
}

// A read stops when its context ends: cancelled as the first chunk is
// read, it reads no more of a 100 GB file.
func TestReadStopsWhenCancelled(t *testing.T) {
	huge := filepath.Join(t.TempDir(), "huge")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 100<<30); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(huge)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cr := &countingReader{r: f, after: cancel}
	err = new(FileRead).read(ctx, cr, 100<<30, "huge", ReadOptions{})
	if err != context.Canceled || cr.n > 128<<10 {
		t.Fatalf("a cancelled read: %v after %d bytes", err, cr.n)
	}
}

// countingReader counts what is read through it, and calls after (if
// any) once it has been read from.
type countingReader struct {
	r     io.Reader
	n     int64
	after func()
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.after != nil {
		c.after()
	}
	return n, err
}

// A file a write makes belongs to the worktree's owner (the sandbox's user
// in a docker sandbox), as `sandbox cp` gives it.
func TestWriteGivesTheWorktreeOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	ctx := context.Background()
	svc, sess := fileSession(t)
	if err := os.Chown(sess.WorktreePath, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WriteFile(ctx, sess, "d/f", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"d", "d/f"} {
		st, err := os.Stat(filepath.Join(sess.WorktreePath, p))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 4321 || sys.Gid != 4321 {
			t.Errorf("%s belongs to %d:%d, want the worktree's owner 4321", p, sys.Uid, sys.Gid)
		}
	}
}
