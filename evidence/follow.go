package evidence

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// Follower reads a step's logs while its xmode writes them, and tells when
// they are whole: the one follower behind `sandbox logs --follow`, the UI's
// live output and MCP's step_logs. The order it keeps is what makes the
// end exact: the step's row is read first, and once it says the step has
// ended (store.StepRow.Live), what the logs hold is all they will hold —
// its xmode closes them before it records the end.
type Follower struct {
	st   *store.Store
	now  func() time.Time
	g    fsguard.Guard
	row  store.StepRow
	logs []*os.File
	offs []int64
}

// Follow opens files (StdoutFile, StderrFile) of step row, each to be read
// from its start (Seek moves it). now is the clock the step's heartbeats
// are compared with: the service's (sandbox.Service.Now).
func Follow(st *store.Store, g fsguard.Guard, now func() time.Time, row store.StepRow, files ...string) (*Follower, error) {
	f := &Follower{st: st, now: now, g: g, row: row}
	for _, name := range files {
		if name != StdoutFile && name != StderrFile {
			f.Close()
			return nil, fmt.Errorf("%q is not a step's log", name)
		}
		l, err := Open(g, row.RunID, row.Seq, row.Name, name)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.logs, f.offs = append(f.logs, l), append(f.offs, 0)
	}
	return f, nil
}

// Close closes the logs.
func (f *Follower) Close() error {
	for _, l := range f.logs {
		l.Close()
	}
	return nil
}

// Step is the step as its row was last read.
func (f *Follower) Step() store.StepRow { return f.row }

// Offset is where the next Read of log i starts.
func (f *Follower) Offset(i int) int64 { return f.offs[i] }

// Size is log i's size now.
func (f *Follower) Size(i int) (int64, error) {
	st, err := f.logs[i].Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// Seek moves log i's offset to off, within the log as it is now.
func (f *Follower) Seek(i int, off int64) error {
	size, err := f.Size(i)
	if err != nil {
		return err
	}
	f.offs[i] = max(0, min(off, size))
	return nil
}

// Read reads what log i holds past its offset into p, and moves the offset
// past it: 0 and nil when nothing new was written yet.
func (f *Follower) Read(i int, p []byte) (int, error) {
	n, err := f.logs[i].ReadAt(p, f.offs[i])
	f.offs[i] += int64(n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// Ended reads the step's row again and reports whether the step has ended:
// it is no longer live (it finished, was lost, or its xmode is gone). Once
// it has, what Read returns from then on is all there is, and its
// result.json has been waited for (resultWait at most), so that whoever
// reads the step's result next finds it: its xmode records the end on the
// row first and writes result.json just after.
func (f *Follower) Ended(ctx context.Context) (bool, error) {
	row, err := f.st.Step(ctx, f.row.RunID, f.row.Seq)
	if err != nil {
		return false, err
	}
	if row.Live(f.now()) {
		f.row = row
		return false, nil
	}
	if row.State == store.StateRunning {
		// Its xmode may have recorded the end and exited between the read
		// and the look at its process: it records the end before it exits,
		// so a second read, after it was seen gone, has the end if any.
		if row, err = f.st.Step(ctx, f.row.RunID, f.row.Seq); err != nil {
			return false, err
		}
	}
	f.row = row
	if row.State != store.StateRunning {
		f.awaitResult(ctx)
	}
	return true, nil
}

// resultWait bounds how long Ended waits for an ended step's result.json.
const resultWait = 2 * time.Second

func (f *Follower) awaitResult(ctx context.Context) {
	if f.row.EvidenceIncomplete {
		return // its xmode could not write it, and said so
	}
	for deadline := time.Now().Add(resultWait); time.Now().Before(deadline); {
		if r, err := Open(f.g, f.row.RunID, f.row.Seq, f.row.Name, ResultFile); err == nil {
			// Written in one write after it is made: whole once it ends
			// with its newline.
			b, _ := io.ReadAll(io.LimitReader(r, 1<<20))
			r.Close()
			if bytes.HasSuffix(b, []byte("}\n")) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stream is how Run follows: how often it looks, and where what it reads
// goes.
type Stream struct {
	// Poll: how often the logs are looked at (200 ms when zero);
	// StatePoll: how often the step's row is (Poll when zero).
	Poll, StatePoll time.Duration
	// Chunk bounds one piece of a log handed to Out (32 KB when zero).
	Chunk int
	// Out takes each new piece of log i; an error ends Run with it.
	Out func(i int, p []byte) error
	// State, if set, takes the step's row each time it is read, before the
	// end is acted on; an error ends Run with it.
	State func(row store.StepRow) error
}

// Run follows the logs until the step ends (then it hands Out the rest and
// returns the step's last row, nil) or ctx ends (ctx's error).
func (f *Follower) Run(ctx context.Context, s Stream) (store.StepRow, error) {
	buf := make([]byte, cmp.Or(s.Chunk, 32<<10))
	drain := func() error {
		for i := range f.logs {
			for {
				n, err := f.Read(i, buf)
				if n > 0 {
					if err := s.Out(i, buf[:n]); err != nil {
						return err
					}
				}
				if err != nil {
					return err
				}
				if n < len(buf) {
					break
				}
			}
		}
		return nil
	}
	poll := cmp.Or(s.Poll, 200*time.Millisecond)
	statePoll := max(s.StatePoll, poll)
	var lastState time.Time
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if err := drain(); err != nil {
			return f.row, err
		}
		if time.Since(lastState) >= statePoll {
			lastState = time.Now()
			ended, err := f.Ended(ctx)
			if err != nil {
				return f.row, err
			}
			if s.State != nil {
				if err := s.State(f.row); err != nil {
					return f.row, err
				}
			}
			if ended {
				return f.row, drain()
			}
		}
		select {
		case <-ctx.Done():
			return f.row, ctx.Err()
		case <-tick.C:
		}
	}
}
