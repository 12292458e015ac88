package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/runview"
	"github.com/xmode/xmode/store"
)

// runStatuses are the statuses the runs page filters by (docs/reference.md,
// "Run status").
var runStatuses = []string{store.RunRunning, store.RunAttempting, store.RunReview, store.RunNoChange, store.RunFailed, store.RunApproved,
	store.RunRejected, store.RunChangesRequested, store.RunSuperseded}

const runsPerPage = 50

type runsData struct {
	Runs         []*runview.RunItem
	Status, User string
	All          bool
	Statuses     []string
	Older        template.URL // the next page; "" on the last
	Paged        bool         // not the first page
}

// runsPage: the runs, newest first, filtered by status and user, a page
// at a time.
func (s *Server) runsPage(r *http.Request) (*view, error) {
	q := r.URL.Query()
	d := &runsData{Status: q.Get("status"), User: q.Get("user"), All: q.Get("all") == "1", Statuses: runStatuses}
	if d.Status != "" && !contains(runStatuses, d.Status) {
		return nil, fail.Usagef("status %q: use one of %s", d.Status, strings.Join(runStatuses, ", "))
	}
	rq := store.RunQuery{Status: d.Status, User: d.User, All: d.All, Limit: runsPerPage}
	if b := q.Get("before"); b != "" {
		cur, err := parseCursor(b)
		if err != nil {
			return nil, err
		}
		rq.Before, d.Paged = cur, true
	}
	runs, next, err := runview.Runs(r.Context(), s.o.Svc.Store, rq)
	if err != nil {
		return nil, err
	}
	d.Runs = runs
	if next != nil {
		older := url.Values{}
		for k, v := range map[string]string{"status": d.Status, "user": d.User} {
			if v != "" {
				older.Set(k, v)
			}
		}
		if d.All {
			older.Set("all", "1")
		}
		older.Set("before", fmt.Sprintf("%d.%s", next.CreatedAt.UnixMilli(), next.ID))
		d.Older = template.URL("/runs?" + older.Encode()) // IDs, numbers and encoded values only
	}
	return &view{tmpl: "runs.html", title: "Runs", nav: "runs", data: d}, nil
}

// parseCursor reads "MILLIS.run_ID".
func parseCursor(s string) (*store.RunCursor, error) {
	ms, id, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || !fsguard.ValidID("run_", id) {
		return nil, fail.Usagef("before=%q is not a page of runs", s)
	}
	return &store.RunCursor{CreatedAt: time.UnixMilli(n).UTC(), ID: id}, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// loadRun is the run a URL names: an exact, well-formed ID, or not found.
func (s *Server) loadRun(r *http.Request) (*runview.Run, error) {
	return runview.LoadRun(r.Context(), s.o.Svc.Store, r.PathValue("run"), s.now())
}

type runData struct {
	*runview.Run
	Steps    []*stepView
	Timeline *timeline
	Network  *networkView
}

// stepView is a step on a page: the read model's, its logs and its
// agent's summary.
type stepView struct {
	runview.Step
	Duration string
	Out, Err *logView
	Agent    *evidence.Agent
	AgentErr string
}

// logView is a part of a step's log, rendered.
type logView struct {
	Stream   string
	HTML     template.HTML
	Size     int64
	From     int64  // where the part shown starts
	End      int64  // where it ends (the next page's start)
	Live     string // the live URL, when the step runs and this shows the end
	Missing  string // why there is no log
	Prev     int64  // the previous page's start, on the step page
	HasPrev  bool
	HasNext  bool
	StepPath string
	State    string // the id of the step's status badge, which the live stream updates
	Seq      int
}

// Bounds of the logs a page shows.
const (
	runPageTail = 16 << 10  // of each log on the run page: its end
	runPageLogs = 1 << 20   // of all logs on the run page together
	logPage     = 256 << 10 // one page of the step page
	maxResult   = 4 << 20   // result.json, for the agent's summary
)

// runPage: the run's objective, plan, timeline, steps with the end of
// their logs (growing live while a step runs), the agent's summary and the
// change requests.
func (s *Server) runPage(r *http.Request) (*view, error) {
	run, err := s.loadRun(r)
	if err != nil {
		return nil, err
	}
	d := &runData{Run: run, Timeline: buildTimeline(run.Steps)}
	names := map[int]string{}
	for _, st := range run.Steps {
		names[st.Seq] = st.Name
	}
	if n, err := runview.Network(r.Context(), s.o.Svc.Cfg, s.o.Svc.Guard, run); err != nil {
		d.Network = &networkView{Error: err.Error()}
	} else {
		d.Network = networkOf(n, func(seq int) string { return names[seq] }, func(seq int) string { return "#step-" + strconv.Itoa(seq) })
	}
	budget := int64(runPageLogs)
	for i := len(run.Steps) - 1; i >= 0; i-- { // the last steps' logs first
		v := viewOf(run.Steps[i])
		if budget > 0 {
			v.Out = s.logTail(v.StepRow, evidence.StdoutFile, v.Live)
			v.Err = s.logTail(v.StepRow, evidence.StderrFile, v.Live)
			budget -= v.Out.End - v.Out.From + v.Err.End - v.Err.From
		}
		s.agentSummary(v)
		d.Steps = append([]*stepView{v}, d.Steps...)
	}
	return &view{tmpl: "run.html", title: "Run " + run.ID, nav: "runs", data: d}, nil
}

func viewOf(st runview.Step) *stepView {
	return &stepView{Step: st, Duration: humanize.Duration(st.Duration)}
}

func (s *Server) stepView(row store.StepRow, now time.Time) *stepView {
	return viewOf(runview.ViewStep(row, now))
}

// agentSummary reads the agent's summary of an agent step from result.json
// (what agents/ made of its event stream).
func (s *Server) agentSummary(v *stepView) {
	f, err := evidence.Open(s.o.Svc.Guard, v.RunID, v.Seq, v.Name, evidence.ResultFile)
	if err != nil {
		return // running, or no result.json: nothing to summarise
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxResult+1))
	if err != nil || len(b) > maxResult {
		v.AgentErr = "result.json is too large or unreadable"
		return
	}
	var res struct {
		Agent *evidence.Agent `json:"agent"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		v.AgentErr = "result.json does not parse"
		return
	}
	v.Agent = res.Agent
}

// openLog opens a step's log through evidence.Open (paths derived from
// the run, number and name; no link followed), with its size.
func (s *Server) openLog(row store.StepRow, file string) (*os.File, int64, error) {
	f, err := evidence.Open(s.o.Svc.Guard, row.RunID, row.Seq, row.Name, file)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

func streamName(file string) string { return strings.TrimSuffix(file, ".log") }

// logTail is the end of a log (runPageTail bytes, from a line's start).
func (s *Server) logTail(row store.StepRow, file string, running bool) *logView {
	lv := &logView{Stream: streamName(file), StepPath: stepPath(row), State: "state-" + strconv.Itoa(row.Seq), Seq: row.Seq}
	f, size, err := s.openLog(row, file)
	if err != nil {
		lv.Missing = err.Error()
		return lv
	}
	defer f.Close()
	lv.Size = size
	from := max(0, size-runPageTail)
	s.readLog(f, lv, from, size, running, true)
	if running {
		lv.Live = liveURL(row, lv.Stream, lv.End)
	}
	return lv
}

// readLog renders [from, to) of an open log into lv. A part that starts
// in the middle of the log starts at its next line (within 4 KB). The
// end is held back to a whole character and sequence while the step
// runs, and what the live stream will send starts there.
func (s *Server) readLog(f *os.File, lv *logView, from, to int64, running, alignLine bool) {
	buf := make([]byte, to-from)
	n, err := f.ReadAt(buf, from)
	if err != nil && err != io.EOF {
		lv.Missing = err.Error()
		return
	}
	buf = buf[:n]
	if alignLine && from > 0 {
		if i := bytes.IndexByte(buf[:min(len(buf), 4096)], '\n'); i >= 0 {
			buf, from = buf[i+1:], from+int64(i+1)
		}
	}
	conv := newANSI()
	atEnd := from+int64(len(buf)) >= lv.Size
	segs := conv.feed(buf, !(running && atEnd))
	var b strings.Builder
	segsHTML(&b, segs)
	lv.HTML = template.HTML(b.String())
	lv.From, lv.End = from, from+int64(len(buf))-int64(conv.pending())
}

func stepPath(row store.StepRow) string {
	return "/runs/" + row.RunID + "/steps/" + strconv.Itoa(row.Seq)
}

func liveURL(row store.StepRow, stream string, from int64) string {
	return fmt.Sprintf("%s/live?stream=%s&from=%d", stepPath(row), stream, from)
}

// loadStep is the step a URL names.
func (s *Server) loadStep(r *http.Request) (store.StepRow, error) {
	run, err := s.loadRun(r)
	if err != nil {
		return store.StepRow{}, err
	}
	seq, err := strconv.Atoi(r.PathValue("seq"))
	if err != nil || seq < 1 {
		return store.StepRow{}, fail.NotFoundf("no such step: steps are numbered from 1")
	}
	return s.o.Svc.Store.Step(r.Context(), run.ID, seq)
}

// streamFile is the log a ?stream= names.
func streamFile(stream string) (string, error) {
	switch stream {
	case "", "stdout":
		return evidence.StdoutFile, nil
	case "stderr":
		return evidence.StderrFile, nil
	}
	return "", fail.Usagef("stream %q: use stdout or stderr", stream)
}

type stepData struct {
	Step *stepView
	Log  *logView
}

// stepPage: one of a step's logs, a page at a time from ?from=, growing
// live on its last page while the step runs.
func (s *Server) stepPage(r *http.Request) (*view, error) {
	row, err := s.loadStep(r)
	if err != nil {
		return nil, err
	}
	file, err := streamFile(r.URL.Query().Get("stream"))
	if err != nil {
		return nil, err
	}
	v := s.stepView(row, s.now())
	s.agentSummary(v)
	lv := &logView{Stream: streamName(file), StepPath: stepPath(row), Seq: row.Seq}
	f, size, err := s.openLog(row, file)
	if err != nil {
		lv.Missing = err.Error()
		return &view{tmpl: "step.html", title: "Step " + strconv.Itoa(row.Seq), nav: "runs", data: &stepData{v, lv}}, nil
	}
	defer f.Close()
	lv.Size = size
	from := int64(0)
	if q := r.URL.Query().Get("from"); q != "" {
		if from, err = strconv.ParseInt(q, 10, 64); err != nil || from < 0 {
			return nil, fail.Usagef("from=%q is not a place in the log", q)
		}
	}
	from = min(from, size)
	s.readLog(f, lv, from, min(size, from+logPage), v.Live, false)
	lv.HasNext = lv.End < size
	lv.Prev, lv.HasPrev = max(0, from-logPage), from > 0
	if v.Live && !lv.HasNext {
		lv.Live = liveURL(row, lv.Stream, lv.End)
	}
	return &view{tmpl: "step.html", title: fmt.Sprintf("Step %d", row.Seq), nav: "runs", data: &stepData{v, lv}}, nil
}
