package changes

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/store"
)

// commentRE is "PATH:LINE: TEXT" (a line of the version's tree) or
// "PATH:-LINE: TEXT" (a line of the base: a deleted or context line), as
// a reviewer writes it on the command line; the shortest PATH that works.
// It is compiled on first use, not at start-up, which every xmode command
// pays (cmd/xmode's TestPackageInitBudget).
var commentRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?s)^(.+?):(-?)([0-9]+):[ \t]?(.*)$`) })

// maxCommentBytes bounds a comment's text.
const maxCommentBytes = 64 << 10

// ParseComment reads a comment as `cr review --comment` takes it:
// "PATH:LINE: TEXT" comments on line LINE of the file as the version has
// it (the diff's new side), "PATH:-LINE: TEXT" on line LINE of the base's
// (its old side: a line the change deleted).
func ParseComment(s string) (store.Comment, error) {
	m := commentRE().FindStringSubmatch(s)
	if m == nil {
		return store.Comment{}, fail.Usagef("comment %q: write it PATH:LINE: TEXT (a line of the change request's version), or PATH:-LINE: TEXT (a line of the base the change deleted)", s)
	}
	line, err := strconv.Atoi(m[3])
	if err != nil || line < 1 {
		return store.Comment{}, fail.Usagef("comment %q: line %s: lines count from 1", s, m[3])
	}
	c := store.Comment{Path: m[1], Side: store.SideNew, Line: line, Text: strings.TrimSpace(m[4])}
	if m[2] == "-" {
		c.Side = store.SideOld
	}
	switch {
	case c.Text == "":
		return c, fail.Usagef("comment %q says nothing: write PATH:LINE: TEXT", s)
	case len(c.Text) > maxCommentBytes:
		return c, fail.Usagef("comment on %s:%d is %d bytes: at most %d", c.Path, c.Line, len(c.Text), maxCommentBytes)
	}
	return c, nil
}

// Where names a comment's line as a reviewer wrote it: PATH:LINE, or
// PATH:-LINE on the base's side.
func Where(c store.Comment) string {
	if c.Side == store.SideOld {
		return fmt.Sprintf("%s:-%d", c.Path, c.Line)
	}
	return fmt.Sprintf("%s:%d", c.Path, c.Line)
}

// versionDiff reads a version's change.patch (verified as it is read:
// OpenFile) into its files.
func (s *Service) versionDiff(p *Package) ([]*fileDiff, error) {
	f, _, err := s.OpenFile(p, PatchFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseDiff(f)
}

// findLine finds the comment's line among the version's diff: its file,
// and the line's place in that file's hunks.
func findLine(files []*fileDiff, c store.Comment) (*fileDiff, int, int, bool) {
	for _, f := range files {
		if f.Path() != c.Path && !(c.Side == store.SideOld && f.OldPath == c.Path) {
			continue
		}
		for hi := range f.Hunks {
			for li, l := range f.Hunks[hi].numbered() {
				if c.Side == store.SideNew && l.New == c.Line || c.Side == store.SideOld && l.Old == c.Line {
					return f, hi, li, true
				}
			}
		}
		return f, -1, -1, false
	}
	return nil, -1, -1, false
}

// CheckComments refuses a comment that names a path the version does not
// change, or a line its diff does not show (exit 2): a reviewer comments
// on the diff, as on a pull request.
func (s *Service) CheckComments(ctx context.Context, p *Package, comments []store.Comment) error {
	if len(comments) == 0 {
		return nil
	}
	files, err := s.versionDiff(p)
	if err != nil {
		return err
	}
	for _, c := range comments {
		f, _, _, ok := findLine(files, c)
		if ok {
			continue
		}
		if f == nil {
			var paths []string
			for _, f := range files {
				paths = append(paths, f.Path())
			}
			return fail.Usagef("comment on %s: version %d of %s does not change %s (it changes %s): comment on a file of its diff",
				Where(c), p.at.Version, p.ID, c.Path, strings.Join(paths, ", "))
		}
		side := "of the version"
		if c.Side == store.SideOld {
			side = "of the base"
		}
		if f.Binary {
			return fail.Usagef("comment on %s: %s is a binary file, which has no lines: say it in the review's note", Where(c), c.Path)
		}
		return fail.Usagef("comment on %s: line %d %s is not in the diff of %s (it shows %s): comment on a line the diff shows",
			Where(c), c.Line, side, c.Path, shownLines(f, c.Side))
	}
	return nil
}

// shownLines says which lines of one side a file's diff shows: "lines
// 3-9, 20-24".
func shownLines(f *fileDiff, side string) string {
	var parts []string
	for _, h := range f.Hunks {
		start, n := h.NewStart, h.NewLines
		if side == store.SideOld {
			start, n = h.OldStart, h.OldLines
		}
		switch {
		case n == 0:
		case n == 1:
			parts = append(parts, strconv.Itoa(start))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", start, start+n-1))
		}
	}
	switch {
	case len(parts) == 0:
		return "no line on that side"
	case len(parts) == 1 && !strings.Contains(parts[0], "-"):
		return "line " + parts[0]
	}
	return "lines " + strings.Join(parts, ", ")
}

// contextLines is how many lines of the diff a comment's context shows on
// each side of its line.
const contextLines = 3

// CommentContext is each comment's context: its line with up to
// contextLines lines of the version's diff before and after it, as the
// diff shows them (' ', '-' or '+' first); nil for a comment whose line
// the diff does not show.
func (s *Service) CommentContext(p *Package, comments []store.Comment) ([][]string, error) {
	files, err := s.versionDiff(p)
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(comments))
	for i, c := range comments {
		f, hi, li, ok := findLine(files, c)
		if !ok {
			continue
		}
		lines := f.Hunks[hi].Lines
		out[i] = slices.Clone(lines[max(0, li-contextLines):min(len(lines), li+contextLines+1)])
	}
	return out, nil
}

// Annotate marks each comment of c's reviews addressed or not: a comment
// on version k is addressed when version k+1 changed its line (a line of
// version k's tree the diff between the two versions touches; a line of
// the base whose hunk the next version's diff shows otherwise), and left
// unmarked (nil) while there is no version k+1.
func (s *Service) Annotate(ctx context.Context, c *store.Change) error {
	vs, err := s.Store.Versions(ctx, c.ID)
	if err != nil {
		return err
	}
	type pair struct{ inter, next, this []*fileDiff }
	cache := map[int]*pair{}
	for ri := range c.Reviews {
		for ci := range c.Reviews[ri].Comments {
			cm := &c.Reviews[ri].Comments[ci]
			k := cm.Version
			if k < 1 || k >= len(vs) {
				continue
			}
			pr := cache[k]
			if pr == nil {
				pr = &pair{}
				if pr.inter, err = s.interdiffFiles(ctx, c, vs[k-1], vs[k]); err != nil {
					return err
				}
				this, err := s.open(c, vs[k-1])
				if err != nil {
					return err
				}
				next, err := s.open(c, vs[k])
				if err != nil {
					return err
				}
				if pr.this, err = s.versionDiff(this); err != nil {
					return err
				}
				if pr.next, err = s.versionDiff(next); err != nil {
					return err
				}
				cache[k] = pr
			}
			addressed := lineChanged(pr.inter, pr.this, pr.next, *cm)
			cm.Addressed = &addressed
		}
	}
	return nil
}

// lineChanged says whether the next version changed the comment's line:
// for a line of the version (new side), whether the interdiff's hunks
// touch it or are inserted beside it; for a line of the base, whether the
// hunk that shows it differs between the two versions' diffs.
func lineChanged(inter, this, next []*fileDiff, c store.Comment) bool {
	if c.Side == store.SideOld {
		_, hi, _, ok := findLine(this, c)
		f2, hj, _, ok2 := findLine(next, c)
		if !ok || !ok2 {
			return ok != ok2
		}
		f1, _, _, _ := findLine(this, c)
		return !slices.Equal(f1.Hunks[hi].Lines, f2.Hunks[hj].Lines)
	}
	for _, f := range inter {
		if f.OldPath != c.Path {
			continue
		}
		if f.NewPath != c.Path || f.Binary {
			return true // deleted, renamed, or no longer text
		}
		for _, h := range f.Hunks {
			if h.OldLines == 0 && (h.OldStart == c.Line || h.OldStart == c.Line-1) {
				return true
			}
			if h.OldLines > 0 && c.Line >= h.OldStart && c.Line < h.OldStart+h.OldLines {
				return true
			}
		}
	}
	return false
}
