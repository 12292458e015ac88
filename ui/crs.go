package ui

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/runview"
	"github.com/xmode/xmode/store"
)

var crStatuses = []string{store.ChangeOpen, store.ChangeApproved, store.ChangeRejected, store.ChangeChangesRequested, store.ChangeSuperseded}

type crsData struct {
	CRs      []*store.Change
	Status   string
	Statuses []string
	More     bool
}

const crsPerPage = 200

// crsPage: the change requests, newest first, by status.
func (s *Server) crsPage(r *http.Request) (*view, error) {
	d := &crsData{Status: r.URL.Query().Get("status"), Statuses: crStatuses}
	if d.Status != "" && !contains(crStatuses, d.Status) {
		return nil, fail.Usagef("status %q: use one of %s", d.Status, strings.Join(crStatuses, ", "))
	}
	list, err := s.o.Changes.Store.ListChanges(r.Context(), store.ChangeFilter{Status: d.Status})
	if err != nil {
		return nil, err
	}
	if len(list) > crsPerPage {
		list, d.More = list[:crsPerPage], true
	}
	d.CRs = list
	return &view{tmpl: "crs.html", title: "Change requests", nav: "crs", data: d}, nil
}

// loadCR is the change request a URL names, opened through the changes
// service (its package read without following a link): its newest
// version, or the one version=N names.
func (s *Server) loadCR(r *http.Request) (*changes.Package, error) {
	id := r.PathValue("cr")
	if !fsguard.ValidID("cr_", id) {
		return nil, fail.NotFoundf("no such change request: IDs look like cr_7k2m9q4x")
	}
	c, err := s.o.Changes.Store.GetChange(r.Context(), id)
	if err != nil {
		return nil, err
	}
	n, err := queryInt(r.URL.Query(), "version")
	if err != nil {
		return nil, err
	}
	return s.o.Changes.OpenVersion(r.Context(), c.ID, n)
}

// queryInt is a query parameter that is a whole number, 0 when absent.
func queryInt(q url.Values, name string) (int, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fail.Usagef("%s=%q is not a version's number", name, v)
	}
	return n, nil
}

type crData struct {
	P         *changes.Package
	M         *changes.Manifest
	Ev        *changes.Evidence
	EvErr     string
	Passed    int
	Verify    *changes.Report
	VerifyErr string
	Files     []fileEntry
	Page      *diffPage
	PageErr   string
	Split     bool
	Pos       pagePos
	Reviews   []reviewView
	// Versions are the change request's; Shown is the version shown and
	// Newest whether it is the newest (only the newest is reviewed, and
	// commented on). Inter, when set, is the interdiff shown instead of
	// the version's diff (?from=&to=).
	Versions []store.ChangeVersion
	Shown    int
	Newest   bool
	Inter    *changes.Interdiff
	// comments are the shown version's comments, by path, side and line,
	// shown under their lines (CommentsAt).
	comments map[lineKey][]store.Comment
	// Attempt: the change request is an attempt of a run of attempts (the
	// form offers to close the others).
	Attempt bool
	Done    string
	Run     *store.LoopRun
	Checks  *runview.Checks
	// Network: what the run's sandboxes reached and were refused, from
	// the package's evidence.
	Network *networkView
	// ExportRepo prefills the export form: the repository the session was
	// made from, when it is a path on this machine.
	ExportRepo string
	// Links of the page: built from IDs and numbers only.
	UnifiedURL, SplitURL, NextURL, FirstURL template.URL
}

// fileEntry is one file of the change, as the list at the top shows it.
type fileEntry struct {
	Index      int
	S          changes.FileStat
	Kind       string
	Modes      string
	Link       template.URL // to the file's diff: on this page, or on its page
	Symlink    bool
	Submodule  bool
	Executable bool
}

type reviewView struct {
	store.Review
	Changes string // what a "request changes" asked
	Asked   bool
}

// lineKey is a line of one side of a file's diff.
type lineKey struct {
	path, side string
	line       int
}

// CommentsAt are the shown version's comments on a line of path's diff
// (old, new: its numbers on each side, 0 where it has none).
func (d *crData) CommentsAt(path string, old, new int) []store.Comment {
	if d.Inter != nil || len(d.comments) == 0 {
		return nil
	}
	var out []store.Comment
	if new > 0 {
		out = append(out, d.comments[lineKey{path, store.SideNew, new}]...)
	}
	if old > 0 {
		out = append(out, d.comments[lineKey{path, store.SideOld, old}]...)
	}
	return out
}

// Commentable: lines of the diff shown take comments (the newest
// version's own diff).
func (d *crData) Commentable() bool { return d.Newest && d.Inter == nil }

// maxVerifyPatch: a patch larger than this is verified on request only
// (`cr verify` reads it whole and applies it with git).
const maxVerifyPatch = 32 << 20

// crPage: the change request under review — title, message, commits,
// files, the diff a page at a time (unified or side by side, highlighted),
// the evidence, the verification, the reviews and the forms.
func (s *Server) crPage(r *http.Request) (*view, error) {
	ctx := r.Context()
	p, err := s.loadCR(r)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	d := &crData{P: p, M: p.Manifest, Split: q.Get("view") == "split", Done: doneMessage(q.Get("done")),
		Shown: p.At().Version, Newest: p.At().Version == p.Version, comments: map[lineKey][]store.Comment{}}
	if d.Versions, err = s.o.Changes.Store.Versions(ctx, p.ID); err != nil {
		return nil, err
	}
	if err := s.o.Changes.Annotate(ctx, p.Change); err != nil {
		return nil, err
	}
	for _, rv := range p.Reviews {
		for _, c := range rv.Comments {
			if c.Version == d.Shown {
				k := lineKey{c.Path, c.Side, c.Line}
				d.comments[k] = append(d.comments[k], c)
			}
		}
	}
	if d.Pos, err = parsePos(q.Get("file"), q.Get("skip")); err != nil {
		return nil, err
	}
	if d.Ev, err = s.o.Changes.Evidence(p); err != nil {
		d.EvErr = err.Error()
	} else {
		for _, st := range d.Ev.Steps {
			if st.Passed() {
				d.Passed++
			}
		}
		if d.Checks, err = runview.LoadChecks(ctx, s.o.Svc.Store, p.RunID, d.Ev); err != nil {
			return nil, err
		}
		names := map[int]string{}
		for _, st := range d.Ev.Steps {
			names[st.Seq] = st.Name
		}
		d.Network = networkOf(d.Ev.Network, func(seq int) string { return names[seq] },
			func(seq int) string { return "/runs/" + p.RunID + "#step-" + strconv.Itoa(seq) })
	}
	if run, err := s.o.Svc.Store.ResolveRun(ctx, p.RunID); err == nil && run.ID == p.RunID {
		d.Run, d.Attempt = run, run.Attempt > 0
	}
	if sess, err := s.o.Svc.Store.Get(ctx, p.SessionID); err == nil && filepath.IsAbs(sess.Repo) {
		d.ExportRepo = sess.Repo
	}
	for _, rv := range p.Reviews {
		v := reviewView{Review: rv}
		v.Changes, v.Asked = changes.AsksForChanges(rv)
		d.Reviews = append(d.Reviews, v)
	}
	if h, ok := p.Manifest.Files[changes.PatchFile]; ok && h.Size > maxVerifyPatch && q.Get("verify") != "1" {
		d.VerifyErr = fmt.Sprintf("the patch is %d MB: not verified on every view", h.Size>>20)
	} else if d.Verify, err = s.o.Changes.Verify(ctx, p); err != nil {
		d.VerifyErr = err.Error()
	}
	var per []changes.FileStat
	if p.Manifest.Stat != nil {
		per = p.Manifest.Stat.PerFile
	}
	var page *diffPage
	if q.Has("from") || q.Has("to") {
		page, err = s.interdiffPage(ctx, p, q, d)
	} else {
		page, err = s.diffPage(p, d.Pos, per)
	}
	if d.Inter != nil {
		per = d.Inter.Stat.PerFile
	}
	if err != nil {
		d.PageErr = err.Error()
	} else {
		d.Page = page
	}
	d.Files = fileEntries(per, page, d.Split)
	// what the diff shows: a version's own (version=N), or an interdiff
	// (from=&to=), kept in every link of the page's diff
	which := ""
	if d.Inter != nil {
		which = fmt.Sprintf("&from=%d&to=%d", d.Inter.From, d.Inter.To)
	} else if !d.Newest {
		which = fmt.Sprintf("&version=%d", d.Shown)
	}
	here := "/crs/" + p.ID + "?" + d.Pos.Query() + which
	d.UnifiedURL, d.SplitURL = template.URL(here+"#diff"), template.URL(here+"&view=split#diff")
	vq := which
	if d.Split {
		vq += "&view=split"
	}
	if page != nil && page.Next != nil {
		d.NextURL = template.URL("/crs/" + p.ID + "?" + page.Next.Query() + vq + "#diff")
	}
	if d.Pos.File > 0 || d.Pos.Skip > 0 {
		d.FirstURL = template.URL("/crs/" + p.ID + "?" + strings.TrimPrefix(vq, "&") + "#diff")
	}
	return &view{tmpl: "cr.html", title: p.ID, nav: "crs", data: d}, nil
}

// diffPage reads the page of the change's patch that starts at pos, and
// starts highlighting it. The patch is read through the changes service, which
// refuses one whose size is not the manifest's.
func (s *Server) diffPage(p *changes.Package, pos pagePos, per []changes.FileStat) (*diffPage, error) {
	f, _, err := s.o.Changes.OpenFile(p, changes.PatchFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	page, err := readPage(f, pos, per)
	if err != nil {
		return nil, err
	}
	// Only the paths the patch and the manifest agree on are the
	// manifest's; a disagreement shows the patch's own.
	for _, fl := range page.Files {
		if fl.Stat != nil && fl.NewPath != "" && fl.NewPath != fl.Stat.Path && fl.OldPath != fl.Stat.Path {
			fl.Stat = nil
		}
	}
	s.hl.start(page) // the template waits for each hunk (hunk.Wait)
	return page, nil
}

// maxInterdiff bounds the interdiff a page reads: the two versions'
// trees are each within XMODE_CR_MAX_BYTES, and a page shows a part.
const maxInterdiff = 64 << 20

// interdiffPage is the page of the interdiff from=&to= names (the same
// service `cr diff` calls), and its stat in d.Inter.
func (s *Server) interdiffPage(ctx context.Context, p *changes.Package, q url.Values, d *crData) (*diffPage, error) {
	from, err := queryInt(q, "from")
	if err != nil {
		return nil, err
	}
	to, err := queryInt(q, "to")
	if err != nil {
		return nil, err
	}
	if !q.Has("from") {
		from = -1
	}
	o := changes.InterdiffOptions{From: from, To: to, Stat: true}
	inter, err := s.o.Changes.WriteInterdiff(ctx, p.Change, o, nil)
	if err != nil {
		return nil, err
	}
	d.Inter = inter
	o.From, o.To, o.Stat = inter.From, inter.To, false
	w := &cappedBuffer{max: maxInterdiff}
	if _, err := s.o.Changes.WriteInterdiff(ctx, p.Change, o, w); err != nil {
		return nil, err
	}
	page, err := readPage(bytes.NewReader(w.b), d.Pos, inter.Stat.PerFile)
	if err != nil {
		return nil, err
	}
	s.hl.start(page)
	return page, nil
}

// cappedBuffer keeps the first max bytes written to it and drops the rest.
type cappedBuffer struct {
	b   []byte
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func parsePos(file, skip string) (pagePos, error) {
	var p pagePos
	var err error
	if file != "" {
		if p.File, err = strconv.Atoi(file); err != nil || p.File < 0 {
			return p, fail.Usagef("file=%q is not a file's number", file)
		}
	}
	if skip != "" {
		if p.Skip, err = strconv.Atoi(skip); err != nil || p.Skip < 0 {
			return p, fail.Usagef("skip=%q is not a number of lines", skip)
		}
	}
	return p, nil
}

func fileEntries(per []changes.FileStat, page *diffPage, split bool) []fileEntry {
	onPage := map[int]bool{}
	if page != nil {
		for _, f := range page.Files {
			onPage[f.Index] = true
		}
	}
	vq := ""
	if split {
		vq = "&view=split"
	}
	out := make([]fileEntry, 0, len(per))
	for i, fs := range per {
		e := fileEntry{Index: i, S: fs, Link: template.URL(fmt.Sprintf("?file=%d%s#f%d", i, vq, i))}
		if onPage[i] {
			e.Link = template.URL(fmt.Sprintf("#f%d", i))
		}
		e.Kind = map[string]string{"A": "added", "D": "deleted", "M": "modified", "R": "renamed", "C": "copied", "T": "type changed"}[fs.Status]
		if e.Kind == "" {
			e.Kind = fs.Status
		}
		mode := fs.NewMode
		if fs.Status == "D" {
			mode = fs.OldMode
		}
		e.Symlink, e.Submodule, e.Executable = mode == "120000", mode == "160000", mode == "100755"
		if fs.OldMode != "" && fs.NewMode != "" && fs.OldMode != fs.NewMode && fs.Status != "A" && fs.Status != "D" {
			e.Modes = fs.OldMode + " → " + fs.NewMode
		}
		out = append(out, e)
	}
	return out
}

// doneMessage is the line an action leaves on the page it returns to:
// from a fixed list, never the URL's own text.
func doneMessage(k string) string {
	return map[string]string{
		"approved":          "Approved.",
		"rejected":          "Rejected.",
		"changes-requested": "Changes requested: the agent answers them in the next version (xmode run continue).",
		"stopped":           "Stopped.",
		"extended":          "Extended.",
	}[k]
}

// review records a decision through the service `cr review` calls.
func (s *Server) review(r *http.Request) (*view, error) {
	p, err := s.loadCR(r)
	if err != nil {
		return nil, err
	}
	// The browser going away must not cut a review in half.
	ctx := context.WithoutCancel(r.Context())
	o := changes.ReviewOptions{Note: r.PostForm.Get("note"), CloseOthers: r.PostForm.Get("close_others") == "1"}
	if o.Comments, err = formComments(r.PostForm); err != nil {
		return nil, err
	}
	var decision, done string
	switch r.PostForm.Get("decision") {
	case "approve":
		decision, done = store.ChangeApproved, "approved"
	case "reject":
		decision, done = store.ChangeRejected, "rejected"
	case "request-changes":
		decision, done = store.ChangeChangesRequested, "changes-requested"
	default:
		return nil, fail.Usagef("decision: use approve, request-changes or reject")
	}
	if _, err = s.o.Changes.Review(ctx, p, decision, o); err != nil {
		return nil, err
	}
	return &view{redirect: "/crs/" + p.ID + "?done=" + done}, nil
}

// maxFormComments bounds the comments one review's form carries.
const maxFormComments = 500

// formComments are a review form's comments on lines: those the page's
// line forms added (comment_path, comment_side, comment_line and
// comment_text, one of each per comment), and the lines of the comments
// field, each PATH:LINE: TEXT as `cr review --comment` takes it (the form
// without its script).
func formComments(f url.Values) ([]store.Comment, error) {
	var out []store.Comment
	paths, sides, lines, texts := f["comment_path"], f["comment_side"], f["comment_line"], f["comment_text"]
	if len(sides) != len(paths) || len(lines) != len(paths) || len(texts) != len(paths) {
		return nil, fail.Usagef("comments: each needs its path, side, line and text")
	}
	for i := range paths {
		n, err := strconv.Atoi(lines[i])
		if err != nil || n < 1 {
			return nil, fail.Usagef("comment on %s: line %q: lines count from 1", paths[i], lines[i])
		}
		if sides[i] != store.SideNew && sides[i] != store.SideOld {
			return nil, fail.Usagef("comment on %s: side %q: new or old", paths[i], sides[i])
		}
		text := strings.TrimSpace(texts[i])
		if text == "" {
			return nil, fail.Usagef("comment on %s:%d says nothing", paths[i], n)
		}
		out = append(out, store.Comment{Path: paths[i], Side: sides[i], Line: n, Text: text})
	}
	for _, l := range strings.Split(f.Get("comments"), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		c, err := changes.ParseComment(l)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) > maxFormComments {
		return nil, fail.Usagef("%d comments: at most %d in one review", len(out), maxFormComments)
	}
	return out, nil
}

type exportData struct {
	P   *changes.Package
	Out *changes.Exported
}

// export makes a branch of the change in a repository of the reviewer's,
// through the service `cr export` calls.
func (s *Server) export(r *http.Request) (*view, error) {
	p, err := s.loadCR(r)
	if err != nil {
		return nil, err
	}
	repo := strings.TrimSpace(r.PostForm.Get("repo"))
	if repo == "" {
		return nil, fail.Usagef("export needs the path of your repository")
	}
	if p, err = s.o.Changes.ExportVersion(r.Context(), p.ID); err != nil {
		return nil, err
	}
	out, err := s.o.Changes.Export(context.WithoutCancel(r.Context()), p, repo, strings.TrimSpace(r.PostForm.Get("branch")))
	if err != nil {
		return nil, err
	}
	return &view{tmpl: "exported.html", title: "Exported " + p.ID, nav: "crs", data: &exportData{p, out}}, nil
}

// patchFile sends change.patch as it is, to save (never shown inline: it
// is a sandbox's text): streamed, and cut short if it turns out not to be
// what the manifest recorded.
func (s *Server) patchFile(w http.ResponseWriter, r *http.Request) {
	p, err := s.loadCR(r)
	if err != nil {
		s.errorPage(w, r, err)
		return
	}
	f, size, err := s.o.Changes.OpenFile(p, changes.PatchFile)
	if err != nil {
		s.errorPage(w, r, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", `attachment; filename="`+p.ID+`.patch"`)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	_, _ = io.Copy(w, f)
}
