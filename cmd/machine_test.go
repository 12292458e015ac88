package cmd

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/xmode/xmode/pool"
)

// machine warm's --pool is checked before anything is cloned.
func TestMachineWarmPoolFlag(t *testing.T) {
	c := newTestCLI(t)
	repo := testRepo(t)
	c.fails(2, "--pool: a pool serves `sandbox create --project` with project machines on: set XMODE_PROJECT_MACHINES=1", "machine", "warm", "demo", "--repo", repo, "--pool", "1")
	c.env["XMODE_PROJECT_MACHINES"] = "1"
	c.fails(2, "--pool -1: use a whole number from 0 (no pool) to ", "machine", "warm", "demo", "--repo", repo, "--pool", "-1")
	c.fails(2, "--pool 1000: use a whole number", "machine", "warm", "demo", "--repo", repo, "--pool", "1000")
	if out := c.ok("machine", "list", "-q"); out != "" {
		t.Errorf("a refused warm made machines: %q", out)
	}
}

// A machine with a pool of one on the host engine: warm prints the project
// and fills the pool; list, show (with its pool) and rm (retiring the
// pool), as text and JSON.
func TestMachineCommands(t *testing.T) {
	c := newTestCLI(t)
	c.env["XMODE_PROJECT_MACHINES"] = "1"
	repo := testRepo(t)
	c.fails(3, "", "machine", "show", "demo")

	if out := c.ok("machine", "warm", "demo", "--repo", repo, "--pool", "1"); out != "demo\n" {
		t.Errorf("machine warm: %q", out)
	}
	if !regexp.MustCompile(`(?m)^cloned demo from .*/repo: main at [0-9a-f]{12}, in \S+\npool of demo: made 1, retired 0, in \S+$`).MatchString(c.stderr.String()) {
		t.Errorf("machine warm says:\n%s", c.stderr.String())
	}

	if out := c.ok("machine", "list"); !regexp.MustCompile(`^PROJECT +REF +COMMIT +FETCHED +SESSIONS +REPO\ndemo +main +[0-9a-f]{12} +\d+s ago +0 +` + regexp.QuoteMeta(repo) + "\n$").MatchString(out) {
		t.Errorf("machine list:\n%s", out)
	}
	if out := c.ok("machine", "list", "-q"); out != "demo\n" {
		t.Errorf("machine list -q: %q", out)
	}

	out := c.ok("machine", "show", "demo")
	for _, want := range []string{"Project:        demo\n", "Default ref:    main ", "Cache volumes:  xmode_proj_demo.u<user> (one per user; docker engine)\n",
		"Open sessions:  0\n", "Pool:           1 ready of 1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("machine show has no %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`\n\nPOOL +STATE +AGE +COMMIT +ENGINE\nsbx_\w+ +ready +\d+s +[0-9a-f]{12} +host\n$`).MatchString(out) {
		t.Errorf("machine show's pool:\n%s", out)
	}
	var v pool.MachineView
	if err := json.Unmarshal([]byte(c.ok("machine", "show", "demo", "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Project != "demo" || v.Pool.Size != 1 || v.Pool.Ready != 1 || len(v.Pool.Entries) != 1 {
		t.Errorf("machine show --json: %+v", v)
	}

	var rm struct {
		Stopped     []string `json:"sessions_stopped"`
		PoolRetired int      `json:"pool_retired"`
	}
	if err := json.Unmarshal([]byte(c.ok("machine", "rm", "demo", "--json")), &rm); err != nil {
		t.Fatal(err)
	}
	if rm.Stopped == nil || len(rm.Stopped) != 0 || rm.PoolRetired != 1 {
		t.Errorf("machine rm --json: %+v, want no session stopped ([]) and the pool's entry retired", rm)
	}
	c.fails(3, "", "machine", "show", "demo")
}

// The "Pool:" line of machine show.
func TestPoolSummary(t *testing.T) {
	entries := func(n int) []pool.EntryView { return make([]pool.EntryView, n) }
	for _, tc := range []struct {
		pool pool.View
		want string
	}{
		{pool.View{Size: 2, Ready: 2, Entries: entries(2)}, "2 ready of 2"},
		{pool.View{Size: 3, Ready: 1, Entries: entries(2)}, "1 ready of 3 (1 more being made or retired)"},
		{pool.View{}, "0 ready of 0 — no pool (`xmode machine warm demo --pool N`, or XMODE_POOL_SIZE)"},
		{pool.View{Entries: entries(1)}, "0 ready of 0 (1 more being made or retired) — no pool (`xmode machine warm demo --pool N`, or XMODE_POOL_SIZE)"},
	} {
		v := pool.MachineView{Pool: tc.pool}
		v.Project = "demo"
		if got := poolSummary(v); got != tc.want {
			t.Errorf("poolSummary(%+v) = %q, want %q", tc.pool, got, tc.want)
		}
	}
}
