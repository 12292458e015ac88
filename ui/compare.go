package ui

import (
	"bytes"
	"net/http"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/runview"
)

// compareData is the compare page of a run of attempts: the attempts side
// by side — rank, status, change request, checks, evidence, change — and
// where two of them (A and B) differ: the files each changes and the diff
// from A's tree to B's.
type compareData struct {
	Run      *runview.Run
	Attempts []*attemptView
	A, B     *attemptView
	Cmp      *changes.Comparison
	Page     *diffPage
	PageErr  string
	NoDiff   noComments
}

// attemptView is an attempt as the compare page shows it.
type attemptView struct {
	runview.Attempt
	Title     string
	CheckList *runview.Checks
	Steps     int // evidence: steps recorded, and those that passed
	Passed    int
	Err       string
	pkg       *changes.Package
}

// maxCompareDiff bounds the diff between two attempts a page reads.
const maxCompareDiff = 16 << 20

// comparePage: /runs/{run}/compare?a=CR&b=CR — a and b default to the
// two best attempts that have a change request.
func (s *Server) comparePage(r *http.Request) (*view, error) {
	ctx := r.Context()
	run, err := s.loadRun(r)
	if err != nil {
		return nil, err
	}
	if run.Attempts == 0 {
		return nil, fail.NotFoundf("run %s is not a run of attempts: there is nothing to compare", run.ID)
	}
	d := &compareData{Run: run}
	for _, at := range run.Ranking {
		v := &attemptView{Attempt: at}
		if at.CR != "" {
			if v.pkg, err = s.o.Changes.Open(ctx, at.CR); err != nil {
				v.Err = err.Error()
			} else if ev, err := s.o.Changes.Evidence(v.pkg); err != nil {
				v.Err = err.Error()
			} else {
				v.Title = v.pkg.Title
				v.Steps = len(ev.Steps)
				for _, st := range ev.Steps {
					if st.Passed() {
						v.Passed++
					}
				}
				if v.CheckList, err = runview.LoadChecks(ctx, s.o.Svc.Store, at.RunID, ev); err != nil {
					return nil, err
				}
			}
		}
		d.Attempts = append(d.Attempts, v)
	}
	q := r.URL.Query()
	pick := func(id string, not *attemptView) (*attemptView, error) {
		for _, v := range d.Attempts {
			if v.pkg == nil || v == not {
				continue
			}
			if id == "" || v.CR == id {
				return v, nil
			}
		}
		if id != "" {
			return nil, fail.NotFoundf("%s is not a change request of an attempt of run %s", id, run.ID)
		}
		return nil, nil
	}
	if d.A, err = pick(q.Get("a"), nil); err != nil {
		return nil, err
	}
	if d.B, err = pick(q.Get("b"), d.A); err != nil {
		return nil, err
	}
	if d.A != nil && d.B != nil {
		w := &cappedBuffer{max: maxCompareDiff}
		if d.Cmp, err = s.o.Changes.Compare(ctx, d.A.pkg, d.B.pkg, w); err != nil {
			d.PageErr = err.Error()
		} else if page, err := readPage(bytes.NewReader(w.b), pagePos{}, d.Cmp.Stat.PerFile); err != nil {
			d.PageErr = err.Error()
		} else {
			s.hl.start(page)
			d.Page = page
		}
	}
	return &view{tmpl: "compare.html", title: "Compare the attempts of " + run.ID, nav: "runs", data: d}, nil
}
