package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xmode/xmode/engine"
)

// AnnotationClaimedBy marks a pool entry's pod taken: the session that
// claimed it and when (docs/kubernetes.md, "Warm pools"). Only Claim
// writes it, through an update the apiserver refuses once anyone else's
// has landed.
const AnnotationClaimedBy = "xmode.claimed-by"

// claimTries bounds Claim's updates that lose to another writer of the pod
// (the kubelet's status updates move its resourceVersion too) without
// meeting a claim.
const claimTries = 8

// Claim marks sb's pod taken by session and moves its deadline to expires
// (engine.Claimer): one JSON merge patch carrying the resourceVersion of
// the pod as read, which the apiserver applies only to that version (409
// Conflict otherwise), so of two claimers — two processes, two hosts, two
// stores — exactly one lands its mark and the other reads it and gets
// engine.ErrClaimed. A pod already marked, by anyone, is engine.ErrClaimed.
// The deadline only grows, as with Extend; when it moves on agent-sandbox,
// the pod's Sandbox or SandboxClaim then gets the same shutdown time. The
// pod as Alive just read it is where a claim starts (a stale one costs a
// conflict and a read, never a wrong claim).
func (p *Provider) Claim(ctx context.Context, sb engine.Sandbox, session string, expires time.Time) error {
	c, err := p.client()
	if err != nil {
		return err
	}
	want := p.deadline(expires)
	pod := p.seen.take(sb)
	var moved bool
	for try := 0; ; try++ {
		if try == claimTries {
			return fmt.Errorf("claim the pod of %s: it changed under every one of %d tries", sb.SessionID, claimTries)
		}
		if pod == nil {
			if pod, err = p.ownedPod(ctx, sb); err != nil {
				return err
			}
		}
		if by := pod.Annotations[AnnotationClaimedBy]; by != "" {
			return fmt.Errorf("pod %s: %w (%s)", pod.Name, engine.ErrClaimed, by)
		}
		ann := map[string]string{AnnotationClaimedBy: session + " " + time.Now().UTC().Format(time.RFC3339)}
		have, perr := strconv.ParseInt(pod.Annotations[AnnotationDeadline], 10, 64)
		if moved = want > 0 && (perr != nil || have < want); moved {
			ann[AnnotationDeadline] = strconv.FormatInt(want, 10)
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": pod.ResourceVersion, "annotations": ann}})
		cctx, cancel := p.call(ctx)
		_, err = c.patchPod(cctx, pod.Name, patch)
		cancel()
		if apierrors.IsConflict(err) {
			pod = nil // read again: a claim, or only the kubelet
			continue
		}
		if err != nil {
			return p.wrap(err, "claim pod "+pod.Name)
		}
		break
	}
	if !moved || metav1.GetControllerOf(pod) == nil {
		return nil // the owner's shutdown time moves with the pod's deadline only
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	return p.moveShutdown(cctx, c, pooled(sb), PodName(sb.SessionID), want)
}

// seenPods keeps the pod Alive read last for each sandbox, for the claim
// that follows it; a few seconds at most.
type seenPods struct {
	mu   sync.Mutex
	pods map[string]seenPod
}

type seenPod struct {
	pod *corev1.Pod
	at  time.Time
}

func (s *seenPods) put(sb engine.Sandbox, pod *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods == nil {
		s.pods = map[string]seenPod{}
	}
	for k, v := range s.pods {
		if time.Since(v.at) > 5*time.Second {
			delete(s.pods, k)
		}
	}
	s.pods[sb.SessionID+"/"+sb.ContainerID] = seenPod{pod, time.Now()}
}

func (s *seenPods) take(sb engine.Sandbox) *corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sb.SessionID + "/" + sb.ContainerID
	v, ok := s.pods[k]
	delete(s.pods, k)
	if !ok || time.Since(v.at) > 5*time.Second {
		return nil
	}
	return v.pod
}
