package runview

import (
	"context"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// Network is what a run's proxied sandboxes reached through their egress
// proxies and what they were refused, each refused attempt with the steps
// that ran when it was made (evidence.SummarizeNetwork): nil when no
// session of the run had a proxied network.
func Network(ctx context.Context, cfg *config.Config, g fsguard.Guard, r *Run) (*evidence.NetworkSummary, error) {
	rows := make([]store.StepRow, len(r.Steps))
	for i, s := range r.Steps {
		rows[i] = s.StepRow
	}
	return evidence.SummarizeNetwork(ctx, cfg, g, r.Sessions, rows)
}
