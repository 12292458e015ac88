package egress

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLogCapCountsWhatItDrops(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sbx.jsonl")
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l, err := OpenLog(path, 4096, clock)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		l.Write(Record{Time: now.Add(time.Duration(i) * time.Second), Kind: "connect", Host: "a.example.com", Port: 443, Verdict: Allowed})
		now = now.Add(time.Second)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Size() > 4096 {
		t.Fatalf("the log grew to %d bytes past its cap of 4096", st.Size())
	}
	recs := records(t, path)
	last := recs[len(recs)-1]
	if last.Kind != "truncated" || !strings.Contains(last.Reason, "cap of 4096 bytes") {
		t.Fatalf("no truncation line: %+v", last)
	}
	kept := int64(len(recs) - 1)
	s, err := SummarizeFile(path, time.Time{}, time.Time{})
	if err != nil || !s.Truncated || s.Dropped != 100-kept || int64(s.Connections) != kept {
		t.Fatalf("summary %+v (kept %d) %v", s, kept, err)
	}

	// Reopened (a restarted proxy), it stays full and goes on counting.
	l, err = OpenLog(path, 4096, clock)
	if err != nil {
		t.Fatal(err)
	}
	l.Write(Record{Time: now, Kind: "connect", Verdict: Denied})
	l.Close()
	if s, _ := SummarizeFile(path, time.Time{}, time.Time{}); s.Dropped != 101-kept {
		t.Fatalf("dropped after a restart: %d", s.Dropped)
	}
	// A link where the log should be is not followed.
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink(filepath.Join(dir, "elsewhere"), link)
	if _, err := OpenLog(link, 4096, clock); err == nil {
		t.Fatal("OpenLog followed a symlink")
	}
}

func TestSummarizeAWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	lines := []Record{
		{Time: t0, Kind: "connect", Host: "before.example.com", Verdict: Allowed},
		{Time: t0.Add(time.Minute), Kind: "connect", Host: "pypi.org", Verdict: Allowed, BytesUp: 10, BytesDown: 100},
		{Time: t0.Add(2 * time.Minute), Kind: "connect", Host: "pypi.org", Verdict: Allowed, BytesUp: 1, BytesDown: 1},
		{Time: t0.Add(2 * time.Minute), Kind: "https", Host: "api.anthropic.com", Verdict: Allowed},
		{Time: t0.Add(3 * time.Minute), Kind: "connect", Host: "pastebin.example", Verdict: Denied},
		{Time: t0.Add(3 * time.Minute), Kind: "dns", Host: "exfil.example", Verdict: Denied},
		{Time: t0.Add(3 * time.Minute), Kind: "dns", Host: "pypi.org", Verdict: Allowed},
		{Time: t0.Add(4 * time.Minute), Kind: "connect", Host: "broken.example", Verdict: Failed},
		{Time: t0.Add(10 * time.Minute), Kind: "connect", Host: "after.example.com", Verdict: Allowed},
	}
	var b strings.Builder
	for _, r := range lines {
		l, _ := marshalLine(r)
		b.Write(l)
	}
	b.WriteString("not json\n" + strings.Repeat("x", maxLine+10) + "\n")
	s, err := Summarize(strings.NewReader(b.String()), t0.Add(time.Minute), t0.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if s.Connections != 5 || s.Denied != 1 || s.Errors != 1 || s.DNS != 2 || s.DNSDenied != 1 || s.BytesDown != 101 || s.Skipped != 2 {
		t.Fatalf("summary %+v", s)
	}
	want := "5 connections to [pypi.org, api.anthropic.com, broken.example], 2 denied [exfil.example, pastebin.example], 1 failed"
	if got := s.String(); got != want {
		t.Fatalf("String() = %q\nwant        %q", got, want)
	}
}
