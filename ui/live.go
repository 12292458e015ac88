package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/runview"
	"github.com/xmode/xmode/store"
)

// A running step's output, live: server-sent events from the step's log
// file, which the step's xmode writes as the step prints (evidence/). The
// page's script (assets/app.js) appends each event's segments as text
// nodes: no HTML is parsed on the client.

// How often the log is looked at, and the step's row (has it ended?).
// The budget is 250 ms from a write to the page.
const (
	livePoll      = 40 * time.Millisecond
	liveStatePoll = 500 * time.Millisecond
	liveChunk     = 64 << 10
	liveMax       = 16 << 20 // bytes one live stream sends; past it, the step page pages the log
	liveKeepAlive = 15 * time.Second
)

// live streams a step's log from ?from= (or the Last-Event-ID a
// reconnecting browser sends) until the step ends, through the one
// follower (evidence.Follower): "out" events carry the converted segments,
// with the offset they end at as the event's ID; "state" events, twice a
// second, the step's counters as they are now (its duration, the log's
// size, and on the stdout stream the run's timeline); one "end" event says
// how the step ended, with the same counters, final.
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	row, err := s.loadStep(r)
	if err != nil {
		s.errorPage(w, r, err)
		return
	}
	file, err := streamFile(r.URL.Query().Get("stream"))
	if err != nil {
		s.errorPage(w, r, err)
		return
	}
	from := r.URL.Query().Get("from")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from = id
	}
	pos, err := strconv.ParseInt(from, 10, 64)
	if err != nil || pos < 0 {
		pos = 0
	}
	svc := s.o.Svc
	fw, err := evidence.Follow(svc.Store, svc.Guard, svc.Now, row, file)
	if err != nil {
		s.errorPage(w, r, err)
		return
	}
	defer fw.Close()
	if err := fw.Seek(0, pos); err != nil {
		s.errorPage(w, r, err)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		s.refuse(w, http.StatusInternalServerError, "streaming is not supported here")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n")
	fl.Flush()

	timeline := file == evidence.StdoutFile
	lastWrite := time.Now()
	conv := newANSI()
	start := fw.Offset(0)
	last, err := fw.Run(r.Context(), evidence.Stream{Poll: livePoll, StatePoll: liveStatePoll, Chunk: liveChunk,
		Out: func(_ int, p []byte) error {
			if segs := conv.feed(p, false); len(segs) > 0 {
				if err := writeEvent(w, "out", strconv.FormatInt(fw.Offset(0)-int64(conv.pending()), 10), segs); err != nil {
					return err
				}
				fl.Flush()
				lastWrite = time.Now()
			}
			if fw.Offset(0)-start > liveMax {
				return errTooMuch
			}
			return nil
		},
		State: func(row store.StepRow) error {
			if row.Live(svc.Now()) {
				if err := writeEvent(w, "state", "", s.liveState(r.Context(), fw, row, timeline)); err != nil {
					return err
				}
				lastWrite = time.Now()
			}
			if time.Since(lastWrite) >= liveKeepAlive {
				if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
					return err
				}
				lastWrite = time.Now()
			}
			fl.Flush()
			return nil
		},
	})
	switch {
	case r.Context().Err() != nil:
		return
	case err != nil:
		s.liveEnd(w, fl, s.liveState(r.Context(), fw, last, timeline), err)
		return
	}
	if conv.pending() > 0 {
		if err := writeEvent(w, "out", strconv.FormatInt(fw.Offset(0), 10), conv.feed(nil, true)); err != nil {
			return
		}
	}
	s.liveEnd(w, fl, s.liveState(r.Context(), fw, last, timeline), nil)
}

var errTooMuch = fmt.Errorf("the log grew by more than %d MB while this page was open: its step page shows the rest", liveMax>>20)

// liveState is the step's counters as the page shows them: how it ended
// (or "running"), its class, its duration, the log's size, and the run's
// timeline when asked.
type liveState struct {
	Step     int           `json:"step"`
	Exit     string        `json:"exit"`
	Class    string        `json:"class"`
	Duration string        `json:"duration"`
	Bytes    int64         `json:"bytes"`
	Error    string        `json:"error,omitempty"`
	Timeline *liveTimeline `json:"timeline,omitempty"`
}

// liveTimeline is the geometry of the run's timeline now: its ticks' text
// and each bar (the page moves the bars it has; it draws no new ones).
type liveTimeline struct {
	Ticks []string          `json:"ticks"`
	Rows  []liveTimelineRow `json:"rows"`
}

type liveTimelineRow struct {
	Seq   int    `json:"seq"`
	X     int    `json:"x"`
	W     int    `json:"w"`
	Class string `json:"class"`
	Info  string `json:"info"`
}

func (s *Server) liveState(ctx context.Context, fw *evidence.Follower, row store.StepRow, timeline bool) liveState {
	now := s.now()
	v := runview.ViewStep(row, now)
	st := liveState{Step: row.Seq, Exit: v.Exit, Class: v.Class, Duration: humanize.Duration(v.Duration)}
	st.Bytes, _ = fw.Size(0)
	if !timeline {
		return st
	}
	rows, err := s.o.Svc.Store.Steps(ctx, row.RunID)
	if err != nil {
		return st
	}
	steps := make([]runview.Step, len(rows))
	for i, r := range rows {
		steps[i] = runview.ViewStep(r, now)
	}
	if tl := buildTimeline(steps); tl != nil {
		st.Timeline = &liveTimeline{}
		for _, t := range tl.Ticks {
			st.Timeline.Ticks = append(st.Timeline.Ticks, t.Text)
		}
		for _, r := range tl.Rows {
			st.Timeline.Rows = append(st.Timeline.Rows, liveTimelineRow{Seq: r.Seq, X: r.X, W: r.W, Class: r.Class, Info: r.Exit + " · " + r.Duration})
		}
	}
	return st
}

// writeEvent writes one server-sent event whose data is JSON.
func writeEvent(w io.Writer, event, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if id != "" {
		_, err = fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", id, event, b)
	} else {
		_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	return err
}

// liveEnd tells the page the stream is over: how the step ended, or why
// the stream stopped.
func (s *Server) liveEnd(w io.Writer, fl http.Flusher, st liveState, err error) {
	if err != nil {
		st.Error = err.Error()
	}
	_ = writeEvent(w, "end", "", st)
	fl.Flush()
}
