package egress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// Records reads a log's records whose time is in [from, to) (a zero time
// leaves that end open) and that keep accepts (nil: all), returning the
// last max of them (0: all) in the log's order, and how many matched in
// all. A line that is not a record is skipped, as Summarize skips it.
func Records(r io.Reader, from, to time.Time, keep func(*Record) bool, max int) ([]Record, int, error) {
	var ring []Record
	next, matched := 0, 0
	br := bufio.NewReaderSize(r, 32<<10)
	for {
		line, long, err := readLine(br)
		var rec Record
		if !long && len(line) > 0 && json.Unmarshal(line, &rec) == nil && rec.Kind != "" &&
			(from.IsZero() || !rec.Time.Before(from)) && (to.IsZero() || rec.Time.Before(to)) &&
			(keep == nil || keep(&rec)) {
			matched++
			switch {
			case max <= 0 || len(ring) < max:
				ring = append(ring, rec)
			default:
				ring[next] = rec
				next = (next + 1) % max
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, matched, fmt.Errorf("read network log: %w", err)
		}
	}
	if next > 0 {
		ring = append(ring[next:], ring[:next]...)
	}
	return ring, matched, nil
}

// RecordsFile is Records of the log at path, opened as SummarizeFile opens
// it (a regular file, no final link followed). A log that does not exist
// has no records.
func RecordsFile(path string, from, to time.Time, keep func(*Record) bool, max int) ([]Record, int, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if os.IsNotExist(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read network log: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("read network log: %s is not a regular file", path)
	}
	return Records(f, from, to, keep, max)
}
