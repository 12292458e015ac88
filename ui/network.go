package ui

import (
	"strconv"

	"github.com/xmode/xmode/evidence"
)

// networkView is what a page says of a run's network (docs/ui.md,
// "Network"): the summary line, and each attempt the egress proxy refused —
// "the sandbox tried to reach pastebin.example:443 and was refused" — with
// the step it was made in, linked. Everything in it but the numbers came
// from a sandbox: the templates show it as hostile text.
type networkView struct {
	Line    string
	Error   string
	Refused []refusedView
	More    int // refused attempts the summary counts but lists not
}

type refusedView struct {
	evidence.Refused
	Dest  string
	Steps []stepLink
}

type stepLink struct {
	Seq  int
	Name string
	URL  string
}

// networkOf is a run's network as a page shows it; name gives a step's
// name, stepURL its link. nil without a summary.
func networkOf(n *evidence.NetworkSummary, name func(int) string, stepURL func(int) string) *networkView {
	if n == nil {
		return nil
	}
	v := &networkView{Line: n.Line}
	for _, r := range n.Refused {
		rv := refusedView{Refused: r, Dest: r.Host}
		if r.Port != 0 && r.Kind != "dns" {
			rv.Dest += ":" + strconv.Itoa(r.Port)
		}
		for _, seq := range r.Steps {
			rv.Steps = append(rv.Steps, stepLink{Seq: seq, Name: name(seq), URL: stepURL(seq)})
		}
		v.Refused = append(v.Refused, rv)
	}
	if total := n.Denied + n.DNSDenied; total > len(v.Refused) {
		v.More = total - len(v.Refused)
	}
	return v
}

// kindWords says what a refused attempt was.
func kindWords(kind string) string {
	switch kind {
	case "dns":
		return "to look up"
	case "connect", "https":
		return "to reach (HTTPS)"
	}
	return "to reach"
}
