package egress

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Record is one line of a sandbox's network log: a connection attempt (a
// tunnel, a plain HTTP request, a request inside a credential host's
// tunnel) or a DNS question. docs/network.md, "The log", lists the fields.
type Record struct {
	Time       time.Time `json:"time"`
	Sandbox    string    `json:"sandbox"`
	Client     string    `json:"client,omitempty"` // the client's address as the proxy saw it
	Kind       string    `json:"kind"`             // connect, http, https, dns, truncated
	Host       string    `json:"host,omitempty"`
	Port       int       `json:"port,omitempty"`
	SNI        string    `json:"sni,omitempty"`
	HostHeader string    `json:"host_header,omitempty"`
	Method     string    `json:"method,omitempty"`
	Address    string    `json:"address,omitempty"` // the upstream address connected to
	Verdict    string    `json:"verdict"`           // allowed, denied, error
	Rule       string    `json:"rule,omitempty"`
	Source     string    `json:"source,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Credential string    `json:"credential,omitempty"` // "X-Api-Key from ANTHROPIC_API_KEY": never the value
	Status     int       `json:"status,omitempty"`     // the upstream's HTTP status
	QType      string    `json:"qtype,omitempty"`
	Answers    []string  `json:"answers,omitempty"`
	Count      int64     `json:"count,omitempty"` // DNS questions refused for their rate since the last line
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS float64   `json:"duration_ms"`
}

// Verdicts.
const (
	Allowed = "allowed"
	Denied  = "denied"
	Failed  = "error" // allowed, but the upstream could not be reached or verified
)

// Log is a sandbox's network log: one JSON line per record, appended
// (the proxy opens it O_APPEND and never rewrites it), capped at Max
// bytes like a step's output. Past the cap one "truncated" line is
// written and later records are only counted, in the file beside it
// (DroppedPath), which the proxy rewrites at most once a second.
type Log struct {
	mu          sync.Mutex
	f           *os.File
	path        string
	size, max   int64
	dropped     int64
	truncated   bool
	lastDropped time.Time
	now         func() time.Time
}

// markerRoom is kept below the cap for the truncation line.
const markerRoom = 512

// OpenLog opens (creating) a log for appending, capped at max bytes.
func OpenLog(path string, max int64, now func() time.Time) (*Log, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open network log: %w", err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open network log: %s is not a regular file", path)
	}
	if max < 2*markerRoom {
		max = 2 * markerRoom
	}
	l := &Log{f: f, path: path, size: st.Size(), max: max, now: now}
	l.dropped = readDropped(DroppedPath(path))
	l.truncated = l.size >= max-markerRoom
	return l, nil
}

// DroppedPath is where a log's count of dropped lines is kept.
func DroppedPath(logPath string) string { return logPath + ".dropped" }

func readDropped(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 32 {
		return 0
	}
	n, _ := strconv.ParseInt(string(trimSpace(b)), 10, 64)
	return max(n, 0)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

func marshalLine(r Record) ([]byte, error) {
	b, err := json.Marshal(r)
	return append(b, '\n'), err
}

// Write appends r, or counts it when the log is full.
func (l *Log) Write(r Record) {
	line, err := marshalLine(r)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	if !l.truncated && l.size+int64(len(line)) <= l.max-markerRoom {
		n, _ := l.f.Write(line)
		l.size += int64(n)
		return
	}
	if !l.truncated {
		l.truncated = true
		m, _ := json.Marshal(Record{Time: l.now().UTC(), Sandbox: r.Sandbox, Kind: "truncated", Verdict: "",
			Reason: fmt.Sprintf("the log reached its cap of %d bytes: later lines are dropped and counted in %s", l.max, filepath.Base(DroppedPath(l.path)))})
		if len(m) < markerRoom {
			n, _ := l.f.Write(append(m, '\n'))
			l.size += int64(n)
		}
	}
	l.dropped++
	if now := l.now(); now.Sub(l.lastDropped) >= time.Second {
		l.lastDropped = now
		l.saveDropped()
	}
}

func (l *Log) saveDropped() {
	p := DroppedPath(l.path)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(l.dropped, 10)+"\n"), 0o600); err == nil {
		_ = os.Rename(tmp, p)
	}
}

// Dropped is how many records the cap has dropped.
func (l *Log) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Close saves the dropped count and closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	if l.dropped > 0 {
		l.saveDropped()
	}
	err := l.f.Close()
	l.f = nil
	return err
}
