// Package progress draws xmode's progress bars (github.com/schollz/progressbar)
// for what takes long: git's clone and fetch, an image pull, a reap pass.
// Callers hand it a writer only when it is a terminal and neither --json
// nor -q asked for silence (cmd decides that, in one place); with a nil
// writer nothing here draws anything.
package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

func newBar(w io.Writer, max int64, what string, bytes bool) *progressbar.ProgressBar {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(80 * time.Millisecond),
		progressbar.OptionUseANSICodes(true),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	}
	if bytes {
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowTotalBytes(true))
	} else {
		opts = append(opts, progressbar.OptionShowCount())
	}
	return progressbar.NewOptions64(max, opts...)
}

// Counter is a bar over a number of things done one by one.
type Counter struct{ bar *progressbar.ProgressBar }

// Count starts a bar of n steps on w; nil when w is nil.
func Count(w io.Writer, n int, what string) *Counter {
	if w == nil {
		return nil
	}
	return &Counter{bar: newBar(w, int64(n), what, false)}
}

// Add counts one step done. Safe for concurrent use, and on a nil Counter.
func (c *Counter) Add() {
	if c != nil {
		_ = c.bar.Add(1)
	}
}

// Done ends the bar.
func (c *Counter) Done() {
	if c != nil {
		_ = c.bar.Finish()
	}
}

// gitLine is one of git's progress lines: "Receiving objects:  45% (45/100), …",
// with "remote: " before the server's phases. Compiled on first use: a
// package-level regexp.MustCompile runs at every start of xmode.
var gitLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(?:remote: )?([A-Z][a-z]+(?: [a-z]+)*):\s+\d+% \((\d+)/(\d+)\)`)
})

// Git is a writer for git's --progress output (its stderr) that draws a bar
// per phase (counting, receiving, resolving, updating files) instead of
// git's own lines. Warnings are passed on; the rest (errors included, which
// the caller reports from git's exit) is not drawn.
type Git struct {
	w     io.Writer
	mu    sync.Mutex
	buf   []byte
	phase string
	bar   *progressbar.ProgressBar
}

// NewGit draws git's progress on w; nil when w is nil.
func NewGit(w io.Writer) *Git {
	if w == nil {
		return nil
	}
	return &Git{w: w}
}

// Writer is g as an io.Writer, or nil for a nil g (gitcli: no progress).
func (g *Git) Writer() io.Writer {
	if g == nil {
		return nil
	}
	return g
}

func (g *Git) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.buf = append(g.buf, p...)
	for {
		i := bytes.IndexAny(g.buf, "\r\n")
		if i < 0 {
			break
		}
		g.line(strings.TrimSpace(string(g.buf[:i])))
		g.buf = g.buf[i+1:]
	}
	return len(p), nil
}

func (g *Git) line(l string) {
	m := gitLine().FindStringSubmatch(l)
	if m == nil {
		if strings.HasPrefix(l, "warning: ") {
			g.finish()
			fmt.Fprintln(g.w, l)
		}
		return
	}
	done, _ := strconv.ParseInt(m[2], 10, 64)
	total, _ := strconv.ParseInt(m[3], 10, 64)
	if m[1] != g.phase {
		g.finish()
		g.phase = m[1]
		g.bar = newBar(g.w, total, m[1], false)
	}
	_ = g.bar.Set64(done)
}

func (g *Git) finish() {
	if g.bar != nil && !g.bar.IsFinished() {
		_ = g.bar.Finish()
	}
	g.bar, g.phase = nil, ""
}

// Close ends the last bar.
func (g *Git) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.finish()
}

// pullMessage is the part of the daemon's JSON pull stream (the Engine
// API's image create) the bar needs.
type pullMessage struct {
	Status         string `json:"status"`
	ID             string `json:"id"`
	ProgressDetail struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"progressDetail"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// Pull reads a docker image pull's JSON stream to its end and draws one bar
// of the bytes of every layer on w (nothing when w is nil). It returns the
// error the daemon reported in the stream, if any.
func Pull(stream io.Reader, w io.Writer, image string) error {
	type layer struct{ cur, total int64 }
	layers := map[string]*layer{}
	var bar *progressbar.ProgressBar
	var shown int64
	dec := json.NewDecoder(stream)
	for {
		var m pullMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("read the pull's progress: %w", err)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
		if w == nil || m.ID == "" {
			continue
		}
		l := layers[m.ID]
		if l == nil {
			l = &layer{}
			layers[m.ID] = l
		}
		switch {
		case m.Status == "Downloading" && m.ProgressDetail.Total > 0:
			l.cur, l.total = m.ProgressDetail.Current, m.ProgressDetail.Total
		case m.Status == "Download complete" || m.Status == "Pull complete" || m.Status == "Already exists":
			l.cur = l.total
		default:
			continue
		}
		var cur, total int64
		for _, l := range layers {
			cur, total = cur+l.cur, total+l.total
		}
		if total == 0 {
			continue
		}
		if bar == nil {
			bar = newBar(w, total, "Pulling "+image, true)
		} else if total != bar.GetMax64() {
			bar.ChangeMax64(total)
		}
		if cur != shown {
			shown = cur
			_ = bar.Set64(cur)
		}
	}
	if bar != nil && !bar.IsFinished() {
		_ = bar.Finish()
	}
	return nil
}
