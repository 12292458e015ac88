package engine

import "context"

// StepKiller is an optional capability of an adapter: end every process of
// one step, found by the tag its processes carry (ExecRequest.Tag), whether
// or not the xmode that started it still runs. Teardown uses it before a
// session's worktree goes, and the reaper for a step whose heartbeat went
// stale (its xmode was killed). Ending a step that is already gone is not
// an error.
type StepKiller interface {
	KillStep(ctx context.Context, sb Sandbox, tag string) error
}

// KillStep ends a step's processes through the adapter when it can; an
// adapter without the capability has nothing that outlives its xmode.
func KillStep(ctx context.Context, a Adapter, sb Sandbox, tag string) error {
	if k, ok := a.(StepKiller); ok && tag != "" {
		return k.KillStep(ctx, sb, tag)
	}
	return nil
}
