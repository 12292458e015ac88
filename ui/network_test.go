package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/store"
)

// The run page and the change request's page say what the sandbox was
// refused — "the sandbox tried to reach pastebin.example:443 in step 1 and
// was refused" — from the network log (the run page) and the package's
// evidence (the change request), a name the sandbox chose shown as text:
// markup and control characters in it do nothing.
func TestNetworkOnThePages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s := f.session()
	// A session whose network was proxied (the host engine has no proxy:
	// the log stands where a docker sandbox's teardown leaves it).
	if err := f.st.SetNetworkPolicy(ctx, s.ID, nil, &store.NetworkPolicy{Mode: "allow"}); err != nil {
		t.Fatal(err)
	}
	if s, _ = f.st.Get(ctx, s.ID); s.NetworkPolicy == nil {
		t.Fatal("the policy was not recorded")
	}
	f.exec(s, "true")
	rows, err := f.st.Steps(ctx, s.RunID)
	if err != nil || len(rows) != 1 {
		t.Fatalf("steps: %v %v", rows, err)
	}
	at := rows[0].StartedAt.Add(time.Millisecond)
	const hostile = "<script>alert(1)</script>\x1b[2J.example"
	var log strings.Builder
	for _, r := range []egress.Record{
		{Time: at, Sandbox: s.ID, Kind: "connect", Host: "pypi.org", Port: 443, Verdict: egress.Allowed, Rule: "pypi.org", Source: "--allow"},
		{Time: at, Sandbox: s.ID, Kind: "connect", Host: "pastebin.example", Port: 443, Verdict: egress.Denied, Rule: "no rule", Reason: "no allow rule names pastebin.example:443"},
		{Time: at, Sandbox: s.ID, Kind: "http", Host: hostile, Port: 80, Verdict: egress.Denied, Rule: "no rule", Reason: "no allow rule names " + hostile},
	} {
		b, _ := json.Marshal(r)
		log.Write(append(b, '\n'))
	}
	kept, _ := f.svc.Guard.NetworkLog(s.RunID, s.ID)
	write(t, kept, log.String())
	p := f.changeRequest(s, "network", map[string]string{"new.txt": "x\n"})
	if _, err := f.svc.Stop(ctx, s, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.root, "runs", s.RunID, "network")); err != nil {
		t.Fatal(err)
	}
	c := f.client()
	for _, page := range []string{"/runs/" + s.RunID, "/crs/" + p.ID} {
		code, body := get(t, c, f.base+page)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", page, code)
		}
		for _, want := range []string{
			`<h2 id="network">Network</h2>`,
			"3 connections to [pypi.org], 2 denied",
			"the sandbox tried to reach (HTTPS) <code><bdi>pastebin.example:443</bdi></code> in step",
			"and was refused: <bdi>no allow rule names pastebin.example:443</bdi>",
			"&lt;script&gt;alert(1)&lt;/script&gt;",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s does not have %s", page, want)
			}
		}
		if testing.Verbose() {
			i := strings.Index(body, `<h2 id="network">`)
			t.Log(body[i : i+900])
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "\x1b") {
			t.Errorf("%s carries the sandbox's markup or control characters as they are", page)
		}
	}
}
