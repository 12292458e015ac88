package egress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Summary is what a network log says about a window of time: how many
// connections, to which hosts, how many refused. The wiring attributes a
// step's lines by the step's start and end.
type Summary struct {
	Connections int         `json:"connections"` // connect, http and https records
	Denied      int         `json:"denied"`
	Errors      int         `json:"errors"`
	DNS         int         `json:"dns"` // DNS questions answered or refused
	DNSDenied   int         `json:"dns_denied"`
	BytesUp     int64       `json:"bytes_up"`
	BytesDown   int64       `json:"bytes_down"`
	Hosts       []HostCount `json:"hosts"`        // connections allowed, by host, most first
	DeniedHosts []HostCount `json:"denied_hosts"` // connections and DNS questions refused, by host, most first
	Truncated   bool        `json:"truncated"`    // the log reached its cap
	Dropped     int64       `json:"dropped"`      // lines the cap dropped (the whole log's, not the window's)
	Skipped     int         `json:"skipped"`      // lines that were not records (too long, not JSON)
}

// HostCount is a host and how many records name it.
type HostCount struct {
	Host  string `json:"host"`
	Count int    `json:"count"`
}

// maxLine bounds one line of a log read back: a record is far smaller.
const maxLine = 64 << 10

// Summarize reads a log's records whose time is in [from, to) (a zero
// time leaves that end open).
func Summarize(r io.Reader, from, to time.Time) (Summary, error) {
	var s Summary
	allowed, denied := map[string]int{}, map[string]int{}
	br := bufio.NewReaderSize(r, 32<<10)
	for {
		line, long, err := readLine(br)
		var rec Record
		switch {
		case long:
			s.Skipped++
		case len(line) == 0:
		case json.Unmarshal(line, &rec) != nil:
			s.Skipped++
		case (!from.IsZero() && rec.Time.Before(from)) || (!to.IsZero() && !rec.Time.Before(to)):
		default:
			s.add(rec, allowed, denied)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, fmt.Errorf("read network log: %w", err)
		}
	}
	s.Hosts, s.DeniedHosts = ranked(allowed), ranked(denied)
	return s, nil
}

// readLine is the next line without its newline, or long for a line over
// maxLine (read past and dropped whole).
func readLine(br *bufio.Reader) (line []byte, long bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !long && len(line)+len(chunk) <= maxLine {
			line = append(line, chunk...)
		} else {
			long, line = true, nil
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), long, err
	}
}

func (s *Summary) add(r Record, allowed, denied map[string]int) {
	host := clip(r.Host)
	switch r.Kind {
	case "truncated":
		s.Truncated = true
	case "dns":
		s.DNS++
		if r.Verdict == Denied {
			s.DNSDenied++
			denied[host]++
		}
	case "connect", "http", "https":
		s.Connections++
		s.BytesUp += r.BytesUp
		s.BytesDown += r.BytesDown
		switch r.Verdict {
		case Denied:
			s.Denied++
			denied[host]++
		case Failed:
			s.Errors++
			allowed[host]++
		default:
			allowed[host]++
		}
	default:
		s.Skipped++
	}
}

func ranked(m map[string]int) []HostCount {
	out := make([]HostCount, 0, len(m))
	for h, n := range m {
		out = append(out, HostCount{h, n})
	}
	slices.SortFunc(out, func(a, b HostCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Host, b.Host)
	})
	return out
}

// SummarizeFile summarises the log at path for [from, to), with the count
// of lines its cap dropped. A log that does not exist is an empty summary.
func SummarizeFile(path string, from, to time.Time) (Summary, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if os.IsNotExist(err) {
		return Summary{}, nil
	}
	if err != nil {
		return Summary{}, fmt.Errorf("read network log: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return Summary{}, fmt.Errorf("read network log: %s is not a regular file", path)
	}
	s, err := Summarize(f, from, to)
	s.Dropped = readDropped(DroppedPath(path))
	return s, err
}

// String is the summary in a line: "12 connections to [api.example.com,
// pypi.org], 2 denied", naming at most five hosts of each.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d connection%s", s.Connections, plural(s.Connections))
	if len(s.Hosts) > 0 {
		fmt.Fprintf(&b, " to [%s]", hostList(s.Hosts))
	}
	fmt.Fprintf(&b, ", %d denied", s.Denied+s.DNSDenied)
	if len(s.DeniedHosts) > 0 {
		fmt.Fprintf(&b, " [%s]", hostList(s.DeniedHosts))
	}
	if s.Errors > 0 {
		fmt.Fprintf(&b, ", %d failed", s.Errors)
	}
	if s.Dropped > 0 {
		fmt.Fprintf(&b, " (the log is full: %d more not recorded)", s.Dropped)
	}
	return b.String()
}

func hostList(hs []HostCount) string {
	const shown = 5
	names := make([]string, 0, shown+1)
	for i, h := range hs {
		if i == shown {
			names = append(names, fmt.Sprintf("+%d more", len(hs)-shown))
			break
		}
		names = append(names, h.Host)
	}
	return strings.Join(names, ", ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
