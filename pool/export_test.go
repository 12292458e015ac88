package pool

import (
	"context"
	"time"
)

// ReserveOne reserves one entry of project's pool at commit, as owner made
// it, and leaves it provisioning: an entry whose maker may have died.
func ReserveOne(ctx context.Context, p *Pools, project, commit, owner string) error {
	_, err := p.reserve(ctx, newEntries{Project: project, Commit: commit, Engine: "host", Shape: "x", Size: 1, Owner: owner, Now: time.Now()})
	return err
}
