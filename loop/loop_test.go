package loop

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/xmode/xmode/store"
)

func TestTitle(t *testing.T) {
	if got := title("  Fix the flaky test\nin detail"); got != "Fix the flaky test" {
		t.Fatal(got)
	}
	long := "x"
	for len(long) < 100 {
		long += "y"
	}
	if r := []rune(title(long)); len(r) != 72 || r[71] != '…' {
		t.Fatalf("long title: %q", string(r))
	}
}

// A reviewer command's answer: the decision first, then notes and
// comments; anything else is refused, naming its line.
func TestParseReviewerAnswer(t *testing.T) {
	a, err := ParseReviewerAnswer([]byte("# my review\n\nrequest-changes\nnote: handle the empty case\nnote: and say why\ncomment: src/a b.go:12: <b>return</b> an error\ncomment: old.go:-3: why was this removed?\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Decision != ReviewRequestChanges || a.Note != "handle the empty case\nand say why" || len(a.Comments) != 2 ||
		a.Comments[0] != (store.Comment{Path: "src/a b.go", Side: store.SideNew, Line: 12, Text: "<b>return</b> an error"}) ||
		a.Comments[1].Side != store.SideOld || a.Comments[1].Line != 3 {
		t.Fatalf("%+v", a)
	}
	if a, err := ParseReviewerAnswer([]byte("approve\r\n")); err != nil || a.Decision != ReviewApprove {
		t.Fatalf("approve: %+v, %v", a, err)
	}
	for out, want := range map[string]string{
		"":                                "answered nothing",
		"lgtm\n":                          "line 1",
		"approve\nship it\n":              "line 2",
		"request-changes\n":               "without saying which",
		"request-changes\ncomment: x\n":   "line 2",
		"reject\ncomment: a.go:0: zero\n": "lines count from 1",
	} {
		if _, err := ParseReviewerAnswer([]byte(out)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", out, err, want)
		}
	}
}

// Attempts side by side write whole lines, each after its prefix.
func TestPrefixedLines(t *testing.T) {
	var out bytes.Buffer
	lw := &lineWriter{w: &out}
	var wg sync.WaitGroup
	for _, p := range []string{"[a] ", "[b] "} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := lw.prefixed(p)
			for i := 0; i < 100; i++ {
				w.Write([]byte("one "))
				w.Write([]byte("line\n"))
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 200 {
		t.Fatalf("%d lines", len(lines))
	}
	for _, l := range lines {
		if l != "[a] one line" && l != "[b] one line" {
			t.Fatalf("a line cut into: %q", l)
		}
	}
	if (&lineWriter{}).prefixed("x") != nil {
		t.Fatal("a writer to nowhere")
	}
}

func TestDefaultParallel(t *testing.T) {
	for _, n := range []int{1, 2, 4, 16} {
		if p := DefaultParallel(n); p < 1 || p > n || p < min(n, 2) {
			t.Errorf("DefaultParallel(%d) = %d", n, p)
		}
	}
}
