package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/xmode/xmode/engine"
)

// AnnotationClaimedBy marks a pool entry's pod taken: the session that
// claimed it (docs/kubernetes.md, "Warm pools"). Only Claim writes it,
// through an update the apiserver refuses once anyone else's has landed.
const AnnotationClaimedBy = "xmode.claimed-by"

// claimTries bounds Claim's updates that lose to another writer of the pod
// (the kubelet's status updates move its resourceVersion too) without
// meeting a claim.
const claimTries = 8

// Claim marks sb's pod taken by session (engine.Claimer): a merge patch
// carrying the resourceVersion of the pod as read, which the apiserver
// applies only to that version (409 Conflict otherwise), so of two
// claimers — two processes, two hosts, two stores — exactly one lands its
// mark and the other reads it and gets engine.ErrClaimed. A pod already
// marked, by anyone, is engine.ErrClaimed.
func (p *Provider) Claim(ctx context.Context, sb engine.Sandbox, session string) error {
	c, err := p.client()
	if err != nil {
		return err
	}
	for range claimTries {
		pod, err := p.ownedPod(ctx, sb)
		if err != nil {
			return err
		}
		if by := pod.Annotations[AnnotationClaimedBy]; by != "" {
			return fmt.Errorf("pod %s: %w (%s)", pod.Name, engine.ErrClaimed, by)
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pod.ResourceVersion,
			"annotations":     map[string]string{AnnotationClaimedBy: session + " " + time.Now().UTC().Format(time.RFC3339)},
		}})
		cctx, cancel := p.call(ctx)
		_, err = c.patchPod(cctx, pod.Name, patch)
		cancel()
		if apierrors.IsConflict(err) {
			continue // read again: a claim, or only the kubelet
		}
		if err != nil {
			return p.wrap(err, "claim pod "+pod.Name)
		}
		return nil
	}
	return fmt.Errorf("claim the pod of %s: it changed under every one of %d tries", sb.SessionID, claimTries)
}
