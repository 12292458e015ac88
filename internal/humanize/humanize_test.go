package humanize

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:           "0ms",
		0:                      "0ms",
		340 * time.Millisecond: "340ms",
		999*time.Millisecond + 900*time.Microsecond: "999ms",
		time.Second:                             "1.0s",
		4249 * time.Millisecond:                 "4.2s",
		4250 * time.Millisecond:                 "4.3s",
		59949 * time.Millisecond:                "59.9s",
		59950 * time.Millisecond:                "1m00s",
		3*time.Minute + 5*time.Second:           "3m05s",
		59*time.Minute + 59500*time.Millisecond: "1h00m",
		2*time.Hour + 10*time.Minute:            "2h10m",
		49 * time.Hour:                          "49h00m",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                              "0s",
		42 * time.Second:               "42s",
		-42 * time.Second:              "42s",
		5*time.Minute + 59*time.Second: "5m",
		time.Hour:                      "1h",
		time.Hour + 59*time.Minute:     "1h59m",
		50 * time.Hour:                 "2d2h",
	} {
		if got := Span(d); got != want {
			t.Errorf("Span(%v) = %q, want %q", d, got, want)
		}
	}
	now := time.Now()
	if got := Ago(now.Add(-65*time.Minute), now); got != "1h5m ago" {
		t.Errorf("Ago = %q", got)
	}
}
