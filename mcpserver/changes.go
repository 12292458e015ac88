package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/store"
)

// The change: sandbox_diff, cr_create, cr_show.

type diffIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Stat    bool   `json:"stat,omitempty" jsonschema:"the stat alone, without the patch"`
}

type fileStatView struct {
	Path       string `json:"path"`
	OldPath    string `json:"old_path,omitempty"`
	Status     string `json:"status" jsonschema:"A added, M modified, D deleted, R renamed, T type changed"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary,omitempty"`
}

type statView struct {
	Files      int            `json:"files"`
	Insertions int            `json:"insertions"`
	Deletions  int            `json:"deletions"`
	PerFile    []fileStatView `json:"per_file"`
}

func viewStat(st *changes.Stat) statView {
	v := statView{PerFile: []fileStatView{}}
	if st == nil {
		return v
	}
	v.Files, v.Insertions, v.Deletions = st.Files, st.Insertions, st.Deletions
	for _, f := range st.PerFile {
		v.PerFile = append(v.PerFile, fileStatView{Path: f.Path, OldPath: f.OldPath, Status: f.Status, Insertions: f.Insertions, Deletions: f.Deletions, Binary: f.Binary})
	}
	return v
}

type diffOut struct {
	BaseCommit string   `json:"base_commit"`
	Commits    []string `json:"commits" jsonschema:"your commits on top of the base: id and subject"`
	Stat       statView `json:"stat"`
	Patch      string   `json:"patch"`
	PatchCut   bool     `json:"patch_cut" jsonschema:"the patch was longer than 256 KiB and is cut (the user sees all of it: xmode sandbox diff)"`
	LeftOut    []string `json:"left_out" jsonschema:"paths left out, and why (paths git refuses to track)"`
	Warnings   []string `json:"warnings"`
}

func (s *Server) addSandboxDiff() {
	add(s, &mcp.Tool{Name: "sandbox_diff", Title: "Diff a sandbox",
		Description: `What the sandbox changed against its base commit — your commits, uncommitted and new files, with the repository's ignore rules — as a patch (cut at 256 KiB) with its stat, or the stat alone. What cr_create would package.`,
		Annotations: readOnly}, s.sandboxDiff)
}

func (s *Server) sandboxDiff(ctx context.Context, _ *mcp.CallToolRequest, in diffIn) (*mcp.CallToolResult, diffOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, diffOut{}, err
	}
	want := changes.WantStat
	if !in.Stat {
		want |= changes.WantPatch
	}
	sn, err := s.o.Changes.Snapshot(ctx, sess, want)
	if err != nil {
		return nil, diffOut{}, err
	}
	defer sn.Close()
	st, err := sn.Stat(ctx)
	if err != nil {
		return nil, diffOut{}, err
	}
	out := diffOut{BaseCommit: sn.Base.String(), Commits: []string{}, Stat: viewStat(st), LeftOut: []string{}, Warnings: append([]string{}, sn.Warnings...)}
	for _, c := range sn.Commits {
		subject, _, _ := strings.Cut(c.Message, "\n")
		out.Commits = append(out.Commits, c.ID.String()[:12]+" "+subject)
	}
	for _, sk := range sn.Skipped {
		out.LeftOut = append(out.LeftOut, sk.Path+": "+sk.Reason)
	}
	if !in.Stat {
		w := &capWriter{max: PatchCap}
		if err := sn.Patch(ctx, w, false); err != nil && !errors.Is(err, errCapped) {
			return nil, diffOut{}, err
		}
		out.Patch, out.PatchCut = w.buf.String(), w.cut
	}
	text := fmt.Sprintf("%d files changed, %d insertions(+), %d deletions(-) against %s\n", out.Stat.Files, out.Stat.Insertions, out.Stat.Deletions, out.BaseCommit)
	if in.Stat {
		for _, f := range out.Stat.PerFile {
			text += fmt.Sprintf(" %s %s +%d -%d\n", f.Status, f.Path, f.Insertions, f.Deletions)
		}
	}
	text += out.Patch
	if out.PatchCut {
		text += fmt.Sprintf("\n[patch cut at %d bytes; the user sees all of it with xmode sandbox diff %s]\n", PatchCap, sess.ID)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

type crCreateIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Title   string `json:"title,omitempty" jsonschema:"what the change does, in one line (default: the sandbox's title, else your last commit's subject)"`
	Message string `json:"message,omitempty" jsonschema:"for the reviewer: what you changed and why, and how you checked it"`
	// ChangeRequest makes the change the next version of one whose
	// review asked for changes, instead of a new change request.
	ChangeRequest string `json:"change_request,omitempty" jsonschema:"the change request (cr_…) whose review asked for changes (cr_show says what): the sandbox's change becomes its next version, instead of a new change request"`
}

type crOut struct {
	ID        string      `json:"id"`
	Title     string      `json:"title"`
	Status    string      `json:"status" jsonschema:"open until the user reviews it; changes_requested: answer the review, then cr_create with change_request makes its next version"`
	Version   int         `json:"version" jsonschema:"its newest version, from 1"`
	Session   string      `json:"session"`
	Stat      statView    `json:"stat"`
	Dir       string      `json:"dir" jsonschema:"its package: change.patch, manifest.json, evidence.json"`
	Review    []string    `json:"review" jsonschema:"the commands the user reviews it with: give the user these"`
	Reviews   []string    `json:"reviews" jsonschema:"decisions so far"`
	Comments  []string    `json:"comments" jsonschema:"the reviewers' comments on lines of its diff: PATH:LINE (a line of the file as that version has it; PATH:-LINE, a line of the base), the version, the text, and whether the next version changed the line"`
	Steps     []crStep    `json:"steps" jsonschema:"the evidence: every step of the sandbox's run, as the package froze it"`
	Patch     string      `json:"patch,omitempty"`
	PatchCut  bool        `json:"patch_cut,omitempty"`
	CreatedAt string      `json:"created_at"`
	Manifest  *manifestIn `json:"manifest,omitempty"`
}

type manifestIn struct {
	BaseCommit string `json:"base_commit"`
	Tree       string `json:"tree"`
	Message    string `json:"message"`
}

type crStep struct {
	Step   int      `json:"step"`
	Name   string   `json:"name"`
	Argv   []string `json:"argv"`
	Status string   `json:"status" jsonschema:"passed, failed, timed_out, oom_killed, killed or running"`
}

func (s *Server) addCRCreate() {
	add(s, &mcp.Tool{Name: "cr_create", Title: "Create a change request",
		Description: `Freeze what the sandbox changed into a change request for the user to review: the patch, the stat, and the evidence of every step. title says what it does (default: the sandbox's title, else your last commit's subject); message says what you changed and why. Returns its ID, the steps of its evidence (each command and file operation with its status) and the commands the user reviews it with — give them to the user. You cannot approve it yourself. When the user asked for changes to one (cr_show: status changes_requested, its comments), make them in the sandbox and call cr_create with change_request: the change becomes its next version.`,
		Annotations: additive}, s.crCreate)
}

func (s *Server) crCreate(ctx context.Context, _ *mcp.CallToolRequest, in crCreateIn) (*mcp.CallToolResult, crOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, crOut{}, err
	}
	title := in.Title
	if title == "" {
		title = sess.Title
	}
	var p *changes.Package
	if in.ChangeRequest != "" {
		p, err = s.newVersion(ctx, in.ChangeRequest, sess, in.Message)
	} else {
		p, err = s.o.Changes.Create(ctx, sess, changes.CreateOptions{Title: title, Message: in.Message})
	}
	if err != nil {
		return nil, crOut{}, err
	}
	ev, err := s.o.Changes.Evidence(p)
	if err != nil {
		return nil, crOut{}, err
	}
	return nil, s.viewCR(p, sess, ev, nil), nil
}

// newVersion makes sess's change the next version of change request id,
// one of a session in scope whose latest review asked for changes.
func (s *Server) newVersion(ctx context.Context, id string, sess *store.Session, message string) (*changes.Package, error) {
	prev, err := s.scopedCR(ctx, id)
	if err != nil {
		return nil, err
	}
	if prev.Status != store.ChangeChangesRequested {
		return nil, fail.Refusedf("%s is %s: a new version answers a review that asked for changes, and none does now", prev.ID, prev.Status)
	}
	return s.o.Changes.NewVersion(ctx, sess, prev, changes.CreateOptions{Message: message})
}

// scopedCR opens the newest version of change request id (its whole ID)
// when it is of a session in scope; any other is not found.
func (s *Server) scopedCR(ctx context.Context, id string) (*changes.Package, error) {
	p, err := s.o.Changes.Open(ctx, id)
	if err == nil {
		if _, err = s.scoped(ctx, p.SessionID); err != nil || p.ID != id {
			err = fail.NotFoundf("no change request %q of your sandboxes (give the whole ID cr_create returned)", id)
		}
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

type crShowIn struct {
	ChangeRequest string `json:"change_request" jsonschema:"the change request's ID (cr_…), from cr_create"`
	Patch         bool   `json:"patch,omitempty" jsonschema:"include the patch"`
}

func (s *Server) addCRShow() {
	add(s, &mcp.Tool{Name: "cr_show", Title: "Show a change request",
		Description: `Show a change request of one of your sandboxes: title, status, reviews, stat, the steps of its evidence, and with patch the patch (cut at 256 KiB).`,
		Annotations: readOnly}, s.crShow)
}

func (s *Server) crShow(ctx context.Context, _ *mcp.CallToolRequest, in crShowIn) (*mcp.CallToolResult, crOut, error) {
	if in.ChangeRequest == "" {
		return nil, crOut{}, fail.Usagef("give the change request's ID (cr_create returns it)")
	}
	// Only a change request of a session in scope: any other is not found.
	p, err := s.scopedCR(ctx, in.ChangeRequest)
	if err != nil {
		return nil, crOut{}, err
	}
	sess, err := s.scoped(ctx, p.SessionID)
	if err != nil {
		return nil, crOut{}, err
	}
	if err := s.o.Changes.Annotate(ctx, p.Change); err != nil {
		return nil, crOut{}, err
	}
	ev, err := s.o.Changes.Evidence(p)
	if err != nil {
		return nil, crOut{}, err
	}
	var patch *capWriter
	if in.Patch {
		r, _, err := s.o.Changes.OpenFile(p, changes.PatchFile)
		if err != nil {
			return nil, crOut{}, err
		}
		patch = &capWriter{max: PatchCap}
		_, err = io.Copy(patch, r)
		r.Close()
		if err != nil && !errors.Is(err, errCapped) {
			return nil, crOut{}, err
		}
	}
	return nil, s.viewCR(p, sess, ev, patch), nil
}

// viewCR is a change request of sess as the tools show it: its review
// commands (the export's --repo the session's repository when that is a
// path of this machine), and its steps when ev is given.
func (s *Server) viewCR(p *changes.Package, sess *store.Session, ev *changes.Evidence, patch *capWriter) crOut {
	x := s.xmodeCommand()
	repo := "REPO"
	if filepath.IsAbs(sess.Repo) {
		repo = fail.ShellWord(sess.Repo)
	}
	out := crOut{ID: p.ID, Title: p.Title, Status: p.Status, Version: p.Version, Session: p.SessionID, Dir: p.Dir, CreatedAt: stamp(p.CreatedAt),
		Review: []string{
			x + " cr show " + p.ID + " --patch     # read it",
			x + " cr review " + p.ID + " --approve # or --reject, or --request-changes with --note and --comment \"PATH:LINE: TEXT\"",
			x + " cr export " + p.ID + " --repo " + repo + " # a branch of it in your repository",
		},
		Reviews: []string{}, Comments: []string{}, Steps: []crStep{}}
	if p.Manifest != nil {
		out.Stat = viewStat(p.Manifest.Stat)
		out.Manifest = &manifestIn{BaseCommit: p.Manifest.BaseCommit, Tree: p.Manifest.Tree, Message: p.Manifest.Message}
	} else {
		out.Stat = viewStat(nil)
	}
	for _, r := range p.Reviews {
		out.Reviews = append(out.Reviews, fmt.Sprintf("%s of version %d by %s at %s: %s", r.Decision, r.Version, r.Reviewer, stamp(r.DecidedAt), r.Note))
		for _, c := range r.Comments {
			line := fmt.Sprintf("%s (version %d): %s", changes.Where(c), c.Version, c.Text)
			if c.Addressed != nil && *c.Addressed {
				line += " [addressed in version " + fmt.Sprint(c.Version+1) + "]"
			} else if c.Addressed != nil {
				line += " [not addressed in version " + fmt.Sprint(c.Version+1) + "]"
			}
			out.Comments = append(out.Comments, line)
		}
	}
	if ev != nil {
		for _, st := range ev.Steps {
			argv := st.Argv
			if argv == nil {
				argv = []string{}
			}
			out.Steps = append(out.Steps, crStep{Step: st.Seq, Name: st.Name, Argv: argv, Status: st.Status})
		}
	}
	if patch != nil {
		out.Patch, out.PatchCut = patch.buf.String(), patch.cut
	}
	return out
}
