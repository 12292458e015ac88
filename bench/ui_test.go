package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/store"
)

// The web UI's benchmarks (issue 22): the real binary's `xmode ui` on a
// loopback port, asked by a Go HTTP client logged in with its token.
//
//   - BenchmarkUIRunsPage: the runs page over 1,000 runs (the first page,
//     a filtered one, an older one). Target: ≤ 100 ms.
//   - BenchmarkUICRPage: a change request of 5,000 changed lines (10 Go
//     files, each line of each changed). Target: ≤ 300 ms to the first
//     byte; the whole page is reported beside it.
//   - BenchmarkUIIdleRSS: the resident memory of `xmode ui` idle, just
//     started and after serving those pages. Target: ≤ 50 MB.
//   - BenchmarkUILiveLatency: from a step writing a line (its timestamp)
//     to the line arriving on the live stream the run page listens to.
//     Target: ≤ 250 ms.

// uiServer is `xmode ui` running, and a client logged in to it.
type uiServer struct {
	cmd    *exec.Cmd
	base   string
	client *http.Client
}

func startUI(b *testing.B, bin string, env []string) *uiServer {
	b.Helper()
	c := exec.Command(bin, "ui")
	c.Env = append(os.Environ(), env...)
	out, err := c.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Process.Signal(syscall.SIGINT)
		c.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("xmode ui printed no URL: %v", err)
	}
	url := strings.TrimSpace(line)
	base, _, _ := strings.Cut(url, "/?token=")
	jar, _ := cookiejar.New(nil)
	// The URL names the server's own host, xmode-PORT.localhost, which
	// browsers and curl resolve to loopback and Go's resolver does not.
	d := &net.Dialer{Timeout: 10 * time.Second}
	local := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, ".localhost") {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return d.DialContext(ctx, network, addr)
	}}
	u := &uiServer{cmd: c, base: base, client: &http.Client{Jar: jar, Timeout: time.Minute, Transport: local}}
	resp, err := u.client.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	return u
}

// get fetches a page and returns the time to its first byte and to its end.
func (u *uiServer) get(b *testing.B, path string) (first, all time.Duration) {
	b.Helper()
	var got time.Time
	start := time.Now()
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(),
		&httptrace.ClientTrace{GotFirstResponseByte: func() { got = time.Now() }}), "GET", u.base+path, nil)
	resp, err := u.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n == 0 {
		b.Fatalf("%s: %d, %d bytes", path, resp.StatusCode, n)
	}
	return got.Sub(start), time.Since(start)
}

// rss is a process's resident set, in MB.
func rss(b *testing.B, pid int) float64 {
	b.Helper()
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return float64(kb) / 1024
		}
	}
	return 0
}

// seedRuns records n runs of the loop in a store, as `xmode run` records
// them, with mixed outcomes and two users.
func seedRuns(b *testing.B, root string, n int) {
	b.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, root)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	base := time.Now().Add(-time.Duration(n) * time.Minute)
	for i := 0; i < n; i++ {
		at := base.Add(time.Duration(i) * time.Minute)
		user := []string{"alice", "bob"}[i%2]
		ns := store.NewSession{NewRun: true, Loop: &store.NewLoop{Objective: fmt.Sprintf("objective %d: make the tests pass\nwith details", i)},
			Session: store.Session{ID: store.NewSessionID(), RunID: store.NewRunID(), User: user, RunnerMode: "local_worktree",
				Engine: "host", CreatedAt: at, ExpiresAt: at.Add(time.Hour)}}
		ns.WorktreePath = filepath.Join(root, "runs", ns.RunID, "worktree")
		if err := st.CreateSession(ctx, ns); err != nil {
			b.Fatal(err)
		}
		status := []string{store.RunReview, store.RunFailed, store.RunNoChange}[i%3]
		if err := st.FinishLoopRun(ctx, ns.RunID, store.LoopEnd{Status: status, ExitCode: i % 2, Finished: at.Add(time.Minute)}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUIRunsPage(b *testing.B) {
	bin := xmodeBin(b)
	root := filepath.Join(b.TempDir(), "root")
	seedRuns(b, root, 1000)
	u := startUI(b, bin, []string{"XMODE_STORAGE_ROOT=" + root})
	u.get(b, "/runs") // templates parsed, store warm
	b.ResetTimer()
	var first, filtered, older []time.Duration
	for i := 0; i < rounds(b); i++ {
		_, d := u.get(b, "/runs")
		first = append(first, d)
		_, d = u.get(b, "/runs?status=failed&user=bob")
		filtered = append(filtered, d)
		_, d = u.get(b, "/runs?before="+strconv.FormatInt(time.Now().Add(-500*time.Minute).UnixMilli(), 10)+".run_aaaaaaaa")
		older = append(older, d)
	}
	b.ReportMetric(ms(median(first)), "runs-page-ms")
	b.ReportMetric(ms(median(filtered)), "filtered-ms")
	b.ReportMetric(ms(median(older)), "older-page-ms")
}

// crFixture5000 is a change request of 5,000 changed lines: ten Go files of
// 250 lines, every line of each rewritten.
func crFixture5000(b *testing.B, bin string, env []string, dir string) string {
	b.Helper()
	repo := filepath.Join(dir, "repo")
	run(b, nil, "git", "init", "-q", "-b", "main", repo)
	body := func(f int, v string) string {
		var s strings.Builder
		s.WriteString("package p\n\n")
		for i := 0; i < 248; i++ {
			fmt.Fprintf(&s, "var %s%d_%d = fmt.Sprintf(\"%%d %s\", %d) // line %d\n", v, f, i, v, i*f, i)
		}
		return s.String()
	}
	for f := 0; f < 10; f++ {
		if err := os.WriteFile(filepath.Join(repo, fmt.Sprintf("file%d.go", f)), []byte(body(f, "old")), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	run(b, nil, "git", "-C", repo, "add", ".")
	run(b, []string{"GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@example.com", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@example.com"},
		"git", "-C", repo, "commit", "-qm", "base")
	id := output(b, env, bin, "sandbox", "create", "--repo", repo, "-q")
	wt, _ := filepath.Glob(filepath.Join(dir, "root", "runs", "*", "worktree"))
	for f := 0; f < 10; f++ {
		if err := os.WriteFile(filepath.Join(wt[0], fmt.Sprintf("file%d.go", f)), []byte(body(f, "new")), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return output(b, env, bin, "cr", "create", id, "-q")
}

func BenchmarkUICRPage(b *testing.B) {
	bin := xmodeBin(b)
	dir := b.TempDir()
	env := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_SANDBOX_ENGINE=host", "XMODE_SANDBOX_MAX_OPEN=0"}
	cr := crFixture5000(b, bin, env, dir)
	var shown struct {
		Insertions, Deletions int
	}
	if err := json.Unmarshal([]byte(output(b, env, bin, "cr", "show", cr, "--json")), &shown); err != nil || shown.Insertions+shown.Deletions < 4900 {
		b.Fatalf("the fixture: %+v %v", shown, err)
	}
	u := startUI(b, bin, env)
	u.get(b, "/crs/"+cr) // templates and lexers built
	b.ResetTimer()
	var first, all, split []time.Duration
	for i := 0; i < rounds(b); i++ {
		f, a := u.get(b, "/crs/"+cr)
		first, all = append(first, f), append(all, a)
		_, a = u.get(b, "/crs/"+cr+"?view=split")
		split = append(split, a)
	}
	b.ReportMetric(ms(median(first)), "first-byte-ms")
	b.ReportMetric(ms(median(all)), "whole-page-ms")
	b.ReportMetric(ms(median(split)), "split-page-ms")
	b.ReportMetric(float64(shown.Insertions+shown.Deletions), "changed-lines")
}

func BenchmarkUIIdleRSS(b *testing.B) {
	bin := xmodeBin(b)
	dir := b.TempDir()
	env := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_SANDBOX_ENGINE=host", "XMODE_SANDBOX_MAX_OPEN=0"}
	cr := crFixture5000(b, bin, env, dir)
	seedRuns(b, filepath.Join(dir, "root"), 1000)
	u := startUI(b, bin, env)
	b.ResetTimer()
	idle := rss(b, u.cmd.Process.Pid)
	for i := 0; i < rounds(b); i++ {
		u.get(b, "/runs")
		u.get(b, "/crs/"+cr)
		u.get(b, "/crs/"+cr+"?view=split")
		u.get(b, "/sessions?all=1")
	}
	b.ReportMetric(idle, "idle-MB")
	b.ReportMetric(rss(b, u.cmd.Process.Pid), "after-pages-MB")
}

func BenchmarkUILiveLatency(b *testing.B) {
	bin := xmodeBin(b)
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	makeRepo(b, repo, 4, 1)
	env := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_SANDBOX_ENGINE=host", "XMODE_SANDBOX_MAX_OPEN=0"}
	id := output(b, env, bin, "sandbox", "create", "--repo", repo, "-q")
	var sess struct {
		RunID string `json:"run_id"`
	}
	json.Unmarshal([]byte(output(b, env, bin, "sandbox", "show", id, "--json")), &sess)
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		b.Fatal(err)
	}
	lines := rounds(b)
	// Each line is the step's clock when it writes it (date prints it,
	// the shell's printf writes it: both are in what is measured).
	step := exec.Command(bin, "sandbox", "exec", id, "--", "sh", "-c",
		fmt.Sprintf(`i=0; while [ $i -lt %d ]; do until read x < %s; do :; done; printf '%%s\n' "$(date +%%s%%N)"; i=$((i+1)); done`, lines, gate))
	step.Env = append(os.Environ(), env...)
	if err := step.Start(); err != nil {
		b.Fatal(err)
	}
	defer step.Wait()
	u := startUI(b, bin, env)
	var resp *http.Response
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := u.client.Get(u.base + "/runs/" + sess.RunID + "/steps/1/live?stream=stdout&from=0")
		if err == nil && r.StatusCode == http.StatusOK {
			resp = r
			break
		}
		if r != nil {
			r.Body.Close()
		}
		if time.Now().After(deadline) {
			b.Fatal("the step never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	next := func() string {
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.HasPrefix(sc.Text(), "data: [") {
				return d
			}
		}
		b.Fatal("the live stream ended")
		return ""
	}
	b.ResetTimer()
	var lat []time.Duration
	for i := 0; i < lines; i++ {
		w, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		w.WriteString("go\n")
		w.Close()
		var segs []struct {
			T string `json:"t"`
		}
		if err := json.Unmarshal([]byte(next()), &segs); err != nil || len(segs) == 0 {
			b.Fatalf("event: %v", err)
		}
		got := time.Now()
		ns, err := strconv.ParseInt(strings.TrimSpace(segs[0].T), 10, 64)
		if err != nil {
			b.Fatalf("line %q", segs[0].T)
		}
		lat = append(lat, got.Sub(time.Unix(0, ns)))
	}
	b.StopTimer()
	worst := lat[0]
	for _, l := range lat {
		worst = max(worst, l)
	}
	b.ReportMetric(ms(median(lat)), "latency-ms")
	b.ReportMetric(ms(worst), "worst-ms")
}
