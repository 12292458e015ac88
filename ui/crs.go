package ui

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/runview"
	"github.com/xmode/xmode/store"
)

var crStatuses = []string{store.ChangeOpen, store.ChangeApproved, store.ChangeRejected}

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
		return nil, fail.Usagef("status %q: use open, approved or rejected", d.Status)
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
// service (its package read without following a link).
func (s *Server) loadCR(r *http.Request) (*changes.Package, error) {
	id := r.PathValue("cr")
	if !fsguard.ValidID("cr_", id) {
		return nil, fail.NotFoundf("no such change request: IDs look like cr_7k2m9q4x")
	}
	c, err := s.o.Changes.Store.GetChange(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return s.o.Changes.Open(r.Context(), c.ID)
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
	Done      string
	Run       *store.LoopRun
	Checks    *runview.Checks
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
	d := &crData{P: p, M: p.Manifest, Split: q.Get("view") == "split", Done: doneMessage(q.Get("done"))}
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
		d.Run = run
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
	page, err := s.diffPage(p, d.Pos, per)
	if err != nil {
		d.PageErr = err.Error()
	} else {
		d.Page = page
	}
	d.Files = fileEntries(per, page, d.Split)
	here := "/crs/" + p.ID + "?" + d.Pos.Query()
	d.UnifiedURL, d.SplitURL = template.URL(here+"#diff"), template.URL(here+"&view=split#diff")
	vq := ""
	if d.Split {
		vq = "&view=split"
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
		"changes-requested": "Changes requested (recorded as a rejection with your note).",
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
	note := r.PostForm.Get("note")
	var done string
	switch r.PostForm.Get("decision") {
	case "approve":
		err, done = s.o.Changes.Review(ctx, p, store.ChangeApproved, note), "approved"
	case "reject":
		err, done = s.o.Changes.Review(ctx, p, store.ChangeRejected, note), "rejected"
	case "request-changes":
		err, done = s.o.Changes.RequestChanges(ctx, p, note), "changes-requested"
	default:
		return nil, fail.Usagef("decision: use approve, request-changes or reject")
	}
	if err != nil {
		return nil, err
	}
	return &view{redirect: "/crs/" + p.ID + "?done=" + done}, nil
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
