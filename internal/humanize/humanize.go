// Package humanize writes durations the one way every front end shows
// them (CLI tables, run show, logs, cr show, the UI): how long something
// took, and how long ago or how long left.
package humanize

import (
	"fmt"
	"time"
)

// Duration is how long something took: 340ms, 4.2s, 3m05s, 2h10m. It is
// rounded to the unit it shows (59.97s is 1m00s); a negative one is 0ms.
func Duration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", max(d, 0).Milliseconds())
	}
	if r := d.Round(100 * time.Millisecond); r < time.Minute {
		return fmt.Sprintf("%d.%ds", r/time.Second, r%time.Second/(100*time.Millisecond))
	}
	if r := d.Round(time.Second); r < time.Hour {
		return fmt.Sprintf("%dm%02ds", r/time.Minute, r%time.Minute/time.Second)
	}
	r := d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", r/time.Hour, r%time.Hour/time.Minute)
}

// Span is a stretch of time to the unit a person thinks in, for how long
// ago or how long left: 42s, 5m, 1h59m, 3d4h. Its sign is dropped.
func Span(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		h := int(d.Hours())
		if m := int(d.Minutes()) % 60; m != 0 {
			return fmt.Sprintf("%dh%dm", h, m)
		}
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// Ago is how long before now t was: "42s ago", "1h5m ago".
func Ago(t, now time.Time) string { return Span(now.Sub(t)) + " ago" }
