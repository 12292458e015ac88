package ui

import (
	"fmt"
	"html/template"
	"time"

	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/internal/termsafe"
	"github.com/xmode/xmode/runview"
)

// The run's steps as a chart, drawn on the server as SVG (no script): one
// row per step, a bar from its start to its end on the run's time axis,
// coloured by how it ended, with its name, exit code and duration.

const (
	tlWidth  = 960 // viewBox units
	tlLabel  = 220 // the names' column
	tlRow    = 24
	tlBar    = 14
	tlRight  = 150 // exit and duration after the bar
	tlTop    = 22  // the time axis
	maxChart = 200 // steps drawn; a longer run's chart shows its last ones
)

type timelineRow struct {
	Y, BarY, TextY, X, W int
	Seq                  int
	Name                 template.HTML
	Class                string
	Exit, Duration       string
	// Title is the tooltip: an SVG <title>, which html/template takes for
	// HTML's RCDATA <title>, so plain text, escaped as on a terminal.
	Title string
}

type timeline struct {
	Height, Width, Label, AxisY int
	Rows                        []timelineRow
	Ticks                       []timelineTick
	Hidden                      int // steps before the ones drawn
}

type timelineTick struct {
	X    int
	Text string
}

// buildTimeline lays the steps out on the time from the first start to the
// last end (the moment they were read, for a step still running).
func buildTimeline(steps []runview.Step) *timeline {
	if len(steps) == 0 {
		return nil
	}
	tl := &timeline{Width: tlWidth, Label: tlLabel, AxisY: tlTop - 8}
	if len(steps) > maxChart {
		tl.Hidden = len(steps) - maxChart
		steps = steps[len(steps)-maxChart:]
	}
	end := func(s runview.Step) time.Time { return s.StartedAt.Add(s.Duration) }
	start, last := steps[0].StartedAt, end(steps[0])
	for _, s := range steps {
		if s.StartedAt.Before(start) {
			start = s.StartedAt
		}
		if e := end(s); e.After(last) {
			last = e
		}
	}
	span := last.Sub(start)
	if span <= 0 {
		span = time.Millisecond
	}
	plot := tlWidth - tlLabel - tlRight
	x := func(t time.Time) int { return tlLabel + int(float64(plot)*float64(t.Sub(start))/float64(span)) }
	for i := 0; i <= 4; i++ {
		tl.Ticks = append(tl.Ticks, timelineTick{X: tlLabel + plot*i/4, Text: "+" + humanize.Duration(span*time.Duration(i)/4)})
	}
	for i, s := range steps {
		y := tlTop + i*tlRow
		x0, x1 := x(s.StartedAt), x(end(s))
		w := max(x1-x0, 2)
		r := timelineRow{
			Y: y, BarY: y + (tlRow-tlBar)/2, TextY: y + tlRow/2 + 4, X: x0, W: w, Seq: s.Seq,
			Name:     hostileSVG(truncate(fmt.Sprintf("%d %s", s.Seq, s.Name), 30)),
			Class:    s.Class,
			Exit:     s.Exit,
			Duration: humanize.Duration(s.Duration),
		}
		r.Title = termsafe.Escape(fmt.Sprintf("step %d %s: %s, %s", s.Seq, truncate(s.Name, 200), r.Exit, r.Duration))
		tl.Rows = append(tl.Rows, r)
	}
	tl.Height = tlTop + len(tl.Rows)*tlRow + 4
	return tl
}
