package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xmode/xmode/codexcloud"
	"github.com/xmode/xmode/codexcloud/codexcloudtest"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/store"
)

// cloudSeed is a storage root with size submitted cloud_subscription
// sessions (written through the store API) whose tasks the stand-in codex
// reports pending, so every `cloud poll` asks about all of them again.
type cloudSeed struct {
	root  string
	fake  *codexcloudtest.Fake
	tasks []string
	env   []string
}

func newCloudSeed(b *testing.B, size int, codex string) *cloudSeed {
	b.Helper()
	ctx := context.Background()
	s := &cloudSeed{root: filepath.Join(b.TempDir(), "root"), fake: codexcloudtest.New(b)}
	st, err := store.Open(ctx, s.root)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for i := 0; i < size; i++ {
		n := store.NewSession{NewRun: true, Session: store.Session{ID: store.NewSessionID(), RunID: store.NewRunID(), User: "bench",
			RunnerMode: config.ModeCloudSubscription, Engine: "cloud", CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour), WorktreePath: "/nowhere"}}
		if err := st.CreateSession(ctx, n); err != nil {
			b.Fatal(err)
		}
		if err := st.Provisioned(ctx, n.ID, "", "", "", "", nil, time.Time{}); err != nil {
			b.Fatal(err)
		}
		if _, err := st.ClaimSubmit(ctx, n.ID, "seed", now, nil); err != nil {
			b.Fatal(err)
		}
		task := s.fake.Put(codexcloudtest.Task{Title: fmt.Sprintf("task %d", i), Status: "pending", Env: "env_1"})
		if err := st.RecordSubmitted(ctx, &store.CloudTask{TaskID: task.ID, SessionID: n.ID, EnvID: "env_1", SubmittedAt: now}, "seed"); err != nil {
			b.Fatal(err)
		}
		s.tasks = append(s.tasks, task.ID)
	}
	s.env = append(append(os.Environ(), s.fake.Env()...), "XMODE_STORAGE_ROOT="+s.root, "XMODE_CODEX_BIN="+codex, "HOME="+b.TempDir())
	return s
}

// poll runs one `xmode cloud poll` and checks it asked about every task.
func (s *cloudSeed) poll(b *testing.B, bin string) {
	c := exec.Command(bin, "cloud", "poll", "--json")
	c.Env = s.env
	out, err := c.Output()
	if err != nil {
		b.Fatalf("cloud poll: %v\n%s", err, out)
	}
	if want := fmt.Sprintf(`"polled": %d,`, len(s.tasks)); !strings.Contains(string(out), want) {
		b.Fatalf("cloud poll did not poll every task: %s", out)
	}
}

// callsAlone asks the stand-in about every task, codexcloud.DefaultParallel
// calls at once as a poll pass does, and does nothing else: what a pass
// would cost if xmode's own work were free.
func (s *cloudSeed) callsAlone(b *testing.B, codex string) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range codexcloud.DefaultParallel {
		wg.Go(func() {
			for id := range work {
				c := exec.Command(codex, "cloud", "status", id)
				c.Env = s.env
				if out, _ := c.Output(); len(out) == 0 { // pending: exit 1, as codex does
					b.Errorf("status %s: no output", id)
				}
			}
		})
	}
	for _, id := range s.tasks {
		work <- id
	}
	close(work)
	wg.Wait()
}

// cpu is this process's CPU time and its waited-for children's.
func cpu() (self, children time.Duration) {
	var s, c syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &s)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c)
	tv := func(r syscall.Rusage) time.Duration {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	return tv(s), tv(c)
}

// BenchmarkCloudPoll: one `xmode cloud poll` pass over 250 and over 1,000
// submitted tasks with the stand-in codex (a Go binary: a call costs what
// starting a small process costs, ~1-2 ms, where the real codex takes
// ~130 ms of node start-up plus the network), status calls DefaultParallel
// at once, side by side with the same status calls made without xmode.
//
// Reports the time per task; the growth from 250 to 1,000 for the pass and,
// for reference, for the calls alone (linear: about 4); the pass's
// wall-clock overhead over the calls alone; and, less exposed to other
// load on the machine, the CPU the pass itself spends (in-process, own
// threads only) against the CPU of the stand-in calls it makes, net of what
// the bare calls cost their caller. Target: overhead at most 10%.
// Wall-clock figures move with whatever else the machine runs; the CPU
// ones much less.
func BenchmarkCloudPoll(b *testing.B) {
	bin := xmodeBin(b)
	codex := buildHelper(b, "fakecodex")
	n := min(rounds(b), 5)
	s250, s1000 := newCloudSeed(b, 250, codex), newCloudSeed(b, 1000, codex)
	s250.poll(b, bin) // warm the page cache
	s1000.poll(b, bin)
	b.ResetTimer()
	m := sideBySide(n,
		func() { s250.poll(b, bin) }, func() { s250.callsAlone(b, codex) },
		func() { s1000.poll(b, bin) }, func() { s1000.callsAlone(b, codex) })
	b.StopTimer()

	// The CPU side: the poller in this process, so that its own CPU time
	// (RUSAGE_SELF) is apart from the stand-in's (RUSAGE_CHILDREN).
	ctx := context.Background()
	st, err := store.Open(ctx, s1000.root)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	p := &codexcloud.Poller{Store: st, Client: &codexcloud.CLI{Bin: codex, StatusCommand: "codex cloud status {task_id}", Env: s1000.env}}
	var passSelf, passKids, aloneSelf, aloneKids time.Duration
	for range n {
		s0, c0 := cpu()
		sum, err := p.Pass(ctx, codexcloud.PassOptions{})
		if err != nil || sum.Polled != 1000 {
			b.Fatalf("pass: %+v %v", sum, err)
		}
		s1, c1 := cpu()
		s1000.callsAlone(b, codex)
		s2, c2 := cpu()
		passSelf, passKids = passSelf+s1-s0, passKids+c1-c0
		aloneSelf, aloneKids = aloneSelf+s2-s1, aloneKids+c2-c1
	}
	perTask := func(d time.Duration) float64 { return ms(d) / float64(n*1000) }

	b.ReportMetric(ms(m[0]), "poll250-ms")
	b.ReportMetric(ms(m[1]), "calls250-ms")
	b.ReportMetric(ms(m[2]), "poll1000-ms")
	b.ReportMetric(ms(m[3]), "calls1000-ms")
	b.ReportMetric(ms(m[2])/1000, "ms/task")
	b.ReportMetric(ms(m[3])/1000, "calls-ms/task")
	b.ReportMetric(float64(m[2])/float64(m[0]), "growth-250-to-1000")
	b.ReportMetric(float64(m[3])/float64(m[1]), "calls-growth-250-to-1000")
	b.ReportMetric(100*(float64(m[2])-float64(m[3]))/float64(m[3]), "wall-overhead-%")
	// The same from 250 to 1,000 tasks: without the pass's fixed costs
	// (xmode's start-up, opening the store).
	b.ReportMetric(100*(float64(m[2]-m[0])-float64(m[3]-m[1]))/float64(m[3]-m[1]), "marginal-wall-overhead-%")
	b.ReportMetric(perTask(passSelf), "pass-cpu-ms/task")
	b.ReportMetric(perTask(aloneSelf), "bare-caller-cpu-ms/task")
	b.ReportMetric(perTask(passKids), "standin-cpu-ms/call")
	b.ReportMetric(100*float64(passSelf-aloneSelf)/float64(passKids), "cpu-overhead-%")
	_ = aloneKids
}
