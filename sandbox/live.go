package sandbox

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// liveQueue bounds what a live stream holds for a terminal that is slower
// than the step: 128 chunks of at most 32 KB (the providers' copy buffer).
const liveQueue = 128

// liveStall is how long a full queue waits for a reader that is not
// reading before the stream starts dropping what does not fit; liveFlush,
// how long the end of a step waits for the terminal to take what is queued.
// A reader that takes longer loses output (marked), never the step's time.
const (
	liveStall = 2 * time.Second
	liveFlush = 2 * time.Second
)

// liveWriter passes a step's output on to the terminal (or a pipe) from a
// goroutine of its own, so that a reader that is stalled or gone never
// makes the step, its evidence or its deadline wait. A reader that keeps up
// (`| grep`) gets everything, as through a pipe; once the queue has stood
// full for liveStall, what does not fit is dropped and counted, and after a
// write error (a closed pipe: `xmode sandbox exec … | head -1`) everything
// is.
type liveWriter struct {
	w       io.Writer
	ch      chan *[]byte
	dropped atomic.Int64
	stalled bool // the reader stood still for liveStall: never wait again
	done    chan struct{}
}

func newLive(w io.Writer) *liveWriter {
	if w == nil {
		return nil
	}
	l := &liveWriter{w: w, ch: make(chan *[]byte, liveQueue), done: make(chan struct{})}
	go l.run()
	return l
}

// liveChunks are the queue's chunks, used again once written: hundreds of
// MB through a step cost the queue's bound, not a copy each that the
// garbage collector must catch up with (which a busy machine lets grow).
var liveChunks = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

// Write is called by one goroutine at a time (the provider's copy of one
// stream).
func (l *liveWriter) Write(p []byte) (int, error) {
	b := liveChunks.Get().(*[]byte)
	*b = append((*b)[:0], p...)
	select {
	case l.ch <- b:
		return len(p), nil
	default:
	}
	if !l.stalled {
		t := time.NewTimer(liveStall)
		defer t.Stop()
		select {
		case l.ch <- b:
			return len(p), nil
		case <-t.C:
			l.stalled = true
		}
	}
	liveChunks.Put(b)
	l.dropped.Add(int64(len(p)))
	return len(p), nil
}

func (l *liveWriter) run() {
	defer close(l.done)
	dead := false
	for b := range l.ch {
		if !dead {
			if err := l.note(); err == nil {
				_, err = l.w.Write(*b)
				dead = err != nil
			} else {
				dead = true
			}
		}
		liveChunks.Put(b)
	}
	if !dead {
		_ = l.note()
	}
}

// note tells the reader how much it missed, once it can read again.
func (l *liveWriter) note() error {
	n := l.dropped.Swap(0)
	if n == 0 {
		return nil
	}
	_, err := fmt.Fprintf(l.w, "\n[xmode: %d bytes not shown here: the terminal could not keep up; the step's log has them]\n", n)
	return err
}

// close lets the queue drain for at most liveFlush.
func (l *liveWriter) close() {
	if l == nil {
		return
	}
	close(l.ch)
	select {
	case <-l.done:
	case <-time.After(liveFlush):
	}
}
