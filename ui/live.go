package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
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
// reconnecting browser sends) until the step ends: "out" events carry the
// converted segments, with the offset they end at as the event's ID, and
// one "end" event says how the step ended.
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
	f, size, err := s.openLog(row, file)
	if err != nil {
		s.errorPage(w, r, err)
		return
	}
	defer f.Close()
	pos = min(pos, size)
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

	ctx := r.Context()
	lastWrite := time.Now()
	conv := newANSI()
	buf := make([]byte, liveChunk)
	start := pos
	send := func(final bool) error {
		for {
			n, err := f.ReadAt(buf, pos)
			if n > 0 {
				pos += int64(n)
				if segs := conv.feed(buf[:n], false); len(segs) > 0 {
					if err := writeEvent(w, "out", strconv.FormatInt(pos-int64(conv.pending()), 10), segs); err != nil {
						return err
					}
					lastWrite = time.Now()
				}
			}
			if err == io.EOF || n == 0 {
				break
			}
			if err != nil {
				return err
			}
			if pos-start > liveMax {
				return errTooMuch
			}
		}
		if final && conv.pending() > 0 {
			if err := writeEvent(w, "out", strconv.FormatInt(pos, 10), conv.feed(nil, true)); err != nil {
				return err
			}
		}
		fl.Flush()
		return nil
	}
	tick := time.NewTicker(livePoll)
	defer tick.Stop()
	lastState := time.Time{}
	for {
		if err := send(false); err != nil {
			s.liveEnd(w, fl, row.Seq, "", err)
			return
		}
		if time.Since(lastState) >= liveStatePoll {
			lastState = time.Now()
			cur, err := s.o.Svc.Store.Step(ctx, row.RunID, row.Seq)
			if err != nil {
				return
			}
			if v := s.stepView(cur, s.now()); !v.Running {
				if err := send(true); err == nil {
					s.liveEnd(w, fl, cur.Seq, v.Exit, nil)
				}
				return
			}
		}
		if time.Since(lastWrite) >= liveKeepAlive {
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
			lastWrite = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

var errTooMuch = fmt.Errorf("the log grew by more than %d MB while this page was open: its step page shows the rest", liveMax>>20)

// writeEvent writes one server-sent event whose data is JSON.
func writeEvent(w io.Writer, event, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", id, event, b)
	return err
}

// liveEnd tells the page the stream is over: how the step ended, or why
// the stream stopped.
func (s *Server) liveEnd(w io.Writer, fl http.Flusher, seq int, exit string, err error) {
	end := map[string]any{"step": seq, "exit": exit}
	if err != nil {
		end["error"] = err.Error()
	}
	_ = writeEvent(w, "end", "", end)
	fl.Flush()
}
