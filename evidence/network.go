package evidence

import (
	"context"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// A session whose network is proxied has a network log besides its steps'
// evidence (docs/network.md, "The log"): one line per decision of its
// egress proxy. The engine keeps it while the sandbox lives and leaves it
// in the run's evidence at teardown (runs/<run>/network/<session>.jsonl).
// A line is a step's by time — the connection began while the step ran —
// since the proxy knows the sandbox a connection came from, not the
// process: a background step's connections are also shown under a step
// that ran beside it.

// NetworkLog is where a session's network log can be read on this host:
// the engine's live log while the sandbox lives, the copy its teardown
// kept in the run's evidence after; "" when it has none (its network was
// never proxied, or nothing was recorded yet).
func NetworkLog(ctx context.Context, cfg *config.Config, g fsguard.Guard, sess *store.Session) (string, error) {
	if sess.NetworkPolicy == nil && sess.Network != string(egress.ModeAllow) && sess.Network != string(egress.ModeOpen) {
		return "", nil
	}
	if cfg != nil && sess.Engine != engine.Cloud && !sess.Ended() {
		if provider, err := engine.Open(sess.Engine, cfg); err == nil {
			defer engine.Close(provider)
			if enf, ok := engine.Egress(provider); ok {
				if p, err := enf.EgressLog(ctx, sess.Sandbox()); err == nil && p != "" {
					return p, nil
				}
			}
		}
	}
	kept, err := g.NetworkLog(sess.RunID, sess.ID)
	if err != nil {
		return "", err
	}
	if _, err := os.Lstat(kept); err == nil {
		return kept, nil
	}
	return "", nil
}

// StepWindow is when a step ran, [start, end), the end open (zero) while
// it runs.
func StepWindow(r store.StepRow) (time.Time, time.Time) {
	if r.FinishedAt == nil {
		return r.StartedAt, time.Time{}
	}
	// The row's end is written after the step's last byte was read: a
	// connection that began in its last millisecond is still its own.
	return r.StartedAt, r.FinishedAt.Add(time.Millisecond)
}

// StepsAt are the steps (of one session) that ran at t.
func StepsAt(steps []store.StepRow, t time.Time) []int {
	out := []int{}
	for _, r := range steps {
		from, to := StepWindow(r)
		if !t.Before(from) && (to.IsZero() || t.Before(to)) {
			out = append(out, r.Seq)
		}
	}
	return out
}

// Refused is an attempt the egress proxy refused, as a reviewer reads it:
// the agent tried to reach Host and was refused, while Steps ran.
type Refused struct {
	Time      time.Time `json:"time"`
	SessionID string    `json:"session_id"`
	Steps     []int     `json:"steps"`
	Kind      string    `json:"kind"` // connect, http, https, dns
	Host      string    `json:"host"`
	Port      int       `json:"port,omitempty"`
	Rule      string    `json:"rule"`
	Reason    string    `json:"reason"`
}

// MaxRefused bounds the refused attempts a summary lists (the counts are
// whole).
const MaxRefused = 100

// NetworkSummary is what a run's sandboxes reached through their egress
// proxies and what they were refused: evidence.json's "network", what
// `cr show` and the review pages say.
type NetworkSummary struct {
	// Line is "N connections to [hosts], M denied [hosts]".
	Line string `json:"summary"`
	egress.Summary
	// Refused are the refused attempts, the first MaxRefused of them.
	Refused []Refused `json:"refused"`
}

// SummarizeNetwork reads the network logs of a run's sessions (those that
// have one) into one summary, each refused attempt with the steps that ran
// when it was made. nil when no session of the run had a proxied network.
func SummarizeNetwork(ctx context.Context, cfg *config.Config, g fsguard.Guard, sessions []*store.Session, steps []store.StepRow) (*NetworkSummary, error) {
	var out *NetworkSummary
	allowed, denied := map[string]int{}, map[string]int{}
	for _, sess := range sessions {
		path, err := NetworkLog(ctx, cfg, g, sess)
		if err != nil {
			return nil, err
		}
		if path == "" && sess.NetworkPolicy == nil {
			continue
		}
		if out == nil {
			out = &NetworkSummary{Refused: []Refused{}}
		}
		if path == "" {
			continue
		}
		s, err := egress.SummarizeFile(path, time.Time{}, time.Time{})
		if err != nil {
			return nil, err
		}
		out.add(s, allowed, denied)
		var own []store.StepRow
		for _, r := range steps {
			if r.SessionID == sess.ID {
				own = append(own, r)
			}
		}
		recs, _, err := egress.RecordsFile(path, time.Time{}, time.Time{}, func(r *egress.Record) bool { return r.Verdict == egress.Denied }, 0)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if len(out.Refused) == MaxRefused {
				break
			}
			out.Refused = append(out.Refused, Refused{Time: r.Time, SessionID: sess.ID, Steps: StepsAt(own, r.Time),
				Kind: r.Kind, Host: r.Host, Port: r.Port, Rule: r.Rule, Reason: r.Reason})
		}
	}
	if out == nil {
		return nil, nil
	}
	out.Hosts, out.DeniedHosts = ranked(allowed), ranked(denied)
	out.Line = out.Summary.String()
	return out, nil
}

// add sums a session's summary into the run's.
func (n *NetworkSummary) add(s egress.Summary, allowed, denied map[string]int) {
	n.Connections += s.Connections
	n.Denied += s.Denied
	n.Errors += s.Errors
	n.DNS += s.DNS
	n.DNSDenied += s.DNSDenied
	n.BytesUp += s.BytesUp
	n.BytesDown += s.BytesDown
	n.Truncated = n.Truncated || s.Truncated
	n.Dropped += s.Dropped
	n.Skipped += s.Skipped
	for _, h := range s.Hosts {
		allowed[h.Host] += h.Count
	}
	for _, h := range s.DeniedHosts {
		denied[h.Host] += h.Count
	}
}

func ranked(m map[string]int) []egress.HostCount {
	out := make([]egress.HostCount, 0, len(m))
	for h, n := range m {
		out = append(out, egress.HostCount{Host: h, Count: n})
	}
	slices.SortFunc(out, func(a, b egress.HostCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Host, b.Host)
	})
	return out
}

// StepNetwork is one step's share of its session's network log, for
// evidence.json's step: how many connections began while it ran, how many
// were refused.
type StepNetwork struct {
	Line        string `json:"summary"`
	Connections int    `json:"connections"`
	Denied      int    `json:"denied"`
}

// SummarizeStep is a step's share of a network log (nil when nothing began
// while it ran).
func SummarizeStep(path string, r store.StepRow) (*StepNetwork, error) {
	from, to := StepWindow(r)
	s, err := egress.SummarizeFile(path, from, to)
	if err != nil || s.Connections+s.DNS == 0 {
		return nil, err
	}
	return &StepNetwork{Line: s.String(), Connections: s.Connections, Denied: s.Denied + s.DNSDenied}, nil
}
